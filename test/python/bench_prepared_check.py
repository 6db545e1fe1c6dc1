"""bench/bench_forward.py's prepared_impl times a launch with prepared inputs only when it writes
what the plain call writes into the output, which it poisons in between: a prepared launch that
writes other values, or nothing at all, is refused with a note. No torch or GPU: a stand-in torch
module with what the bench module touches at import and in prepared_impl. Exit status 0 when the
property holds."""
import os
import sys
import types

calls = []


class FakeOut:
    """An output buffer: clone() and fill_() as torch's."""

    def __init__(self, values):
        self.values = list(values)

    def clone(self):
        return FakeOut(self.values)

    def fill_(self, v):
        self.values = [v] * len(self.values)
        return self


def stub_torch():
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16, torch.float32, torch.float64 = "bf16", "fp16", "fp32", "fp64"
    torch.cuda = types.SimpleNamespace(synchronize=lambda: calls.append("sync"))
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(CUDNN_ATTENTION=1, FLASH_ATTENTION=2,
                                                 EFFICIENT_ATTENTION=3, MATH=4)
    attention.sdpa_kernel = lambda *a, **k: None
    torch.nn, nn.functional, nn.attention = nn, functional, attention
    sys.modules.update({"torch": torch, "torch.nn": nn, "torch.nn.functional": functional,
                        "torch.nn.attention": attention})


stub_torch()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_forward  # noqa: E402


def same(a, b):
    return a.values == b.values


def run(prepared_writes):
    """prepared_impl over a plain call writing [1, 2, 3] and a prepared one writing
    `prepared_writes` (None: nothing)."""
    out = FakeOut([7, 7, 7])
    res = {"note": {}}

    def plain():
        out.values = [1, 2, 3]

    def prepared():
        if prepared_writes is not None:
            out.values = list(prepared_writes)

    return bench_forward.prepared_impl(res, plain, prepared, out, same), res, prepared


failures = []
entry, res, prepared = run([1, 2, 3])
if entry != ("attnc-prepared", prepared) or res["note"]:
    failures.append(f"a prepared launch writing the plain output was not timed: {entry}, {res}")
for label, writes in (("other values", [1, 2, 4]), ("nothing", None)):
    entry, res, _ = run(writes)
    if entry is not None or "WRONG RESULT" not in res["note"].get("attnc-prepared", ""):
        failures.append(f"a prepared launch writing {label} was timed: {entry}, {res}")
for f in failures:
    print("FAIL:", f)
print(f"bench prepared check: {3 - len(failures)}/3 passed")
sys.exit(1 if failures else 0)
