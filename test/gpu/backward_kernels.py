# The backward kernels of a set of examples, launched directly through the driver (the launch
# protocol of docs/templates.md), against float64 torch autograd; both dQ modes (atomic and
# deterministic, the latter checked bit-identical over two runs); with --bench, backward TFLOP/s
# against torch SDPA's FlashAttention-2 backward. The cubins and their tile metadata come from
# scripts/device-bundle.sh (.device/bundle/bwd).
#   python3 test/gpu/backward_kernels.py [--dir .device/bundle/bwd] [--bench]
import argparse, ctypes, math, os, statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
ap = argparse.ArgumentParser()
ap.add_argument("--dir", default=".device/bundle/bwd")
ap.add_argument("--bench", action="store_true")
ap.add_argument("--memory", action="store_true", help="forward + backward at N = 65536 (causal hd128, 16 heads)")
ap.add_argument("--skip-check", action="store_true", help="only --bench / --memory")
args = ap.parse_args()
dev = torch.device("cuda"); torch.manual_seed(0)
cuda = ctypes.CDLL("libcuda.so.1"); torch.zeros(1, device=dev)
def ck(r, w):
    if r: raise RuntimeError(f"{w}: {r}")
class InputRef(ctypes.Structure):
    # summary: block summaries of the input (params.h); left null here, so masks scan elements
    _fields_ = [("ptr", ctypes.c_void_p), ("sb", ctypes.c_int64), ("sh", ctypes.c_int64), ("sp", ctypes.c_int64),
                ("summary", ctypes.c_void_p)]
class Fwd(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("q","k","v","o","lse")] + \
      [(f"{t}{d}", ctypes.c_int64) for t in "qkvo" for d in ("b","h","s")] + \
      [(n, ctypes.c_int) for n in ("batch","hq","hkv","ql","kl")] + \
      [("scale", ctypes.c_float), ("p", ctypes.c_float), ("seed", ctypes.c_uint64), ("off", ctypes.c_uint64),
       ("keys", ctypes.c_uint32*20),  # dropout round keys (philox.h); zero: these runs drop nothing
       ("tile_bounds", ctypes.c_void_p), ("tile_classes", ctypes.c_void_p), ("class_words", ctypes.c_int),
       ("group_classes", ctypes.c_void_p), ("group_words", ctypes.c_int),
       ("inputs", InputRef*8)]
T = ["q","k","v","o","do","dq","dk","dv"]
class Bwd(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("q","k","v","o","do","lse","dq","dk","dv","dq_accum","delta")] + \
      [(f"{t}{d}", ctypes.c_int64) for t in T for d in ("b","h","s")] + \
      [(n, ctypes.c_int) for n in ("batch","hq","hkv","ql","kl")] + \
      [("scale", ctypes.c_float), ("p", ctypes.c_float), ("seed", ctypes.c_uint64), ("off", ctypes.c_uint64),
       ("keys", ctypes.c_uint32*20),
       # the dK/dV kernel's tile classes (params.h): left null here, so the kernel classifies itself
       ("q_tile_bounds", ctypes.c_void_p), ("q_tile_classes", ctypes.c_void_p), ("q_class_words", ctypes.c_int),
       ("inputs", InputRef*8)]
def meta(name):
    toks = open(os.path.join(args.dir, name + ".meta")).read().split(); m = {}
    for i, t in enumerate(toks):
        if t == "=": m[toks[i-1]] = float(toks[i+1])
    return m
mods = {}
def fn(name, entry, smem):
    if name not in mods:
        mod = ctypes.c_void_p(); ck(cuda.cuModuleLoadData(ctypes.byref(mod), open(os.path.join(args.dir, name + ".cubin"), "rb").read()), "load"); mods[name] = mod
    f = ctypes.c_void_p(); ck(cuda.cuModuleGetFunction(ctypes.byref(f), mods[name], entry.encode()), entry)
    if smem: ck(cuda.cuFuncSetAttribute(f, 8, int(smem)), "smem")
    return f
def ordered(tiles, heads, batch, on):
    """The forward's grid: block_order.h's orderedGrid where the kernel was built for it (a masked
    spec's sm_90a forward: fwd_ordered in the .meta), else (tiles, heads, batch)."""
    if not on:
        return (tiles, heads, batch)
    per_group = min(heads * batch, -(-256 // tiles))
    return (per_group, tiles, -(-(heads * batch) // per_group))
def kv_grid(tiles, heads, batch, on):
    """The dK/dV kernel's grid: block_order.h's orderedGrid over (kv head, batch) pairs where it
    was built for the ordered one (kv_ordered in the .meta), else (tiles, heads, batch)."""
    return ordered(tiles, heads, batch, True) if on else (tiles, heads, batch)
def launch(f, grid, threads, smem, prm):
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(prm), ctypes.c_void_p))
    ck(cuda.cuLaunchKernel(f, *grid, int(threads), 1, 1, int(smem), None, args, None), "launch")
def causal(qi, ki, ql, kl): return ki <= qi + kl - ql
def slopes16(h): return 2.0 ** (-8.0 * (h + 1) / 16)
CASES = {
 "causal_hd128": (128, torch.bfloat16, 16, 16, causal, None),
 "full_hd64": (64, torch.bfloat16, 16, 16, None, None),
 "softcap": (128, torch.bfloat16, 16, 16, causal, lambda s, qi, ki, hi, ql, kl: 30 * torch.tanh(s / 30)),
 "alibi": (128, torch.bfloat16, 16, 16, causal, lambda s, qi, ki, hi, ql, kl: s - slopes16(hi) * (qi + kl - ql - ki).abs()),
 "gqa_32_8": (128, torch.bfloat16, 32, 8, causal, None),
 "hd72_fp16": (72, torch.float16, 16, 16, causal, None),
 "causal_hd256": (256, torch.bfloat16, 16, 16, causal, None),
 "document": (128, torch.bfloat16, 16, 16, "doc", None),
 "custom_score": (128, torch.bfloat16, 16, 16, causal, lambda s, qi, ki, hi, ql, kl: s - 0.1 * torch.log(1.0 + (qi - ki).abs())),
}
LENS = [(200, 200), (129, 300), (300, 129), (1024, 1024)]
rows = []
for name, (d, dt, hq, hkv, mask, score) in ([] if args.skip_check else CASES.items()):
    m = meta(name)
    for (ql, kl) in LENS:
        B = 2
        q = torch.randn(B, ql, hq, d, device=dev, dtype=dt); k = torch.randn(B, kl, hkv, d, device=dev, dtype=dt)
        v = torch.randn(B, kl, hkv, d, device=dev, dtype=dt); do = torch.randn(B, ql, hq, d, device=dev, dtype=dt)
        o = torch.full_like(q, float("nan")); lse = torch.full((B, hq, ql), float("nan"), device=dev)
        npos = max(ql, kl)
        doc = torch.sort(torch.randint(0, 6, (npos,), device=dev, dtype=torch.int32)).values
        f = Fwd(); f.q, f.k, f.v, f.o, f.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        for t, x in zip("qkvo", (q, k, v, o)): setattr(f, t+"b", x.stride(0)); setattr(f, t+"h", x.stride(2)); setattr(f, t+"s", x.stride(1))
        f.batch, f.hq, f.hkv, f.ql, f.kl = B, hq, hkv, ql, kl; f.scale = m["scale"]
        f.inputs[0].ptr = doc.data_ptr(); f.inputs[0].sp = 1
        launch(fn(name, name + "_fwd", m["smem_bytes"]), ordered(math.ceil(ql / m["block_q"]), hq, B, m.get("fwd_ordered")), m["warps"] * 32, m["smem_bytes"], f)
        def backward(deterministic):
            dq = torch.full_like(q, float("nan")); dk = torch.full_like(k, float("nan")); dv = torch.full_like(v, float("nan"))
            acc = torch.full((B * hq * ql * d,), float("nan"), device=dev); delta = torch.full((B, hq, ql), float("nan"), device=dev)
            p = Bwd(); p.q, p.k, p.v, p.o, p.do, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(), lse.data_ptr()
            p.dq, p.dk, p.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
            p.dq_accum = None if deterministic else acc.data_ptr(); p.delta = delta.data_ptr()
            for t, x in zip(T, (q, k, v, o, do, dq, dk, dv)): setattr(p, t+"b", x.stride(0)); setattr(p, t+"h", x.stride(2)); setattr(p, t+"s", x.stride(1))
            p.batch, p.hq, p.hkv, p.ql, p.kl = B, hq, hkv, ql, kl; p.scale = m["scale"]
            p.inputs[0].ptr = doc.data_ptr(); p.inputs[0].sp = 1
            kvt = m["kv_warps"] * 32
            launch(fn(name, name + "_bwd_preprocess", 0), (math.ceil(ql / 64), hq, B), kvt, 0, p)
            if deterministic:
                launch(fn(name, name + "_bwd_kv_nodq", m["kv_smem_bytes"]), kv_grid(math.ceil(kl / m["kv_block_kv"]), hkv, B, m.get("kv_ordered")), kvt, m["kv_smem_bytes"], p)
                launch(fn(name, name + "_bwd_q", m["q_smem_bytes"]), (math.ceil(ql / m["q_block_q"]), hq, B), m["q_warps"] * 32, m["q_smem_bytes"], p)
            else:
                launch(fn(name, name + "_bwd_kv", m["kv_smem_bytes"]), kv_grid(math.ceil(kl / m["kv_block_kv"]), hkv, B, m.get("kv_ordered")), kvt, m["kv_smem_bytes"], p)
                launch(fn(name, name + "_bwd_convert_dq", 0), (math.ceil(ql / 64), hq, B), kvt, 0, p)
            torch.cuda.synchronize()
            return dq, dk, dv
        grads = backward(False)
        det1 = backward(True); det2 = backward(True)
        # float64 autograd reference
        q64, k64, v64 = (x.double().permute(0, 2, 1, 3).requires_grad_() for x in (q, k, v))
        kk = k64.repeat_interleave(hq // hkv, 1); vv = v64.repeat_interleave(hq // hkv, 1)
        s = q64 @ kk.transpose(-1, -2) * m["scale"]
        qi = torch.arange(ql, device=dev)[:, None]; ki = torch.arange(kl, device=dev)[None, :]
        hi = torch.arange(hq, device=dev)[:, None, None]
        if score: s = score(s, qi, ki, hi, ql, kl)
        if mask == "doc":
            qa = (qi + kl - ql).clamp(0, npos - 1); keep = (doc[qa].long() == doc[ki].long()) & (ki <= qi + kl - ql)
        elif mask: keep = mask(qi, ki, ql, kl)
        else: keep = torch.ones(ql, kl, dtype=torch.bool, device=dev)
        s = s.masked_fill(~keep, float("-inf"))
        pr = torch.softmax(s, -1).nan_to_num(0.0)
        out = pr @ vv
        out.backward(do.double().permute(0, 2, 1, 3))
        refs = [g.permute(0, 2, 1, 3) for g in (q64.grad, k64.grad, v64.grad)]
        errs = [((g.double() - r).norm() / r.norm().clamp_min(1e-30)).item() for g, r in zip(grads, refs)]
        derrs = [((g.double() - r).norm() / r.norm().clamp_min(1e-30)).item() for g, r in zip(det1, refs)]
        same = all(torch.equal(a, b) for a, b in zip(det1, det2))
        nan = any(bool(torch.isnan(g).any()) for g in grads + det1)
        bound = 2e-3 if dt == torch.float16 else 1e-2
        ok = max(errs + derrs) <= bound and same and not nan
        rows.append(ok)
        print(f"{name:14s} {ql:5d} {kl:5d} dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e} | det dq {derrs[0]:.1e} dk {derrs[1]:.1e} dv {derrs[2]:.1e} bitident {same} nan {nan} {'PASS' if ok else 'FAIL'}", flush=True)
if rows: print(f"{sum(rows)} passed, {len(rows) - sum(rows)} failed")

def bench():
    """Backward TFLOP/s (2.5 x the forward's 4 B H N^2 D x unmasked fraction) vs SDPA FA2."""
    def timeit(fn, reps=20):
        for _ in range(3): fn()
        ts = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
        return statistics.median(ts)
    print("\nbackward, bf16, N = 4096, B = 4 (TFLOP/s = 2.5 x forward FLOPs / time)")
    for name, d, H, causal_ in (("full_hd64", 64, 32, False), ("causal_hd64", 64, 32, True),
                                 ("full_hd128", 128, 16, False), ("causal_hd128", 128, 16, True)):
        m = meta(name); B, N = 4, 4096
        q, k, v, do = (torch.randn(B, N, H, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
        o = torch.empty_like(q); lse = torch.empty(B, H, N, device=dev)
        f = Fwd(); f.q, f.k, f.v, f.o, f.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        for t, x in zip("qkvo", (q, k, v, o)): setattr(f, t+"b", x.stride(0)); setattr(f, t+"h", x.stride(2)); setattr(f, t+"s", x.stride(1))
        f.batch, f.hq, f.hkv, f.ql, f.kl = B, H, H, N, N; f.scale = m["scale"]
        launch(fn(name, name + "_fwd", m["smem_bytes"]), ordered(math.ceil(N / m["block_q"]), H, B, m.get("fwd_ordered")), m["warps"] * 32, m["smem_bytes"], f)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        acc = torch.empty(B * H * N * d, device=dev); delta = torch.empty(B, H, N, device=dev)
        p = Bwd(); p.q, p.k, p.v, p.o, p.do, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(), lse.data_ptr()
        p.dq, p.dk, p.dv, p.dq_accum, p.delta = dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), acc.data_ptr(), delta.data_ptr()
        for t, x in zip(T, (q, k, v, o, do, dq, dk, dv)): setattr(p, t+"b", x.stride(0)); setattr(p, t+"h", x.stride(2)); setattr(p, t+"s", x.stride(1))
        p.batch, p.hq, p.hkv, p.ql, p.kl = B, H, H, N, N; p.scale = m["scale"]
        kvt = m["kv_warps"] * 32
        fp, fk, fc = fn(name, name + "_bwd_preprocess", 0), fn(name, name + "_bwd_kv", m["kv_smem_bytes"]), fn(name, name + "_bwd_convert_dq", 0)
        def run():
            launch(fp, (math.ceil(N / 64), H, B), kvt, 0, p)
            launch(fk, kv_grid(math.ceil(N / m["kv_block_kv"]), H, B, m.get("kv_ordered")), kvt, m["kv_smem_bytes"], p)
            launch(fc, (math.ceil(N / 64), H, B), kvt, 0, p)
        ms = timeit(run)
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal_)
            dot = do.transpose(1, 2)
            fa2 = timeit(lambda: torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True))
        flops = 2.5 * 4 * B * H * N * N * d * ((N + 1) / (2 * N) if causal_ else 1.0)
        print(f"{name:14s} attnc {flops / ms / 1e9:6.1f}  FA2 {flops / fa2 / 1e9:6.1f}  attnc/FA2 {fa2 / ms:.2f}", flush=True)

def memory():
    """Forward + backward at Sq = Skv = 65536: the extra device memory is the LSE, delta and the fp32
    dQ accumulator, O(N) per head; no N x N buffer exists."""
    name, d, H, B, N = "causal_hd128", 128, 16, 1, 65536
    m = meta(name)
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    q, k, v, do = (torch.randn(B, N, H, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q); dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tensors = sum(x.numel() * x.element_size() for x in (q, k, v, do, o, dq, dk, dv))
    base = torch.cuda.memory_allocated()
    lse = torch.empty(B, H, N, device=dev); acc = torch.zeros(B * H * N * d, device=dev); delta = torch.empty(B, H, N, device=dev)
    extra = torch.cuda.memory_allocated() - base
    f = Fwd(); f.q, f.k, f.v, f.o, f.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for t, x in zip("qkvo", (q, k, v, o)): setattr(f, t+"b", x.stride(0)); setattr(f, t+"h", x.stride(2)); setattr(f, t+"s", x.stride(1))
    f.batch, f.hq, f.hkv, f.ql, f.kl = B, H, H, N, N; f.scale = m["scale"]
    a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True); c = torch.cuda.Event(enable_timing=True)
    a.record()
    launch(fn(name, name + "_fwd", m["smem_bytes"]), ordered(math.ceil(N / m["block_q"]), H, B, m.get("fwd_ordered")), m["warps"] * 32, m["smem_bytes"], f)
    b.record()
    p = Bwd(); p.q, p.k, p.v, p.o, p.do, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(), lse.data_ptr()
    p.dq, p.dk, p.dv, p.dq_accum, p.delta = dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), acc.data_ptr(), delta.data_ptr()
    for t, x in zip(T, (q, k, v, o, do, dq, dk, dv)): setattr(p, t+"b", x.stride(0)); setattr(p, t+"h", x.stride(2)); setattr(p, t+"s", x.stride(1))
    p.batch, p.hq, p.hkv, p.ql, p.kl = B, H, H, N, N; p.scale = m["scale"]
    kvt = m["kv_warps"] * 32
    launch(fn(name, name + "_bwd_preprocess", 0), (math.ceil(N / 64), H, B), kvt, 0, p)
    launch(fn(name, name + "_bwd_kv", m["kv_smem_bytes"]), kv_grid(math.ceil(N / m["kv_block_kv"]), H, B, m.get("kv_ordered")), kvt, m["kv_smem_bytes"], p)
    launch(fn(name, name + "_bwd_convert_dq", 0), (math.ceil(N / 64), H, B), kvt, 0, p)
    c.record(); c.synchronize()
    finite = all(bool(torch.isfinite(x).all()) for x in (o, dq, dk, dv))
    print(f"\nN = {N}, {H} heads, hd{d} causal, bf16: forward {a.elapsed_time(b):.1f} ms, backward {b.elapsed_time(c):.1f} ms; "
          f"inputs+outputs+gradients {tensors / 2**20:.0f} MiB; extra (LSE, delta, dQ accumulator) {extra / 2**20:.1f} MiB "
          f"= {extra / (B * H * N)} bytes per row; peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB; all finite: {finite}")

if args.bench:
    bench()
if args.memory:
    memory()
