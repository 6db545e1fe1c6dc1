"""GPU test of the JIT cache's identity: specs that share a name and a shape but differ in a field
the generated source need not show (scale, heads, dropout) compile, through one cache directory,
to kernels that each compute their own spec, in one process and across processes. Every output is
checked against a float64 reference built from the spec's own values (never from what the kernel
reports), with outputs poisoned before each launch.

  python3 test/gpu/test_cache_identity.py [--cache-dir DIR]

It runs each pair twice: both specs in this process, then the first in a child process and the
second here (a cache entry written by another process)."""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnc_ctypes  # noqa: E402
import philox_host  # noqa: E402

TOL = {"bf16": 5e-3, "fp16": 1e-3}
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}

# Pairs (first, second): the second compiled after the first under one cache directory. Each spec
# is (YAML, its values as the reference reads them).
PAIRS = {
    "scale_and_heads": (
        ("name: k\nhead_dim: 64\ndtype: bf16\nheads: 8\nscale: 0.25\n",
         dict(hq=8, hkv=8, scale=0.25, p=0.0, dtype="bf16", hd=64)),
        ("name: k\nhead_dim: 64\ndtype: bf16\nheads: {q: 16, kv: 4}\nscale: 0.5\n",
         dict(hq=16, hkv=4, scale=0.5, p=0.0, dtype="bf16", hd=64))),
    "dropout_p": (
        ("name: d\nhead_dim: 64\ndtype: bf16\nheads: 4\ndropout: 0.5\n",
         dict(hq=4, hkv=4, scale=0.125, p=0.5, dtype="bf16", hd=64)),
        ("name: d\nhead_dim: 64\ndtype: bf16\nheads: 4\ndropout: 0.1\n",
         dict(hq=4, hkv=4, scale=0.125, p=0.1, dtype="bf16", hd=64))),
    "query_heads": (
        ("name: h\nhead_dim: 64\ndtype: fp16\nheads: {q: 2, kv: 2}\n",
         dict(hq=2, hkv=2, scale=0.125, p=0.0, dtype="fp16", hd=64)),
        ("name: h\nhead_dim: 64\ndtype: fp16\nheads: {q: 4, kv: 2}\n",
         dict(hq=4, hkv=2, scale=0.125, p=0.0, dtype="fp16", hd=64))),
    "fewer_heads": (
        ("name: g\nhead_dim: 64\ndtype: bf16\nheads: {q: 16, kv: 2}\nmask: causal\n",
         dict(hq=16, hkv=2, scale=0.125, p=0.0, dtype="bf16", hd=64, causal=True)),
        ("name: g\nhead_dim: 64\ndtype: bf16\nheads: {q: 2, kv: 2}\nmask: causal\n",
         dict(hq=2, hkv=2, scale=0.125, p=0.0, dtype="bf16", hd=64, causal=True))),
}


def check(kern, want, B=2, ql=257, kl=257):
    """Problems of one launch of `kern` against the float64 reference of the spec values `want`."""
    dev = torch.device("cuda")
    dt = TORCH_DTYPE[want["dtype"]]
    hq, hkv, hd, p = want["hq"], want["hkv"], want["hd"], want["p"]
    q = torch.randn(B, ql, hq, hd, device=dev, dtype=dt)
    k = torch.randn(B, kl, hkv, hd, device=dev, dtype=dt)
    v = torch.randn(B, kl, hkv, hd, device=dev, dtype=dt)
    o = torch.full((B, ql, hq, hd), float("nan"), device=dev, dtype=dt)
    lse = torch.full((B, hq, ql), float("nan"), device=dev, dtype=torch.float32)
    seed, offset = 0x5EED_0000_1234 + ql, 99
    try:
        kern.forward(q, k, v, o, lse, seed=seed, offset=offset)
        torch.cuda.synchronize()
    except attnc_ctypes.AttncError as e:
        return [f"launch refused: {e}"]
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(hq // hkv, 1)
    vd = v.double().transpose(1, 2).repeat_interleave(hq // hkv, 1)
    s = (qd @ kd.transpose(-1, -2)) * want["scale"]
    if want.get("causal"):
        qi = torch.arange(ql, device=dev).view(ql, 1) + (kl - ql)
        ki = torch.arange(kl, device=dev).view(1, kl)
        s = s.masked_fill(ki > qi, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    pr = torch.exp(s - ref_lse.unsqueeze(-1))
    if p > 0:
        keep = philox_host.keep_mask(seed, offset, p, B, hq, ql, kl, 7)
        pr = pr * torch.from_numpy(keep).to(dev) * philox_host.scale(p)
    ref = (pr @ vd).transpose(1, 2)
    problems = []
    if torch.isnan(o).any():
        problems.append(f"{int(torch.isnan(o).sum())} elements of O never written")
    err = ((o.double() - ref).norm() / ref.norm()).item()
    if not err <= TOL[want["dtype"]]:
        problems.append(f"relative error {err:.2e} > {TOL[want['dtype']]:g}")
    lse_err = (lse.double() - ref_lse).abs().max().item()
    if not lse_err <= 1e-3:
        problems.append(f"LSE max error {lse_err:.2e}")
    info = kern.info
    for field, value in (("heads_q", hq), ("heads_kv", hkv)):
        if info[field] != value:
            problems.append(f"reports {field} {info[field]}, spec says {value}")
    if not math.isclose(info["scale"], want["scale"], rel_tol=1e-6):
        problems.append(f"reports scale {info['scale']}, spec says {want['scale']}")
    if not math.isclose(info["dropout"], p, rel_tol=1e-6, abs_tol=1e-9):
        problems.append(f"reports dropout {info['dropout']}, spec says {p}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--compile-only", default=None, help="(child) compile this pair's first spec")
    ap.add_argument("--target", default=None)
    args = ap.parse_args()
    lib = attnc_ctypes.Library()
    if args.compile_only:
        lib.compile_text(PAIRS[args.compile_only][0][0], args.target)
        return 0
    root = args.cache_dir or tempfile.mkdtemp(prefix="attnc-cache-identity-")
    rows, failed = [], 0
    for target in (None, "sm_80"):  # the device's own (sm_90a on Hopper), then the sm_80 kernels
        for name, (first, second) in PAIRS.items():
            for mode in ("same process", "two processes"):
                cache = os.path.join(root, f"{target or 'device'}-{name}-{mode.replace(' ', '-')}")
                os.makedirs(cache, exist_ok=True)
                os.environ["ATTNC_CACHE_DIR"] = cache
                if mode == "same process":
                    first_problems = check(lib.compile_text(first[0], target), first[1])
                else:
                    cmd = [sys.executable, __file__, "--compile-only", name]
                    if target:
                        cmd += ["--target", target]
                    subprocess.run(cmd, check=True, env=dict(os.environ))
                    first_problems = []
                problems = first_problems + check(lib.compile_text(second[0], target), second[1])
                entries = len(os.listdir(cache))
                failed += bool(problems)
                rows.append((target or "device", name, mode, entries,
                             "ok" if not problems else "FAIL: " + "; ".join(problems)))
                print(rows[-1], flush=True)
    print("\n| target | pair | mode | cache entries | result |\n|---|---|---|---:|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
