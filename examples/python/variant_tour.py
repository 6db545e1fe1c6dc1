"""A FlexAttention-style tour of attention variants through the Python op attnc.attention: causal,
sliding window, ALiBi, softcap, document, prefix-LM, a custom mask expression and a custom score
expression (and no mask, for scale). Per variant: attnc's forward and backward beside
torch.nn.attention.flex_attention (torch.compile'd, the matching mask_mod/score_mod and block mask)
and torch SDPA (is_causal, or an explicit boolean or additive mask; SDPA picks its backend), in
TFLOP/s; the first-call compile time of each (attnc with a cold and a warm disk cache, measured in
a child process; Flex's first torch.compile'd call, with a fresh inductor cache); and attnc's
kernel time through the op against the same kernel launched through the raw C API, which must be
equal within noise. attnc's output and gradients are checked against Flex's (or SDPA's) before
anything is timed. Prints a table last; exits non-zero on a failed check.

  PYTHONPATH=python python3 examples/python/variant_tour.py [--quick] [--json PATH] [--only TEXT]

FLOPs: forward 4 * B * H * Sq * Skv * D times the unmasked fraction, backward 2.5 x that; the
backward's time is the forward+backward call's minus the forward's (bench/bench_forward.py's
CUDA-event medians)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Flex's first call is timed from a cold inductor and Triton cache unless the caller chose them.
_SCRATCH = tempfile.mkdtemp(prefix="variant_tour_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_SCRATCH, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_SCRATCH, "triton"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
sys.path.append(os.path.join(ROOT, "python"))  # the checkout's package when none is installed
import attnc  # noqa: E402
import attnc_ctypes  # noqa: E402
from attnc import _loader  # noqa: E402
from bench_forward import time_ms  # noqa: E402
from python_op import KERNEL_FLOOR_US, KERNEL_TOL, device_times_us  # noqa: E402

DT = torch.bfloat16
CHECK_TOL = 1e-2  # relerr of attnc's output against a peer's (bench_forward.py's bound)
GRAD_CHECK_TOL = 2e-2  # of its gradients: two bf16 backward passes, each within 1e-2 of float64
TIMING = {"reps": 10, "warm_ms": 200.0}


class Variant:
    """One row: attnc's arguments, the keep(b, h, q, k) predicate and score function on index
    tensors that Flex's mask_mod/score_mod and SDPA's masks are made from."""

    def __init__(self, name, mask=None, score=None, keep=None, score_fn=None, uses_doc=False,
                 sdpa_causal=False, additive=True):
        self.name, self.mask, self.score = name, mask, score
        self.keep, self.score_fn = keep, score_fn
        self.uses_doc, self.sdpa_causal = uses_doc, sdpa_causal
        self.additive = additive  # the score adds a bias, which SDPA takes as a float mask


def alibi_slopes(heads):
    """The ALiBi paper's slopes for a power-of-two head count (docs/spec.md)."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


def variants(seq, heads, doc, quick):
    window, prefix = (256, 256) if seq <= 1024 else (1024, 1024)
    slopes = torch.tensor(alibi_slopes(heads), device="cuda", dtype=torch.float32)
    custom_mask = "k <= q && (q - k < 256 || k % 128 == 0)"  # local window plus strided globals
    custom_score = "score - 0.1 * log(1.0 + abs(q - k))"

    def causal(b, h, q, k):
        return k <= q

    rows = [
        Variant("no mask"),
        Variant("causal", "causal", keep=causal, sdpa_causal=True),
        Variant(f"sliding window {window}", {"window": window},
                keep=lambda b, h, q, k: (k <= q) & (q - k < window)),
        Variant("ALiBi causal", "causal", "alibi", keep=causal,
                score_fn=lambda s, b, h, q, k: s - slopes[h] * (q - k).abs()),
        Variant("softcap 30 causal", "causal", {"softcap": 30}, keep=causal,
                score_fn=lambda s, b, h, q, k: 30.0 * torch.tanh(s / 30.0), additive=False),
        Variant("document x8 causal", {"document": "doc", "causal": True}, uses_doc=True,
                keep=lambda b, h, q, k: (doc[q] == doc[k]) & (k <= q)),
        Variant(f"prefix-LM {prefix}", {"prefix": prefix},
                keep=lambda b, h, q, k: (k < prefix) | (k <= q)),
        Variant("custom mask expr", custom_mask,
                keep=lambda b, h, q, k: (k <= q) & ((q - k < 256) | (k % 128 == 0))),
        Variant("custom score expr", "causal", custom_score, keep=causal,
                score_fn=lambda s, b, h, q, k: s - 0.1 * torch.log(1.0 + (q - k).abs())),
    ]
    if quick:
        keep_names = ("causal", "softcap 30 causal", "document x8 causal", "custom mask expr",
                      "custom score expr")
        rows = [r for r in rows if r.name in keep_names]
    return rows


def document_ids(seq, docs=8):
    """Document ids per position: `docs` documents cut at seeded random positions."""
    cuts = torch.sort(torch.randperm(seq - 1, generator=torch.Generator().manual_seed(1))
                      [:docs - 1] + 1).values
    doc = torch.zeros(seq, dtype=torch.int32)
    for c in cuts:
        doc[c:] += 1
    return doc.to("cuda")


def keep_grid(var, seq, heads):
    """keep as a bool [1 or H, S, S] tensor (None without a mask)."""
    if var.keep is None:
        return None
    q = torch.arange(seq, device="cuda").view(-1, 1)
    k = torch.arange(seq, device="cuda").view(1, -1)
    return var.keep(0, 0, q, k).view(1, seq, seq)


def sdpa_call(var, seq, heads):
    """A function running SDPA on (q, k, v) with the variant's mask, or None where SDPA has no
    form of it (a score other than an additive bias)."""
    if not var.additive:
        return None
    if var.keep is None:
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    if var.sdpa_causal and var.score_fn is None:
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    keep = keep_grid(var, seq, heads)
    if var.score_fn is None:
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    # An additive mask: the score function applied to zeros is the bias (ALiBi and the log bias
    # add to the score), -inf where masked.
    qi = torch.arange(seq, device="cuda").view(1, 1, -1, 1)
    ki = torch.arange(seq, device="cuda").view(1, 1, 1, -1)
    hi = torch.arange(heads, device="cuda").view(1, -1, 1, 1)
    zero = torch.zeros(1, 1, 1, 1, device="cuda")
    bias = var.score_fn(zero, 0, hi, qi, ki).float().masked_fill(~keep.unsqueeze(0), float("-inf"))
    bias = bias.to(DT)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def flex_call(var, seq, flex, create_block_mask):
    """A function running the compiled flex_attention with the variant's block mask and
    score_mod."""
    block_mask = None
    if var.keep is not None:  # keep(b, h, q, k) is a mask_mod, score_fn a score_mod
        block_mask = create_block_mask(var.keep, None, None, seq, seq, device="cuda")
    return lambda q, k, v: flex(q, k, v, score_mod=var.score_fn, block_mask=block_mask)


def unmasked_fraction(var, seq):
    if var.keep is None:
        return 1.0
    total = 0
    k = torch.arange(seq, device="cuda").view(1, -1)
    for q0 in range(0, seq, 1024):
        q = torch.arange(q0, min(seq, q0 + 1024), device="cuda").view(-1, 1)
        total += int(var.keep(0, 0, q, k).sum().item())
    return total / (seq * seq)


def relerr(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def forward_and_backward(fn, q, k, v, do):
    """(forward call, forward+backward call) of fn(q, k, v) for timing."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

    def fwd():
        return fn(q, k, v)

    def fwd_bwd():
        return torch.autograd.grad(fn(*leaves), leaves, do)
    return fwd, fwd_bwd


def first_call_s(fn):
    """Seconds of one call, synchronized: a first call's compile time and its run."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# ---- attnc's first-call times, in a child process with its own disk cache directory ----

def child_compile_times(args):
    """(child mode) First forward and first backward call of each variant's op at a small
    sequence, printed as JSON: the compile times a user meets with this process's disk cache."""
    heads, dim, seq = args.heads, args.dim, 256  # the kernels are those of args.seq's variants
    doc = document_ids(seq)
    torch.zeros(1, device="cuda")
    # NVRTC and the driver loaded first, so that each row's time is its own kernels' compile.
    attnc.compile(attnc.Spec(head_dim=64, heads=1, dtype="bf16"))
    times = {}
    for var in variants(args.seq, heads, doc, args.quick):
        if not selected(var, args.only):
            continue
        q, k, v = (torch.randn(1, heads, seq, dim, device="cuda", dtype=DT, requires_grad=True)
                   for _ in range(3))
        inputs = {"doc": doc} if var.uses_doc else None
        out = None

        def fwd():
            nonlocal out
            out = attnc.attention(q, k, v, mask=var.mask, score=var.score, inputs=inputs)
        try:
            first_fwd = first_call_s(fwd)
            first_bwd = first_call_s(lambda: out.backward(torch.ones_like(out)))
            times[var.name] = [first_fwd, first_bwd]
        except Exception as e:  # noqa: BLE001
            times[var.name] = str(e).splitlines()[0][:200]
    print("COMPILE_TIMES " + json.dumps(times), flush=True)


def attnc_compile_times(argv_rows):
    """{variant: {"cold": [fwd s, bwd s], "warm": [...]}} from two child runs sharing a fresh
    ATTNC_CACHE_DIR (the first fills it)."""
    cache = tempfile.mkdtemp(prefix="attnc_cold_cache_", dir=_SCRATCH)
    env = dict(os.environ, ATTNC_CACHE_DIR=cache)
    out = {}
    for phase in ("cold", "warm"):
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-compile-times",
                               *argv_rows], env=env, capture_output=True, text=True, timeout=600)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("COMPILE_TIMES ")), None)
        if line is None:
            print(f"attnc compile-time child ({phase}) failed:\n{proc.stderr[-2000:]}", flush=True)
            continue
        for name, value in json.loads(line.split(" ", 1)[1]).items():
            out.setdefault(name, {})[phase] = value
    return out


def selected(var, only):
    return not only or any(text in var.name for text in only)


# ---- One row ----

def run_row(var, args, lib, doc, flex_parts, compile_times):
    B, H, S, D = args.batch, args.heads, args.seq, args.dim
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=DT) for _ in range(4))
    inputs = {"doc": doc} if var.uses_doc else None
    frac = unmasked_fraction(var, S)
    fwd_flops = 4.0 * B * H * S * S * D * frac
    row = {"variant": var.name, "B": B, "H": H, "S": S, "D": D, "unmasked": frac, "ms": {},
           "tflops": {}, "first_call_s": {}, "notes": [], "ok": True}

    def attnc_fn(q, k, v):
        return attnc.attention(q, k, v, mask=var.mask, score=var.score, inputs=inputs)

    impls = {"attnc": attnc_fn}
    if flex_parts is not None:
        flex_fn, create_block_mask = flex_parts
        torch._dynamo.reset()  # each row's first call compiles from scratch
        flex = torch.compile(flex_fn, dynamic=False)
        impls["flex"] = flex_call(var, S, flex, create_block_mask)
    sdpa = sdpa_call(var, S, H)
    if sdpa is not None:
        impls["sdpa"] = sdpa

    # First calls (Flex compiles its forward, then its backward), then correctness.
    outs, grads = {}, {}
    for name, fn in list(impls.items()):
        fwd, fwd_bwd = forward_and_backward(fn, q, k, v, do)
        try:
            if name == "flex":
                row["first_call_s"]["flex fwd"] = first_call_s(fwd)
                row["first_call_s"]["flex bwd"] = first_call_s(fwd_bwd)
            outs[name] = fwd()
            grads[name] = fwd_bwd()
        except Exception as e:  # noqa: BLE001
            row["notes"].append(f"{name} failed: {str(e).splitlines()[0][:200]}")
            impls.pop(name)
            if name == "attnc":
                row["ok"] = False
    peer = next((p for p in ("flex", "sdpa") if p in outs), None)
    if "attnc" in outs and peer:
        out_err = relerr(outs["attnc"], outs[peer])
        grad_err = max(relerr(a, b) for a, b in zip(grads["attnc"], grads[peer]))
        row["check"] = f"out {out_err:.1e} grads {grad_err:.1e} vs {peer}"
        if not (out_err <= CHECK_TOL and grad_err <= GRAD_CHECK_TOL):
            row["ok"] = False
            row["notes"].append(f"attnc differs from {peer}: not timed")
            impls.pop("attnc")
    elif "attnc" in outs:
        row["check"] = "no peer ran: unchecked"
    times = compile_times.get(var.name, {})
    for phase in ("cold", "warm"):
        value = times.get(phase)
        if isinstance(value, list):
            row["first_call_s"][f"attnc {phase} fwd"] = value[0]
            row["first_call_s"][f"attnc {phase} bwd"] = value[1]
        elif value is not None:
            row["notes"].append(f"attnc {phase} first call failed: {value}")

    # Timings.
    for name, fn in impls.items():
        fwd, fwd_bwd = forward_and_backward(fn, q, k, v, do)
        try:
            t_fwd = time_ms(fwd, **TIMING)[0]
            t_all = time_ms(fwd_bwd, **TIMING)[0]
        except Exception as e:  # noqa: BLE001
            row["notes"].append(f"{name} timing failed: {str(e).splitlines()[0][:200]}")
            continue
        t_bwd = max(t_all - t_fwd, 1e-6)
        row["ms"][name] = {"fwd": t_fwd, "bwd": t_bwd}
        row["tflops"][name] = {"fwd": fwd_flops / (t_fwd * 1e-3) / 1e12,
                               "bwd": 2.5 * fwd_flops / (t_bwd * 1e-3) / 1e12}

    # The op's kernel time against the raw C API launch of the same spec's kernel.
    if "attnc" in impls:
        try:
            compare_with_c_api(var, row, lib, q, k, v, inputs, attnc_fn)
        except Exception as e:  # noqa: BLE001
            row["ok"] = False
            row["notes"].append(f"C API comparison failed: {str(e).splitlines()[0][:200]}")
    return row


def compare_with_c_api(var, row, lib, q, k, v, inputs, attnc_fn):
    B, H, S, D = q.shape
    declared = {"doc": {"dtype": "i32", "dims": ["pos"]}} if inputs else None
    # The fields the op fills from these tensors (bf16, the default dtype, left unset): the
    # same spec text, so the same kernel.
    spec = attnc.Spec(head_dim=D, heads=(H, H), mask=var.mask, score=var.score, inputs=declared)
    kernel = attnc.compile(spec)
    raw = lib.compile_text(kernel.spec.to_yaml(), kernel.info.target)
    out = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    args = raw.make_args(q, k, v, out, lse, [(inputs["doc"], "pos")] if inputs else [],
                         layout="bhsd")
    stream = torch.cuda.current_stream().cuda_stream
    calls = 20
    op_us, _ = device_times_us(lambda: attnc_fn(q, k, v), calls)
    raw_us, _ = device_times_us(lambda: raw.launch(args, stream), calls)
    same_out = relerr(out, attnc_fn(q, k, v)) <= 1e-3
    equal = abs(op_us - raw_us) <= max(KERNEL_TOL * raw_us, KERNEL_FLOOR_US)
    row["kernel_us"] = {"op": op_us, "c_api": raw_us}
    if not (equal and same_out):
        row["ok"] = False
        row["notes"].append(f"op kernel {op_us:.1f} us vs C API {raw_us:.1f} us, same output "
                            f"{same_out}")


def fmt(value, spec=".0f"):
    return "-" if value is None else format(value, spec)


def print_table(rows):
    impls = ("attnc", "flex", "sdpa")
    print("\nTFLOP/s forward | backward; first call s (attnc cold/warm fwd+bwd, flex fwd+bwd); "
          "attnc kernel us through the op / the C API")
    head = (f"{'variant':22s} {'unmasked':>8s} "
            + " ".join(f"{n + ' fwd':>9s}" for n in impls) + " "
            + " ".join(f"{n + ' bwd':>9s}" for n in impls)
            + f" {'attnc cold':>10s} {'warm':>6s} {'flex':>6s} {'op us':>8s} {'C API us':>8s}  ok")
    print(head)
    for r in rows:
        t = r["tflops"]
        fc = r["first_call_s"]

        def both(prefix):
            a, b = fc.get(prefix + " fwd"), fc.get(prefix + " bwd")
            return None if a is None or b is None else a + b
        ku = r.get("kernel_us", {})
        print(f"{r['variant']:22s} {r['unmasked']:8.3f} "
              + " ".join(f"{fmt(t.get(n, {}).get('fwd')):>9s}" for n in impls) + " "
              + " ".join(f"{fmt(t.get(n, {}).get('bwd')):>9s}" for n in impls)
              + f" {fmt(both('attnc cold'), '.2f'):>10s} {fmt(both('attnc warm'), '.2f'):>6s}"
              f" {fmt(both('flex'), '.1f'):>6s} {fmt(ku.get('op'), '.1f'):>8s}"
              f" {fmt(ku.get('c_api'), '.1f'):>8s}  {'ok' if r['ok'] else 'FAIL'}")
    for r in rows:
        for note in r["notes"]:
            print(f"  {r['variant']}: {note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B=1 H=8 S=1024, five variants")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the rows there")
    ap.add_argument("--only", action="append", default=None, help="variants whose name has TEXT")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compiles)")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--child-compile-times", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.batch = args.batch or (1 if args.quick else 4)
    args.heads = args.heads or (8 if args.quick else 16)
    args.seq = args.seq or (1024 if args.quick else 4096)
    if args.child_compile_times:
        child_compile_times(args)
        return 0

    torch.zeros(1, device="cuda")
    lib = attnc_ctypes.Library(_loader.library_path())
    print(f"attnc {attnc.__version__}; {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"B={args.batch} H={args.heads} S={args.seq} D={args.dim} bf16 BHSD", flush=True)
    row_argv = (["--quick"] if args.quick else []) + [
        f"--heads={args.heads}", f"--dim={args.dim}", f"--seq={args.seq}"] + [
        f"--only={o}" for o in args.only or []]
    t0 = time.time()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    compile_times = attnc_compile_times(row_argv)
    print(f"attnc first-call times (cold, warm cache) in {time.time() - t0:.0f} s: "
          f"{compile_times}", flush=True)
    flex_parts = None
    if not args.no_flex:
        import torch._dynamo as dynamo
        for name in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo.config, name):
                setattr(dynamo.config, name, 256)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex_parts = (flex_attention, create_block_mask)
    doc = document_ids(args.seq)
    rows = []
    for var in variants(args.seq, args.heads, doc, args.quick):
        if not selected(var, args.only):
            continue
        t1 = time.time()
        try:
            row = run_row(var, args, lib, doc, flex_parts, compile_times)
        except Exception as e:  # noqa: BLE001
            row = {"variant": var.name, "unmasked": float("nan"), "tflops": {}, "ok": False,
                   "first_call_s": {}, "notes": [f"failed: {str(e).splitlines()[0][:300]}"]}
        rows.append(row)
        print(f"{var.name}: {time.time() - t1:.1f} s {json.dumps(row)}", flush=True)
        if args.json:  # partial results survive a timeout
            with open(args.json, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "attnc": attnc.__version__, "date": started,
                           "command": " ".join(["examples/python/variant_tour.py"] + sys.argv[1:]),
                           "rows": rows}, f, indent=1)
        torch.cuda.empty_cache()
    print_table(rows)
    failed = [r["variant"] for r in rows if not r["ok"]]
    print(f"\n{len(rows)} variants in {time.time() - t0:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else "all checks passed"))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
