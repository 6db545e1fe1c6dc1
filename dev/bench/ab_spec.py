"""Forward A/B of spec files (YAML, e.g. test/kernel-specs/*.yaml) between several attnc builds in
one process: per spec, each build's kernel on the same random inputs (q_len = kv_len = --n; the
declared inputs made as test/gpu/test_forward.py makes its own), outputs checked against the first
build's, warmed up, then R rounds of one batch of 20 calls each in turn (A, B, ...); prints each
build's median ms per call and the ratios to A. Exits 1 on a failed call or outputs apart > 1e-2.

  python3 dev/bench/ab_spec.py --lib A/libattnc.so --lib B/libattnc.so [--rounds 30] [--n 4096] \
      [--batch 2] test/kernel-specs/mask-key-part-bool.yaml ...
"""
import argparse
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # one_batch, warm_up
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))  # attnc_ctypes, test_forward's generators

INNER = 20  # forward calls per timed batch
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="a libattnc.so (repeat: first is the base)")
    ap.add_argument("--rounds", type=int, default=30, help="timed batches per build, alternating")
    ap.add_argument("--n", type=int, default=4096, help="q_len = kv_len")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--warm-ms", type=float, default=300.0, help="untimed ms per build before the rounds")
    ap.add_argument("spec", nargs="+", help="spec files (YAML)")
    args = ap.parse_args()
    if len(args.lib) < 2:
        ap.error(f"--lib: expected at least two builds, got {len(args.lib)}")

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
            kerns = [lib.compile_text(text) for lib in libs]
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
        fns, outs = [], []
        try:
            for kern in kerns:
                if kern.input_names != kerns[0].input_names:
                    raise attnc_ctypes.AttncError(f"inputs {kern.input_names} vs A's {kerns[0].input_names}")
                in_args = [(made[n], declared[n][1]) for n in kern.input_names]
                o = torch.full((B, N, hq, hdv), float("nan"), device=dev, dtype=dt)
                lse = torch.empty(B, hq, N, device=dev, dtype=torch.float32)
                a = kern.make_args(q, k, v, o, lse, in_args, layout="bshd")
                fns.append(lambda kern=kern, a=a: kern.launch(a, stream))
                outs.append(o)
            for fn in fns:
                fn()
            torch.cuda.synchronize()
        except (attnc_ctypes.AttncError, KeyError) as e:
            print(f"{name}: launch failed: {e}", flush=True)
            failed = True
            continue
        diffs = [(o.float() - outs[0].float()).abs().max().item() for o in outs[1:]]
        nan = any(torch.isnan(o).any().item() for o in outs)
        for fn in fns:
            bf.warm_up(fn, INNER, args.warm_ms)
        times = [[] for _ in fns]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(bf.one_batch(fn, INNER))
        med = [statistics.median(t) for t in times]
        cells = [f"{NAMES[i]} {m:.4f} ms" for i, m in enumerate(med)]
        cells += [f"{NAMES[i]}/A {m / med[0]:.3f}" for i, m in enumerate(med) if i]
        cells += [f"maxdiff {NAMES[i + 1]} {d:.1e}" for i, d in enumerate(diffs)]
        bad = nan or not all(d <= 1e-2 for d in diffs)
        print(f"{name} (B{B} N{N} hq{hq} hkv{hkv} hd{hd} dv{hdv} {info['dtype']}): " + ", ".join(cells)
              + ("  <- OUTPUTS DIFFER" + (" (NaN)" if nan else "") if bad else ""), flush=True)
        failed |= bad
    for i, path in enumerate(args.lib):
        print(f"- {NAMES[i]}: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
