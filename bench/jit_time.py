"""Cold JIT compile time per spec: one attnc_compile_file_ex call (libattnc.so's C API, NVRTC
included) with a fresh, empty ATTNC_CACHE_DIR, each in a process of its own, timed inside the
process (interpreter start and libattnc's dlopen excluded; loading NVRTC, 13-20 ms warm on
the build machine, included, as in any process's first JIT), forward alone and forward with
backward. Needs no GPU (pass --target). With several --lib, each spec's runs alternate between
them (A, B, A, B, ...) so that the machine's load hits all alike. Prints a markdown table (the
fastest of the rounds), slowest spec first, then the machine (CPU model and count, load average),
the libnvrtc files the compiles loaded and how long loading them takes in a fresh process.
  python3 bench/jit_time.py [--lib .device/bundle/libattnc.so [--lib OTHER]] [--target sm_90a] \
      [--rounds 2] examples/*.yaml
"""
import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def one(lib, spec, target, backward):
    """Compiles once in this process; prints the seconds, or exits 1 with attnc's error."""
    cache = tempfile.mkdtemp(prefix="attnc-jit-time-")
    os.environ["ATTNC_CACHE_DIR"] = cache
    attnc = ctypes.CDLL(lib)
    attnc.attnc_version.restype = ctypes.c_char_p
    attnc.attnc_version()  # resolves the library before the clock starts
    kernel, error = ctypes.c_void_p(), ctypes.c_char_p()
    start = time.perf_counter()
    rc = attnc.attnc_compile_file_ex(spec.encode(), target.encode(), ctypes.c_uint32(1 if backward else 0),
                                     ctypes.byref(kernel), ctypes.byref(error))
    seconds = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    if rc != 0:
        sys.exit(f"{spec}: {error.value.decode() if error.value else 'error ' + str(rc)}")
    print(f"{seconds:.3f}\t{loaded_nvrtc()}")


def loaded_nvrtc():
    """The libnvrtc files this process mapped (Linux: libnvrtc and its builtins, joined by ':'),
    or '?'."""
    found = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith(("libnvrtc.so", "libnvrtc-builtins.so")):
                    path = os.path.realpath(path)
                    if path not in found:
                        found.append(path)
    except OSError:
        pass
    return ":".join(sorted(found)) or "?"


def load_only(files):
    """Loads the NVRTC files (as loaded_nvrtc names them) in this fresh process; prints the
    seconds: the share of a cold JIT that is loading NVRTC rather than compiling."""
    start = time.perf_counter()
    for path in files.split(":"):
        ctypes.CDLL(path)
    print(f"{time.perf_counter() - start:.3f}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--lib", action="append", help="a libattnc.so (repeat to compare builds); default "
                    "$ATTNC_LIB, else .device/bundle/libattnc.so")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--rounds", type=int, default=1, help="runs per spec and mode; the table has the fastest")
    ap.add_argument("--one", choices=["fwd", "bwd", "load"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    libs = args.lib or [os.environ.get("ATTNC_LIB", os.path.join(HERE, "..", ".device", "bundle", "libattnc.so"))]
    if args.one == "load":
        return load_only(args.specs[0])
    if args.one:
        return one(os.path.abspath(libs[0]), args.specs[0], args.target, args.one == "bwd")
    rows, nvrtcs = [], set()
    load_before = os.getloadavg()[0]
    for spec in args.specs:
        best = {}
        for _ in range(args.rounds):
            for lib in libs:
                for mode in ("fwd", "bwd"):
                    run = subprocess.run([sys.executable, __file__, "--one", mode, "--lib", lib,
                                          "--target", args.target, spec], capture_output=True, text=True)
                    if run.returncode != 0:
                        sys.exit(run.stderr.strip() or f"{spec}: exit {run.returncode}")
                    seconds, nvrtc = run.stdout.strip().split("\t")
                    nvrtcs.add(nvrtc)
                    key = (lib, mode)
                    best[key] = min(best.get(key, float("inf")), float(seconds))
        rows.append((os.path.splitext(os.path.basename(spec))[0], best))
    label = (lambda i: "") if len(libs) == 1 else (lambda i: f", {chr(ord('A') + i)}")
    header = "".join(f" forward{label(i)} (s) | forward + backward{label(i)} (s) |" for i in range(len(libs)))
    print(f"| spec ({args.target}, cold) |{header}")
    print("|---|" + "---:|---:|" * len(libs))
    for name, best in sorted(rows, key=lambda r: -r[1][(libs[-1], "bwd")]):
        cells = "".join(f" {best[(lib, 'fwd')]:.2f} | {best[(lib, 'bwd')]:.2f} |" for lib in libs)
        print(f"| {name} |{cells}")
    if len(libs) > 1:
        for i, lib in enumerate(libs):
            print(f"- {chr(ord('A') + i)}: {lib}")
    # Compile times differ between machines and between starts of one machine by more than
    # kernel changes move them (docs/perf/): say which machine and NVRTC these are.
    print(f"- machine: {cpu_model()}, {os.cpu_count()} CPUs; 1-minute load average {load_before:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")
    for files in sorted(nvrtcs):
        loads = []
        for _ in range(3):
            run = subprocess.run([sys.executable, __file__, "--one", "load", files], capture_output=True,
                                 text=True)
            if run.returncode == 0:
                loads.append(float(run.stdout.strip()))
        spread = f"{min(loads):.3f}-{max(loads):.3f} s" if loads else "failed"
        print(f"- NVRTC {files.replace(':', ' + ')}: loading it in a fresh process (part of every "
              f"time above) {spread} (3 runs)")

if __name__ == "__main__":
    main()
