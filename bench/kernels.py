"""Where one attnc call's time goes: each kernel's GPU time and the call's span (first kernel's start
to last kernel's end), from torch.profiler's CUDA trace, for bench rows (bench_forward.py's names),
forward and backward. The span minus the kernels' sum is the launch gaps between them.

  python3 bench/kernels.py [--lib L] [--calls 20] [--backward [--deterministic]] --only ROW ...
"""
import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_backward as bwd  # noqa: E402
import bench_forward as fwd  # noqa: E402


def setup(lib, row, backward, deterministic=False):
    dev = torch.device("cuda")
    B, H, N = row.b, row.hq, row.n
    q, k, v, do, doc = bwd.row_tensors(row, dev)  # the backward bench's documents (equal lengths)
    inputs = [(doc, "pos")] if doc is not None else []
    kern = lib.compile_text(fwd.spec_of(row), backward=backward)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    if not backward:
        args = kern.make_args(q, k, v, o, lse, inputs, seed=42, offset=0, layout="bhsd")
        return lambda: kern.launch(args, stream)  # (args keeps its tensors alive)
    kern.forward(q, k, v, o, lse, inputs, seed=42, offset=0, layout="bhsd")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    workspace = torch.empty(kern.backward_workspace_bytes(B, N, deterministic), device=dev, dtype=torch.uint8)
    args = kern.make_backward_args(q, k, v, o, do, lse, dq, dk, dv, inputs, 42, 0, "bhsd", deterministic,
                                   workspace)
    return lambda: kern.launch_backward(args, stream)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--deterministic", action="store_true",
                    help="the backward's deterministic dQ (dK/dV kernel without dQ, then a dQ kernel)")
    ap.add_argument("--only", action="append", required=True)
    args = ap.parse_args()
    lib = fwd.attnc_ctypes.Library(args.lib)
    for row in fwd.rows(False):
        if not fwd.selected(row, args.only):
            continue
        fn = setup(lib, row, args.backward, args.deterministic)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        spans = []
        per_kernel = collections.defaultdict(list)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                fn()
                torch.cuda.synchronize()
        events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        # Every call launches the same kernels in the same order: a call starts at each launch of
        # the first call's first kernel.
        calls, current = [], []
        for e in events:
            if current and e.name == events[0].name:
                calls.append(current)
                current = []
            current.append(e)
        if current:
            calls.append(current)
        for call in calls:
            spans.append(call[-1].time_range.end - call[0].time_range.start)
            for e in call:
                per_kernel[e.name].append(e.time_range.end - e.time_range.start)
        spans.sort()
        span = spans[len(spans) // 2]
        total = 0.0
        print(f"\n{row.name} ({'deterministic backward' if args.deterministic else 'backward' if args.backward else 'forward'}), {len(calls)} calls, "
              f"median span {span:.1f} us")
        for name, ts in per_kernel.items():
            ts.sort()
            med = ts[len(ts) // 2]
            total += med * len(ts) / len(calls)
            short = name if len(name) < 70 else name[:67] + "..."
            print(f"  {med:9.1f} us  x{len(ts) / len(calls):.0f}  {short}")
        print(f"  kernels {total:.1f} us, gaps {span - total:.1f} us")
        del fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
