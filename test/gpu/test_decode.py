"""GPU tests of attnc's inference launches (attnc_kernel_forward_ex): decode (GQA-packed rows,
split-KV), paged K/V caches and variable-length batches, each sequence against test_forward.py's
float64 reference with its own (q_len_b, kv_len_b), so bottom-right alignment per sequence is the
reference's own. Outputs and LSE are NaN-poisoned before each launch and every row is checked;
page pools hold NaN in unused pages and in the unused slots of a sequence's last page, block
tables are shuffled and share prefix pages between sequences. Bad arguments must fail with a
message naming the argument and launch nothing; device arrays with bad values (no host copies)
must run without an out-of-bounds access (--sanitize, under compute-sanitizer). Prints a short
pass/fail table last.

  python3 test/gpu/test_decode.py [--subset tiny|small|full] [--only VARIANT]... [--target T]
                                  [--json PATH] [--sanitize]
  compute-sanitizer --tool memcheck --kernel-name kns=attnctest_ --error-exitcode 1 \\
      python3 test/gpu/test_decode.py --sanitize

The case plan, the paging and the per-sequence views need no GPU (test/python/
test_decode_helpers.py checks them on the CPU)."""
import argparse
import concurrent.futures
import ctypes
import json
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnc_ctypes  # noqa: E402
import attnc_decode_ctypes as dx  # noqa: E402
import test_forward as tf  # noqa: E402

# Query/kv heads: G = 1, 2, 4, 8 and 16 query heads a kv head.
HEADS = [(8, 8), (16, 8), (32, 8), (64, 8), (16, 1)]
Q_LENS = [1, 2, 7, 8, 16]
PAGE_SIZES = [1, 16, 64, 128, 256]
SPLITS = [1, 3, 0]  # 0: derived from the device and the lengths
LAYOUTS = ["bshd", "bhsd", "varlen", "paged", "paged_varlen"]
# The spec families (test_forward.py's variants): none, causal, sliding window, softcap, ALiBi, a
# document mask over a declared input, a custom mask expression, prefix-LM.
VARIANTS = ["full", "causal", "window64", "softcap", "alibi", "document_causal", "custom_mask",
            "prefix50"]
KV_LENS = {"tiny": [0, 1, 17, 300, 4097], "small": [0, 1, 17, 300, 4097],
           "full": [0, 1, 17, 4097, 65537]}
SANITIZE_KV_MAX = 300  # compute-sanitizer runs kernels ~100x slower: short caches only
PACKED_ROWS_MAX = 64  # decode=Auto packs G x q_len rows up to this (attnc.h, DecodeChoice)


class Case:
    """One launch: a kernel key (variant, head_dim, dtype, heads_q, heads_kv), a layout, the
    per-sequence lengths and the launch options."""

    def __init__(self, key, layout, q_lens, kv_lens, page_size=0, num_splits=0,
                 decode=dx.DECODE_AUTO, lse=True, share=False, workspace=False, seed=0):
        self.key, self.layout = key, layout
        self.q_lens, self.kv_lens = list(q_lens), list(kv_lens)
        self.page_size, self.num_splits, self.decode = page_size, num_splits, decode
        self.lse, self.share, self.workspace, self.seed = lse, share, workspace, seed

    @property
    def paged(self):
        return self.layout.startswith("paged")

    @property
    def packed_q(self):
        return self.layout in ("varlen", "paged_varlen")

    @property
    def packed_kv(self):
        return self.layout == "varlen"

    def name(self):
        variant, hd, dtype, hq, hkv = self.key
        page = f" page{self.page_size}" if self.paged else ""
        decode = {dx.DECODE_AUTO: "", dx.DECODE_OFF: " decode=Off", dx.DECODE_ON: " decode=On"}
        return (f"{self.layout}{page} q{'/'.join(map(str, sorted(set(self.q_lens))))}"
                f" kv{'/'.join(map(str, self.kv_lens))} splits{self.num_splits or 'auto'}"
                f"{decode[self.decode]}{'' if self.lse else ' noLSE'}"
                f"{' shared' if self.share else ''}{' workspace' if self.workspace else ''}")


def kernel_keys(subset):
    """The kernels a subset compiles, (variant, head_dim, dtype, heads_q, heads_kv): tiny <= 6."""
    tiny = [("causal", 128, "bf16", 32, 8), ("full", 128, "fp16", 16, 1),
            ("softcap", 128, "bf16", 64, 8), ("document_causal", 64, "bf16", 8, 8),
            ("custom_mask", 128, "bf16", 16, 8), ("alibi", 128, "fp16", 32, 8)]
    if subset == "tiny":
        return tiny
    if subset == "small":
        return tiny + [("window64", 128, "bf16", 16, 8), ("prefix50", 64, "fp16", 64, 8),
                       ("causal", 64, "fp16", 16, 1), ("full", 128, "bf16", 8, 8)]
    keys = []
    for i, variant in enumerate(VARIANTS):
        for j, (hq, hkv) in enumerate(HEADS):
            keys.append((variant, 128 if (i + j) % 3 else 64, "bf16" if (i + j) % 2 else "fp16",
                         hq, hkv))
    return keys


def cases_for(key, subset, index):
    """The cases of one kernel: every layout, with q_len, page size and splits cycling over their
    axes (offset by the kernel's index, so the subset covers each axis across its kernels), one
    decode=On case where G x q_len > 64 (or the largest q_len), paged cases with shared prefix
    pages, one without LSE and one with a caller's workspace."""
    rng = random.Random(1000 + index)
    kv_axis = KV_LENS[subset]
    _, _, _, hq, hkv = key
    group = hq // hkv
    out = []
    n_layouts = LAYOUTS if subset != "tiny" or index < 2 else ["bshd", "varlen", "paged",
                                                                 "paged_varlen"]
    for i, layout in enumerate(n_layouts):
        c = index + i
        q_len = Q_LENS[c % len(Q_LENS)]
        splits = SPLITS[c % len(SPLITS)]
        page = PAGE_SIZES[c % len(PAGE_SIZES)]
        if layout in ("bshd", "bhsd"):
            kv = kv_axis[(c + 3) % len(kv_axis)] or 17  # contiguous: one length for all, >= 1
            lens = ([q_len] * 2, [kv] * 2)
        else:
            kv = list(kv_axis)
            rng.shuffle(kv)
            qs = ([rng.choice(Q_LENS) for _ in kv] if layout in ("varlen", "paged_varlen")
                  else [q_len] * len(kv))
            lens = (qs, kv)
        out.append(Case(key, layout, *lens, page_size=page if layout.startswith("paged") else 0,
                        num_splits=splits, share=layout.startswith("paged"),
                        lse=(c % 4 != 3), seed=rng.randrange(1 << 30)))
    # decode=On past the 64 packed rows Auto takes (more than one row tile a kv head).
    q_on = next((q for q in Q_LENS if group * q > PACKED_ROWS_MAX), Q_LENS[-1])
    kv_on = kv_axis[-2]
    out.append(Case(key, "bshd", [q_on] * 2, [kv_on] * 2, num_splits=0, decode=dx.DECODE_ON,
                    seed=rng.randrange(1 << 30)))
    if index % 2 == 1:  # the forward kernel on the same kind of launch (A/B in one process)
        out.append(Case(key, "bshd", [q_on] * 2, [kv_on] * 2, decode=dx.DECODE_OFF,
                        seed=rng.randrange(1 << 30)))
    if index % 2 == 0:
        out.append(Case(key, "paged", [Q_LENS[index % len(Q_LENS)]] * 3, [kv_axis[-2], 1, 17],
                        page_size=PAGE_SIZES[(index + 2) % len(PAGE_SIZES)], num_splits=3,
                        share=True, workspace=True, seed=rng.randrange(1 << 30)))
    if subset == "full":
        for i, page in enumerate(PAGE_SIZES):  # every page size, all lengths in one batch
            out.append(Case(key, "paged_varlen", [rng.choice(Q_LENS) for _ in kv_axis],
                            kv_axis, page_size=page, num_splits=SPLITS[i % len(SPLITS)],
                            share=True,
                            seed=rng.randrange(1 << 30)))
    return out


def plan(subset, only=None, sanitize=False):
    """[(kernel key, [Case])] of a subset; only: variant names to keep; sanitize: short caches."""
    groups = []
    for index, key in enumerate(kernel_keys(subset)):
        if only and key[0] not in only:
            continue
        cases = cases_for(key, subset, index)
        if sanitize:
            for c in cases:
                c.kv_lens = [min(kv, SANITIZE_KV_MAX) for kv in c.kv_lens]
        groups.append((key, cases))
    return groups


# ---- Tensors of a case: per-sequence Q/K/V, then the layout attnc is given ----

def cu_seqlens(lens, device="cpu"):
    """int32 [len(lens) + 1] running sums (FlashAttention's cu_seqlens)."""
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int64), 0).to(torch.int32)
    return out.to(device)


def share_prefixes(ks, vs, kv_lens, page_size, rng):
    """Makes some sequences start with the previous one's first whole pages (copying its keys
    and values there), as a cache whose sequences share a prompt; returns the shared page counts
    per sequence (0 for the first)."""
    shared = [0] * len(kv_lens)
    for b in range(1, len(kv_lens)):
        whole = min(kv_lens[b - 1], kv_lens[b]) // page_size
        if whole and rng.random() < 0.75:
            n = rng.randint(1, whole)
            rows = n * page_size
            ks[b][:rows] = ks[b - 1][:rows]
            vs[b][:rows] = vs[b - 1][:rows]
            shared[b] = n
    return shared


def build_pages(ks, vs, kv_lens, page_size, rng, shared=None, spare_pages=3, extra_slots=2):
    """Page pools [num_pages, page_size, heads_kv, dim] of K and V holding each sequence's rows,
    and the block table [batch, stride] (int32): pages in a random order, sequences sharing the
    pages of `shared` prefixes, NaN in unused pages and in the unused rows of last pages. Table
    entries past a sequence's pages name an unused (NaN) page, so a kernel that reads past
    kv_len_b reads NaN. Returns (k_pool, v_pool, table, max_pages)."""
    batch = len(kv_lens)
    shared = shared or [0] * batch
    pages = [math.ceil(n / page_size) for n in kv_lens]
    own = sum(p - s for p, s in zip(pages, shared))
    num_pages = own + spare_pages
    order = list(range(num_pages))
    rng.shuffle(order)
    unused = order[own:]
    max_pages = max(1, max(pages))
    table = torch.full((batch, max_pages + extra_slots), unused[0], dtype=torch.int32)
    like_k, like_v = ks[0], vs[0]
    k_pool = torch.full((num_pages, page_size) + tuple(like_k.shape[1:]), float("nan"),
                        dtype=like_k.dtype, device=like_k.device)
    v_pool = torch.full((num_pages, page_size) + tuple(like_v.shape[1:]), float("nan"),
                        dtype=like_v.dtype, device=like_v.device)
    next_page = 0
    for b in range(batch):
        for j in range(pages[b]):
            if j < shared[b]:
                table[b, j] = table[b - 1, j]
                continue
            page = order[next_page]
            next_page += 1
            table[b, j] = page
            rows = slice(j * page_size, min(kv_lens[b], (j + 1) * page_size))
            n = rows.stop - rows.start
            k_pool[page, :n] = ks[b][rows]
            v_pool[page, :n] = vs[b][rows]
    return k_pool, v_pool, table, max_pages


def gather_pages(pool, table_row, kv_len, page_size):
    """Sequence rows [kv_len, heads, dim] of a page pool through one block table row."""
    rows = torch.arange(kv_len, device=pool.device)
    page = table_row.to(pool.device).long()[rows // page_size]
    return pool[page, rows % page_size]


class Launch:
    """What attnc is given for a case, and how to read sequence b's O [q_len_b, heads_q, dv] and
    LSE [heads_q, q_len_b] back."""

    def __init__(self, case, qs, ks, vs, hq, dv, dev, rng):
        self.case = case
        batch = len(qs)
        self.batch = batch
        self.q_len = max(case.q_lens)
        self.kv_len = max(1, max(case.kv_lens))
        dt = qs[0].dtype
        self.seq = None
        self.layout = "bhsd" if case.layout == "bhsd" else "bshd"
        seq = {}
        host = {}
        if case.packed_q:
            self.cu_q = cu_seqlens(case.q_lens)
            total_q = int(self.cu_q[-1])
            self.q = torch.cat(qs)[None]
            self.o = torch.full((1, total_q, hq, dv), float("nan"), device=dev, dtype=dt)
            self.lse = torch.full((hq, total_q), float("nan"), device=dev, dtype=torch.float32)
            seq.update(cu_seqlens_q=self.cu_q.to(dev), total_q=total_q)
            host["cu_seqlens_q"] = self.cu_q
        else:
            self.q = torch.stack(qs)  # [B, Sq, H, D]
            self.o = torch.full((batch, self.q_len, hq, dv), float("nan"), device=dev, dtype=dt)
            self.lse = torch.full((batch, hq, self.q_len), float("nan"), device=dev,
                                  dtype=torch.float32)
        if case.paged:
            self.k, self.v, self.table, max_pages = build_pages(
                ks, vs, case.kv_lens, case.page_size, rng, case.shared)
            lens = torch.tensor(case.kv_lens, dtype=torch.int32)
            seq.update(block_table=self.table.to(dev), seq_lens_kv=lens.to(dev),
                       page_size=case.page_size, num_pages=self.k.shape[0],
                       k_stride_page=self.k.stride(0), v_stride_page=self.v.stride(0),
                       max_pages=max_pages)
            host.update(block_table=self.table, seq_lens_kv=lens)
        elif case.packed_kv:
            self.cu_kv = cu_seqlens(case.kv_lens)
            self.k, self.v = torch.cat(ks)[None], torch.cat(vs)[None]
            seq.update(cu_seqlens_kv=self.cu_kv.to(dev), total_kv=int(self.cu_kv[-1]))
            host["cu_seqlens_kv"] = self.cu_kv
        else:
            self.k, self.v = torch.stack(ks), torch.stack(vs)
        if seq:
            self.seq = dx.seq_layout(host=host, **seq)
        if self.layout == "bhsd":
            self.q, self.k, self.v = (t.transpose(1, 2).contiguous() for t in
                                      (self.q, self.k, self.v))
            self.o = self.o.transpose(1, 2).contiguous()
        if not case.lse:
            self.lse = None

    def out(self, b):
        if self.case.packed_q:
            rows = slice(int(self.cu_q[b]), int(self.cu_q[b + 1]))
            return self.o[0, rows], None if self.lse is None else self.lse[:, rows]
        o = self.o[b] if self.layout == "bshd" else self.o[b].transpose(0, 1)
        return o, None if self.lse is None else self.lse[b]

    def args(self, kern, inputs, workspace=None):
        return dx.forward_args_ex(kern, self.q, self.k, self.v, self.o, self.lse, inputs,
                                  batch=self.batch, q_len=self.q_len, kv_len=self.kv_len,
                                  layout=self.layout, decode=self.case.decode,
                                  num_splits=self.case.num_splits, workspace=workspace,
                                  seq=self.seq)


def make_sequences(case, hq, hkv, hd, hdv, dt, dev):
    """Per-sequence Q [q_len_b, hq, hd], K [kv_len_b, hkv, hd], V [kv_len_b, hkv, hdv]; paged
    cases also decide their shared prefixes here (the copies land in K and V)."""
    gen = torch.Generator(device=dev).manual_seed(case.seed)
    qs = [torch.randn(n, hq, hd, device=dev, dtype=dt, generator=gen) for n in case.q_lens]
    ks = [torch.randn(n, hkv, hd, device=dev, dtype=dt, generator=gen) for n in case.kv_lens]
    vs = [torch.randn(n, hkv, hdv, device=dev, dtype=dt, generator=gen) for n in case.kv_lens]
    rng = random.Random(case.seed)
    case.shared = (share_prefixes(ks, vs, case.kv_lens, case.page_size, rng)
                   if case.paged and case.share else None)
    return qs, ks, vs, rng


def sequence_inputs(var, inputs, b):
    """The declared inputs as sequence b's reference sees them: dims with b sliced to [1, ...]."""
    out = {}
    for name, t in inputs.items():
        dims = var.inputs[name][1].replace(" ", "")
        out[name] = t[b:b + 1] if dims.startswith("b") else t
    return out


def synchronize(dev):
    """Waits for the launches on `dev` (the CPU dry runs of test_decode_helpers.py have none)."""
    if dev.type == "cuda":
        torch.cuda.synchronize()


def check_sequence(o_b, lse_b, ref, ref_lse, fully, tol):
    """Problems of one sequence's O [q, h, dv] and LSE [h, q] against the float64 reference
    (ref [1, q, h, dv], ref_lse and fully [1, h, q]); (relerr, lse err, problems)."""
    problems = []
    o = o_b[None]
    fm = fully.to(o.device)
    if torch.isnan(o).any():
        problems.append("NaN in O")
    ref = ref.to(o.device)
    err = tf.relerr(o, ref) if ref.norm() > 0 else o.double().abs().max().item() if o.numel() else 0
    if err > tol:
        problems.append(f"relerr {err:.2e} > {tol:g}")
    if fm.any() and not bool((o.transpose(1, 2)[fm] == 0).all()):
        problems.append("rows without a kept key not exactly 0")
    lse_err = 0.0
    if lse_b is not None:
        lse = lse_b[None]
        if torch.isnan(lse).any():
            problems.append("NaN in LSE")
        if fm.any() and not bool((lse[fm] == float("-inf")).all()):
            problems.append("LSE of rows without a kept key not -inf")
        live = ~fm
        if live.any():
            lse_err = (lse.double()[live] - ref_lse.to(o.device)[live]).abs().max().item()
            lse_err = lse_err if math.isfinite(lse_err) else float("inf")
            if lse_err > tf.LSE_TOL:
                problems.append(f"LSE max err {lse_err:.2e}")
    return err, lse_err, problems


def run_case(kern, var, case, res, ref_dev, row, dev=None):
    info = kern.info
    _, hd, dtype, hq, hkv = case.key
    hdv = info["head_dim_v"]
    dt = tf.TORCH_DTYPE[dtype]
    dev = dev or torch.device("cuda")
    qs, ks, vs, rng = make_sequences(case, hq, hkv, hd, hdv, dt, dev)
    launch = Launch(case, qs, ks, vs, hq, hdv, dev, rng)
    npos = max(launch.q_len, launch.kv_len)  # declared inputs span the launch's positions
    inputs = {n: gen(launch.batch, hq, npos, dev) for n, (_, _, gen) in var.inputs.items()}
    in_args = [(inputs[n], var.inputs[n][1]) for n in kern.input_names]
    workspace = None
    if case.workspace:
        probe = launch.args(kern, in_args)
        workspace = torch.empty(max(16, dx.workspace_bytes(kern, probe)), dtype=torch.uint8,
                                device=dev)
    args = launch.args(kern, in_args, workspace)
    plan_text = ""
    try:
        p = dx.decode_plan(kern, args)
        plan_text = (f" [{'decode' if p['decode'] else 'forward'} rows {p['rows']} x"
                     f"{p['row_tiles']} splits {p['splits']}]")
    except attnc_ctypes.AttncError as e:
        p = {"decode": None}
        plan_text = f" [no plan: {e}]"
    problems = []
    if case.decode == dx.DECODE_ON and p.get("decode") == 0:
        problems.append("decode=On but the plan takes the forward kernel")
    dx.launch_ex(kern, args)
    synchronize(dev)
    worst, worst_lse = 0.0, 0.0
    scale = float(info["scale"])
    for b in range(launch.batch):
        ql, kl = case.q_lens[b], case.kv_lens[b]
        o_b, lse_b = launch.out(b)
        o_b = o_b[:ql]
        lse_b = None if lse_b is None else lse_b[:, :ql]
        ref, ref_lse, fully, _ = tf.reference(qs[b][None], ks[b][None], vs[b][None], scale, var,
                                              1, hq, hkv, ql, kl,
                                              sequence_inputs(var, inputs, b), ref_dev)
        err, lse_err, probs = check_sequence(o_b, lse_b, ref, ref_lse, fully, tf.TOL[dtype])
        worst, worst_lse = max(worst, err), max(worst_lse, lse_err)
        problems += [f"seq {b} (q {ql}, kv {kl}): {x}" for x in probs]
    if launch.o.isnan().any():  # rows no sequence owns in a contiguous O are written too
        problems.append("NaN left in O")
    ok = not problems
    print(f"{'ok  ' if ok else 'FAIL'} {row:34s} {case.name()} err {worst:.2e} lse {worst_lse:.1e}"
          f"{plan_text}" + ("" if ok else "  <- " + "; ".join(problems[:4])), flush=True)
    res.add(row, ok, worst, worst_lse, None, f"{case.name()}: " + "; ".join(problems[:4]))
    return {"row": row, "case": case.name(), "ok": ok, "err": worst, "lse_err": worst_lse,
            "plan": p, "problems": problems}


# ---- Arguments: refused with a message naming them, or (device values) clamped ----

def small_paged(kern, dev, page_size=16, kv_lens=(40, 17, 5), q_len=1, seed=7):
    """A small paged + varlen-Q launch of `kern` for the argument checks."""
    _, hd, dtype, hq, hkv = ("", kern.info["head_dim"], kern.info["dtype"], kern.info["heads_q"],
                             kern.info["heads_kv"])
    case = Case(("", hd, dtype, hq, hkv), "paged_varlen", [q_len] * len(kv_lens), kv_lens,
                page_size=page_size, seed=seed)
    qs, ks, vs, rng = make_sequences(case, hq, hkv, hd, kern.info["head_dim_v"],
                                     tf.TORCH_DTYPE[dtype], dev)
    return Launch(case, qs, ks, vs, hq, kern.info["head_dim_v"], dev, rng)


def bad_argument_checks(kern, res, dev=None):
    """Host copies given: each bad value fails before launch, naming the argument; O untouched."""
    dev = dev or torch.device("cuda")
    cases = []

    def device_copy(launch, name, host_array):
        """Points the layout's device array `name` at a fresh copy of the edited host one."""
        copy = host_array.to(dev)
        launch.seq._keepalive += (copy,)
        setattr(launch.seq, name, copy.data_ptr())

    def bad_table(launch):
        launch.table[1, 0] = launch.k.shape[0] + 7  # the host copy is this tensor
        device_copy(launch, "block_table", launch.table)

    def bad_cu(launch):
        launch.cu_q[2] = launch.cu_q[1] - 1
        device_copy(launch, "cu_seqlens_q", launch.cu_q)

    def long_seq(launch):
        lens = torch.tensor([20, launch.kv_len + 1, 5], dtype=torch.int32)
        launch.seq.host_seq_lens_kv = ctypes.cast(dx.pointer(lens),
                                                  ctypes.POINTER(ctypes.c_int32))
        device_copy(launch, "seq_lens_kv", lens)
        launch.seq._keepalive += (lens,)

    def page_48(launch):
        launch.seq.page_size = 48

    def paged_off(launch):
        launch.case.decode = dx.DECODE_OFF  # the forward kernel takes contiguous K/V only

    for what, edit, word in [("block-table entry out of range", bad_table, "block_table"),
                             ("cu_seqlens_q not increasing", bad_cu, "cu_seqlens_q"),
                             ("a length beyond the pages", long_seq, "seq_lens_kv"),
                             ("page_size 48", page_48, "page_size"),
                             ("decode=Off, paged K/V + varlen Q", paged_off, "decode")]:
        launch = small_paged(kern, dev)
        launch.kv_len = launch.seq.max_pages * launch.seq.page_size  # all the pages allow
        edit(launch)
        cases.append((what, launch, word))
    for what, launch, word in cases:
        args = launch.args(kern, [])
        checked = dx.validate_ex(kern, args)
        try:
            dx.launch_ex(kern, args)
            msg = None
        except attnc_ctypes.AttncError as e:
            msg = str(e)
        synchronize(dev)
        untouched = bool(torch.isnan(launch.o).all()) and bool(torch.isnan(launch.lse).all())
        ok = msg is not None and word in msg and checked is not None and untouched
        print(f"{'ok  ' if ok else 'FAIL'} bad argument: {what:32s} -> {msg!r}"
              f" output untouched {untouched}", flush=True)
        res.add("bad arguments", ok, what=f"{what}: message {msg!r}, validate {checked!r},"
                f" output untouched {untouched}")


def bad_device_checks(kern, res, dev=None):
    """No host copies: device arrays with out-of-range page ids, lengths and offsets. The kernels
    clamp what they read (attnc.h): the launch must finish without a CUDA error (under
    compute-sanitizer: without an out-of-bounds access); the numbers are not checked."""
    dev = dev or torch.device("cuda")
    def wild_ids(launch):
        launch.table[0, 0], launch.table[1, 1] = 1_000_000, -3

    def wild_lens(launch):
        launch.lens = [1_000_000, -5, 17]

    def wild_offsets(launch):
        launch.cu_q.copy_(torch.tensor([0, 3, 1, 1_000_000], dtype=torch.int32))

    edits = {"page ids 10^6 and -3": wild_ids, "seq_lens_kv 10^6 and -5": wild_lens,
             "cu_seqlens_q decreasing, past total_q": wild_offsets}
    for what, edit in edits.items():
        launch = small_paged(kern, dev, q_len=2)
        launch.lens = list(launch.case.kv_lens)
        edit(launch)
        keep = (launch.table.to(dev), torch.tensor(launch.lens, dtype=torch.int32, device=dev),
                launch.cu_q.to(dev))
        launch.seq.block_table, launch.seq.seq_lens_kv, launch.seq.cu_seqlens_q = (
            t.data_ptr() for t in keep)
        launch.seq._keepalive += keep
        for name in ("cu_seqlens_q", "cu_seqlens_kv", "block_table", "seq_lens_kv"):
            setattr(launch.seq, "host_" + name, None)
        note = ""
        try:  # refused would test nothing: without host copies the values cannot be known
            dx.launch_ex(kern, launch.args(kern, []))
            refused = False
        except attnc_ctypes.AttncError as e:
            refused, note = True, f" refused: {e}"
        try:
            synchronize(dev)
            ok = not refused
        except RuntimeError as e:  # an illegal address poisons the context: report, then stop
            ok, note = False, f" CUDA error: {e}"
        print(f"{'ok  ' if ok else 'FAIL'} bad device values: {what}{note}", flush=True)
        res.add("bad device values", ok, what=f"{what}:{note}")
        if not ok:
            return


# ---- Driver ----

def compile_kernels(lib, keys, target):
    """Each key's kernel, compiled once (in parallel), with the JIT's deferred parts built."""
    kernels, errors = {}, {}
    t0 = time.time()

    def build(key):
        variant, hd, dtype, hq, hkv = key
        kern = lib.compile_text(tf.V[variant].spec(hd, dtype, hq, hkv), target)
        dx.compile_deferred(kern)
        return kern

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        futures = {pool.submit(build, key): key for key in keys}
        for f in concurrent.futures.as_completed(futures):
            try:
                kernels[futures[f]] = f.result()
            except Exception as e:  # noqa: BLE001
                errors[futures[f]] = str(e)
    print(f"compiled {len(kernels)} kernels in {time.time() - t0:.1f} s ({len(errors)} failed)",
          flush=True)
    return kernels, errors


def row_name(key):
    variant, hd, dtype, hq, hkv = key
    return f"{variant} hd{hd} {dtype} {hq}/{hkv}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", default="small", choices=["tiny", "small", "full"])
    ap.add_argument("--only", action="append", default=None, metavar="VARIANT",
                    help=f"only this variant's kernels (repeatable): {', '.join(VARIANTS)}")
    ap.add_argument("--target", default=None, help="attnc target (default: the device's)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the results there")
    ap.add_argument("--sanitize", action="store_true",
                    help="for compute-sanitizer: the tiny subset, caches of at most "
                         f"{SANITIZE_KV_MAX} keys, and the bad-device-values launches")
    ap.add_argument("--ref-device", default="cuda")
    ap.add_argument("--lib", default=None)
    args = ap.parse_args(argv)
    subset = "tiny" if args.sanitize else args.subset
    t_start = time.time()
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # a current context before attnc looks for one
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = attnc_ctypes.Library(args.lib)
    facts = tf.device_facts()
    print(f"attnc {lib.version()} ({lib.path}); {facts}; subset {subset}", flush=True)
    groups = plan(subset, args.only, args.sanitize)
    keys = [key for key, _ in groups]
    check_key = ("causal", 128, "bf16", 32, 8)
    if check_key not in keys:
        keys.append(check_key)
    kernels, errors = compile_kernels(lib, keys, args.target)
    res = tf.Results()
    records = []
    for key, e in errors.items():
        print(f"COMPILE FAIL {key}: {e}")
        res.add(f"{row_name(key)} (compile)", False, what=e)
    for key, cases in groups:
        kern = kernels.get(key)
        if kern is None:
            continue
        for case in cases:
            try:
                records.append(run_case(kern, tf.V[key[0]], case, res, args.ref_device,
                                        row_name(key)))
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {row_name(key)} {case.name()}: exception {e}", flush=True)
                res.add(row_name(key), False, what=f"{case.name()}: exception {e}")
    if check_key in kernels:
        bad_argument_checks(kernels[check_key], res)
        bad_device_checks(kernels[check_key], res)
    elapsed = time.time() - t_start
    total = sum(r["cases"] for r in res.rows.values())
    passed = sum(r["pass"] for r in res.rows.values())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"facts": facts, "argv": sys.argv[1:] if argv is None else argv,
                       "subset": subset, "seconds": elapsed, "rows": res.rows,
                       "failures": res.failures, "cases": records}, f, indent=1)
    print(f"\n{'kernel / check':36s} {'cases':>5s} {'pass':>5s} {'worst err':>10s} "
          f"{'worst lse':>9s}")
    for key, r in res.rows.items():
        print(f"{key:36s} {r['cases']:5d} {r['pass']:5d} {r['err']:10.2e} {r['lse']:9.1e}")
    print(f"\n{passed}/{total} passed, {total - passed} failed, {elapsed:.0f} s")
    return 0 if passed == total and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
