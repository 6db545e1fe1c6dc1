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
    ATTNC_COMPILE_BACKWARD, ATTNC_DECODE_AUTO, ATTNC_DECODE_OFF, ATTNC_DECODE_ON, ATTNC_OK,
    BackwardArgs, BackwardArgsEx, DecodePlan, ForwardArgs, ForwardArgsEx, Info, Input, SeqLayout,
    Tensor, bind)
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


def _rows_tensor(t, layout):
    """A Tensor of a 4-d tensor in `layout`, or of a 3-d packed one [rows, heads, dim] (varlen:
    stride_b is not used) or of a 4-d paged pool [pages, page_size, heads, dim] (bshd: stride_b
    is the page stride, which the layout's k/v_stride_page gives)."""
    if t is not None and t.dim() == 3:
        return Tensor(t.data_ptr(), 0, t.stride(1), t.stride(0))
    return _tensor(t, layout)


def _address(x):
    """A device array's address: None, an int, or a tensor."""
    if x is None or isinstance(x, int):
        return x
    return x.data_ptr()


def _host_int32(values):
    """A host copy as a ctypes int32 array (None: not given): a sequence of ints or a tensor."""
    if values is None:
        return None
    if hasattr(values, "tolist"):
        values = values.reshape(-1).tolist()
    values = [int(x) for x in values]
    return (ctypes.c_int32 * max(1, len(values)))(*values)


_DECODE = {"auto": ATTNC_DECODE_AUTO, "off": ATTNC_DECODE_OFF, "on": ATTNC_DECODE_ON}


def make_seq_layout(cu_seqlens_q=None, cu_seqlens_kv=None, total_q=0, total_kv=0,
                    block_table=None, seq_lens_kv=None, page_size=0, num_pages=0,
                    k_stride_page=0, v_stride_page=0, block_table_stride=None, max_pages=None,
                    host_cu_seqlens_q=None, host_cu_seqlens_kv=None, host_block_table=None,
                    host_seq_lens_kv=None):
    """(layout, keepalive): an attnc_seq_layout of device arrays as tensors or addresses and host
    copies as sequences of ints or CPU tensors (checked before launch), or None for layout where
    no field is set (contiguous Q, K, V); keepalive holds what it points at. A block table tensor
    [batch, max_pages] gives block_table_stride and max_pages unless they are given."""
    if block_table is not None and not isinstance(block_table, int) and block_table.dim() == 2:
        block_table_stride = (block_table.stride(0) if block_table_stride is None
                              else block_table_stride)
        max_pages = block_table.shape[1] if max_pages is None else max_pages
    hosts = [_host_int32(h) for h in (host_cu_seqlens_q, host_cu_seqlens_kv, host_block_table,
                                     host_seq_lens_kv)]
    host = [ctypes.cast(h, ctypes.POINTER(ctypes.c_int32)) if h is not None else None
            for h in hosts]
    layout = SeqLayout(
        struct_size=ctypes.sizeof(SeqLayout), cu_seqlens_q=_address(cu_seqlens_q),
        cu_seqlens_kv=_address(cu_seqlens_kv), total_q=total_q, total_kv=total_kv,
        block_table=_address(block_table), seq_lens_kv=_address(seq_lens_kv),
        block_table_stride=block_table_stride or 0, max_pages=max_pages or 0,
        page_size=page_size, num_pages=num_pages, k_stride_page=k_stride_page,
        v_stride_page=v_stride_page, host_cu_seqlens_q=host[0], host_cu_seqlens_kv=host[1],
        host_block_table=host[2], host_seq_lens_kv=host[3])
    given = any(getattr(layout, name) for name, _ in SeqLayout._fields_[2:])
    keepalive = (layout, hosts, cu_seqlens_q, cu_seqlens_kv, block_table, seq_lens_kv)
    return (layout if given else None), keepalive


def make_args_ex(base, decode="auto", num_splits=0, workspace=None, prepared=None, **layout):
    """An attnc_forward_args_ex over a ready ForwardArgs `base`: `layout` make_seq_layout's
    keywords; decode "auto" | "off" | "on" (or 0, 1, 2); workspace a CUDA tensor, or (address,
    bytes). The struct keeps everything it points at alive (see _fill_shared)."""
    ex = ForwardArgsEx()
    ex.struct_size = ctypes.sizeof(ForwardArgsEx)
    ex.base = base
    ex.decode = _DECODE[decode] if isinstance(decode, str) else int(decode)
    ex.num_splits = num_splits
    if workspace is not None:
        if isinstance(workspace, tuple):
            ex.workspace, ex.workspace_bytes = workspace
        else:
            ex.workspace = workspace.data_ptr()
            ex.workspace_bytes = workspace.numel() * workspace.element_size()
    ex.prepared = prepared.handle if prepared is not None else None
    seq_layout, keepalive = make_seq_layout(**layout)
    ex.layout = ctypes.pointer(seq_layout) if seq_layout is not None else None
    ex._keepalive = (getattr(base, "_keepalive", None), keepalive, workspace, prepared)
    return ex


def make_backward_args_ex(base, **layout):
    """An attnc_backward_args_ex over a ready BackwardArgs `base`: `layout` make_seq_layout's
    keywords (the library accepts only the varlen ones, with their host copies). Keeps what it
    points at alive."""
    ex = BackwardArgsEx()
    ex.struct_size = ctypes.sizeof(BackwardArgsEx)
    ex.base = base
    seq_layout, keepalive = make_seq_layout(**layout)
    ex.layout = ctypes.pointer(seq_layout) if seq_layout is not None else None
    ex._keepalive = (getattr(base, "_keepalive", None), getattr(base, "_workspace", None),
                     keepalive)
    return ex


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

    # ---- varlen, paged K/V and decode (attnc_forward_args_ex) ----

    def validate_ex(self, ex):
        """attnc_kernel_validate_ex on a ForwardArgsEx (make_args_ex): None or the message."""
        error = ctypes.c_void_p()
        rc = self.library.lib.attnc_kernel_validate_ex(self.handle, ctypes.byref(ex),
                                                       ctypes.byref(error))
        return None if rc == ATTNC_OK else self.library._take_error(error)

    def launch_ex(self, ex, stream=None):
        """attnc_kernel_forward_ex with a ready ForwardArgsEx; raises AttncError."""
        self._call(self.library.lib.attnc_kernel_forward_ex, ex, stream)

    def decode_plan(self, ex, num_sms=0):
        """attnc_kernel_decode_plan: a dict of DecodePlan's fields for a device of num_sms SMs
        (0: the current device's); raises AttncError with the library's message."""
        plan = DecodePlan()
        error = ctypes.c_void_p()
        rc = self.library.lib.attnc_kernel_decode_plan(self.handle, ctypes.byref(ex), num_sms,
                                                       ctypes.byref(plan), ctypes.byref(error))
        if rc != ATTNC_OK:
            raise AttncError(self.library._take_error(error))
        return {f: getattr(plan, f) for f, _ in DecodePlan._fields_}

    def forward_workspace_bytes(self, ex):
        """Bytes the workspace of a launch with `ex` needs (-1: arguments refused)."""
        return self.library.lib.attnc_kernel_forward_workspace_bytes(self.handle,
                                                                     ctypes.byref(ex))

    def forward_ex(self, q, k, v, o, lse=None, inputs=(), seed=0, offset=0, layout="bshd",
                   batch=None, q_len=None, kv_len=None, stream=None, **options):
        """A forward with the inference options (make_args_ex's keywords). q, o: 4-d in `layout`
        or, with cu_seqlens_q, packed [total_q, heads_q, dim]; k, v likewise with cu_seqlens_kv,
        or paged pools [num_pages, page_size, heads_kv, dim] with block_table (their page
        strides taken from them unless given). With varlen or paged, batch, q_len and kv_len
        (the longest sequence's) must be given."""
        args = ForwardArgs()
        args.q, args.k, args.v, args.o = (_rows_tensor(t, layout) for t in (q, k, v, o))
        s_axis = 1 if layout == "bshd" else 2
        _fill_shared(args, (q, k, v, o), lse, inputs, seed, offset,
                     batch if batch is not None else q.shape[0],
                     q_len if q_len is not None else q.shape[s_axis],
                     kv_len if kv_len is not None else k.shape[s_axis])
        if options.get("block_table") is not None:
            options.setdefault("k_stride_page", k.stride(0))
            options.setdefault("v_stride_page", v.stride(0))
        ex = make_args_ex(args, **options)
        self.launch_ex(ex, stream)
        return ex

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
        gradients dq, dk, dv (written) as 4-d tensors in `layout` (or 3-d packed rows, for
        backward_ex); lse the forward's [b, h, q_len]
        float32 LSE (between d_o and the gradients); inputs as in make_args; workspace None (the kernel's own) or a CUDA tensor of
        at least backward_workspace_bytes(...) bytes."""
        s_axis = 1 if layout == "bshd" else 2
        args = BackwardArgs()
        (args.q, args.k, args.v, args.o, args.d_o, args.dq, args.dk, args.dv) = (
            _rows_tensor(t, layout) for t in (q, k, v, o, d_o, dq, dk, dv))
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

    # ---- varlen backward (attnc_backward_args_ex) ----

    def validate_backward_ex(self, ex):
        """attnc_kernel_backward_validate_ex on a BackwardArgsEx (make_backward_args_ex): None or
        the message."""
        error = ctypes.c_void_p()
        rc = self.library.lib.attnc_kernel_backward_validate_ex(self.handle, ctypes.byref(ex),
                                                                ctypes.byref(error))
        return None if rc == ATTNC_OK else self.library._take_error(error)

    def launch_backward_ex(self, ex, stream=None):
        """attnc_kernel_backward_ex with a ready BackwardArgsEx; raises AttncError."""
        self._call(self.library.lib.attnc_kernel_backward_ex, ex, stream)

    def make_backward_args_ex(self, q, k, v, o, d_o, lse, dq, dk, dv, inputs=(), seed=0,
                              offset=0, layout="bshd", deterministic=False, workspace=None,
                              batch=None, q_len=None, kv_len=None, **options):
        """The BackwardArgsEx of backward_ex (no launch), for its arguments."""
        hosts = {}
        for side, total, t in (("q", "total_q", q), ("kv", "total_kv", k)):
            device = options.get("cu_seqlens_" + side)
            if device is None:
                continue
            if options.get("host_cu_seqlens_" + side) is None and hasattr(device, "tolist"):
                options["host_cu_seqlens_" + side] = device.tolist()  # synchronizes
            if not options.get(total) and t is not None and t.dim() == 3:
                options[total] = t.shape[0]
            host = options.get("host_cu_seqlens_" + side)
            if host is not None:
                host = host.tolist() if hasattr(host, "tolist") else list(host)
                hosts[side] = [int(b) - int(a) for a, b in zip(host, host[1:])]
        if hosts:
            if batch is None:
                batch = len(next(iter(hosts.values())))
            if q_len is None and "q" in hosts:
                q_len = max(hosts["q"], default=0)
            if kv_len is None and "kv" in hosts:
                kv_len = max(hosts["kv"], default=0)
        args = self.make_backward_args(q, k, v, o, d_o, lse, dq, dk, dv, inputs, seed, offset,
                                       layout, deterministic, workspace, batch, q_len, kv_len)
        return make_backward_args_ex(args, **options)

    def backward_ex(self, q, k, v, o, d_o, lse, dq, dk, dv, inputs=(), seed=0, offset=0,
                    layout="bshd", deterministic=False, workspace=None, batch=None, q_len=None,
                    kv_len=None, stream=None, **options):
        """The backward of a packed batch (make_seq_layout's varlen keywords): q, o, d_o, dq
        packed [total_q, heads_q, dim] with cu_seqlens_q, k, v, dk, dv [total_kv, heads_kv, dim]
        with cu_seqlens_kv (else 4-d in `layout`); lse the forward's ([heads_q, total_q] for
        packed Q). The host copies of cu_seqlens default to the device arrays' contents (a copy
        that synchronizes); total_q, total_kv to the packed tensors' rows; batch, q_len and kv_len
        to the number of sequences and the longest one's lengths. Raises AttncError."""
        ex = self.make_backward_args_ex(q, k, v, o, d_o, lse, dq, dk, dv, inputs, seed, offset,
                                        layout, deterministic, workspace, batch, q_len, kv_len,
                                        **options)
        self.launch_backward_ex(ex, stream)
        return ex
