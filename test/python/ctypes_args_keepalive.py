"""test/gpu/attnc_ctypes.py's argument structs keep alive every tensor they point at: a launch from
a struct whose caller dropped its tensors reads memory the caching allocator has handed to another
tensor (dev/bench/ab_mix.py once timed a document mask over overwritten ids that way). No torch or
GPU: stand-in tensors with the few methods the helper calls. Exit status 0 when the property
holds."""
import gc
import os
import sys
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import attnc_ctypes  # noqa: E402


class FakeTensor:
    """What attnc_ctypes reads of a torch tensor: an address, strides, shape, element size."""
    _next = 0x10000

    def __init__(self, *shape):
        self.shape = shape
        FakeTensor._next += 0x10000
        self._ptr = FakeTensor._next

    def data_ptr(self):
        return self._ptr

    def dim(self):
        return len(self.shape)

    def stride(self, i=None):
        strides, step = [], 1
        for n in reversed(self.shape):
            strides.insert(0, step)
            step *= n
        return strides if i is None else strides[i]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def element_size(self):
        return 1


def made(build):
    """Builds args from fresh tensors that only `build` holds; returns (args, weakrefs to them)."""
    refs = []

    def tensor(*shape):
        t = FakeTensor(*shape)
        refs.append(weakref.ref(t))
        return t

    return build(tensor), refs


def check(name, build):
    args, refs = made(build)
    gc.collect()
    dead = sum(r() is None for r in refs)
    if dead:
        print(f"FAIL {name}: {dead} of {len(refs)} tensors freed while the struct is alive")
        return False
    del args
    gc.collect()
    alive = sum(r() is not None for r in refs)
    if alive:
        print(f"FAIL {name}: {alive} of {len(refs)} tensors outlive the struct")
        return False
    print(f"ok {name}: {len(refs)} tensors held by the struct, freed with it")
    return True


def main():
    kernel = attnc_ctypes.Kernel.__new__(attnc_ctypes.Kernel)  # make_*args use no library call
    kernel.library, kernel.handle = None, None
    shape = (2, 4, 64, 32)  # b, h, s, d (bhsd)

    def forward(tensor):
        return kernel.make_args(tensor(*shape), tensor(*shape), tensor(*shape), tensor(*shape),
                                tensor(2, 4, 64), [(tensor(2, 64), "b,pos")], layout="bhsd")

    def backward(tensor):
        return kernel.make_backward_args(
            *(tensor(*shape) for _ in range(5)), tensor(2, 4, 64),
            *(tensor(*shape) for _ in range(3)), [(tensor(2, 64), "b,pos")], layout="bhsd",
            workspace=tensor(4096))

    ok = check("ForwardArgs", forward) & check("BackwardArgs", backward)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
