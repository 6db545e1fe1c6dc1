"""Cold JIT compile time per spec: one attnc_compile_file_ex call (libattnc.so's C API, NVRTC
included) with a fresh, empty ATTNC_CACHE_DIR, each in a process of its own, timed inside the
process (interpreter start, dlopen and loading NVRTC excluded), forward alone and forward with
backward. Needs no GPU (pass --target). Prints a markdown table, slowest first.
  python3 bench/jit_time.py [--lib .device/bundle/libattnc.so] [--target sm_90a] [--rounds 2] \
      examples/*.yaml
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def one(lib, spec, target, backward):
    """Compiles once in this process; prints the seconds, or exits 1 with attnc's error."""
    os.environ["ATTNC_CACHE_DIR"] = tempfile.mkdtemp(prefix="attnc-jit-time-")
    attnc = ctypes.CDLL(lib)
    attnc.attnc_version.restype = ctypes.c_char_p
    attnc.attnc_version()  # resolves the library before the clock starts
    kernel, error = ctypes.c_void_p(), ctypes.c_char_p()
    start = time.perf_counter()
    rc = attnc.attnc_compile_file_ex(spec.encode(), target.encode(), ctypes.c_uint32(1 if backward else 0),
                                     ctypes.byref(kernel), ctypes.byref(error))
    seconds = time.perf_counter() - start
    if rc != 0:
        sys.exit(f"{spec}: {error.value.decode() if error.value else 'error ' + str(rc)}")
    print(f"{seconds:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--lib", default=os.environ.get("ATTNC_LIB", os.path.join(HERE, "..", ".device", "bundle", "libattnc.so")))
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--rounds", type=int, default=1, help="runs per spec and mode; the table has the fastest")
    ap.add_argument("--one", choices=["fwd", "bwd"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one(os.path.abspath(args.lib), args.specs[0], args.target, args.one == "bwd")
    rows = []
    for spec in args.specs:
        best = {}
        for _ in range(args.rounds):
            for mode in ("fwd", "bwd"):
                run = subprocess.run([sys.executable, __file__, "--one", mode, "--lib", args.lib,
                                      "--target", args.target, spec], capture_output=True, text=True)
                if run.returncode != 0:
                    sys.exit(run.stderr.strip() or f"{spec}: exit {run.returncode}")
                best[mode] = min(best.get(mode, float("inf")), float(run.stdout.strip()))
        rows.append((os.path.splitext(os.path.basename(spec))[0], best["fwd"], best["bwd"]))
    print(f"| spec ({args.target}, cold) | forward (s) | forward + backward (s) |")
    print("|---|---:|---:|")
    for name, fwd, bwd in sorted(rows, key=lambda r: -r[2]):
        print(f"| {name} | {fwd:.2f} | {bwd:.2f} |")


if __name__ == "__main__":
    main()
