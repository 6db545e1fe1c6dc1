"""The absolute and relative error of the device tanh forms of templates/attnc/common/expr.h
against float64 tanh, over every float in [-16, 16] (beyond, tanh is +-1 in float32). Each form's
device code is read from expr.h itself (its `#if defined(__CUDA_ARCH__)` branch) and run through
torch's jiterator, so the test measures what the kernels compile. Fails (exit 1) if an error
exceeds the bound docs/spec.md states for it.
  python3 test/gpu/tanh_error.py
"""
import os
import re
import sys

import torch

EXPR_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "templates", "attnc",
                      "common", "expr.h")
# expr.h's function -> where attnc uses it, and the bound docs/spec.md states
BOUNDS = {"fast_tanh": ("forward score hooks", 1e-5), "tanh": ("masks, backward score hooks", 2.5e-7)}


def device_code(name):
    """expr.h's `float name(float a)` as a jiterator function: its device branch."""
    with open(EXPR_H) as f:
        text = f.read()
    m = re.search(r"ATTNC_HD float " + name + r"\(float a\) \{\n#if defined\(__CUDA_ARCH__\)\n(.*?)\n#else",
                  text, re.S)
    if not m:
        sys.exit(f"tanh_error: no device branch of {name} in {EXPR_H}")
    return "template <typename T> T f(T a) {\n" + m.group(1) + "\n}"


def main():
    last = torch.tensor([16.0], dtype=torch.float32).view(torch.int32).item()
    chunk = 1 << 26
    failed = False
    print("| form (used in) | max abs error | at | max rel error (|x| >= 2^-10) | bound (abs) |")
    print("|---|---:|---:|---:|---:|")
    for name, (used, bound) in BOUNDS.items():
        fn = torch.cuda.jiterator._create_jit_fn(device_code(name))
        worst_abs, at, worst_rel = 0.0, 0.0, 0.0
        for start in range(0, last + 1, chunk):
            bits = torch.arange(start, min(start + chunk, last + 1), device="cuda", dtype=torch.int32)
            for x in (bits.view(torch.float32), -bits.view(torch.float32)):
                exact = torch.tanh(x.double())
                err = (fn(x).double() - exact).abs()
                i = int(err.argmax())
                if err[i].item() > worst_abs:
                    worst_abs, at = err[i].item(), x[i].item()
                big = x.abs() >= 2.0 ** -10
                if big.any():
                    worst_rel = max(worst_rel, (err[big] / exact[big].abs()).max().item())
        ok = worst_abs <= bound
        failed |= not ok
        print(f"| {name} ({used}) | {worst_abs:.3g} | {at:.6g} | {worst_rel:.3g} | {bound:g}{'' if ok else ' FAIL'} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
