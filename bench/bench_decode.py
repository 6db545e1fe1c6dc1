"""Decode benchmark on one GPU: a decode step (q_len 1 or 8 new tokens a sequence, bottom-right
causal) over a KV cache, contiguous or paged, in GB/s against the device's copy bandwidth measured
in the same run, beside cuDNN (torch SDPA), FlashAttention-2 (flash_attn_with_kvcache, else SDPA's
flash backend), FlexAttention's decoding path and attnc with decode=Off; then a varlen prefill
(8 causal sequences of 100..8K tokens) in TFLOP/s against cuDNN's ragged SDPA (else the padded
batch). bf16, head_dim 128, GQA 32/8 and 64/8. Every attnc timing follows a check of sequences 0
and B-1 against a float32 reference (relerr < 1e-2); a peer that is missing or fails is a row's
note. docs/perf/decode.md is rendered from --json by bench/decode_page.py.

  python3 bench/bench_decode.py [--quick] [--json decode.json] [--only TEXT]... [--no-flex]

Bytes a step = K/V read (sum over sequences of kv_len x Hkv x (d + dv) x 2) + Q + O + LSE. Time:
CUDA events around batches of back-to-back calls (bench_forward.time_ms), median of the batches;
where K/V is under 4x the L2 the calls rotate over copies of the cache so that no call finds its
cache in L2."""
import argparse
import datetime
import itertools
import json
import math
import os
import random
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import attnc_ctypes  # noqa: E402
import attnc_decode_ctypes as dx  # noqa: E402

DT = torch.bfloat16
HEAD_DIM = 128
L2_FALLBACK = 50 << 20  # H100's 50 MB, where torch does not report the L2 size
ROTATE_FACTOR = 4  # rotate copies of a cache smaller than this many L2s
MAX_COPIES = 64
MAX_KV_BYTES = 40e9  # rows whose cache exceeds this are skipped (two caches must fit 80 GB)
COPY_BYTES = 2 << 30  # the copy-bandwidth probe: 2 GiB each way
CHECK_TOL = 1e-2
LAYOUTS = ["contiguous", "paged16", "paged256"]
WARM_MS = 200.0  # untimed back-to-back calls before each implementation's timed batches
GRAPHS = False  # --graphs: time replays of a CUDA graph of the batch (no launch overhead)
VARLEN_SEQS, VARLEN_MIN, VARLEN_MAX, VARLEN_SEED = 8, 100, 8192, 51


class Row:
    """A decode step: heads, batch, kv length (every sequence), q_len and the cache layout."""

    def __init__(self, hq, hkv, batch, kv, q_len, layout):
        self.hq, self.hkv, self.batch, self.kv, self.q_len = hq, hkv, batch, kv, q_len
        self.layout = layout
        self.d = self.dv = HEAD_DIM

    @property
    def page_size(self):
        return int(self.layout[5:]) if self.layout.startswith("paged") else 0

    @property
    def name(self):
        kv = f"{self.kv // 1024}K" if self.kv >= 1024 else str(self.kv)
        return f"GQA {self.hq}/{self.hkv} B{self.batch} kv{kv} q{self.q_len} {self.layout}"

    def contiguous_name(self):
        return Row(self.hq, self.hkv, self.batch, self.kv, self.q_len, "contiguous").name

    def kv_bytes(self):
        return self.batch * self.kv * self.hkv * (self.d + self.dv) * 2

    def bytes(self):
        """What a step must move: K/V read, Q read, O and LSE written."""
        rows = self.batch * self.q_len * self.hq
        return self.kv_bytes() + rows * (self.d * 2 + self.dv * 2 + 4)


def rows(quick):
    heads = [(32, 8)] if quick else [(32, 8), (64, 8)]
    batches = [8, 64] if quick else [1, 8, 64]
    kvs = [32768, 131072] if quick else [2048, 32768, 131072]
    layouts = ["contiguous", "paged256"] if quick else LAYOUTS
    out = []
    for (hq, hkv), batch, kv, q_len, layout in itertools.product(heads, batches, kvs, [1, 8],
                                                                  layouts):
        row = Row(hq, hkv, batch, kv, q_len, layout)
        if row.kv_bytes() <= MAX_KV_BYTES:
            out.append(row)
    return out


def selected(row, only):
    return not only or any(text in row.name for text in only)


def copies_for(kv_bytes, l2_bytes):
    """Caches to rotate over so that the calls between two uses of one exceed 4x the L2."""
    if kv_bytes >= ROTATE_FACTOR * l2_bytes:
        return 1
    return min(MAX_COPIES, math.ceil(ROTATE_FACTOR * l2_bytes / max(kv_bytes, 1)) + 1)


def spec_text(hq, hkv):
    return (f"name: bench_decode_causal_hd{HEAD_DIM}_{hq}_{hkv}\nhead_dim: {HEAD_DIM}\n"
            f"dtype: bf16\nheads: {{q: {hq}, kv: {hkv}}}\nmask: causal\n")


def reference_rows(q, k, v, scale):
    """float32 O [q_len, Hq, dv] of one sequence, bottom-right causal (q [q_len, Hq, d], K/V
    [kv, Hkv, d])."""
    ql, kl, group = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    qf = q.float().transpose(0, 1)
    kf = k.float().transpose(0, 1).repeat_interleave(group, 0)
    vf = v.float().transpose(0, 1).repeat_interleave(group, 0)
    s = (qf @ kf.transpose(-1, -2)) * scale
    keep = (torch.arange(kl, device=q.device)[None, :]
            <= torch.arange(ql, device=q.device)[:, None] + (kl - ql))
    s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1) @ vf).transpose(0, 1)


def relerr(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def paged_cache(batch, kv, hkv, d, page_size, dev, seed):
    """Page pools [pages, page_size, Hkv, d] of K and V (random), a block table [batch, pages a
    sequence] of shuffled page ids and the int32 kv lengths."""
    per_seq = math.ceil(kv / page_size)
    gen = torch.Generator(device=dev).manual_seed(seed)
    k = torch.randn(batch * per_seq, page_size, hkv, d, device=dev, dtype=DT, generator=gen)
    v = torch.randn(batch * per_seq, page_size, hkv, d, device=dev, dtype=DT, generator=gen)
    order = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed))
    table = order.to(torch.int32).view(batch, per_seq).to(dev)
    lens = torch.full((batch,), kv, dtype=torch.int32, device=dev)
    return k, v, table, lens


def gather(pool, table_row, kv, page_size):
    rows = torch.arange(kv, device=pool.device)
    return pool[table_row.long()[rows // page_size], rows % page_size]


class Cache:
    """One copy of a row's inputs and outputs: Q [B, q, Hq, d], K/V contiguous [B, kv, Hkv, d]
    or paged pools, O, LSE."""

    def __init__(self, row, dev, seed):
        gen = torch.Generator(device=dev).manual_seed(seed)
        b, q, hq, hkv, d = row.batch, row.q_len, row.hq, row.hkv, row.d
        self.q = torch.randn(b, q, hq, d, device=dev, dtype=DT, generator=gen)
        self.o = torch.empty(b, q, hq, row.dv, device=dev, dtype=DT)
        self.lse = torch.empty(b, hq, q, device=dev, dtype=torch.float32)
        self.table = self.lens = None
        if row.page_size:
            self.k, self.v, self.table, self.lens = paged_cache(b, row.kv, hkv, d, row.page_size,
                                                                dev, seed + 1)
        else:
            self.k = torch.randn(b, row.kv, hkv, d, device=dev, dtype=DT, generator=gen)
            self.v = torch.randn(b, row.kv, hkv, row.dv, device=dev, dtype=DT, generator=gen)

    def sequence(self, row, b):
        if row.page_size:
            return (gather(self.k, self.table[b], row.kv, row.page_size),
                    gather(self.v, self.table[b], row.kv, row.page_size))
        return self.k[b], self.v[b]

    def attnc_args(self, kern, row, decode, workspace=None):
        seq = None
        if row.page_size:
            seq = dx.seq_layout(block_table=self.table, seq_lens_kv=self.lens,
                                page_size=row.page_size, num_pages=self.k.shape[0],
                                k_stride_page=self.k.stride(0), v_stride_page=self.v.stride(0))
        return dx.forward_args_ex(kern, self.q, self.k, self.v, self.o, self.lse,
                                  batch=row.batch, q_len=row.q_len, kv_len=row.kv,
                                  decode=decode, workspace=workspace, seq=seq)


def cycle(fns):
    """One callable that calls fns in turn (one per cache copy)."""
    it = itertools.cycle(fns)
    return lambda: next(it)()


# ---- Peers: each returns a callable for one cache copy, or raises ----

def sdpa_peer(backend, cache, row):
    """torch SDPA with one backend forced, GQA through enable_gqa, bottom-right causal for
    q_len > 1 (torch's is_causal is top-left)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    q, k, v = (t.transpose(1, 2) for t in (cache.q, cache.k, cache.v))

    def make(mask):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        fn()
        return fn
    if row.q_len == 1:  # bottom-right causal keeps every key
        return make(None)
    from torch.nn.attention.bias import causal_lower_right
    try:
        return make(causal_lower_right(row.q_len, row.kv))
    except Exception as e:  # noqa: BLE001
        # The same bytes without the mask (q_len rows over kv_len keys): a bandwidth peer still.
        fn = make(None)
        fn.note = ("no mask (bottom-right causal refused: "
                   f"{str(e).splitlines()[0][:100]}); the same bytes")
        return fn


def fa2_peer(cache, row):
    """flash_attn_with_kvcache (bottom-right causal; paged where the page is a multiple of 256)."""
    from flash_attn import flash_attn_with_kvcache
    if row.page_size and row.page_size % 256:
        raise RuntimeError(f"FA2's paged cache takes pages of a multiple of 256, not "
                           f"{row.page_size}")
    extra = {}
    if row.page_size:
        extra = {"block_table": cache.table, "cache_seqlens": cache.lens}

    def fn():
        return flash_attn_with_kvcache(cache.q, cache.k, cache.v, causal=True, **extra)
    fn()
    return fn


class Flex:
    """torch.compile(flex_attention) and create_block_mask, made once (GPU only)."""

    def __init__(self):
        import torch._dynamo as dynamo  # every row's shapes compile anew: lift the limits
        for name in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo.config, name):
                setattr(dynamo.config, name, 256)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        self.flex = torch.compile(flex_attention, dynamic=False)
        self.create_block_mask = create_block_mask

    def peer(self, cache, row):
        if row.page_size:
            raise RuntimeError("no paged cache")
        shift = row.kv - row.q_len

        def bottom_right(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + shift
        block_mask = self.create_block_mask(bottom_right, None, None, row.q_len, row.kv,
                                            device=cache.q.device)
        q, k, v = (t.transpose(1, 2) for t in (cache.q, cache.k, cache.v))

        def fn():
            return self.flex(q, k, v, block_mask=block_mask, enable_gqa=True)
        fn()
        return fn


def time_call(fn, graphs):
    """Median ms a call: back-to-back eager calls, or (graphs) replays of a CUDA graph that holds
    a batch of them, so that rows of a few microseconds do not time the Python launch."""
    import bench_forward
    if not graphs:
        return bench_forward.time_ms(fn, warm_ms=WARM_MS)[0]
    inner = bench_forward.batch_size(fn)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    return bench_forward.time_ms(graph.replay, warm_ms=WARM_MS)[0] / inner


def timed(res, impls, work, rates):
    """Times each implementation: res["ms"], rates[name] = work / s; a failure goes to its note.
    Under --graphs one whose capture fails is timed eagerly, with a note."""
    for name, fn in impls.items():
        try:
            try:
                med, how = time_call(fn, GRAPHS), "graph" if GRAPHS else "eager"
            except Exception as e:  # noqa: BLE001
                if not GRAPHS:
                    raise
                med, how = time_call(fn, False), "eager"
                res["note"][name] = f"eager (graph capture failed: {str(e).splitlines()[0][:120]})"
            res["ms"][name] = med
            res.setdefault("timing", {})[name] = how
            rates[name] = work / (med * 1e-3)
        except Exception as e:  # noqa: BLE001
            res["note"][name] = f"failed timing: {str(e).splitlines()[0][:160]}"


def copy_bandwidth(dev):
    """Device-to-device copy bandwidth in GB/s: dst.copy_(src) of COPY_BYTES, read + write."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / (best * 1e-3) / 1e9


def run_row(lib, kernels, row, flex, peers_of, l2_bytes, log):
    """One row's GB/s per implementation (dict), with notes and the attnc check."""
    dev = torch.device("cuda")
    res = {"row": row.name, "hq": row.hq, "hkv": row.hkv, "B": row.batch, "kv": row.kv,
           "q_len": row.q_len, "layout": row.layout, "bytes": row.bytes(), "gbps": {},
           "ms": {}, "note": {}}
    n_copies = copies_for(row.kv_bytes(), l2_bytes)
    res["copies"] = n_copies
    caches = [Cache(row, dev, 1000 * i + 1) for i in range(n_copies)]
    key = (row.hq, row.hkv)
    if key not in kernels:
        kernels[key] = lib.compile_text(spec_text(row.hq, row.hkv))
        dx.compile_deferred(kernels[key])
    kern = kernels[key]
    scale = float(kern.info["scale"])
    impls = {}
    modes = [("attnc", dx.DECODE_AUTO)] + ([] if row.page_size else [("attnc-off", dx.DECODE_OFF)])
    for name, mode in modes:
        try:
            probe = caches[0].attnc_args(kern, row, mode)
            ws_bytes = dx.workspace_bytes(kern, probe)
            workspace = torch.empty(max(16, ws_bytes), dtype=torch.uint8, device=dev)
            args = [c.attnc_args(kern, row, mode, workspace) for c in caches]
            if mode == dx.DECODE_AUTO:
                try:
                    res["plan"] = dx.decode_plan(kern, probe)
                except attnc_ctypes.AttncError as e:
                    res["note"]["plan"] = f"no decode plan: {str(e).splitlines()[0][:160]}"
            c0 = caches[0]
            c0.o.fill_(float("nan"))
            dx.launch_ex(kern, args[0])
            torch.cuda.synchronize()
            errs = []
            for b in sorted({0, row.batch - 1}):
                k_b, v_b = c0.sequence(row, b)
                errs.append(relerr(c0.o[b], reference_rows(c0.q[b], k_b, v_b, scale)))
            res.setdefault("check", {})[name] = max(errs)
            if max(errs) > CHECK_TOL or math.isnan(max(errs)):
                res["note"][name] = f"WRONG RESULT (relerr {max(errs):.1e}), not timed"
                continue
            # a graph captures on a stream of its own: the launch must take the current one
            stream = None if GRAPHS else torch.cuda.current_stream().cuda_stream
            impls[name] = cycle([lambda a=a: dx.launch_ex(kern, a, stream) for a in args])
        except Exception as e:  # noqa: BLE001
            res["note"][name] = f"failed: {str(e).splitlines()[0][:160]}"
    for name, make in peers_of(row, flex).items():
        try:
            fns = [make(c, row) for c in caches]
            if getattr(fns[0], "note", None):
                res["note"][name] = fns[0].note
            impls[name] = cycle(fns)
        except Exception as e:  # noqa: BLE001
            res["note"][name] = f"failed: {str(e).splitlines()[0][:160]}" if str(e) else \
                f"failed: {type(e).__name__}"
    timed(res, impls, row.bytes() / 1e9, res["gbps"])
    del caches, impls
    torch.cuda.empty_cache()
    return res


def default_peers(no_flex):
    """The peers of a row: name -> make(cache, row)."""
    def peers_of(row, flex):
        from torch.nn.attention import SDPBackend
        out = {}
        if not row.page_size:
            out["cudnn"] = lambda c, r: sdpa_peer(SDPBackend.CUDNN_ATTENTION, c, r)
        try:
            import flash_attn  # noqa: F401
            out["fa2"] = fa2_peer
        except ImportError:
            if not row.page_size:
                out["fa2"] = lambda c, r: sdpa_peer(SDPBackend.FLASH_ATTENTION, c, r)
        if flex is not None and not no_flex and not row.page_size:
            out["flex"] = flex.peer
        return out
    return peers_of


PEERS = ["cudnn", "fa2", "flex"]


def best_peer(result, contiguous=None):
    """(name, GB/s) of the fastest peer of a row; a paged row also counts its contiguous row's
    peers (same lengths, same bytes)."""
    seen = dict((p, g) for p, g in result["gbps"].items() if p in PEERS)
    if contiguous:
        for p, g in contiguous["gbps"].items():
            if p in PEERS and g > seen.get(p, 0.0):
                seen[p] = g
    if not seen:
        return None, None
    name = max(seen, key=seen.get)
    return name, seen[name]


def summarize(results, copy_gbps):
    """Adds to each row: % of the copy bandwidth, the best peer and attnc's ratio to it, and for
    paged rows the ratio to the contiguous row."""
    by_name = {r["row"]: r for r in results}
    for r in results:
        a = r["gbps"].get("attnc")
        contiguous = None
        if r["layout"] != "contiguous":
            contiguous = by_name.get(Row(r["hq"], r["hkv"], r["B"], r["kv"], r["q_len"],
                                         "contiguous").name)
        peer, g = best_peer(r, contiguous)
        r["best_peer"] = peer
        r["pct_copy"] = None if a is None else 100.0 * a / copy_gbps
        r["vs_best_peer"] = None if a is None or g is None else a / g
        c = contiguous["gbps"].get("attnc") if contiguous else None
        r["vs_contiguous"] = None if a is None or c is None else a / c
    return results


# ---- Varlen prefill ----

def varlen_lengths(n=VARLEN_SEQS, lo=VARLEN_MIN, hi=VARLEN_MAX, seed=VARLEN_SEED):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def varlen_flops(lens, hq, d):
    """Useful forward FLOPs of causal sequences: 4 x Hq x d x the kept (q, k) pairs."""
    return sum(4.0 * hq * d * n * (n + 1) / 2 for n in lens)


def run_varlen(lib, hq=32, hkv=8, log=print):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = torch.device("cuda")
    lens = varlen_lengths()
    total = sum(lens)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    gen = torch.Generator(device=dev).manual_seed(VARLEN_SEED)
    q = torch.randn(total, hq, HEAD_DIM, device=dev, dtype=DT, generator=gen)
    k = torch.randn(total, hkv, HEAD_DIM, device=dev, dtype=DT, generator=gen)
    v = torch.randn(total, hkv, HEAD_DIM, device=dev, dtype=DT, generator=gen)
    o = torch.empty_like(q)
    lse = torch.empty(hq, total, device=dev, dtype=torch.float32)
    flops = varlen_flops(lens, hq, HEAD_DIM)
    res = {"row": f"varlen prefill GQA {hq}/{hkv} causal, {len(lens)} sequences "
                  f"{min(lens)}..{max(lens)} (total {total})", "lens": lens, "flops": flops,
           "tflops": {}, "ms": {}, "note": {}}
    impls = {}
    try:
        kern = lib.compile_text(spec_text(hq, hkv))
        seq = dx.seq_layout(cu_seqlens_q=cu.to(dev), cu_seqlens_kv=cu.to(dev), total_q=total,
                            total_kv=total, host={"cu_seqlens_q": cu, "cu_seqlens_kv": cu})
        args = dx.forward_args_ex(kern, q[None], k[None], v[None], o[None], lse,
                                  batch=len(lens), q_len=max(lens), kv_len=max(lens), seq=seq)
        o.fill_(float("nan"))
        dx.launch_ex(kern, args)
        torch.cuda.synchronize()
        first = slice(0, lens[0])
        err = relerr(o[first], reference_rows(q[first], k[first], v[first],
                                              float(kern.info["scale"])))
        res["check"] = err
        if err <= CHECK_TOL:
            impls["attnc"] = lambda: dx.launch_ex(kern, args)
        else:
            res["note"]["attnc"] = f"WRONG RESULT (relerr {err:.1e}), not timed"
    except Exception as e:  # noqa: BLE001
        res["note"]["attnc"] = f"failed: {str(e).splitlines()[0][:160]}"
    try:  # cuDNN on nested (jagged) tensors; K/V widened to Hq heads where GQA is refused
        offsets = cu.to(dev).long()

        def jagged(t):
            return torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2)
        kw, vw = (t.repeat_interleave(hq // hkv, 1) for t in (k, v))
        nq, nk, nv = jagged(q), jagged(kw), jagged(vw)

        def ragged():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(nq, nk, nv, is_causal=True)
        ragged()
        impls["cudnn-ragged"] = ragged
    except Exception as e:  # noqa: BLE001
        res["note"]["cudnn-ragged"] = f"failed: {str(e).splitlines()[0][:160]}"
    try:  # the padded batch: every sequence padded to the longest (causal keeps pads unread)
        n = max(lens)
        qp = torch.zeros(len(lens), n, hq, HEAD_DIM, device=dev, dtype=DT)
        kp = torch.zeros(len(lens), n, hkv, HEAD_DIM, device=dev, dtype=DT)
        vp = torch.zeros_like(kp)
        for b, length in enumerate(lens):
            rows = slice(int(cu[b]), int(cu[b + 1]))
            qp[b, :length], kp[b, :length], vp[b, :length] = q[rows], k[rows], v[rows]
        qt, kt, vt = (t.transpose(1, 2) for t in (qp, kp, vp))

        def padded():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
        padded()
        impls["cudnn-padded"] = padded
    except Exception as e:  # noqa: BLE001
        res["note"]["cudnn-padded"] = f"failed: {str(e).splitlines()[0][:160]}"
    try:
        from flash_attn import flash_attn_varlen_func
        cu_dev, n = cu.to(dev), max(lens)
        impls["fa2-varlen"] = lambda: flash_attn_varlen_func(q, k, v, cu_dev, cu_dev, n, n,
                                                             causal=True)
        impls["fa2-varlen"]()
    except Exception as e:  # noqa: BLE001
        impls.pop("fa2-varlen", None)
        res["note"]["fa2-varlen"] = f"not run: {str(e).splitlines()[0][:160]}"
    timed(res, impls, flops / 1e12, res["tflops"])
    peer = "cudnn-ragged" if "cudnn-ragged" in res["tflops"] else "cudnn-padded"
    a, p = res["tflops"].get("attnc"), res["tflops"].get(peer)
    res["peer"] = peer
    res["vs_peer"] = None if a is None or p is None else a / p
    log(f"{res['row']}: " + " ".join(f"{k} {t:.0f}" for k, t in res["tflops"].items())
        + f" TFLOP/s; attnc/{peer} {res['vs_peer'] or float('nan'):.2f}"
        + (f" notes {res['note']}" if res["note"] else ""))
    return res


# ---- Output ----

def fmt(x, spec=".0f"):
    return "-" if x is None else format(x, spec)


def table_lines(results):
    lines = [f"{'row':42s} {'attnc':>6s} {'%copy':>6s} {'off':>6s} {'cuDNN':>6s} {'FA2':>6s} "
             f"{'flex':>6s} {'/best':>6s} {'/contig':>7s}"]
    for r in results:
        g = r["gbps"]
        lines.append(f"{r['row']:42s} {fmt(g.get('attnc')):>6s} {fmt(r.get('pct_copy')):>6s} "
                     f"{fmt(g.get('attnc-off')):>6s} {fmt(g.get('cudnn')):>6s} "
                     f"{fmt(g.get('fa2')):>6s} {fmt(g.get('flex')):>6s} "
                     f"{fmt(r.get('vs_best_peer'), '.2f'):>6s} "
                     f"{fmt(r.get('vs_contiguous'), '.2f'):>7s}")
    return lines


def facts_of(lib, argv):
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        driver = "?"
    import bench_forward
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
             "gpu": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
             "attnc": lib.version(), "warm_ms": WARM_MS,
             **bench_forward.run_facts("bench_decode.py", argv, lib.path)}
    facts["command"] = facts["command"].replace("bash bench/", "python3 bench/")
    return facts


def write_json(path, facts, copy_gbps, results, varlen):
    """The run as JSON with one result a line: a full run has over a hundred rows of nested
    fields, which an indented dump spreads over thousands of lines."""
    if path:
        with open(path, "w") as f:
            f.write('{"facts": %s,\n "copy_gbps": %s,\n "results": [\n' %
                    (json.dumps(facts), json.dumps(copy_gbps)))
            f.write(",\n".join("  " + json.dumps(r) for r in results))
            f.write('\n ],\n "varlen": %s}\n' % json.dumps(varlen))


def main(argv=None):
    global WARM_MS, GRAPHS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="B 8/64, kv 32K/128K, q_len 1/8, GQA 32/8, contiguous and paged 256")
    ap.add_argument("--json", default=None, metavar="PATH")
    ap.add_argument("--only", action="append", default=None,
                    help="rows whose name contains this text (repeatable), e.g. --only B64")
    ap.add_argument("--no-flex", action="store_true",
                    help="skip FlexAttention (it compiles once a row shape)")
    ap.add_argument("--no-varlen", action="store_true", help="skip the varlen prefill row")
    ap.add_argument("--warm-ms", type=float, default=WARM_MS)
    ap.add_argument("--graphs", action="store_true",
                    help="time replays of a CUDA graph of each batch of calls (else eager calls)")
    ap.add_argument("--lib", default=None)
    args = ap.parse_args(argv)
    WARM_MS, GRAPHS = args.warm_ms, args.graphs
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    lib = attnc_ctypes.Library(args.lib)
    facts = facts_of(lib, sys.argv[1:] if argv is None else argv)
    props = torch.cuda.get_device_properties(dev)
    l2_bytes = getattr(props, "L2_cache_size", 0) or L2_FALLBACK
    copy_gbps = copy_bandwidth(dev)
    facts["l2_bytes"], facts["graphs"] = l2_bytes, GRAPHS
    print(f"{facts}\ncopy bandwidth {copy_gbps:.0f} GB/s, L2 {l2_bytes >> 20} MiB", flush=True)
    flex = None
    if not args.no_flex:
        try:
            flex = Flex()
        except Exception as e:  # noqa: BLE001
            print(f"flex unavailable: {e}", flush=True)
    peers_of = default_peers(args.no_flex)
    kernels, results, varlen = {}, [], None
    t0 = time.time()
    for row in rows(args.quick):
        if not selected(row, args.only):
            continue
        t1 = time.time()
        try:
            r = run_row(lib, kernels, row, flex, peers_of, l2_bytes, print)
        except Exception as e:  # noqa: BLE001
            print(f"{row.name}: FAILED {e}", flush=True)
            torch.cuda.empty_cache()
            continue
        results.append(r)
        summarize(results, copy_gbps)
        write_json(args.json, facts, copy_gbps, results, varlen)  # partial results survive
        print(f"{row.name:42s} " + " ".join(f"{k} {g:6.0f}" for k, g in r["gbps"].items())
              + f" GB/s; {fmt(r['pct_copy'])}% of copy, {fmt(r['vs_best_peer'], '.2f')}x best"
              f" peer ({r['best_peer']}) plan {r.get('plan')} {time.time() - t1:.1f}s"
              + (f" notes {r['note']}" if r["note"] else ""), flush=True)
    if not args.no_varlen:
        try:
            varlen = run_varlen(lib)
        except Exception as e:  # noqa: BLE001
            print(f"varlen prefill: FAILED {e}", flush=True)
    write_json(args.json, facts, copy_gbps, results, varlen)
    print(f"\nbench_decode: {len(results)} rows in {time.time() - t0:.0f} s; copy bandwidth "
          f"{copy_gbps:.0f} GB/s; GB/s per implementation\n")
    print("\n".join(table_lines(results)))
    if varlen:
        print(f"\n{varlen['row']}: " + " ".join(f"{k} {t:.0f}" for k, t in
                                                 varlen["tflops"].items()) + " TFLOP/s")
    import decode_page
    verdicts = [met for _, rows in decode_page.targets(results, varlen) for _, _, met in rows]
    print(f"\nSUMMARY: {len(results)} rows, copy {copy_gbps:.0f} GB/s; row targets met "
          f"{sum(verdicts)} of {len(verdicts)}")
    return 0 if all("WRONG" not in str(r["note"]) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
