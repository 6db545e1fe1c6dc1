"""Decode probes for tuning (device only, not a test): GB/s of the attnc decode launch against
the copy bandwidth for a split-count sweep at batch 1, and for paged caches with shuffled pages
against pages in order (block table 0, 1, 2, ...), so that what a paged row loses can be told
apart: the kernel's page lookups (both tables) or the memory system's scattered pages (shuffled
only). Prints one line a probe; reuses bench/bench_decode.py's caches and timing.
  python3 dev/decode_probe.py [--splits] [--paged]"""
import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_decode as bd  # noqa: E402

dx = bd.dx


def gbps(lib, kern, row, caches, num_splits=0):
    dev = torch.device("cuda")
    probe = caches[0].attnc_args(kern, row, dx.DECODE_ON)
    probe.num_splits = num_splits
    ws = torch.empty(max(16, dx.workspace_bytes(kern, probe)), dtype=torch.uint8, device=dev)
    args = []
    for c in caches:
        a = c.attnc_args(kern, row, dx.DECODE_ON, ws)
        a.num_splits = num_splits
        args.append(a)
    plan = dx.decode_plan(kern, args[0])
    c0 = caches[0]
    c0.o.fill_(float("nan"))
    dx.launch_ex(kern, args[0])
    torch.cuda.synchronize()
    k0, v0 = c0.sequence(row, 0)
    err = bd.relerr(c0.o[0], bd.reference_rows(c0.q[0], k0, v0, float(kern.info["scale"])))
    stream = torch.cuda.current_stream().cuda_stream
    fn = bd.cycle([lambda a=a: dx.launch_ex(kern, a, stream) for a in args])
    ms = bd.time_call(fn, False)
    return row.bytes() / 1e9 / (ms * 1e-3), plan, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", action="store_true")
    ap.add_argument("--paged", action="store_true")
    a = ap.parse_args()
    both = not (a.splits or a.paged)
    dev = torch.device("cuda")
    lib = bd.attnc_ctypes.Library(None)
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 0) or bd.L2_FALLBACK
    copy = bd.copy_bandwidth(dev)
    print(f"{props.name}: copy {copy:.0f} GB/s", flush=True)
    kernels = {}

    def kernel(hq, hkv):
        if (hq, hkv) not in kernels:
            kernels[(hq, hkv)] = lib.compile_text(bd.spec_text(hq, hkv))
            dx.compile_deferred(kernels[(hq, hkv)])
        return kernels[(hq, hkv)]

    def caches_of(row):
        n = bd.copies_for(row.kv_bytes(), l2)
        return [bd.Cache(row, dev, 1000 * i + 1) for i in range(n)]

    def line(name, rate, plan, err):
        print(f"{name:58s} {rate:6.0f} GB/s {100 * rate / copy:5.1f}% splits {plan['splits']:3d}"
              f" rowTiles {plan['row_tiles']} err {err:.1e}", flush=True)

    if a.splits or both:
        for hq, b, kv, q in [(32, 1, 32768, 1), (32, 1, 131072, 1), (32, 8, 32768, 1),
                             (64, 8, 32768, 8), (64, 1, 32768, 8)]:
            row = bd.Row(hq, 8, b, kv, q, "contiguous")
            caches = caches_of(row)
            kern = kernel(hq, 8)
            for s in [0, 1, 4, 8, 16, 29, 33, 48, 66, 99, 128]:
                if b > 1 and s not in (0, 1, 2, 4, 8):
                    continue
                try:
                    line(f"{row.name} splits={s or 'derived'}", *gbps(lib, kern, row, caches, s))
                except Exception as e:  # noqa: BLE001
                    print(f"{row.name} splits={s}: failed {str(e).splitlines()[0][:120]}")
            del caches
            torch.cuda.empty_cache()
    if a.paged or both:
        for hq, b, kv, q in [(32, 8, 32768, 1), (32, 64, 32768, 1), (64, 8, 32768, 8)]:
            contiguous = bd.Row(hq, 8, b, kv, q, "contiguous")
            caches = caches_of(contiguous)
            line(contiguous.name, *gbps(lib, kernel(hq, 8), contiguous, caches))
            del caches
            for page in (16, 256):
                row = bd.Row(hq, 8, b, kv, q, f"paged{page}")
                caches = caches_of(row)
                line(row.name + " shuffled", *gbps(lib, kernel(hq, 8), row, caches))
                for c in caches:  # pages in order: sequence i holds pages i * n .. i * n + n - 1
                    n = c.table.shape[1]
                    c.table.copy_(torch.arange(b * n, dtype=torch.int32, device=dev).view(b, n))
                line(row.name + " in order", *gbps(lib, kernel(hq, 8), row, caches))
                del caches
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
