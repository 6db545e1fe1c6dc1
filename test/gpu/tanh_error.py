"""The absolute and relative error of the device tanh forms of templates/attnc/common/expr.h
against float64 tanh, over every float in [-16, 16] (beyond, tanh is +-1 in float32). Fails
(exit 1) if an error exceeds the bound docs/spec.md states for it.
  python3 test/gpu/tanh_error.py
"""
import sys

import torch

FORMS = {
    # ex::fast_tanh: score hooks
    "fast_tanh": ('template <typename T> T f(T a) { float t; '
                  'asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(a)); return t; }', 1e-5),
    # ex::tanh: masks
    "tanh": ('template <typename T> T f(T a) { float e, r; '
             'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a * 2.8853900817779268f)); '
             'asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f)); '
             'return 1.0f - 2.0f * r; }', 2.5e-7),
}


def main():
    last = torch.tensor([16.0], dtype=torch.float32).view(torch.int32).item()
    chunk = 1 << 26
    failed = False
    print("| form | max abs error | at | max rel error (|x| >= 2^-10) | bound (abs) |")
    print("|---|---:|---:|---:|---:|")
    for name, (code, bound) in FORMS.items():
        fn = torch.cuda.jiterator._create_jit_fn(code)
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
        print(f"| {name} | {worst_abs:.3g} | {at:.6g} | {worst_rel:.3g} | {bound:g}{'' if ok else ' FAIL'} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
