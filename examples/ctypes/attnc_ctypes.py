"""Calls libattnc.so (the C API, include/attnc/attnc_c.h) from Python with ctypes only.

Compiles a spec, launches it on device memory allocated through libcuda, and checks that with
V = 1.0 everywhere the output is 1.0 (softmax rows sum to one).
    python3 attnc_ctypes.py path/to/libattnc.so spec.yaml [target]
"""
import ctypes as C
import struct
import sys


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("stride_b", C.c_int64), ("stride_h", C.c_int64),
                ("stride_s", C.c_int64)]


class Input(C.Structure):
    _fields_ = [("data", C.c_void_p), ("stride_b", C.c_int64), ("stride_h", C.c_int64),
                ("stride_pos", C.c_int64)]


class ForwardArgs(C.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", C.POINTER(C.c_float)),
                ("batch", C.c_int64), ("q_len", C.c_int64), ("kv_len", C.c_int64),
                ("inputs", C.POINTER(Input)), ("num_inputs", C.c_int64),
                ("dropout_seed", C.c_uint64), ("dropout_offset", C.c_uint64)]


class Info(C.Structure):
    _fields_ = [("name", C.c_char_p), ("entry", C.c_char_p), ("target", C.c_char_p),
                ("dtype", C.c_char_p), ("threads", C.c_int32), ("head_dim", C.c_int32),
                ("head_dim_v", C.c_int32), ("heads_q", C.c_int32), ("heads_kv", C.c_int32),
                ("num_inputs", C.c_int32), ("smem_bytes", C.c_int64), ("scale", C.c_float),
                ("dropout", C.c_float), ("has_backward", C.c_int32),
                ("dropout_rounds", C.c_int32)]  # all of attnc_info: the library writes all of it


def load(path):
    lib = C.CDLL(path)
    lib.attnc_version.restype = C.c_char_p
    lib.attnc_compile_file.argtypes = [C.c_char_p, C.c_char_p, C.POINTER(C.c_void_p),
                                       C.POINTER(C.c_void_p)]
    lib.attnc_kernel_forward.argtypes = [C.c_void_p, C.POINTER(ForwardArgs), C.c_void_p,
                                         C.POINTER(C.c_void_p)]
    lib.attnc_kernel_validate.argtypes = [C.c_void_p, C.POINTER(ForwardArgs), C.POINTER(C.c_void_p)]
    lib.attnc_kernel_info.argtypes = [C.c_void_p, C.POINTER(Info)]
    lib.attnc_kernel_free.argtypes = [C.c_void_p]
    lib.attnc_free_string.argtypes = [C.c_void_p]
    return lib


def check(lib, rc, error):
    if rc != 0:
        message = C.cast(error, C.c_char_p).value.decode()
        lib.attnc_free_string(error)
        raise RuntimeError(message)


def main():
    lib = load(sys.argv[1])
    target = sys.argv[3].encode() if len(sys.argv) > 3 else None
    print("attnc", lib.attnc_version().decode())
    kernel, error = C.c_void_p(), C.c_void_p()
    check(lib, lib.attnc_compile_file(sys.argv[2].encode(), target, C.byref(kernel), C.byref(error)), error)
    info = Info()
    lib.attnc_kernel_info(kernel, C.byref(info))
    print(f"{info.name.decode()} ({info.target.decode()}): entry {info.entry.decode()}, "
          f"{info.threads} threads, {info.smem_bytes} B smem, heads {info.heads_q}/{info.heads_kv}")

    cuda = C.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    dev, ctx = C.c_int(), C.c_void_p()
    cuda.cuDeviceGet(C.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(C.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)

    batch, n, h, d = 2, 300, info.heads_q, info.head_dim
    count = batch * h * n * d

    def alloc(nbytes, fill=None):
        ptr = C.c_uint64()
        assert cuda.cuMemAlloc_v2(C.byref(ptr), C.c_size_t(nbytes)) == 0
        if fill is not None:
            cuda.cuMemcpyHtoD_v2(ptr, C.c_char_p(fill), C.c_size_t(nbytes))
        return ptr.value

    one = struct.pack("<H", 0x3F80 if info.dtype == b"bf16" else 0x3C00)
    q, k = alloc(count * 2, b"\0" * count * 2), alloc(count * 2, b"\0" * count * 2)
    v, o = alloc(count * 2, one * count), alloc(count * 2)
    bhsd = (h * n * d, n * d, d)
    args = ForwardArgs(Tensor(q, *bhsd), Tensor(k, *bhsd), Tensor(v, *bhsd), Tensor(o, *bhsd), None,
                       batch, n, n, None, 0, 0, 0)
    bad = ForwardArgs.from_buffer_copy(args)
    bad.q.stride_s = 100
    rc = lib.attnc_kernel_validate(kernel, C.byref(bad), C.byref(error))
    print("bad stride ->", C.cast(error, C.c_char_p).value.decode())
    lib.attnc_free_string(error)
    check(lib, lib.attnc_kernel_forward(kernel, C.byref(args), None, C.byref(error)), error)
    assert cuda.cuCtxSynchronize() == 0
    out = C.create_string_buffer(count * 2)
    cuda.cuMemcpyDtoH_v2(out, C.c_uint64(o), C.c_size_t(count * 2))
    ok = out.raw == one * count
    print("O == 1.0 everywhere:", ok)
    lib.attnc_kernel_free(kernel)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
