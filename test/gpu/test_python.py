"""GPU tests of the Python package's op, attnc.attention: outputs, LSE and gradients against float64
torch references for every mask and score family (both layouts, GQA/MQA, head_dim_v != head_dim,
fp16 and bf16), the autograd path (dO of any strides, partial requires_grad, accumulation),
torch.compile(fullgraph=True), CUDA-graph capture and replay with inputs changed in place, dropout
(reproducible from torch.manual_seed, its mask recovered with an identity V and the gradients
checked against a reference built from it), the deterministic backward, launches on the current
stream from two streams at once, and argument errors raised before anything is launched.
Prints a summary table last; exits non-zero if any check fails.

  PYTHONPATH=python python3 test/gpu/test_python.py [--quick] [--results PATH]

The op allocates its outputs, so each run first fills freed allocator blocks of the outputs' sizes
with NaN: a kernel that skips an element leaves NaN there rather than a plausible stale value."""
import argparse
import math
import os
import sys
import time
import traceback
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The checkout's package when none is installed or on PYTHONPATH.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import philox_host  # noqa: E402
import results_page  # noqa: E402
from test_backward import gradient_error, reference_grads  # noqa: E402
from test_forward import TORCH_DTYPE, V, device_facts, reference, relerr  # noqa: E402

import attnc  # noqa: E402
from attnc import _loader  # noqa: E402

FWD_TOL = {"bf16": 5e-3, "fp16": 1e-3}  # test_forward.py's bounds
BWD_TOL = {"bf16": 1e-2, "fp16": 2e-3}  # test_backward.py's bounds
LSE_TOL = 1e-3
# torch.compile's graph may round the code around the op differently; the op's own kernels are the
# same, so compiled and eager agree to well below one bf16 rounding step (2^-8).
COMPILE_TOL = 1e-3


class Results:
    """Per group: cases, passes and the worst output, LSE and gradient errors; failures' texts."""

    def __init__(self):
        self.rows, self.failures = {}, []

    def add(self, group, ok, what="", out_err=None, lse_err=None, grad_err=None):
        row = self.rows.setdefault(group, {"cases": 0, "pass": 0, "out": None, "lse": None,
                                           "grad": None})
        row["cases"] += 1
        row["pass"] += int(ok)
        for name, value in (("out", out_err), ("lse", lse_err), ("grad", grad_err)):
            if value is not None:
                row[name] = max(row[name] or 0.0, value)
        print(f"{'ok  ' if ok else 'FAIL'} {group:34s} {what}", flush=True)
        if not ok:
            self.failures.append(f"{group}: {what}")


def fmt(x):
    return "-" if x is None else f"{x:.2e}"


def poison(*templates):
    """Hands the caching allocator NaN-filled blocks of each template's size (a (shape, dtype)
    pair), so the op's next allocations of those sizes start as NaN."""
    blocks = [torch.full(shape, float("nan"), device="cuda", dtype=dtype)
              for shape, dtype in templates]
    del blocks


def kernels_launched(fn):
    """How many device kernels (and memsets/copies) run while fn() does; fn's exception is kept
    and returned beside the count."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    error = None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            error = e
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA), error


# ---- The mask and score families: the op's arguments beside test_forward.py's references ----

class Family:
    """mask/score: attnc.attention's arguments; ref: the test_forward.V entry whose ref_mask,
    ref_score and input generators describe the same variant."""

    def __init__(self, name, ref, mask=None, score=None):
        self.name, self.ref, self.mask, self.score = name, V[ref], mask, score

    def inputs(self, B, hq, skv):
        """The declared inputs, shaped so the op infers their dims ([Skv] -> pos, [B, Skv] ->
        b,pos, [Hq] -> h)."""
        return {n: gen(B, hq, skv, "cuda") for n, (_, _, gen) in self.ref.inputs.items()}


CUSTOM_MASK = "(q + k) % 3 != 0 && allow[b, k] == 1"
CUSTOM_SCORE = "score * gain[h] - 0.05 * abs(q - k) + bias[b, k]"
FAMILIES = {f.name: f for f in [
    Family("none", "full"),
    Family("causal", "causal", mask="causal"),
    Family("window", "window64", mask={"window": 64}),
    Family("prefix", "prefix50", mask={"prefix": 50}),
    Family("document", "document", mask={"document": "doc"}),
    Family("document causal", "document_causal", mask={"document": "doc", "causal": True}),
    Family("custom mask", "custom_mask", mask=CUSTOM_MASK),
    Family("softcap", "softcap30", mask="causal", score={"softcap": 30}),
    Family("alibi", "alibi", score="alibi"),
    Family("alibi slopes", "alibi_slopes", mask="causal", score={"alibi": "slopes"}),
    Family("custom score", "custom_score", mask="causal", score=CUSTOM_SCORE),
]}


class Case:
    def __init__(self, family, layout="bhsd", dtype="bf16", hq=4, hkv=4, d=64, dv=None, sq=256,
                 skv=256, batch=2):
        self.family, self.layout, self.dtype = FAMILIES[family], layout, dtype
        self.hq, self.hkv, self.d, self.dv = hq, hkv, d, dv or d
        self.sq, self.skv, self.batch = sq, skv, batch

    @property
    def group(self):
        heads = f" {self.hq}/{self.hkv}" if self.hq != self.hkv else ""
        dims = f"hd{self.d}" + (f" dv{self.dv}" if self.dv != self.d else "")
        return f"{self.family.name} {dims} {self.dtype}{heads}"

    def shape(self, s, h, d):
        return (self.batch, h, s, d) if self.layout == "bhsd" else (self.batch, s, h, d)

    def bshd(self, t):
        return t if self.layout == "bshd" else t.transpose(1, 2)


def plan(quick):
    cases = []
    layouts = ("bhsd", "bshd")
    for i, name in enumerate(FAMILIES):
        for layout in ([layouts[i % 2]] if quick else layouts):
            cases.append(Case(name, layout))
    unequal = [(129, 300)] if quick else [(129, 300), (300, 129)]
    for sq, skv in unequal:  # bottom-right alignment; at 300 x 129, rows without a key
        for layout in ((["bshd"]) if quick else layouts):
            cases.append(Case("causal", layout, sq=sq, skv=skv))
    extra = [Case("causal", "bhsd", "fp16", d=128), Case("causal", "bhsd", hq=32, hkv=8, d=128,
                                                         batch=1),
             Case("none", "bshd", "fp16", hq=8, hkv=1), Case("causal", "bshd", d=128, dv=64)]
    if not quick:
        extra += [Case("causal", "bshd", "fp16", d=128), Case("custom score", "bshd", "fp16"),
                  Case("causal", "bshd", hq=32, hkv=8, d=128, batch=1),
                  Case("softcap", "bhsd", hq=32, hkv=8, d=128, batch=1),
                  Case("document causal", "bhsd", hq=32, hkv=8, d=128, batch=1),
                  Case("causal", "bhsd", hq=8, hkv=1), Case("window", "bhsd", d=64, dv=128),
                  Case("causal", "bhsd", d=128, dv=64)]
    return cases + extra


def run_case(case, res):
    """Output, LSE and dQ/dK/dV of one case against float64 references."""
    dt = TORCH_DTYPE[case.dtype]
    fam = case.family
    q = torch.randn(case.shape(case.sq, case.hq, case.d), device="cuda", dtype=dt)
    k = torch.randn(case.shape(case.skv, case.hkv, case.d), device="cuda", dtype=dt)
    v = torch.randn(case.shape(case.skv, case.hkv, case.dv), device="cuda", dtype=dt)
    do = torch.randn(case.shape(case.sq, case.hq, case.dv), device="cuda", dtype=dt)
    for t in (q, k, v):
        t.requires_grad_()
    inputs = fam.inputs(case.batch, case.hq, case.skv)
    lse_shape = (case.batch, case.hq, case.sq)
    poison((do.shape, dt), (lse_shape, torch.float32), (q.shape, dt), (k.shape, dt), (v.shape, dt))
    out, lse = attnc.attention(q, k, v, mask=fam.mask, score=fam.score, inputs=inputs or None,
                               layout=case.layout, return_lse=True)
    out.backward(do)
    torch.cuda.synchronize()
    scale = 1.0 / math.sqrt(case.d)
    B, hq, hkv, sq, skv = case.batch, case.hq, case.hkv, case.sq, case.skv
    qb, kb, vb, dob = (case.bshd(t.detach()) for t in (q, k, v, do))
    ref_o, ref_lse, fully, _ = reference(qb, kb, vb, scale, fam.ref, B, hq, hkv, sq, skv, inputs,
                                         "cuda")
    refs = reference_grads(qb, kb, vb, dob, scale, fam.ref, B, hq, hkv, sq, skv, inputs, None, 0.0)
    problems = []
    if tuple(out.shape) != case.shape(sq, hq, case.dv) or out.dtype != dt:
        problems.append(f"out {tuple(out.shape)} {out.dtype}, expected "
                        f"{case.shape(sq, hq, case.dv)} {dt}")
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32:
        problems.append(f"lse {tuple(lse.shape)} {lse.dtype}, expected {lse_shape} float32")
    out_err = relerr(case.bshd(out.detach()), ref_o)
    if not out_err <= FWD_TOL[case.dtype]:  # NaN fails too
        problems.append(f"out relerr {out_err:.2e} > {FWD_TOL[case.dtype]:g}")
    live = ~fully
    lse_err = ((lse.double()[live] - ref_lse[live]).abs().max().item() if live.any() else 0.0)
    if not lse_err <= LSE_TOL:
        problems.append(f"lse max err {lse_err:.2e} > {LSE_TOL:g}")
    if fully.any():
        rows_out = case.bshd(out.detach()).transpose(1, 2)[fully]
        if not (rows_out == 0).all() or not (lse[fully] == float("-inf")).all():
            problems.append("rows without a key: out not 0 or lse not -inf")
    grad_err = 0.0
    for name, t, r in zip(("dq", "dk", "dv"), (q, k, v), refs):
        if t.grad is None or t.grad.shape != t.shape:
            problems.append(f"{name}: missing or misshapen")
            continue
        err = gradient_error(case.bshd(t.grad), r)
        grad_err = max(grad_err, err)
        if not err <= BWD_TOL[case.dtype]:
            problems.append(f"{name} relerr {err:.2e} > {BWD_TOL[case.dtype]:g}")
    what = (f"{case.layout} B{B} Sq{sq} Skv{skv}: out {out_err:.2e} lse {lse_err:.1e} grads "
            f"{grad_err:.2e}" + ("" if not problems else "  <- " + "; ".join(problems)))
    res.add(case.group, not problems, what, out_err, lse_err, grad_err)


# ---- The autograd path ----

def autograd_checks(res):
    """The op's gradients, the way autograd hands it dO, against float64 autograd: out.sum()
    (a dO of stride 0), a non-contiguous dO, only q requiring grad, and accumulation over two
    backward passes."""
    fam = FAMILIES["causal"]
    B, H, S, D = 2, 4, 200, 64
    scale = 1.0 / math.sqrt(D)
    base = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    bshd = [t.transpose(1, 2) for t in base]

    def grads_of(loss_of, needs=(True, True, True), passes=1):
        leaves = [t.clone().requires_grad_(n) for t, n in zip(base, needs)]
        for _ in range(passes):
            loss_of(attnc.attention(*leaves, mask="causal")).backward()
        torch.cuda.synchronize()
        return [t.grad for t in leaves]

    def reference_of(do_bhsd):
        return reference_grads(*bshd, do_bhsd.transpose(1, 2), scale, fam.ref, B, H, H, S, S, {},
                               None, 0.0)

    def check(what, grads, refs, factor=1.0):
        problems, worst = [], 0.0
        for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
            if r is None:
                if g is not None:
                    problems.append(f"{name} set though its tensor needs no grad")
                continue
            if g is None:
                problems.append(f"{name} missing")
                continue
            err = gradient_error(g.transpose(1, 2), r * factor)
            worst = max(worst, err)
            if not err <= BWD_TOL["bf16"]:
                problems.append(f"{name} relerr {err:.2e}")
        res.add("autograd", not problems, f"{what}: worst {worst:.2e}"
                + ("" if not problems else "  <- " + "; ".join(problems)), grad_err=worst)

    ones = torch.ones(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    check("out.sum().backward() (dO of stride 0)", grads_of(lambda o: o.sum()), reference_of(ones))
    weight = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    check("dO a transposed view", grads_of(lambda o: (o * weight).sum()), reference_of(weight))
    refs = reference_of(weight)
    check("only q requires grad", grads_of(lambda o: (o * weight).sum(), (True, False, False)),
          [refs[0], None, None])
    check("two backward passes accumulate", grads_of(lambda o: (o * weight).sum(), passes=2),
          refs, factor=2.0)


# ---- torch.compile and CUDA graphs ----

class TinyAttention(torch.nn.Module):
    """Projections around the op, as a model's attention block uses it."""

    def __init__(self, width, heads, head_dim):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = torch.nn.Linear(width, 3 * heads * head_dim, bias=False)
        self.out = torch.nn.Linear(heads * head_dim, width, bias=False)

    def forward(self, x, doc):
        B, S, _ = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, self.head_dim).unbind(2)
        o = attnc.attention(q, k, v, mask={"document": "doc", "causal": True},
                            inputs={"doc": doc}, layout="bshd", deterministic=True)
        return self.out(o.reshape(B, S, -1))


def compile_check(res):
    """torch.compile(fullgraph=True) of a module calling the op: no graph break (fullgraph raises
    on one), forward and gradients equal to eager."""
    torch.manual_seed(1)
    model = TinyAttention(256, 4, 64).to("cuda", torch.bfloat16)
    x = torch.randn(2, 384, 256, device="cuda", dtype=torch.bfloat16)
    doc = torch.sort(torch.randint(0, 4, (384,), device="cuda", dtype=torch.int32)).values
    weight = torch.randn(2, 384, 256, device="cuda", dtype=torch.bfloat16)

    def run(fn):
        model.zero_grad(set_to_none=True)
        xx = x.clone().requires_grad_()
        y = fn(xx, doc)
        (y.float() * weight.float()).sum().backward()
        torch.cuda.synchronize()
        return [y.detach(), xx.grad] + [p.grad for p in model.parameters()]

    eager = run(model)
    try:
        compiled = torch.compile(model, fullgraph=True)
        got = run(compiled)
        got2 = run(compiled)  # the second call runs the cached graph
    except Exception as e:  # noqa: BLE001
        res.add("torch.compile", False, f"fullgraph compile failed: {str(e).splitlines()[0][:300]}")
        return
    errs = [relerr(g, e.double()) for g, e in zip(got, eager)]
    same = all(torch.equal(a, b) for a, b in zip(got, got2))
    worst = max(errs)
    ok = worst <= COMPILE_TOL and same
    bitwise = all(torch.equal(g, e) for g, e in zip(got, eager))
    res.add("torch.compile", ok, f"fullgraph: out/dx/dW vs eager worst relerr {worst:.1e}"
            f" (bit-identical: {bitwise}), two compiled runs identical: {same}", grad_err=worst)


def graph_check(res, family):
    """A CUDA graph captures the op's forward and backward; each replay after new values are
    copied into the inputs (declared inputs too) equals an eager run on those values."""
    fam = FAMILIES[family]
    B, H, S, D = 2, 4, 256, 64
    shape = (B, H, S, D)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    inputs = fam.inputs(B, H, S)

    def step():
        out = attnc.attention(q, k, v, mask=fam.mask, score=fam.score, inputs=inputs or None,
                              deterministic=True)
        grads = torch.autograd.grad(out, (q, k, v), do)
        return (out, *grads)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    # Warm-up on the stream that captures: kernels compiled and loaded, and the per-stream buffer
    # of a mask's input summaries sized, outside the capture (docs/python.md, CUDA graphs).
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
    for replay in range(3):
        with torch.no_grad():
            for t in (q, k, v, do):
                t.copy_(torch.randn_like(t))
            for name, t in inputs.items():
                t.copy_(fam.inputs(B, H, S)[name])
        for t in static:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = step()
        torch.cuda.synchronize()
        for name, got, want in zip(("out", "dq", "dk", "dv"), static, eager):
            if not torch.equal(got, want):
                problems.append(f"replay {replay}: {name} differs from eager "
                                f"(relerr {relerr(got, want.double()):.1e})")
    res.add("CUDA graph", not problems, f"{family}: capture + 3 replays with new inputs"
            + ("" if not problems else "  <- " + "; ".join(problems[:4])))


def graph_cold_stream_check(res):
    """A capture on a stream where the document mask never ran: its per-stream summary buffer
    would have to be allocated inside the capture. The call must raise AttncError (before any
    launch, naming the capture) and leave the capture intact, so that it ends cleanly and the
    stream still runs the op."""
    fam = FAMILIES["document causal"]
    B, H, S, D = 1, 2, 384, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    inputs = fam.inputs(B, H, S)
    cold = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    raised = None
    try:
        with torch.cuda.graph(graph, stream=cold):
            try:
                attnc.attention(q, k, v, mask=fam.mask, inputs=inputs)
            except attnc.AttncError as e:
                raised = str(e)
    except Exception as e:  # noqa: BLE001
        res.add("CUDA graph", False, f"cold stream: the capture broke: {str(e)[:200]}")
        return
    with torch.cuda.stream(cold):
        out = attnc.attention(q, k, v, mask=fam.mask, inputs=inputs)
    torch.cuda.synchronize()
    want = attnc.attention(q, k, v, mask=fam.mask, inputs=inputs)
    ok = raised is not None and "capturing a CUDA graph" in raised and torch.equal(out, want)
    res.add("CUDA graph", ok, f"cold stream: AttncError before launch: "
            f"{(raised or 'none raised')[:120]}; op on that stream afterwards right: "
            f"{torch.equal(out, want)}")


# ---- Dropout, the deterministic backward, streams ----

def dropout_checks(res, p=0.1):
    """torch.manual_seed reproduces a call, the next call draws another mask, the kept fraction is
    the kernel's 1 - threshold/256, and the backward matches float64 autograd through the same
    mask. The mask is recovered with V = identity (head_dim_v = Skv): row q of O is then row q
    of P * keep / (1 - p), zero exactly where dropped (no score underflows at these sizes)."""
    B, H, S, D = 2, 4, 128, 64
    scale = 1.0 / math.sqrt(D)
    q, k = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    identity = torch.eye(S, device="cuda", dtype=torch.bfloat16).expand(B, H, S, S).contiguous()
    v = torch.randn(B, H, S, S, device="cuda", dtype=torch.bfloat16)
    do = torch.randn(B, H, S, S, device="cuda", dtype=torch.bfloat16)

    torch.manual_seed(1234)
    probs = attnc.attention(q, k, identity, dropout_p=p)
    torch.manual_seed(1234)
    again = attnc.attention(q, k, identity, dropout_p=p)
    following = attnc.attention(q, k, identity, dropout_p=p)
    torch.manual_seed(1234)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attnc.attention(*leaves, dropout_p=p)
    out.backward(do)
    torch.cuda.synchronize()

    res.add("dropout", torch.equal(probs, again), "torch.manual_seed reproduces the output")
    res.add("dropout", not torch.equal(probs, following), "the next call draws another mask")
    keep = probs != 0
    kept = keep.double().mean().item()
    expect = 1.0 - philox_host.threshold(p) / 256.0
    sigma = math.sqrt(expect * (1 - expect) / keep.numel())
    res.add("dropout", abs(kept - expect) <= 4 * sigma,
            f"kept fraction {kept:.5f}, expected {expect:.5f} +- 4 x {sigma:.1e}")
    qb, kb = q.transpose(1, 2), k.transpose(1, 2)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    ref_probs = torch.softmax(s, -1) * keep * philox_host.scale(p)
    err = relerr(probs, ref_probs)
    res.add("dropout", err <= FWD_TOL["bf16"],
            f"P * keep / (1 - p) through V = identity vs float64: relerr {err:.2e}", out_err=err)
    ref_o = (ref_probs @ v.double())
    err = relerr(out.detach(), ref_o)
    res.add("dropout", err <= FWD_TOL["bf16"], f"output under the recovered mask: relerr {err:.2e}",
            out_err=err)
    refs = reference_grads(qb, kb, v.transpose(1, 2), do.transpose(1, 2), scale,
                           types.SimpleNamespace(ref_mask=None, ref_score=None), B, H, H, S, S, {},
                           keep.cpu().numpy(), p)
    errs = [gradient_error(t.grad.transpose(1, 2), r) for t, r in zip(leaves, refs)]
    res.add("dropout", max(errs) <= BWD_TOL["bf16"],
            "backward vs float64 autograd with the recovered mask: dq/dk/dv "
            + " ".join(f"{e:.2e}" for e in errs), grad_err=max(errs))


def deterministic_check(res):
    """deterministic=True: three backward passes give bit-identical gradients."""
    for family, (hq, hkv, d) in (("causal", (8, 2, 128)), ("document causal", (4, 4, 64))):
        fam = FAMILIES[family]
        B, S = 2, 1000
        base = [torch.randn(B, h, S, d, device="cuda", dtype=torch.bfloat16)
                for h in (hq, hkv, hkv)]
        do = torch.randn(B, hq, S, d, device="cuda", dtype=torch.bfloat16)
        inputs = fam.inputs(B, hq, S)
        runs = []
        for _ in range(3):
            leaves = [t.clone().requires_grad_() for t in base]
            poison(*(((t.shape, t.dtype)) for t in base))
            attnc.attention(*leaves, mask=fam.mask, inputs=inputs or None,
                            deterministic=True).backward(do)
            runs.append([t.grad for t in leaves])
        torch.cuda.synchronize()
        same = all(torch.equal(a, b) for run in runs[1:] for a, b in zip(runs[0], run))
        finite = all(torch.isfinite(g).all() for g in runs[0])
        res.add("deterministic", same and finite, f"{family} {hq}/{hkv} hd{d} S{S}: 3 runs "
                f"bit-identical {same}, finite {finite}")


def streams_check(res):
    """The op launches on torch's current stream: two streams each fill their own q after a long
    sleep and call the op; a launch on any other stream would read q before it is written."""
    B, H, S, D = 2, 8, 1024, 128
    scale = 1.0 / math.sqrt(D)
    fam = FAMILIES["causal"]
    streams = [torch.cuda.Stream() for _ in range(2)]
    news = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    kv = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    qs = [torch.zeros(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    torch.cuda.synchronize()
    outs = []
    for stream, q, new in zip(streams, qs, news):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(100_000_000)  # about 50 ms at 2 GHz
            q.copy_(new)
            outs.append(attnc.attention(q, kv[0], kv[1], mask="causal"))
    torch.cuda.synchronize()
    ref, _, _, _ = reference(news[0].transpose(1, 2), kv[0].transpose(1, 2),
                             kv[1].transpose(1, 2), scale, fam.ref, B, H, H, S, S, {}, "cuda")
    ref2, _, _, _ = reference(news[1].transpose(1, 2), kv[0].transpose(1, 2),
                              kv[1].transpose(1, 2), scale, fam.ref, B, H, H, S, S, {}, "cuda")
    errs = [relerr(o.transpose(1, 2), r) for o, r in zip(outs, (ref, ref2))]
    res.add("streams", max(errs) <= FWD_TOL["bf16"], "two streams, q written after a sleep on "
            "each: relerr " + " ".join(f"{e:.2e}" for e in errs), out_err=max(errs))


# ---- Argument errors ----

def error_checks(res):
    """Bad calls raise the contract's exception naming the argument, and launch nothing."""
    B, H, S, D = 2, 4, 128, 64

    def t(*shape, dtype=torch.bfloat16, device="cuda"):
        return torch.randn(*shape, device=device, dtype=dtype)

    q, k, v = t(B, H, S, D), t(B, H, S, D), t(B, H, S, D)
    bias = torch.randn(B, S, device="cuda", requires_grad=True)
    gain = torch.rand(H, device="cuda")
    # The bad tensors are made here, not in the calls: making them launches kernels of its own.
    q32, q_cpu = q.float(), q.cpu()
    k32, q6, v_b = t(B, H, S, 32), t(B, 6, S, D), t(B + 1, H, S, D)
    doc_f32 = torch.zeros(S, device="cuda")
    cases = [
        ("q float32", lambda: attnc.attention(q32, k, v), attnc.ArgumentError, ["q"]),
        ("k head dim != q's", lambda: attnc.attention(q, k32, v),
         attnc.ArgumentError, ["k"]),
        ("q heads not a multiple of k's", lambda: attnc.attention(q6, k, v),
         attnc.ArgumentError, ["heads", "k"]),
        ("v batch != q's", lambda: attnc.attention(q, k, v_b),
         attnc.ArgumentError, ["v"]),
        ("q on the CPU", lambda: attnc.attention(q_cpu, k, v), attnc.ArgumentError, ["q"]),
        ("q of 3 dims", lambda: attnc.attention(q[0], k, v), attnc.ArgumentError, ["q"]),
        ("layout 'bsdh'", lambda: attnc.attention(q, k, v, layout="bsdh"), attnc.ArgumentError,
         ["layout"]),
        ("dropout_p 1.5", lambda: attnc.attention(q, k, v, dropout_p=1.5), attnc.ArgumentError,
         ["dropout"]),
        # The spec made from these arguments is wrong: the compiler's SpecError may say so.
        ("document mask without its input",
         lambda: attnc.attention(q, k, v, mask={"document": "doc"}),
         (attnc.ArgumentError, attnc.SpecError), ["doc"]),
        ("document ids as float32",
         lambda: attnc.attention(q, k, v, mask={"document": "doc"},
                                 inputs={"doc": doc_f32}),
         (attnc.ArgumentError, attnc.SpecError), ["doc"]),
        ("mask expression with a syntax error",
         lambda: attnc.attention(q, k, v, mask="k <= q +"), attnc.SpecError, ["mask"]),
        ("f32 input that requires grad",
         lambda: attnc.attention(q, k, v, score=CUSTOM_SCORE, mask="causal",
                                 inputs={"gain": gain, "bias": bias}),
         attnc.ArgumentError, ["bias"]),
    ]
    for what, call, expected, words in cases:
        launched, error = kernels_launched(call)
        message = str(error) if error is not None else None
        ok = (isinstance(error, expected) and isinstance(error, attnc.AttncError)
              and any(w in message for w in words) and launched == 0)
        res.add("argument errors", ok, f"{what}: {type(error).__name__} {message!r}, "
                f"{launched} kernels launched")


def write_results(path, res, elapsed):
    bounds = ("Bounds: relative Frobenius error of O against a float64 reference <= 5e-3 (bf16) /"
              " 1e-3 (fp16), of each of dQ, dK, dV against float64 autograd <= 1e-2 (bf16) /"
              " 2e-3 (fp16); LSE max abs error <= 1e-3 on rows with a key, O == 0 and LSE == -inf"
              " on rows without; outputs start as NaN (poisoned allocator blocks). torch.compile"
              f" within {COMPILE_TOL:g} of eager; CUDA-graph replays bit-identical to eager"
              " (deterministic backward); dropout's mask recovered with V = identity.")
    columns = ["group", "cases", "pass", "worst out err", "worst LSE err", "worst grad err"]
    rows = [[g, r["cases"], r["pass"], fmt(r["out"]), fmt(r["lse"]), fmt(r["grad"])]
            for g, r in res.rows.items()]
    results_page.write(path, "attnc Python op GPU tests: results",
                       results_page.command_line(__file__, sys.argv[1:]), device_facts(),
                       results_page.commit_of(_loader.library_path()), elapsed, bounds,
                       columns, rows, res.failures)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one layout per family, fewer extras")
    ap.add_argument("--results", default=None, metavar="PATH", help="also write a summary page")
    args = ap.parse_args()
    start = time.time()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"attnc {attnc.__version__} ({_loader.library_path()}); {device_facts()}",
          flush=True)
    res = Results()
    steps = [(f"{c.group} {c.layout} Sq{c.sq} Skv{c.skv}", run_case, (c, res))
             for c in plan(args.quick)]
    steps += [("autograd", autograd_checks, (res,)), ("torch.compile", compile_check, (res,)),
              ("CUDA graph causal", graph_check, (res, "causal")),
              ("CUDA graph document", graph_check, (res, "document causal")),
              ("CUDA graph cold stream", graph_cold_stream_check, (res,)),
              ("dropout", dropout_checks, (res,)), ("deterministic", deterministic_check, (res,)),
              ("streams", streams_check, (res,)), ("argument errors", error_checks, (res,))]
    for name, fn, fn_args in steps:
        try:
            fn(*fn_args)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res.add(name.split(" hd")[0] if fn is not run_case else fn_args[0].group, False,
                    f"{name}: exception {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 (a sticky CUDA error: the next steps report it)
                pass
    elapsed = time.time() - start
    if args.results:
        write_results(args.results, res, elapsed)
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
