"""ctypes mirrors of include/attnc/attnc_c.h: its structs, constants and every function's
signature, bound once to the loaded libattnc.so. No torch; nothing here allocates device memory."""
import ctypes
import functools

from ._loader import load_library

ATTNC_OK = 0
ATTNC_ERROR = 1
ATTNC_ERROR_BAD_SPEC = 2
ATTNC_ERROR_BAD_ARGUMENT = 3
ATTNC_ERROR_NO_GPU = 4
ATTNC_ERROR_NVRTC = 5
ATTNC_ERROR_OUT_OF_MEMORY = 6
ATTNC_ERROR_INTERNAL = 7
ATTNC_COMPILE_BACKWARD = 1
# attnc_forward_args_ex.decode: which kernel a forward takes (attnc::DecodeChoice).
ATTNC_DECODE_AUTO = 0
ATTNC_DECODE_OFF = 1
ATTNC_DECODE_ON = 2


class Tensor(ctypes.Structure):
    """attnc_tensor: Q, K, V, O and the gradients (element strides of b, h, s)."""
    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64),
                ("stride_h", ctypes.c_int64), ("stride_s", ctypes.c_int64)]


class Input(ctypes.Structure):
    """attnc_input: a declared input (element strides of the dims it has; 0 for the others)."""
    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64),
                ("stride_h", ctypes.c_int64), ("stride_pos", ctypes.c_int64)]


class ForwardArgs(ctypes.Structure):
    """attnc_forward_args (192 bytes)."""
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("q_len", ctypes.c_int64), ("kv_len", ctypes.c_int64),
                ("inputs", ctypes.POINTER(Input)), ("num_inputs", ctypes.c_int64),
                ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64)]


class BackwardArgs(ctypes.Structure):
    """attnc_backward_args."""
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("d_o", Tensor),
                ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("lse", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("q_len", ctypes.c_int64), ("kv_len", ctypes.c_int64),
                ("inputs", ctypes.POINTER(Input)), ("num_inputs", ctypes.c_int64),
                ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64),
                ("deterministic", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_int64)]


class SeqLayout(ctypes.Structure):
    """attnc_seq_layout (136 bytes): varlen where cu_seqlens_q or cu_seqlens_kv is set, paged
    where block_table is; struct_size must be set to ctypes.sizeof(SeqLayout)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_kv", ctypes.c_void_p),
                ("total_q", ctypes.c_int64), ("total_kv", ctypes.c_int64),
                ("block_table", ctypes.c_void_p), ("seq_lens_kv", ctypes.c_void_p),
                ("block_table_stride", ctypes.c_int64), ("max_pages", ctypes.c_int64),
                ("page_size", ctypes.c_int64), ("num_pages", ctypes.c_int64),
                ("k_stride_page", ctypes.c_int64), ("v_stride_page", ctypes.c_int64),
                ("host_cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
                ("host_cu_seqlens_kv", ctypes.POINTER(ctypes.c_int32)),
                ("host_block_table", ctypes.POINTER(ctypes.c_int32)),
                ("host_seq_lens_kv", ctypes.POINTER(ctypes.c_int32))]


class ForwardArgsEx(ctypes.Structure):
    """attnc_forward_args_ex (240 bytes): ForwardArgs with the inference options; struct_size must
    be set to ctypes.sizeof(ForwardArgsEx)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("decode", ctypes.c_int32),
                ("base", ForwardArgs), ("layout", ctypes.POINTER(SeqLayout)),
                ("num_splits", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_int64),
                ("prepared", ctypes.c_void_p)]


class BackwardArgsEx(ctypes.Structure):
    """attnc_backward_args_ex (360 bytes): BackwardArgs with a packed batch (layout's varlen part
    only; its host copies of cu_seqlens required); struct_size must be set to
    ctypes.sizeof(BackwardArgsEx)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_int32),
                ("base", BackwardArgs), ("layout", ctypes.POINTER(SeqLayout))]


class DecodePlan(ctypes.Structure):
    """attnc_decode_plan (32 bytes): what a forward with given arguments launches."""
    _fields_ = [("decode", ctypes.c_int32), ("rows", ctypes.c_int32),
                ("row_tiles", ctypes.c_int32), ("splits", ctypes.c_int32),
                ("split_tiles", ctypes.c_int32), ("block_kv", ctypes.c_int32),
                ("workspace_bytes", ctypes.c_int64)]


class Info(ctypes.Structure):
    """attnc_info (80 bytes; the library writes all of it, so every field must be here)."""
    _fields_ = [("name", ctypes.c_char_p), ("entry", ctypes.c_char_p), ("target", ctypes.c_char_p),
                ("dtype", ctypes.c_char_p), ("threads", ctypes.c_int32),
                ("head_dim", ctypes.c_int32), ("head_dim_v", ctypes.c_int32),
                ("heads_q", ctypes.c_int32), ("heads_kv", ctypes.c_int32),
                ("num_inputs", ctypes.c_int32), ("smem_bytes", ctypes.c_int64),
                ("scale", ctypes.c_float), ("dropout", ctypes.c_float),
                ("has_backward", ctypes.c_int32), ("dropout_rounds", ctypes.c_int32)]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class CompileOptions(ctypes.Structure):
    """attnc_compile_options; struct_size must be set to ctypes.sizeof(CompileOptions)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("timeout_seconds", ctypes.c_double), ("cache_dir", ctypes.c_char_p),
                ("use_cache", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("log", LOG_FN), ("log_user_data", ctypes.c_void_p)]


_kernel = ctypes.c_void_p
_error = ctypes.POINTER(ctypes.c_void_p)
_int = ctypes.c_int

# name: (restype, argtypes), in attnc_c.h's order.
_SIGNATURES = {
    "attnc_version": (ctypes.c_char_p, []),
    "attnc_compile_file": (_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_kernel),
                                  _error]),
    "attnc_compile_text": (_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_kernel),
                                  _error]),
    "attnc_compile_file_ex": (_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                     ctypes.POINTER(_kernel), _error]),
    "attnc_compile_text_ex": (_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                     ctypes.POINTER(_kernel), _error]),
    "attnc_compile_file_opts": (_int, [ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(CompileOptions), ctypes.POINTER(_kernel),
                                       _error]),
    "attnc_compile_text_opts": (_int, [ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(CompileOptions), ctypes.POINTER(_kernel),
                                       _error]),
    "attnc_kernel_forward": (_int, [_kernel, ctypes.POINTER(ForwardArgs), ctypes.c_void_p,
                                    _error]),
    "attnc_kernel_validate": (_int, [_kernel, ctypes.POINTER(ForwardArgs), _error]),
    "attnc_kernel_forward_ex": (_int, [_kernel, ctypes.POINTER(ForwardArgsEx), ctypes.c_void_p,
                                       _error]),
    "attnc_kernel_validate_ex": (_int, [_kernel, ctypes.POINTER(ForwardArgsEx), _error]),
    "attnc_kernel_decode_plan": (_int, [_kernel, ctypes.POINTER(ForwardArgsEx), ctypes.c_int32,
                                        ctypes.POINTER(DecodePlan), _error]),
    "attnc_kernel_forward_workspace_bytes": (ctypes.c_int64, [_kernel,
                                                              ctypes.POINTER(ForwardArgsEx)]),
    "attnc_kernel_prepare_inputs": (_int, [_kernel, ctypes.POINTER(ForwardArgs), ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_void_p), _error]),
    "attnc_kernel_forward_prepared": (_int, [_kernel, ctypes.POINTER(ForwardArgs),
                                             ctypes.c_void_p, ctypes.c_void_p, _error]),
    "attnc_kernel_backward_prepared": (_int, [_kernel, ctypes.POINTER(BackwardArgs),
                                              ctypes.c_void_p, ctypes.c_void_p, _error]),
    "attnc_prepared_free": (None, [ctypes.c_void_p]),
    "attnc_kernel_backward": (_int, [_kernel, ctypes.POINTER(BackwardArgs), ctypes.c_void_p,
                                     _error]),
    "attnc_kernel_backward_validate": (_int, [_kernel, ctypes.POINTER(BackwardArgs), _error]),
    "attnc_kernel_backward_ex": (_int, [_kernel, ctypes.POINTER(BackwardArgsEx), ctypes.c_void_p,
                                        _error]),
    "attnc_kernel_backward_validate_ex": (_int, [_kernel, ctypes.POINTER(BackwardArgsEx),
                                                 _error]),
    "attnc_kernel_compile_deferred": (_int, [_kernel, ctypes.POINTER(ctypes.c_int32), _error]),
    "attnc_kernel_backward_workspace_bytes": (ctypes.c_int64, [_kernel, ctypes.c_int64,
                                                               ctypes.c_int64, ctypes.c_int32]),
    "attnc_kernel_info": (_int, [_kernel, ctypes.POINTER(Info)]),
    "attnc_kernel_input_name": (ctypes.c_char_p, [_kernel, ctypes.c_int32]),
    "attnc_kernel_free": (None, [_kernel]),
    "attnc_free_string": (None, [ctypes.c_void_p]),
}


def bind(lib: ctypes.CDLL, optional: bool = False) -> ctypes.CDLL:
    """Sets restype and argtypes of every C API function on `lib`. optional: skip the functions
    an older library lacks instead of raising AttributeError (for A/B runs against old builds)."""
    for name, (restype, argtypes) in _SIGNATURES.items():
        if optional and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """The package's libattnc.so (attnc._loader.load_library), with every signature bound."""
    return bind(load_library())


def take_error(lib: ctypes.CDLL, error: ctypes.c_void_p) -> str:
    """The message an erroring call left in `error`, freed with attnc_free_string."""
    if not error.value:
        return "(no message)"
    text = ctypes.string_at(error.value).decode(errors="replace")
    lib.attnc_free_string(error)
    return text
