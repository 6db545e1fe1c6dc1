"""A/B timing of spec files between several attnc builds, the forward or (--backward) the backward.

In one process, per spec (YAML, e.g. test/kernel-specs/*.yaml): each build's kernel on the same
random inputs (q_len = kv_len = --n; the declared inputs made as test/gpu/test_forward.py makes its
own), outputs checked against the first build's, warmed up, then R rounds of one batch of 20 calls
each in turn (A, B, ...); prints each build's median ms per call and the ratios to A. Exits 1 on a
failed call or outputs apart.

The forward by default (outputs apart: max abs difference > 1e-2). With --backward, the backward
(every kernel of one attnc_kernel_backward call: preprocess, dK/dV, dQ, convert) as
test/gpu/test_backward.py launches it, from the first build's forward output and LSE, the same dO
and dropout stream for every build; dQ, dK and dV each checked against the first build's by
relative error (> 1e-2: apart; dQ's order of summation is not fixed unless --deterministic).
--target compiles for another target than the device's (sm_80 on an H100 or H200: the sm_80
kernels, which the driver compiles from their PTX).

  python3 dev/bench/ab_spec.py --lib A/libattnc.so --lib B/libattnc.so [--rounds 30] [--n 4096] \
      [--batch 2] [--backward [--deterministic]] [--target T] test/kernel-specs/mask-key-part-bool.yaml ...
"""
import argparse
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # one_batch, warm_up
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))  # attnc_ctypes, test_forward's generators

INNER = 20  # calls per timed batch
SEED, OFFSET = 1234, 56  # the dropout stream, the same for every build
NAMES = "ABCDEFGH"


def declared_inputs(text):
    """{name: (dtype, [dims])} of the spec's `inputs:` (PyYAML where installed, else the flow form
    `NAME: {dtype: T, dims: [a, b]}` that the specs use)."""
    try:
        import yaml
        spec = yaml.safe_load(text) or {}
        return {n: (d["dtype"], [str(x).strip() for x in d["dims"]])
                for n, d in (spec.get("inputs") or {}).items()}
    except ImportError:
        pass
    out, inside = {}, False
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if re.match(r"^inputs\s*:", line):
            inside = True
            continue
        if inside and not line[0].isspace():
            inside = False
        m = inside and re.match(r"^\s+(\w+)\s*:\s*\{\s*dtype\s*:\s*(\w+)\s*,\s*dims\s*:\s*\[([^\]]*)\]", line)
        if m:
            out[m.group(1)] = (m.group(2), [d.strip() for d in m.group(3).split(",")])
    return out


def make_input(tf, torch, dtype, dims, B, H, npos, dev):
    """A declared input: test_forward's generators where one fits (documents, weights, slopes),
    else random values of the dims' shape (b -> B, h -> query heads, pos -> npos)."""
    key = (dtype, ",".join(dims))
    if key in (("i32", "pos"), ("i32", "b,pos")):
        return tf.gen_doc(B, H, npos, dev, key[1])
    if key == ("i32", "b,h,pos"):
        return tf.gen_head_docs(B, H, npos, dev)
    if key == ("f32", "b,pos"):
        return tf.gen_weight(B, npos, dev)
    if key == ("f32", "h"):
        return torch.rand(H, device=dev) * 0.5
    shape = tuple({"b": B, "h": H, "pos": npos}[d] for d in dims)
    if dtype == "i32":
        return torch.randint(0, 3, shape, device=dev, dtype=torch.int32)
    return torch.randn(shape, device=dev)


def forward_calls(torch, kerns, q, k, v, in_args, stream):
    """Per build: a forward call into its own O and LSE, run once; the calls, each O's max abs
    difference to A's, and whether any O has a NaN."""
    B, N, hq, hdv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    fns, outs = [], []
    for kern in kerns:
        o = torch.full((B, N, hq, hdv), float("nan"), device=q.device, dtype=q.dtype)
        lse = torch.empty(B, hq, N, device=q.device, dtype=torch.float32)
        a = kern.make_args(q, k, v, o, lse, in_args, SEED, OFFSET, layout="bshd")
        fns.append(lambda kern=kern, a=a: kern.launch(a, stream))
        outs.append(o)
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    diffs = [(o.float() - outs[0].float()).abs().max().item() for o in outs[1:]]
    return fns, diffs, any(torch.isnan(o).any().item() for o in outs)


def backward_calls(torch, tf, kerns, q, k, v, in_args, deterministic, stream):
    """Per build: a backward call (test_backward.py's launch: BSHD, the kernel's own workspace)
    from A's forward O and LSE and one dO, into its own NaN-poisoned dQ, dK, dV, run once; the
    calls, the largest relative error of a build's dQ, dK, dV to A's, and whether any has a NaN."""
    B, N, hq, hdv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    o = torch.full((B, N, hq, hdv), float("nan"), device=q.device, dtype=q.dtype)
    lse = torch.full((B, hq, N), float("nan"), device=q.device, dtype=torch.float32)
    kerns[0].forward(q, k, v, o, lse, in_args, seed=SEED, offset=OFFSET, stream=stream)
    do = torch.randn_like(o)
    fns, grads = [], []
    for kern in kerns:
        g = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        a = kern.make_backward_args(q, k, v, o, do, lse, *g, in_args, SEED, OFFSET, "bshd",
                                    deterministic)
        fns.append(lambda kern=kern, a=a: kern.launch_backward(a, stream))
        grads.append(g)
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    diffs = [max(tf.relerr(x, r.double()) for x, r in zip(g, grads[0])) for g in grads[1:]]
    return fns, diffs, any(torch.isnan(x).any().item() for g in grads for x in g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="a libattnc.so (repeat: first is the base)")
    ap.add_argument("--rounds", type=int, default=30, help="timed batches per build, alternating")
    ap.add_argument("--n", type=int, default=4096, help="q_len = kv_len")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--warm-ms", type=float, default=300.0, help="untimed ms per build before the rounds")
    ap.add_argument("--backward", action="store_true", help="time the backward instead of the forward")
    ap.add_argument("--deterministic", action="store_true",
                    help="with --backward: the deterministic backward (dQ kernel, no atomics)")
    ap.add_argument("--target", default=None, help="attnc target (default: the device's)")
    ap.add_argument("spec", nargs="+", help="spec files (YAML)")
    args = ap.parse_args()
    if len(args.lib) < 2:
        ap.error(f"--lib: expected at least two builds, got {len(args.lib)}")
    if args.deterministic and not args.backward:
        ap.error("--deterministic: only with --backward")

    import torch
    import attnc_ctypes
    import bench_forward as bf
    import test_forward as tf

    libs = [attnc_ctypes.Library(path) for path in args.lib]
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    B, N = args.batch, args.n
    failed = False
    for path in args.spec:
        name = os.path.basename(path)
        text = open(path).read()
        try:
            kerns = [lib.compile_text(text, args.target, backward=args.backward) for lib in libs]
        except attnc_ctypes.AttncError as e:
            print(f"{name}: compile failed: {e}", flush=True)
            failed = True
            continue
        info = kerns[0].info
        hq, hkv, hd, hdv = info["heads_q"], info["heads_kv"], info["head_dim"], info["head_dim_v"]
        dt = tf.TORCH_DTYPE[info["dtype"]]
        declared = declared_inputs(text)
        torch.manual_seed(0)
        q = torch.randn(B, N, hq, hd, device=dev, dtype=dt)
        k = torch.randn(B, N, hkv, hd, device=dev, dtype=dt)
        v = torch.randn(B, N, hkv, hdv, device=dev, dtype=dt)
        made = {n: make_input(tf, torch, dtype, dims, B, hq, N, dev) for n, (dtype, dims) in declared.items()}
        try:
            for kern in kerns:
                if kern.input_names != kerns[0].input_names:
                    raise attnc_ctypes.AttncError(f"inputs {kern.input_names} vs A's {kerns[0].input_names}")
            in_args = [(made[n], declared[n][1]) for n in kerns[0].input_names]
            if args.backward:
                fns, diffs, nan = backward_calls(torch, tf, kerns, q, k, v, in_args, args.deterministic,
                                                 stream)
            else:
                fns, diffs, nan = forward_calls(torch, kerns, q, k, v, in_args, stream)
        except (attnc_ctypes.AttncError, KeyError) as e:
            print(f"{name}: launch failed: {e}", flush=True)
            failed = True
            continue
        for fn in fns:
            bf.warm_up(fn, INNER, args.warm_ms)
        times = [[] for _ in fns]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(bf.one_batch(fn, INNER))
        med = [statistics.median(t) for t in times]
        cells = [f"{NAMES[i]} {m:.4f} ms" for i, m in enumerate(med)]
        cells += [f"{NAMES[i]}/A {m / med[0]:.3f}" for i, m in enumerate(med) if i]
        measure = "relerr" if args.backward else "maxdiff"
        cells += [f"{measure} {NAMES[i + 1]} {d:.1e}" for i, d in enumerate(diffs)]
        bad = nan or not all(d <= 1e-2 for d in diffs)
        what = "backward" + (" deterministic" if args.deterministic else "") if args.backward else "forward"
        print(f"{name} {what} (B{B} N{N} hq{hq} hkv{hkv} hd{hd} dv{hdv} {info['dtype']}"
              + (f" {info['target']}" if args.target else "") + "): " + ", ".join(cells)
              + ("  <- OUTPUTS DIFFER" + (" (NaN)" if nan else "") if bad else ""), flush=True)
        failed |= bad
    for i, path in enumerate(args.lib):
        print(f"- {NAMES[i]}: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
