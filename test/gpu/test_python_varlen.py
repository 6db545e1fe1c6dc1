"""GPU tests of attnc.attention's inference arguments (attnc::forward_ex): packed sequences
(cu_seqlens_q/kv), paged K/V pools (block_table, seq_lens_kv) with shuffled and shared pages,
contiguous q over a paged cache, and the decode options (num_splits, decode), each sequence
against test_forward.py's float64 reference with its own lengths (so bottom-right causal is per
sequence), output and LSE, for the mask and score families of test_python.py; torch.compile
(fullgraph=True) bit-identical to eager; a CUDA graph of a decode step replayed after tokens are
appended in place, bit-identical to eager; argument errors raised before any launch. And the
varlen backward (attnc::backward_ex): dq, dk, dv of packed batches, each sequence against float64
autograd (test_backward.py's reference and bounds), gradients poisoned before each run, the
deterministic mode bit-identical twice, torch.compile of a training step bit-identical to eager.
Prints a summary table last; exits non-zero if any check fails.

  PYTHONPATH=python python3 test/gpu/test_python_varlen.py [--only TEXT] [--list]

test/python/test_python_varlen_dry.py runs the case building and checking on the CPU against a
simulated op (no GPU)."""
import argparse
import functools
import math
import os
import random
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The checkout's package when none is installed or on PYTHONPATH.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import test_backward as tb  # noqa: E402
import test_decode as td  # noqa: E402
import test_forward as tf  # noqa: E402
from test_python import FAMILIES, Results, fmt, kernels_launched  # noqa: E402

import attnc  # noqa: E402
from attnc import _loader, torch_ops  # noqa: E402


class Case:
    """One call: a family of test_python.FAMILIES, a layout ("varlen": packed q and k/v;
    "paged_varlen": packed q over pools; "paged": contiguous q over pools; "varlen_q": packed q
    over contiguous k/v; "contiguous": the decode options alone), per-sequence lengths, and the
    call's options. max_kv False leaves max_seqlen_kv out (paged: the table's capacity);
    host_lens passes host_seq_lens_kv (paged)."""

    def __init__(self, family, layout, q_lens, kv_lens, page_size=16, hq=8, hkv=2, d=64,
                 dtype="bf16", qkv_layout="bshd", num_splits=0, decode="auto", share=False,
                 max_kv=True, seed=0, deterministic=False, host_lens=False):
        self.family, self.layout = FAMILIES[family], layout
        self.q_lens, self.kv_lens = list(q_lens), list(kv_lens)
        self.page_size, self.hq, self.hkv, self.d, self.dtype = page_size, hq, hkv, d, dtype
        self.qkv_layout, self.num_splits, self.decode = qkv_layout, num_splits, decode
        self.share, self.max_kv, self.seed = share, max_kv, seed
        self.deterministic = deterministic
        self.host_lens = host_lens

    @property
    def paged(self):
        return self.layout.startswith("paged")

    @property
    def packed_q(self):
        return self.layout in ("varlen", "paged_varlen", "varlen_q")

    def name(self):
        opts = [f"page{self.page_size}"] if self.paged else []
        opts += [f"splits{self.num_splits}"] if self.num_splits else []
        opts += [f"decode={self.decode}"] if self.decode != "auto" else []
        opts += ["shared"] if self.share else []
        opts += ["no max_seqlen_kv"] if not self.max_kv else []
        opts += ["deterministic"] if self.deterministic else []
        opts += ["host lengths"] if self.host_lens else []
        return (f"{self.family.name} {self.layout} {self.qkv_layout} {self.dtype} "
                f"{self.hq}/{self.hkv} hd{self.d} q{'/'.join(map(str, self.q_lens))} "
                f"kv{'/'.join(map(str, self.kv_lens))} {' '.join(opts)}").rstrip()


# Lengths: an empty cache, one key, a partial page, several tiles; q_len 1 to 16 (decode to a
# short prefill chunk).
MIXED_Q, MIXED_KV = [1, 4, 16, 2], [300, 0, 17, 1100]


def plan():
    cases = [Case(f, "paged_varlen", MIXED_Q, MIXED_KV) for f in (
        "none", "causal", "window", "document causal", "custom mask", "softcap",
        "alibi slopes", "custom score")]
    cases += [
        Case("causal", "varlen", [5, 1, 16], [17, 300, 64]),
        Case("causal", "varlen_q", [5, 1, 16], [200, 200, 200]),
        Case("causal", "paged", [1, 1, 1], [1, 17, 4097], page_size=64, share=True),
        Case("causal", "paged", [4, 4], [33, 700], qkv_layout="bhsd", max_kv=False),
        Case("causal", "paged_varlen", MIXED_Q, MIXED_KV, num_splits=5),
        Case("causal", "paged_varlen", MIXED_Q, MIXED_KV, host_lens=True),
        Case("window", "paged", [1, 1, 1, 1], [9000, 3, 17, 0], page_size=16, host_lens=True),
        Case("causal", "contiguous", [2, 2], [900, 900], num_splits=3, decode="on"),
        Case("causal", "contiguous", [8, 8], [300, 300], qkv_layout="bhsd", decode="off"),
        Case("softcap", "paged_varlen", [1, 3, 1], [4097, 1, 256], page_size=256, hq=16, hkv=1,
             d=128, dtype="fp16", share=True),
    ]
    return cases


# The backward's cases: training on packed batches (no paged K/V, no decode options). Four
# specs, so four compiles with backward kernels on the GPU machine's clock. Causal cases keep
# q_len <= kv_len per sequence (no row without keys, whose reference gradient is not defined by
# autograd). Sequences of one row, a partial tile, several tiles.
TRAIN_LENS = [1, 17, 300, 1000]


def backward_plan():
    return [
        Case("causal", "varlen", TRAIN_LENS, TRAIN_LENS, hq=8, hkv=2, d=128),
        Case("none", "varlen", TRAIN_LENS, [17, 1, 1000, 300], hq=8, hkv=8, d=64, dtype="fp16"),
        Case("causal", "varlen", TRAIN_LENS, TRAIN_LENS, hq=8, hkv=8, d=64, deterministic=True),
        Case("document causal", "varlen", [17, 300, 1000], [17, 300, 1000], hq=8, hkv=2),
        # G x max q_len <= 64 packed rows: the decode kernel does the forward, whose LSE the
        # backward reads.
        Case("causal", "varlen", [1, 5, 16], [40, 17, 300], hq=8, hkv=2, d=128),
        # Packed q over contiguous K/V in each layout.
        Case("causal", "varlen_q", [5, 100, 200], [200, 200, 200], hq=8, hkv=2, d=128,
             qkv_layout="bhsd"),
        Case("causal", "varlen_q", [5, 100, 200], [200, 200, 200], hq=8, hkv=2, d=128),
    ]


def build(case, dev):
    """(per-sequence q, k, v lists, the call's q, k, v, its keyword arguments, the inputs)."""
    dt = tf.TORCH_DTYPE[case.dtype]
    gen = torch.Generator(device=dev).manual_seed(case.seed)
    hq, hkv, d = case.hq, case.hkv, case.d
    qs = [torch.randn(n, hq, d, device=dev, dtype=dt, generator=gen) for n in case.q_lens]
    ks = [torch.randn(n, hkv, d, device=dev, dtype=dt, generator=gen) for n in case.kv_lens]
    vs = [torch.randn(n, hkv, d, device=dev, dtype=dt, generator=gen) for n in case.kv_lens]
    rng = random.Random(case.seed)
    shared = (td.share_prefixes(ks, vs, case.kv_lens, case.page_size, rng) if case.share
              else None)
    bhsd = case.qkv_layout == "bhsd"
    kwargs = {"layout": case.qkv_layout, "num_splits": case.num_splits, "decode": case.decode}
    batch = len(qs)
    if case.packed_q:
        q = torch.cat(qs)
        kwargs.update(cu_seqlens_q=td.cu_seqlens(case.q_lens, dev), max_seqlen_q=max(case.q_lens))
    else:
        q = torch.stack(qs)
        q = q.transpose(1, 2).contiguous() if bhsd else q
    if case.paged:
        k, v, table, _ = td.build_pages(ks, vs, case.kv_lens, case.page_size, rng, shared)
        if bhsd:
            k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        kwargs.update(block_table=table.to(dev),
                      seq_lens_kv=torch.tensor(case.kv_lens, dtype=torch.int32, device=dev))
        if case.host_lens:
            kwargs["host_seq_lens_kv"] = torch.tensor(case.kv_lens, dtype=torch.int32)
        capacity = table.shape[1] * case.page_size
        kv_len = max(1, max(case.kv_lens)) if case.max_kv else capacity
        if case.max_kv:
            kwargs["max_seqlen_kv"] = kv_len
    elif case.layout == "varlen":
        k, v = torch.cat(ks), torch.cat(vs)
        kv_len = max(case.kv_lens)
        kwargs.update(cu_seqlens_kv=td.cu_seqlens(case.kv_lens, dev), max_seqlen_kv=kv_len)
    else:
        k, v = torch.stack(ks), torch.stack(vs)
        if bhsd:
            k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        kv_len = k.shape[2 if bhsd else 1]
    npos = max(max(case.q_lens), kv_len)  # declared inputs span the launch's positions
    inputs = {n: g(batch, hq, npos, dev) for n, (_, _, g) in case.family.ref.inputs.items()}
    return qs, ks, vs, q, k, v, kwargs, inputs


def sequence_out(case, out, lse, b):
    """Sequence b's O [q_len_b, Hq, Dv] and LSE [Hq, q_len_b] in the call's results."""
    if case.packed_q:
        start = sum(case.q_lens[:b])
        rows = slice(start, start + case.q_lens[b])
        return out[rows], lse[:, rows]
    o = out[b].transpose(0, 1) if case.qkv_layout == "bhsd" else out[b]
    return o, lse[b]


def poison(dev, *tensors_like):
    """Hands the caching allocator NaN blocks of each tensor's size, so the op's outputs start
    as NaN: a row the kernel skips stays NaN."""
    if dev.type == "cuda":
        blocks = [torch.full_like(t, float("nan")) for t in tensors_like]
        del blocks


def run_case(case, res, dev=None, attention=None, ref_dev=None):
    """One call against the float64 reference per sequence; returns the problems found."""
    dev = dev or torch.device("cuda")
    attention = attention or attnc.attention
    qs, ks, vs, q, k, v, kwargs, inputs = build(case, dev)
    fam = case.family
    packed_lse = (case.hq, q.shape[0]) if case.packed_q else None
    poison(dev, q.new_empty(q.shape[:-1] + (v.shape[-1],)),
           torch.empty(packed_lse or (len(qs), case.hq, max(case.q_lens)), device=dev))
    out, lse = attention(q, k, v, mask=fam.mask, score=fam.score, inputs=inputs or None,
                         return_lse=True, **kwargs)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    problems, worst, worst_lse = [], 0.0, 0.0
    scale = 1.0 / math.sqrt(case.d)
    for b, (ql, kl) in enumerate(zip(case.q_lens, case.kv_lens)):
        o_b, lse_b = sequence_out(case, out, lse, b)
        ref, ref_lse, fully, _ = tf.reference(qs[b][None], ks[b][None], vs[b][None], scale,
                                              fam.ref, 1, case.hq, case.hkv, ql, kl,
                                              td.sequence_inputs(fam.ref, inputs, b),
                                              ref_dev or dev)
        err, lse_err, probs = td.check_sequence(o_b, lse_b, ref, ref_lse, fully,
                                                tf.TOL[case.dtype])
        worst, worst_lse = max(worst, err), max(worst_lse, lse_err)
        problems += [f"seq {b} (q {ql}, kv {kl}): {p}" for p in probs]
    if out.isnan().any():
        problems.append("NaN left in out")
    res.add(f"{fam.name} {case.layout}", not problems, case.name()
            + ("" if not problems else "  <- " + "; ".join(problems[:4])), out_err=worst,
            lse_err=worst_lse)
    return problems


def sequence_rows(case, t, b, side):
    """Sequence b's rows of a call's tensor (q-side or kv-side) as [S_b, H, D]."""
    lens = case.q_lens if side == "q" else case.kv_lens
    packed = case.packed_q if side == "q" else case.layout == "varlen"
    if packed:
        start = sum(lens[:b])
        return t[start:start + lens[b]]
    return t[b].transpose(0, 1) if case.qkv_layout == "bhsd" else t[b]


def train_step(case, q, k, v, kwargs, inputs, do, attention):
    """dq, dk, dv of one training call (fresh leaves of q, k, v; `do` the output's gradient),
    their blocks poisoned between the forward and the backward."""
    fam = case.family
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, mask=fam.mask, score=fam.score, inputs=inputs or None,
                    return_lse=False, deterministic=case.deterministic, **kwargs)
    poison(q.device, q, k, v)
    return torch.autograd.grad(out, leaves, do)


def run_backward_case(case, res, dev=None, attention=None):
    """One training call's gradients, each sequence's against float64 autograd of that sequence
    alone; the deterministic mode twice, bit-identical. Returns the problems found."""
    dev = dev or torch.device("cuda")
    attention = attention or attnc.attention
    qs, ks, vs, q, k, v, kwargs, inputs = build(case, dev)
    gen = torch.Generator(device=dev).manual_seed(case.seed + 1)
    do_shape = q.shape[:-1] + (case.d,)
    do = torch.randn(do_shape, device=dev, dtype=q.dtype, generator=gen)
    dos = [sequence_rows(case, do, b, "q") for b in range(len(qs))]
    runs = []
    for _ in range(2 if case.deterministic else 1):
        runs.append(train_step(case, q, k, v, kwargs, inputs, do, attention))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dq, dk, dv = runs[0]
    problems, worst = [], 0.0
    scale = 1.0 / math.sqrt(case.d)
    tol = tb.TOL[case.dtype]
    for name, g in zip(("dq", "dk", "dv"), runs[0]):
        if g.isnan().any():
            problems.append(f"NaN left in {name}")
    for b, (ql, kl) in enumerate(zip(case.q_lens, case.kv_lens)):
        refs = tb.reference_grads(qs[b][None], ks[b][None], vs[b][None], dos[b][None], scale,
                                  case.family.ref, 1, case.hq, case.hkv, ql, kl,
                                  td.sequence_inputs(case.family.ref, inputs, b), None, 0.0)
        for name, g, side, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), ("q", "kv", "kv"), refs):
            err = tb.gradient_error(sequence_rows(case, g, b, side), ref[0])
            worst = max(worst, err)
            if not err <= tol:
                problems.append(f"seq {b} (q {ql}, kv {kl}): {name} relerr {err:.2e} > {tol:g}")
    if case.deterministic and not all(torch.equal(a, b) for a, b in zip(*runs)):
        problems.append("deterministic gradients differ between two runs")
    res.add(f"backward {case.family.name} {case.layout}", not problems, case.name()
            + ("" if not problems else "  <- " + "; ".join(problems[:4])), grad_err=worst)
    return problems


# ---- torch.compile, CUDA graphs, errors ----

def compile_check(res):
    """torch.compile(fullgraph=True) of a paged varlen call with a declared input: the same
    kernels as eager, so bit-identical out and LSE, twice (the second from the cached graph)."""
    case = Case("document causal", "paged_varlen", MIXED_Q, MIXED_KV, num_splits=3)
    _, _, _, q, k, v, kwargs, inputs = build(case, torch.device("cuda"))

    def step(q, k, v, doc):
        return attnc.attention(q, k, v, mask=case.family.mask, inputs={"doc": doc},
                               return_lse=True, **kwargs)
    eager = step(q, k, v, inputs["doc"])
    try:
        compiled = torch.compile(step, fullgraph=True)
        got = [compiled(q, k, v, inputs["doc"]) for _ in range(2)]
    except Exception as e:  # noqa: BLE001
        res.add("torch.compile", False, f"fullgraph compile failed: {str(e).splitlines()[0][:300]}")
        return
    torch.cuda.synchronize()
    same = all(torch.equal(g[i], eager[i]) for g in got for i in range(2))
    res.add("torch.compile", same, f"fullgraph paged varlen: out and LSE bit-identical to eager "
            f"in two runs: {same}")


def compile_backward_check(res):
    """torch.compile(fullgraph=True) of a varlen training step (forward_ex and backward_ex in
    aot_autograd's graphs): deterministic gradients bit-identical to eager's."""
    case = Case("causal", "varlen", TRAIN_LENS, TRAIN_LENS, hq=8, hkv=8, d=64,
                deterministic=True)
    dev = torch.device("cuda")
    _, _, _, q, k, v, kwargs, inputs = build(case, dev)
    do = torch.randn(q.shape[:-1] + (case.d,), device=dev, dtype=q.dtype)
    eager = train_step(case, q, k, v, kwargs, inputs, do, attnc.attention)
    try:
        # aot_eager: dynamo and aot_autograd trace the ops as inductor would, without its
        # compile time.
        compiled = torch.compile(attnc.attention, fullgraph=True, backend="aot_eager")
        got = [train_step(case, q, k, v, kwargs, inputs, do, compiled) for _ in range(2)]
    except Exception as e:  # noqa: BLE001
        res.add("torch.compile backward", False,
                f"fullgraph compile failed: {str(e).splitlines()[0][:300]}")
        return
    torch.cuda.synchronize()
    same = all(torch.equal(g[i], eager[i]) for g in got for i in range(3))
    res.add("torch.compile backward", same, f"fullgraph varlen training step, deterministic: "
            f"dq, dk, dv bit-identical to eager in two runs: {same}")


def graph_check(res, family):
    """A decode step over a paged cache, captured once with max_seqlen_kv left to the table's
    capacity; each replay after a token is appended in place (new q, K/V written into the pool,
    seq_lens_kv + 1) equals an eager call on the same tensors, bit for bit."""
    dev = torch.device("cuda")
    fam = FAMILIES[family]
    case = Case(family, "paged", [1, 1, 1], [40, 17, 100], page_size=16, max_kv=False)
    _, _, _, q, k, v, kwargs, inputs = build(case, dev)
    # Room for the appended tokens: two spare slots at the end of each table row.
    table, lens = kwargs["block_table"], kwargs["seq_lens_kv"]

    def step():
        return attnc.attention(q, k, v, mask=fam.mask, score=fam.score, inputs=inputs or None,
                               return_lse=True, **kwargs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    # Warm-up on the capturing stream: kernels compiled and loaded, a mask's summary buffer sized.
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=side):
            static = step()
    except Exception as e:  # noqa: BLE001
        res.add("CUDA graph", False, f"{family}: capture failed: {str(e).splitlines()[0][:300]}")
        return
    problems = []
    page = case.page_size
    for replay in range(3):
        with torch.no_grad():
            q.copy_(torch.randn_like(q))
            for b, n in enumerate(lens.tolist()):
                slot = table[b, n // page].item()  # the page of the new token (a spare one)
                k[slot, n % page] = torch.randn_like(k[slot, n % page])
                v[slot, n % page] = torch.randn_like(v[slot, n % page])
            lens += 1
        for t in static:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = step()
        torch.cuda.synchronize()
        for name, got, want in zip(("out", "lse"), static, eager):
            if not torch.equal(got, want):
                problems.append(f"replay {replay}: {name} differs from eager "
                                f"(relerr {tf.relerr(got, want.double()):.1e})")
    res.add("CUDA graph", not problems, f"{family}: paged decode, capture + 3 replays appending "
            "a token" + ("" if not problems else "  <- " + "; ".join(problems[:4])))


def error_checks(res):
    """Bad arguments raise ArgumentError naming them and launch nothing, whether Python or the
    C API's validation finds them."""
    case = Case("causal", "paged_varlen", MIXED_Q, MIXED_KV)
    _, _, _, q, k, v, kwargs, _ = build(case, torch.device("cuda"))
    capacity = kwargs["block_table"].shape[1] * case.page_size
    bad = {"max_seqlen_kv": ({"max_seqlen_kv": capacity + 1}, "max_seqlen_kv: expected at most"),
           "decode off": ({"decode": "off"}, "ForwardArgs.decode"),
           "requires grad": ({}, "block_table: expected None when q, k or v requires grad")}
    for name, (change, prefix) in bad.items():
        qq = q.detach().requires_grad_() if name == "requires grad" else q

        def call():
            attnc.attention(qq, k, v, mask="causal", **{**kwargs, **change})
        launched, error = kernels_launched(call)
        ok = (isinstance(error, attnc.ArgumentError) and str(error).startswith(prefix)
              and launched == 0)
        res.add("argument errors", ok, f"{name}: {type(error).__name__}: "
                f"{str(error)[:100]}; {launched} kernels launched")
    # A training call over a sequence with queries and no keys: refused from the host copies,
    # before any attnc launch (the copy's own stack and transfer are all that run).
    case = Case("causal", "varlen", [3, 4, 5], [40, 0, 17])
    _, _, _, q, k, v, kwargs, _ = build(case, torch.device("cuda"))
    q = q.detach().requires_grad_()
    copy, _ = kernels_launched(lambda: torch_ops._host_copies(kwargs["cu_seqlens_q"],
                                                              kwargs["cu_seqlens_kv"]))
    launched, error = kernels_launched(lambda: attnc.attention(q, k, v, mask="causal", **kwargs))
    prefix = "cu_seqlens_kv: expected sequences with both queries and keys"
    ok = (isinstance(error, attnc.ArgumentError) and str(error).startswith(prefix)
          and launched == copy)
    res.add("argument errors", ok, f"training on a sequence without keys: "
            f"{type(error).__name__}: {str(error)[:100]}; {launched - copy} kernels launched "
            f"past the host copy")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="only cases whose name contains TEXT (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the steps' names and exit "
                    "(no GPU needed)")
    args = ap.parse_args()
    steps = [(c.name(), functools.partial(run_case, c)) for c in plan()]
    steps += [("backward " + c.name(), functools.partial(run_backward_case, c))
              for c in backward_plan()]
    steps += [("torch.compile", compile_check),
              ("torch.compile backward", compile_backward_check),
              ("CUDA graph causal", lambda res: graph_check(res, "causal")),
              ("CUDA graph document", lambda res: graph_check(res, "document causal")),
              ("argument errors", error_checks)]
    steps = [s for s in steps if not args.only or any(t in s[0] for t in args.only)]
    if args.list:
        print("\n".join(name for name, _ in steps))
        return 0
    start = time.time()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"attnc {attnc.__version__} ({_loader.library_path()}); {tf.device_facts()}",
          flush=True)
    res = Results()
    for name, fn in steps:
        try:
            fn(res)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res.add(name, False, f"exception {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 (a sticky CUDA error: the next steps report it)
                pass
    elapsed = time.time() - start
    print(f"\n{'group':34s} {'cases':>5s} {'pass':>5s} {'out err':>9s} {'lse err':>9s} "
          f"{'grad err':>9s}")
    for group, r in res.rows.items():
        print(f"{group:34s} {r['cases']:5d} {r['pass']:5d} {fmt(r['out']):>9s} "
              f"{fmt(r['lse']):>9s} {fmt(r['grad']):>9s}")
    cases = sum(r["cases"] for r in res.rows.values())
    passed = sum(r["pass"] for r in res.rows.values())
    print(f"\n{passed}/{cases} passed, {cases - passed} failed, {elapsed:.0f} s")
    return 0 if passed == cases else 1


if __name__ == "__main__":
    sys.exit(main())
