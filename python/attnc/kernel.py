"""attnc.compile and attnc.Kernel: a Spec compiled by libattnc (JIT, with its disk cache) into a
kernel whose info is read once; calling a Kernel with torch tensors is attnc.attention."""
import ctypes
import dataclasses
import warnings
from typing import Any, Optional

from . import _capi
from ._errors import ArgumentError, error_from_code, error_from_message
from .spec import Spec


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """What libattnc reports of a compiled kernel (attnc_info and the declared inputs' names)."""
    name: str
    entry: str
    target: str
    dtype: str
    threads: int
    head_dim: int
    head_dim_v: int
    heads_q: int
    heads_kv: int
    input_names: tuple
    smem_bytes: int
    scale: float
    dropout: float
    dropout_rounds: int
    has_backward: bool


class Kernel:
    """A compiled spec. `kernel(q, k, v, ...)` is attnc.attention with this spec (needs torch and
    a GPU of the kernel's target); `spec` and `info` work anywhere."""

    def __init__(self, spec: Spec, handle: ctypes.c_void_p, lib: ctypes.CDLL) -> None:
        self.spec = spec
        self._handle = handle
        self._lib = lib
        raw = _capi.Info()
        if lib.attnc_kernel_info(handle, ctypes.byref(raw)) != _capi.ATTNC_OK:
            lib.attnc_kernel_free(handle)
            self._handle = None
            raise error_from_message("attnc_kernel_info failed on a kernel just compiled")
        names = []
        while True:
            name = lib.attnc_kernel_input_name(handle, len(names))
            if name is None:
                break
            names.append(name.decode())
        self.info = KernelInfo(
            name=raw.name.decode(), entry=raw.entry.decode(), target=raw.target.decode(),
            dtype=raw.dtype.decode(), threads=raw.threads, head_dim=raw.head_dim,
            head_dim_v=raw.head_dim_v, heads_q=raw.heads_q, heads_kv=raw.heads_kv,
            input_names=tuple(names), smem_bytes=raw.smem_bytes, scale=raw.scale,
            dropout=raw.dropout, dropout_rounds=raw.dropout_rounds,
            has_backward=bool(raw.has_backward))
        # The torch integration's per-kernel state (attnc.torch_ops): launch plans per inputs
        # description, the devices this kernel was offered to its kernel cache for, and the
        # split partials' bytes per inference launch shape.
        self._torch_state = None
        self._torch_devices = set()
        self._torch_workspaces = {}

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.attnc_kernel_free(handle)
            self._handle = None

    def __repr__(self) -> str:
        return f"<attnc.Kernel {self.info.name} {self.info.target} {self.info.dtype}>"

    def __call__(self, q: Any, k: Any, v: Any, *, inputs: Optional[dict] = None,
                 layout: str = "bhsd", deterministic: bool = False, return_lse: bool = False,
                 cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None,
                 max_seqlen_q: Optional[int] = None, max_seqlen_kv: Optional[int] = None,
                 block_table: Any = None, seq_lens_kv: Any = None, num_splits: int = 0,
                 decode: str = "auto") -> Any:
        """attnc.attention(q, k, v, ...) with this kernel's spec (see its docstring)."""
        from . import torch_ops
        return torch_ops.call_kernel(self, q, k, v, inputs=inputs, layout=layout,
                                     deterministic=deterministic, return_lse=return_lse,
                                     cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                                     max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                                     block_table=block_table, seq_lens_kv=seq_lens_kv,
                                     num_splits=num_splits, decode=decode)

    def backward_workspace_bytes(self, batch: int, q_len: int,
                                 deterministic: bool = False) -> int:
        """Bytes the backward's workspace needs (0 for a kernel without backward)."""
        return self._lib.attnc_kernel_backward_workspace_bytes(self._handle, batch, q_len,
                                                               int(bool(deterministic)))

    def _check(self, rc: int, error: ctypes.c_void_p) -> None:
        if rc != _capi.ATTNC_OK:
            raise error_from_code(rc, _capi.take_error(self._lib, error))

    def validate(self, args: "_capi.ForwardArgs") -> None:
        """Runs the C API's forward argument checks (no GPU); raises ArgumentError."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_validate(self._handle, ctypes.byref(args),
                                                    ctypes.byref(error)), error)

    def validate_backward(self, args: "_capi.BackwardArgs") -> None:
        """Runs the C API's backward argument checks (no GPU); raises ArgumentError."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_backward_validate(self._handle, ctypes.byref(args),
                                                             ctypes.byref(error)), error)

    def launch(self, args: "_capi.ForwardArgs", stream: int) -> None:
        """attnc_kernel_forward on `stream` (a CUstream address); raises on the C API's error."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_forward(self._handle, ctypes.byref(args), stream,
                                                   ctypes.byref(error)), error)

    def validate_ex(self, args: "_capi.ForwardArgsEx") -> None:
        """attnc_kernel_validate_ex: the inference launch's checks (no GPU); raises
        ArgumentError."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_validate_ex(self._handle, ctypes.byref(args),
                                                       ctypes.byref(error)), error)

    def launch_ex(self, args: "_capi.ForwardArgsEx", stream: int) -> None:
        """attnc_kernel_forward_ex on `stream`; raises on the C API's error."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_forward_ex(self._handle, ctypes.byref(args), stream,
                                                      ctypes.byref(error)), error)

    def forward_workspace_bytes(self, args: "_capi.ForwardArgsEx") -> int:
        """Bytes the split partials of this inference launch need on the current device (0:
        none); raises the C API's error where it refuses the arguments."""
        size = self._lib.attnc_kernel_forward_workspace_bytes(self._handle, ctypes.byref(args))
        if size < 0:
            self.validate_ex(args)
            raise error_from_message("attnc_kernel_forward_workspace_bytes refused arguments "
                                     "that attnc_kernel_validate_ex accepts")
        return size

    def decode_plan(self, args: "_capi.ForwardArgsEx", num_sms: int = 0) -> "_capi.DecodePlan":
        """attnc_kernel_decode_plan: what the launch runs (decode kernel or not, rows, splits)
        on a device of num_sms SMs (0: the current device's)."""
        plan = _capi.DecodePlan()
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_decode_plan(self._handle, ctypes.byref(args), num_sms,
                                                       ctypes.byref(plan), ctypes.byref(error)),
                    error)
        return plan

    def validate_backward_ex(self, args: "_capi.BackwardArgsEx") -> None:
        """attnc_kernel_backward_validate_ex: the varlen backward's checks, every sequence's
        (no GPU); raises ArgumentError."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_backward_validate_ex(
            self._handle, ctypes.byref(args), ctypes.byref(error)), error)

    def launch_backward_ex(self, args: "_capi.BackwardArgsEx", stream: int) -> None:
        """attnc_kernel_backward_ex on `stream` (a launch a sequence); raises on the C API's
        error."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_backward_ex(self._handle, ctypes.byref(args), stream,
                                                       ctypes.byref(error)), error)

    def launch_backward(self, args: "_capi.BackwardArgs", stream: int) -> None:
        """attnc_kernel_backward on `stream`; raises on the C API's error."""
        error = ctypes.c_void_p()
        self._check(self._lib.attnc_kernel_backward(self._handle, ctypes.byref(args), stream,
                                                    ctypes.byref(error)), error)


def _warn(user_data: Any, message: bytes) -> None:
    warnings.warn(f"attnc: {message.decode(errors='replace')}", RuntimeWarning, stacklevel=2)


# Kept at module level: the C callback must outlive every compile that may call it.
_LOG = _capi.LOG_FN(_warn)


def compile(spec: Spec, target: Optional[str] = None, *, backward: bool = False,
            cache_dir: Optional[str] = None, use_cache: bool = True,
            timeout: Optional[float] = None) -> Kernel:
    """Compiles `spec` (JIT through NVRTC, with libattnc's disk cache).

    target: None for the current GPU's architecture (needs one); "sm_90a", "sm_80", ... need no
    GPU. backward: also compile the backward kernels. cache_dir: the disk cache's directory
    (None: $ATTNC_CACHE_DIR or ~/.cache/attnc); use_cache=False neither reads nor writes it.
    timeout: seconds the compile may take (None: $ATTNC_COMPILE_TIMEOUT or no limit).
    Raises SpecError with the compiler's message, CompileError for NVRTC, driver or no-GPU
    failures, ArgumentError for bad arguments."""
    if not isinstance(spec, Spec):
        raise ArgumentError(f"spec: expected an attnc.Spec, got {type(spec).__name__}")
    if target is not None and not isinstance(target, str):
        raise ArgumentError(f"target: expected None or a string like 'sm_90a', got {target!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ArgumentError(f"timeout: expected None or seconds > 0, got {timeout!r}")
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise ArgumentError(f"cache_dir: expected None or a directory path, got {cache_dir!r}")
    lib = _capi.library()
    options = _capi.CompileOptions()
    options.struct_size = ctypes.sizeof(_capi.CompileOptions)
    options.flags = _capi.ATTNC_COMPILE_BACKWARD if backward else 0
    options.timeout_seconds = float(timeout) if timeout is not None else 0.0
    options.cache_dir = cache_dir.encode() if cache_dir is not None else None
    options.use_cache = 1 if use_cache else -1
    options.log = _LOG
    handle = ctypes.c_void_p()
    error = ctypes.c_void_p()
    target_bytes = target.encode() if target is not None else None
    if spec._path is not None:
        rc = lib.attnc_compile_file_opts(spec._path.encode(), target_bytes, ctypes.byref(options),
                                         ctypes.byref(handle), ctypes.byref(error))
    else:
        rc = lib.attnc_compile_text_opts(spec.to_yaml().encode(), target_bytes,
                                         ctypes.byref(options), ctypes.byref(handle),
                                         ctypes.byref(error))
    if rc != _capi.ATTNC_OK:
        raise error_from_code(rc, _capi.take_error(lib, error))
    return Kernel(spec, handle, lib)
