"""ctypes bindings of attnc's inference launch calls (attnc_c.h: attnc_seq_layout,
attnc_forward_args_ex, attnc_decode_plan and the attnc_kernel_*_ex calls) for the decode, paged
and varlen GPU tests and benchmarks. The library and the compiles are attnc_ctypes' (Library,
Kernel); the structs here mirror the C ones field by field (test/python/test_decode_helpers.py
compares their sizes and offsets with the header's). No torch import: tensors are duck-typed
(data_ptr(), stride()), so the argument building also runs on the CPU."""
import ctypes

# The structs are the attnc package's (python/attnc/_capi.py), one definition of the C layout.
from attnc_ctypes import ATTNC_OK, AttncError, DecodePlan, ForwardArgsEx, SeqLayout

DECODE_AUTO, DECODE_OFF, DECODE_ON = 0, 1, 2  # attnc_forward_args_ex.decode (attnc::DecodeChoice)


_kernel = ctypes.c_void_p
_error = ctypes.POINTER(ctypes.c_void_p)
_args = ctypes.POINTER(ForwardArgsEx)
SIGNATURES = {
    "attnc_kernel_forward_ex": (ctypes.c_int, [_kernel, _args, ctypes.c_void_p, _error]),
    "attnc_kernel_validate_ex": (ctypes.c_int, [_kernel, _args, _error]),
    "attnc_kernel_decode_plan": (ctypes.c_int, [_kernel, _args, ctypes.c_int32,
                                                ctypes.POINTER(DecodePlan), _error]),
    "attnc_kernel_forward_workspace_bytes": (ctypes.c_int64, [_kernel, _args]),
}


def _function(library, name):
    """`name` of the library as a function object of this module's own: CDLL[name] makes a new
    one, so these argtypes never meet another binding's struct classes for the same symbol.
    Made once a library (a timed launch pays no lookup)."""
    functions = library.__dict__.setdefault("_decode_functions", {})
    if name not in functions:
        try:
            fn = library.lib[name]
        except AttributeError:
            raise AttncError(f"{library.path} has no {name}: a library built before the "
                             "inference launch options (rebuild it, or set ATTNC_LIB)") from None
        fn.restype, fn.argtypes = SIGNATURES[name]
        functions[name] = fn
    return functions[name]


def pointer(x):
    """The address of a torch tensor, a numpy array or None (NULL)."""
    if x is None:
        return None
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    return x.ctypes.data


def seq_layout(cu_seqlens_q=None, cu_seqlens_kv=None, total_q=0, total_kv=0, block_table=None,
               seq_lens_kv=None, page_size=0, num_pages=0, k_stride_page=0, v_stride_page=0,
               block_table_stride=None, max_pages=None, host=None):
    """A SeqLayout from int32 device arrays (None: not given). block_table [batch, stride]: its
    stride and max_pages default to its width. host: a dict of the host copies (keys
    cu_seqlens_q, cu_seqlens_kv, block_table, seq_lens_kv; CPU int32 tensors or arrays) checked
    before launch; None gives none. The struct keeps every array it points at alive."""
    s = SeqLayout()
    s.struct_size = ctypes.sizeof(SeqLayout)
    s.cu_seqlens_q, s.cu_seqlens_kv = pointer(cu_seqlens_q), pointer(cu_seqlens_kv)
    s.total_q, s.total_kv = total_q, total_kv
    s.block_table, s.seq_lens_kv = pointer(block_table), pointer(seq_lens_kv)
    width = block_table.shape[1] if block_table is not None else 0
    s.block_table_stride = width if block_table_stride is None else block_table_stride
    s.max_pages = width if max_pages is None else max_pages
    s.page_size, s.num_pages = page_size, num_pages
    s.k_stride_page, s.v_stride_page = k_stride_page, v_stride_page
    host = host or {}
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "block_table", "seq_lens_kv"):
        address = pointer(host.get(name))
        setattr(s, "host_" + name,
                ctypes.cast(address, ctypes.POINTER(ctypes.c_int32)) if address else None)
    s._keepalive = (cu_seqlens_q, cu_seqlens_kv, block_table, seq_lens_kv, dict(host))
    return s


def forward_args_ex(kernel, q, k, v, o, lse=None, inputs=(), batch=None, q_len=None, kv_len=None,
                    layout=None, decode=DECODE_AUTO, num_splits=0, workspace=None, seq=None):
    """A ForwardArgsEx for attnc_ctypes.Kernel `kernel`. q, k, v, o: 4-d tensors in `layout`
    ('bshd' | 'bhsd'); packed rows [total, heads, dim] and page pools [pages, page_size, heads,
    dim] are passed as 4-d BSHD views (x[None] and the pool itself: stride_b is ignored for
    them). batch, q_len, kv_len: the sequences and the longest one's lengths. seq: a SeqLayout
    (seq_layout()) or None for contiguous tensors. workspace: a device tensor or None (the
    kernel's own)."""
    ex = ForwardArgsEx()
    ex.struct_size = ctypes.sizeof(ForwardArgsEx)
    ex.base = kernel.make_args(q, k, v, o, lse, inputs, layout=layout or "bshd", batch=batch,
                               q_len=q_len, kv_len=kv_len)
    ex.decode, ex.num_splits = decode, num_splits
    if seq is not None:
        ex.layout = ctypes.pointer(seq)
    if workspace is not None:
        ex.workspace = workspace.data_ptr()
        ex.workspace_bytes = workspace.numel() * workspace.element_size()
    # The base struct was copied into ex: its keepalive (tensors, the inputs' array) moves along.
    ex._keepalive = (ex.base._keepalive if hasattr(ex.base, "_keepalive") else None, seq,
                     workspace, (q, k, v, o, lse))
    return ex


def _call(kernel, name, args, *rest):
    error = ctypes.c_void_p()
    rc = _function(kernel.library, name)(kernel.handle, ctypes.byref(args), *rest,
                                         ctypes.byref(error))
    if rc != ATTNC_OK:
        raise AttncError(kernel.library._take_error(error))


def launch_ex(kernel, args, stream=None):
    """attnc_kernel_forward_ex on `stream` (None: torch's current one); raises AttncError."""
    if stream is None:
        import torch
        stream = torch.cuda.current_stream().cuda_stream
    _call(kernel, "attnc_kernel_forward_ex", args, ctypes.c_void_p(stream))


def validate_ex(kernel, args):
    """attnc_kernel_validate_ex: None if the arguments are accepted, else the message."""
    try:
        _call(kernel, "attnc_kernel_validate_ex", args)
    except AttncError as e:
        return str(e)
    return None


def decode_plan(kernel, args, num_sms=0):
    """attnc_kernel_decode_plan as a dict (decode, rows, row_tiles, splits, split_tiles,
    block_kv, workspace_bytes); num_sms 0: the current device's."""
    plan = DecodePlan()
    _call(kernel, "attnc_kernel_decode_plan", args, ctypes.c_int32(num_sms), ctypes.byref(plan))
    return {name: getattr(plan, name) for name, _ in DecodePlan._fields_}


def workspace_bytes(kernel, args):
    """attnc_kernel_forward_workspace_bytes; raises AttncError where the arguments are refused."""
    n = _function(kernel.library, "attnc_kernel_forward_workspace_bytes")(kernel.handle,
                                                                          ctypes.byref(args))
    if n < 0:
        raise AttncError(validate_ex(kernel, args) or "forward_workspace_bytes refused the args")
    return n


def compile_deferred(kernel):
    """Builds what the JIT defers (the decode kernels among them) now, so a timed or sanitized
    first launch does not compile; a no-op for a library without the call."""
    fn = getattr(kernel.library.lib, "attnc_kernel_compile_deferred", None)
    if fn is None:
        return
    error = ctypes.c_void_p()
    if fn(kernel.handle, None, ctypes.byref(error)) != ATTNC_OK:
        raise AttncError(kernel.library._take_error(error))


__all__ = ["DECODE_AUTO", "DECODE_OFF", "DECODE_ON", "SeqLayout", "ForwardArgsEx", "DecodePlan",
           "seq_layout", "forward_args_ex", "launch_ex", "validate_ex", "decode_plan",
           "workspace_bytes", "compile_deferred", "pointer"]
