"""Python bindings of attnc's C API (include/attnc/attnc_c.h) with ctypes, for the GPU tests and
the benchmarks: compile a spec (file or YAML text), read the kernel's info, and launch the forward
on torch tensors (pointers and strides; BSHD and BHSD alike). No torch import at module level, so
the argument-building part also works without a GPU."""
import ctypes
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))

sys.path.insert(0, os.path.join(_ROOT, "python"))
# The C API's structs and signatures live in the attnc package; these names stay for the tests.
from attnc._capi import (  # noqa: E402,F401
    ATTNC_COMPILE_BACKWARD, ATTNC_OK, BackwardArgs, ForwardArgs, Info, Input, Tensor, bind)
from attnc._errors import AttncError  # noqa: E402


def default_library_path():
    """$ATTNC_LIB, else the device bundle, else a build tree next to the sources."""
    candidates = [os.environ.get("ATTNC_LIB"),
                  os.path.join(_ROOT, ".device", "bundle", "libattnc.so"),
                  os.path.join(_ROOT, "build", "lib", "libattnc.so"),
                  os.path.join(_ROOT, "build", "runtime", "libattnc.so")]
    for path in candidates:
        if path and os.path.exists(path):
            return path
    raise AttncError("libattnc.so not found: set ATTNC_LIB or run dev/device-bundle.sh")


class Library:
    def __init__(self, path=None):
        self.path = path or default_library_path()
        # optional: a library built before a function existed still loads (A/B runs).
        lib = bind(ctypes.CDLL(self.path), optional=True)
        self.lib = lib

    def version(self):
        return self.lib.attnc_version().decode()

    def _take_error(self, ptr):
        if not ptr.value:
            return "(no message)"
        text = ctypes.string_at(ptr.value).decode(errors="replace")
        self.lib.attnc_free_string(ptr)
        return text

    def _compile(self, fn, arg, target, flags=0):
        handle = ctypes.c_void_p()
        error = ctypes.c_void_p()
        rc = fn(arg.encode(), target.encode() if target else None, flags, ctypes.byref(handle),
                ctypes.byref(error))
        if rc != ATTNC_OK:
            raise AttncError(self._take_error(error))
        return Kernel(self, handle)

    def compile_file(self, path, target=None, backward=False):
        """backward=True also compiles the backward kernels (Kernel.backward)."""
        return self._compile(self.lib.attnc_compile_file_ex, path, target,
                             ATTNC_COMPILE_BACKWARD if backward else 0)

    def compile_text(self, yaml, target=None, backward=False):
        return self._compile(self.lib.attnc_compile_text_ex, yaml, target,
                             ATTNC_COMPILE_BACKWARD if backward else 0)


def _tensor(t, layout):
    """(pointer, stride_b, stride_h, stride_s) of a 4-d torch tensor in `layout` ('bshd' | 'bhsd')."""
    if t is None:
        return Tensor(None, 0, 0, 0)
    sb, s1, s2, _ = t.stride()
    sh, ss = (s2, s1) if layout == "bshd" else (s1, s2)
    return Tensor(t.data_ptr(), sb, sh, ss)


def input_strides(t, dims):
    """An Input for declared input tensor `t` whose dimensions are `dims` (e.g. "b,pos")."""
    names = [d.strip() for d in dims.split(",")] if isinstance(dims, str) else list(dims)
    assert len(names) == t.dim(), f"input has {t.dim()} dims, expected {names}"
    strides = {n: t.stride(i) for i, n in enumerate(names)}
    return Input(t.data_ptr(), strides.get("b", 0), strides.get("h", 0), strides.get("pos", 0))


def _fill_shared(args, tensors, lse, inputs, seed, offset, batch, q_len, kv_len):
    """The fields ForwardArgs and BackwardArgs share: LSE, sizes, declared inputs (a list of
    (tensor, dims) or Input structs) and the dropout stream. The struct holds only addresses, so
    it keeps every tensor it points at alive (`tensors`, LSE, the inputs' tensors and their
    array): a launch from a struct whose caller dropped its tensors would read freed memory that
    the caching allocator hands to the next tensor (dev/bench/ab_mix.py once timed a document mask
    over ids overwritten that way)."""
    args.lse = lse.data_ptr() if lse is not None else None
    args.batch, args.q_len, args.kv_len = batch, q_len, kv_len
    structs = [x if isinstance(x, Input) else input_strides(*x) for x in inputs]
    array = (Input * max(1, len(structs)))(*structs)
    args.inputs = ctypes.cast(array, ctypes.POINTER(Input))
    args.num_inputs = len(structs)
    args._keepalive = (array, tuple(tensors), lse,
                       tuple(x[0] for x in inputs if not isinstance(x, Input)))
    args.dropout_seed = seed
    args.dropout_offset = offset


class Prepared:
    """An attnc_prepared (attnc_kernel_prepare_inputs); keeps the arguments it was made from (and
    so their tensors) alive, and frees the device memory when collected."""

    def __init__(self, library, handle, args):
        self.library, self.handle, self._args = library, handle, args

    def __del__(self):
        lib = getattr(self.library, "lib", None)
        if lib is not None and self.handle:
            lib.attnc_prepared_free(self.handle)
            self.handle = None


class Kernel:
    def __init__(self, library, handle):
        self.library = library
        self.handle = handle
        info = Info()
        if library.lib.attnc_kernel_info(handle, ctypes.byref(info)) != ATTNC_OK:
            raise AttncError("attnc_kernel_info failed")
        self.info = {f: getattr(info, f) for f, _ in Info._fields_}
        for key in ("name", "entry", "target", "dtype"):
            self.info[key] = self.info[key].decode()
        self.input_names = []
        while True:
            name = library.lib.attnc_kernel_input_name(handle, len(self.input_names))
            if name is None:
                break
            self.input_names.append(name.decode())

    def __del__(self):
        lib = getattr(self.library, "lib", None)
        if lib is not None and self.handle:
            lib.attnc_kernel_free(self.handle)
            self.handle = None

    def make_args(self, q, k, v, o, lse=None, inputs=(), seed=0, offset=0, layout="bshd",
                  batch=None, q_len=None, kv_len=None):
        """The C struct for a launch. q, k, v, o: 4-d tensors in `layout`; inputs: a list of
        (tensor, dims) in the spec's order, or ready Input structs."""
        s_axis = 1 if layout == "bshd" else 2
        args = ForwardArgs()
        args.q, args.k, args.v, args.o = (_tensor(t, layout) for t in (q, k, v, o))
        _fill_shared(args, (q, k, v, o), lse, inputs, seed, offset,
                     batch if batch is not None else (q if q is not None else o).shape[0],
                     q_len if q_len is not None else (q if q is not None else o).shape[s_axis],
                     kv_len if kv_len is not None else (k if k is not None else v).shape[s_axis])
        return args

    def _call(self, fn, args, stream, before=(), after=()):
        """The library's fn(kernel, &args, *before, stream, *after, &error) on `stream` (None:
        torch's current one); raises AttncError with the library's message."""
        if stream is None:
            import torch
            stream = torch.cuda.current_stream().cuda_stream
        error = ctypes.c_void_p()
        rc = fn(self.handle, ctypes.byref(args), *before, ctypes.c_void_p(stream), *after,
                ctypes.byref(error))
        if rc != ATTNC_OK:
            raise AttncError(self.library._take_error(error))

    def launch(self, args, stream=None):
        """Launches with a ready ForwardArgs; raises AttncError with the library's message."""
        self._call(self.library.lib.attnc_kernel_forward, args, stream)

    def prepare_inputs(self, args, stream=None):
        """attnc_kernel_prepare_inputs: a Prepared for these arguments' kernel, lengths and inputs
        (freed with the object); raises AttncError with the library's message."""
        out = ctypes.c_void_p()
        self._call(self.library.lib.attnc_kernel_prepare_inputs, args, stream,
                   after=(ctypes.byref(out),))
        return Prepared(self.library, out, args)

    def launch_prepared(self, args, prepared, stream=None):
        """attnc_kernel_forward_prepared: launch with a ready ForwardArgs and a Prepared."""
        self._call(self.library.lib.attnc_kernel_forward_prepared, args, stream,
                   before=(prepared.handle if prepared is not None else None,))

    def validate(self, args):
        error = ctypes.c_void_p()
        rc = self.library.lib.attnc_kernel_validate(self.handle, ctypes.byref(args), ctypes.byref(error))
        return None if rc == ATTNC_OK else self.library._take_error(error)

    def forward(self, q, k, v, o, lse=None, inputs=(), seed=0, offset=0, layout="bshd", stream=None):
        args = self.make_args(q, k, v, o, lse, inputs, seed, offset, layout)
        self.launch(args, stream)
        return args

    # ---- backward ----

    def backward_workspace_bytes(self, batch, q_len, deterministic=False):
        return self.library.lib.attnc_kernel_backward_workspace_bytes(self.handle, batch, q_len,
                                                                      int(bool(deterministic)))

    def make_backward_args(self, q, k, v, o, d_o, lse, dq, dk, dv, inputs=(), seed=0, offset=0,
                           layout="bshd", deterministic=False, workspace=None, batch=None,
                           q_len=None, kv_len=None):
        """The C struct for a backward launch: q, k, v, o (the forward's output), d_o and the
        gradients dq, dk, dv (written) as 4-d tensors in `layout`; lse the forward's [b, h, q_len]
        float32 LSE (between d_o and the gradients); inputs as in make_args; workspace None (the kernel's own) or a CUDA tensor of
        at least backward_workspace_bytes(...) bytes."""
        s_axis = 1 if layout == "bshd" else 2
        args = BackwardArgs()
        (args.q, args.k, args.v, args.o, args.d_o, args.dq, args.dk, args.dv) = (
            _tensor(t, layout) for t in (q, k, v, o, d_o, dq, dk, dv))
        _fill_shared(args, (q, k, v, o, d_o, dq, dk, dv), lse, inputs, seed, offset,
                     batch if batch is not None else (q if q is not None else dq).shape[0],
                     q_len if q_len is not None else (q if q is not None else dq).shape[s_axis],
                     kv_len if kv_len is not None else (k if k is not None else dk).shape[s_axis])
        args.deterministic = int(bool(deterministic))
        if workspace is not None:
            args.workspace = workspace.data_ptr()
            args.workspace_bytes = workspace.numel() * workspace.element_size()
            args._workspace = workspace  # alive as long as the struct (see _fill_shared)
        return args

    def launch_backward(self, args, stream=None):
        """Launches with a ready BackwardArgs; raises AttncError with the library's message."""
        self._call(self.library.lib.attnc_kernel_backward, args, stream)

    def launch_backward_prepared(self, args, prepared, stream=None):
        """attnc_kernel_backward_prepared: launch with a ready BackwardArgs and a Prepared (made by
        prepare_inputs from the forward's arguments)."""
        self._call(self.library.lib.attnc_kernel_backward_prepared, args, stream,
                   before=(prepared.handle if prepared is not None else None,))

    def validate_backward(self, args):
        error = ctypes.c_void_p()
        rc = self.library.lib.attnc_kernel_backward_validate(self.handle, ctypes.byref(args),
                                                             ctypes.byref(error))
        return None if rc == ATTNC_OK else self.library._take_error(error)

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv, inputs=(), seed=0, offset=0,
                 layout="bshd", deterministic=False, workspace=None, stream=None):
        args = self.make_backward_args(q, k, v, o, d_o, lse, dq, dk, dv, inputs, seed, offset,
                                       layout, deterministic, workspace)
        self.launch_backward(args, stream)
        return args
