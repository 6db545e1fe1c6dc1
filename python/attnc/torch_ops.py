"""attnc.attention on torch tensors: argument checks, the spec the tensors imply, and the custom
ops torch.ops.attnc.forward / backward / philox_state (register_fake and register_autograd), so
that eager mode, autograd, torch.compile(fullgraph=True) and CUDA graphs all take the call; and
torch.ops.attnc.forward_ex, the forward of varlen and paged K/V calls, with backward_ex, the
backward of packed batches (at the end).

Inside the ops the kernel is found from the call's variant (a tuple of constants without sizes,
carried as its repr) and the tensors' sizes, dtype and device, so a traced graph holds no Python
objects and dynamic shapes leave the variant constant. The forward compiles with the backward
kernels when a gradient is needed, so that the forward and the backward that consumes its output
and LSE are one compiled kernel; a forward without gradients compiles the forward only (about
half the compile time).

Eager calls on plain CUDA tensors run the same launch functions without the dispatcher (through
an autograd.Function when a gradient is needed): a custom op's dispatch alone costs more than
the per-call budget. torch.compile, fake tensors and dispatch modes see the custom ops.

Launches go on torch's current stream; the backward's workspace comes from torch's allocator,
so concurrent streams do not share one. CUDA graphs: a call without dropout captures and
replays, forward and backward. A mask that reads declared inputs keeps their summaries in a
buffer libattnc allocates on the first launch on each stream (docs/runtime.md), which cannot be
captured: run the call once on the capture stream first. Dropout under capture is an error: the
kernels take the seed and offset by value, so every replay would repeat the captured mask."""
import ast
import ctypes
import re
import struct
import threading
from typing import Any, Optional

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from . import _capi
from ._errors import ArgumentError, AttncError
from .kernel import Kernel, compile as compile_spec
from .spec import Spec, _freeze, _thaw

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_INPUT_DTYPES = {torch.int32: "i32", torch.float32: "f32"}
# The C API's rules (docs/runtime.md, "Launch arguments"): 16-byte aligned Q/K/V/O pointers,
# strides in multiples of 8 elements, 4-byte aligned inputs.
_TENSOR_ALIGN = 16
_STRIDE_MULTIPLE = 8
_INPUT_ALIGN = 4
# Advance of torch's CUDA generator offset per dropout call: torch keeps its offsets multiples
# of 4 (one Philox4x32 output), and the kernels key their masks on the whole offset.
_OFFSET_INCREMENT = 4
_U64 = (1 << 64) - 1

_lock = threading.Lock()
_plans: dict = {}     # call key -> (its repr, inputs description, has dropout)
_resolved: dict = {}  # (call key repr, dtype, head dims, heads) -> (Spec, Spec key)
_kernels: dict = {}   # (Spec key, device index, with backward) -> Kernel


def _fail(message: str) -> None:
    raise ArgumentError(message)


def _axes(layout: str) -> tuple:
    """(heads axis, sequence axis) of a 4-d tensor in `layout`."""
    return (1, 2) if layout == "bhsd" else (2, 1)


def _check_tensor(name: str, t: Any, layout: str, dims: Optional[str] = None,
                  rank: int = 4) -> tuple:
    """t's shape after its own checks (rank, device, dtype, strides). dims: the `rank` dims it
    must have, in words (default: those of `layout`)."""
    if not isinstance(t, Tensor):
        _fail(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    shape = t.shape
    if dims is None:
        dims = f"{'B, H, S, D' if layout == 'bhsd' else 'B, S, H, D'} for layout '{layout}'"
    if len(shape) != rank:
        _fail(f"{name}: expected {rank} dims ({dims}), got shape {tuple(shape)}")
    if not (t.is_cuda or t.is_meta):
        _fail(f"{name}: expected a CUDA tensor, got one on {t.device}")
    if t.dtype not in _DTYPES:
        _fail(f"{name}: expected dtype torch.bfloat16 or torch.float16, got {t.dtype}")
    strides = t.stride()
    if strides[-1] != 1:
        _fail(f"{name}: expected a contiguous last dim (stride 1), got strides "
              f"{tuple(strides)}; pass {name}.contiguous()")
    if any(n > 1 and stride % _STRIDE_MULTIPLE for n, stride in zip(shape[:-1], strides)):
        _fail(f"{name}: expected strides that are multiples of {_STRIDE_MULTIPLE} elements, "
              f"got strides {tuple(strides)}; pass {name}.contiguous()")
    return shape


def _check_qkv(q: Tensor, k: Tensor, v: Tensor, layout: str) -> tuple:
    """(batch, heads_q, q_len, head_dim, heads_kv, kv_len, head_dim_v) after every shape, dtype
    and device check."""
    if layout != "bhsd" and layout != "bshd":
        _fail(f"layout: expected 'bhsd' or 'bshd', got {layout!r}")
    q_shape = _check_tensor("q", q, layout)
    k_shape = _check_tensor("k", k, layout)
    v_shape = _check_tensor("v", v, layout)
    dtype = q.dtype
    if k.dtype != dtype or v.dtype != dtype:
        _fail(f"k, v: expected q's dtype {dtype}, got k {k.dtype} and v {v.dtype}")
    device = q.device
    if k.device != device or v.device != device:
        _fail(f"k, v: expected q's device {device}, got k on {k.device} and v on {v.device}")
    h_axis, s_axis = (1, 2) if layout == "bhsd" else (2, 1)
    batch, heads_q, q_len, head_dim = q_shape[0], q_shape[h_axis], q_shape[s_axis], q_shape[3]
    heads_kv, kv_len = k_shape[h_axis], k_shape[s_axis]
    if k_shape[0] != batch or v_shape[0] != batch:
        _fail(f"k, v: expected batch {batch} (q's), got k {k_shape[0]} and v {v_shape[0]}")
    if k_shape[3] != head_dim:
        _fail(f"k: expected head dim {head_dim} (q's), got {k_shape[3]}")
    if v_shape[h_axis] != heads_kv or v_shape[s_axis] != kv_len:
        _fail(f"v: expected {heads_kv} heads and length {kv_len} (k's), got "
              f"{v_shape[h_axis]} heads and length {v_shape[s_axis]}")
    if heads_q % heads_kv:
        _fail(f"k: expected a head count that divides q's {heads_q}, got {heads_kv}")
    if batch == 0 or heads_q == 0 or q_len == 0 or kv_len == 0:
        _fail(f"q, k: expected non-empty tensors, got q {tuple(q_shape)} and k "
              f"{tuple(k_shape)}")
    return batch, heads_q, q_len, head_dim, heads_kv, kv_len, v_shape[3]


def _infer_dims(name: str, t: Tensor, batch: int, heads_q: int, length: int) -> tuple:
    """The dims of an input the spec does not declare, from its shape: [L] -> pos, [B, L] ->
    (b, pos), [Hq] -> h (a float32 one, or one shorter than the sequence), [B, Hq] -> (b, h),
    [B, Hq, L] -> (b, h, pos); L at least max(q_len, kv_len)."""
    shape = tuple(t.shape)
    by_head = t.dtype == torch.float32 or length > heads_q
    if len(shape) == 1:
        if shape[0] == heads_q and by_head:
            return ("h",)
        if shape[0] >= length:
            return ("pos",)
    elif len(shape) == 2 and shape[0] == batch:
        if shape[1] == heads_q and by_head:
            return ("b", "h")
        if shape[1] >= length:
            return ("b", "pos")
    elif len(shape) == 3 and shape[:2] == (batch, heads_q) and shape[2] >= length:
        return ("b", "h", "pos")
    _fail(f"inputs['{name}']: expected shape [L], [B, L], [Hq], [B, Hq] or [B, Hq, L] with "
          f"B={batch}, Hq={heads_q}, L >= {length}, got {list(shape)}")


def _check_declared(name: str, t: Tensor, dims: tuple, batch: int, heads_q: int,
                    length: int) -> None:
    extents = {"b": batch, "h": heads_q, "pos": length}
    shape = tuple(t.shape)
    if len(shape) != len(dims) or any(
            n < extents[d] if d == "pos" else n != extents[d] for n, d in zip(shape, dims)):
        want = ", ".join(f"{d}={extents[d]}" + ("+" if d == "pos" else "") for d in dims)
        _fail(f"inputs['{name}']: expected shape [{want}] (the spec's dims {list(dims)}), got "
              f"{list(shape)}")


def _check_inputs(inputs: Any, q: Tensor, batch: int, heads_q: int, length: int,
                  declared: Optional[dict]) -> tuple:
    """(tensors, frozen declarations (name, dtype, dims)) of the inputs, after their checks.
    declared: the spec's inputs field (None: infer every declaration from the tensors)."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        _fail(f"inputs: expected a dict {{name: tensor}}, got {type(inputs).__name__}")
    tensors, decls = [], []
    for name, t in inputs.items():
        if not isinstance(name, str):
            _fail(f"inputs: expected string names, got {name!r}")
        if not isinstance(t, Tensor):
            _fail(f"inputs['{name}']: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _INPUT_DTYPES:
            _fail(f"inputs['{name}']: expected dtype torch.int32 or torch.float32, got {t.dtype}")
        if t.device != q.device:
            _fail(f"inputs['{name}']: expected q's device {q.device}, got {t.device}")
        if t.requires_grad and torch.is_grad_enabled():
            _fail(f"inputs['{name}']: requires grad, but inputs are not differentiable yet; "
                  f"pass inputs['{name}'].detach()")
        if declared is not None and name not in declared:
            _fail(f"inputs: expected only the spec's inputs ({', '.join(declared) or 'none'}), "
                  f"got '{name}'")
        if declared is not None:
            decl = declared[name]
            dims = tuple(decl.get("dims", ())) if isinstance(decl, dict) else ()
            want = decl.get("dtype") if isinstance(decl, dict) else None
            if want is not None and want != _INPUT_DTYPES[t.dtype]:
                _fail(f"inputs['{name}']: expected {want} (the spec's dtype), got {t.dtype}")
            _check_declared(name, t, dims, batch, heads_q, length)
        else:
            dims = _infer_dims(name, t, batch, heads_q, length)
        tensors.append(t)
        decls.append((name, _INPUT_DTYPES[t.dtype], dims))
    if declared is not None:
        missing = [n for n in declared if n not in inputs]
        if missing:
            _fail(f"inputs: expected a tensor for every input the spec declares "
                  f"({', '.join(declared)}), got none for '{missing[0]}'")
    return tensors, tuple(decls)


def _merge(arg: str, given: Any, from_spec: Any) -> Any:
    if given is None:
        return from_spec
    if from_spec is not None and given != from_spec:
        _fail(f"{arg}: expected the spec's {from_spec!r} (or None), got {given!r}")
    return given


# A top-level `dropout:` whose value is not zero (`0`, `0.0`, `{p: 0}` mean none), for a YAML spec
# whose fields PyYAML did not read.
_DROPOUT_KEY = re.compile(r"^dropout\s*:\s*(?!(?:\{\s*p\s*:\s*)?0*\.?0*\s*(?:[,}#]|$))\S",
                          re.MULTILINE)


def _spec_dropout(dropout: Any) -> bool:
    p = dropout.get("p") if isinstance(dropout, dict) else dropout
    return bool(p)


def _make_plan(key: tuple) -> tuple:
    """(variant text, inputs description, has dropout) for a call key (spec key, mask, score,
    scale, dropout_p, inputs' declarations); cached, and run once at trace time under
    torch.compile. The key holds no sizes, so dynamic shapes keep it constant: head dims, heads
    and dtype join it inside the op (_resolve)."""
    plan = _plans.get(key)
    if plan is not None:
        return plan
    spec_key, _, _, _, dropout_p, decls = key
    dropout_p = _thaw(dropout_p)
    given = Spec.from_key(spec_key) if spec_key is not None else Spec()
    if given._text is not None:
        # head_dim is required: set when PyYAML read the fields, else the text's own key says.
        has_dropout = (_spec_dropout(given.dropout) if given.head_dim is not None
                       else _DROPOUT_KEY.search(given._text) is not None)
    else:
        has_dropout = bool(dropout_p or given.dropout)
    description = ";".join(f"{name}:{','.join(dims)}" for name, _, dims in decls)
    plan = (repr(key), description, has_dropout)
    with _lock:
        _plans[key] = plan
    return plan


def _resolve(text: str, dtype: str, head_dim: int, head_dim_v: int, heads_q: int,
             heads_kv: int) -> tuple:
    """(Spec, its key) of a plan's variant text for tensors of these sizes; cached."""
    sizes = (text, dtype, head_dim, head_dim_v, heads_q, heads_kv)
    found = _resolved.get(sizes)
    if found is not None:
        return found
    spec_key, mask, score, scale, dropout_p, decls = ast.literal_eval(text)
    scale, dropout_p = _thaw(scale), _thaw(dropout_p)
    given = Spec.from_key(spec_key) if spec_key is not None else Spec()
    if given._text is not None:
        spec = given  # compiled as written, so its messages point into its text
    else:
        # The tensors fill what the spec leaves unset, and only where they differ from the
        # compiler's default, so that a Spec that states everything keeps its own key (and its
        # compiled kernel) however it is called.
        declared = dict(given.inputs or {})
        for name, input_dtype, dims in decls:
            declared.setdefault(name, {"dtype": input_dtype, "dims": list(dims)})
        spec = Spec(head_dim, heads=given.heads or (heads_q, heads_kv),
                    head_dim_v=given.head_dim_v or (head_dim_v if head_dim_v != head_dim
                                                    else None),
                    dtype=given.dtype or (dtype if dtype != "bf16" else None), scale=scale,
                    mask=_thaw(mask), score=_thaw(score),
                    dropout=given.dropout or dropout_p or None,
                    inputs=declared or None, name=given.name)
    found = (spec, spec.key())
    with _lock:
        _resolved[sizes] = found
    return found


# Under torch.compile the plan is run, not traced: its result enters the graph as constants, so
# no cache miss (YAML parsing, Spec building) is ever traced by dynamo.
_plan_constant = torch._dynamo.assume_constant_result(_make_plan)


def attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Any = None, score: Any = None,
              inputs: Optional[dict] = None, dropout_p: float = 0.0,
              scale: Optional[float] = None, layout: str = "bhsd", deterministic: bool = False,
              return_lse: bool = False, spec: Optional[Spec] = None,
              cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_kv: Optional[Tensor] = None,
              max_seqlen_q: Optional[int] = None, max_seqlen_kv: Optional[int] = None,
              block_table: Optional[Tensor] = None, seq_lens_kv: Optional[Tensor] = None,
              num_splits: int = 0, decode: str = "auto",
              host_seq_lens_kv: Optional[Tensor] = None) -> Any:
    """attnc.attention (see its docstring in attnc/__init__.py)."""
    layout_args = {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_kv": cu_seqlens_kv,
                   "max_seqlen_q": max_seqlen_q, "max_seqlen_kv": max_seqlen_kv,
                   "block_table": block_table, "seq_lens_kv": seq_lens_kv}
    if (type(num_splits) is int and num_splits == 0 and decode == "auto"
            and all(a is None for a in layout_args.values()) and host_seq_lens_kv is None):
        batch, heads_q, q_len, head_dim, heads_kv, kv_len, head_dim_v = _check_qkv(q, k, v,
                                                                                    layout)
        text, description, has_dropout, tensors = _plan_call(
            q, batch, heads_q, q_len, head_dim, heads_kv, kv_len, head_dim_v, mask, score,
            inputs, dropout_p, scale, spec, deterministic, return_lse)
        return _attention(q, k, v, tensors, text, description, has_dropout, layout,
                          deterministic, return_lse)
    sizes = _check_ex(q, k, v, layout, num_splits=num_splits, decode=decode, **layout_args)
    text, description, has_dropout, tensors = _plan_call(q, *sizes[:7], mask, score, inputs,
                                                         dropout_p, scale, spec, deterministic,
                                                         return_lse)
    _check_host("host_seq_lens_kv", host_seq_lens_kv, seq_lens_kv)
    return _attention_ex(q, k, v, tensors, text, description, has_dropout, layout, sizes,
                         layout_args, num_splits, decode, deterministic, return_lse,
                         host_seq_lens_kv)


def _plan_call(q: Tensor, batch: int, heads_q: int, q_len: int, head_dim: int, heads_kv: int,
               kv_len: int, head_dim_v: int, mask: Any, score: Any, inputs: Any,
               dropout_p: Any, scale: Any, spec: Any, deterministic: Any,
               return_lse: Any) -> tuple:
    """(plan text, inputs description, has dropout, input tensors) of a call whose q, k, v are
    checked and have these sizes, after the checks of the other arguments."""
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or not (
            0.0 <= dropout_p < 1.0):
        _fail(f"dropout_p: expected a probability in [0, 1), got {dropout_p!r}")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)
                              or not 0 < scale < float("inf")):
        _fail(f"scale: expected None or a positive finite number, got {scale!r}")
    if spec is not None and not isinstance(spec, Spec):
        _fail(f"spec: expected None or an attnc.Spec, got {type(spec).__name__}")
    dtype = _DTYPES[q.dtype]
    spec_key = None
    declared = None
    if spec is not None:
        if spec._text is not None and (mask, score, scale) != (None, None, None) or (
                spec._text is not None and dropout_p):
            _fail("mask, score, scale, dropout_p: expected None with a spec read from YAML "
                  "(write them in the YAML), got some")
        for arg, mine, theirs in (("q", head_dim, spec.head_dim), ("v", head_dim_v,
                                                                    spec.head_dim_v),
                                  ("q", dtype, spec.dtype)):
            if theirs is not None and theirs != mine:
                _fail(f"{arg}: expected the spec's {theirs!r}, got {mine!r}")
        if spec.heads is not None and spec.heads != (heads_q, heads_kv):
            _fail(f"q, k: expected the spec's heads {spec.heads}, got ({heads_q}, {heads_kv})")
        mask = _merge("mask", mask, spec.mask)
        score = _merge("score", score, spec.score)
        scale = _merge("scale", scale, spec.scale)
        spec_p = spec.dropout.get("p") if isinstance(spec.dropout, dict) else spec.dropout
        if dropout_p and spec_p is not None and dropout_p != spec_p:
            _fail(f"dropout_p: expected the spec's {spec_p!r} (or 0), got {dropout_p!r}")
        # A spec that states its inputs takes only those; one without infers them all.
        declared = spec.inputs
        spec_key = spec.key()
    tensors, decls = _check_inputs(inputs, q, batch, heads_q, max(q_len, kv_len),
                                          declared)
    if deterministic not in (True, False):
        _fail(f"deterministic: expected a bool, got {deterministic!r}")
    if return_lse not in (True, False):
        _fail(f"return_lse: expected a bool, got {return_lse!r}")
    key = (spec_key, _freeze(mask), _freeze(score), _freeze(scale), _freeze(dropout_p),
           decls)
    if torch.compiler.is_compiling():
        text, description, has_dropout = _plan_constant(key)
    else:
        text, description, has_dropout = _make_plan(key)
    return text, description, has_dropout, tensors


def _attention(q: Tensor, k: Tensor, v: Tensor, tensors: list, text: str, description: str,
               has_dropout: bool, layout: str, deterministic: bool, return_lse: bool) -> Any:
    """attention() of contiguous q, k, v through attnc::forward (or its eager path)."""
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                              or v.requires_grad)
    if _eager(q):
        seed, offset = _draw_philox(_device_of(q)) if has_dropout else (0, 0)
        if needs_grad:
            out, lse = _EagerAttention.apply(q, k, v, tensors, seed, offset, text, description,
                                             layout, deterministic)
        else:
            out, lse = _forward_impl(q, k, v, tensors, seed, offset, text, description, layout,
                                     False, want_lse=return_lse)
    else:
        rng = torch.ops.attnc.philox_state(q, _OFFSET_INCREMENT) if has_dropout else None
        out, lse = torch.ops.attnc.forward(q, k, v, tensors, rng, text, description, layout,
                                           needs_grad, deterministic)
    return (out, lse) if return_lse else out


def call_kernel(kernel: Kernel, q: Tensor, k: Tensor, v: Tensor, *, inputs: Optional[dict],
                layout: str, deterministic: bool, return_lse: bool, **inference: Any) -> Any:
    """Kernel.__call__: attention() with the kernel's spec, reusing the kernel itself on a GPU
    of its target."""
    if isinstance(q, Tensor) and q.is_cuda:
        device = _device_of(q)
        if device not in kernel._torch_devices:
            if _device_target(device) == kernel.info.target:
                with _lock:
                    _kernels.setdefault((kernel.spec.key(), device, kernel.info.has_backward),
                                        kernel)
            kernel._torch_devices.add(device)
    return attention(q, k, v, inputs=inputs, layout=layout, deterministic=deterministic,
                     return_lse=return_lse, spec=kernel.spec, **inference)


def _device_target(device: int) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


# ---- inside the ops: the kernels and their launches ----

def _kernel(text: str, q: Tensor, k: Tensor, v: Tensor, layout: str, device: int,
            backward: bool) -> Kernel:
    """The kernel of plan `text` for these tensors on `device`: one compiled with backward
    serves forward calls too."""
    h_axis, _ = _axes(layout)
    return _kernel_sized(text, _DTYPES[q.dtype], q.shape[3], v.shape[3], q.shape[h_axis],
                         k.shape[h_axis], device, backward)


def _kernel_sized(text: str, dtype: str, head_dim: int, head_dim_v: int, heads_q: int,
                  heads_kv: int, device: int, backward: bool) -> Kernel:
    """_kernel for tensors of these sizes."""
    spec, spec_key = _resolve(text, dtype, head_dim, head_dim_v, heads_q, heads_kv)
    found = _kernels.get((spec_key, device, True))
    if found is None and not backward:
        found = _kernels.get((spec_key, device, False))
    if found is not None:
        return found
    with torch.cuda.device(device):
        kernel = compile_spec(spec, None, backward=backward)
    with _lock:
        return _kernels.setdefault((spec_key, device, backward), kernel)


class _LaunchState:
    """Per (kernel, inputs description): where each declared input comes from and its dims."""

    def __init__(self, kernel: Kernel, description: str) -> None:
        passed = {}
        for i, entry in enumerate(filter(None, description.split(";"))):
            name, dims = entry.split(":")
            passed[name] = (i, tuple(dims.split(",")))
        missing = [n for n in kernel.info.input_names if n not in passed]
        if missing:
            _fail(f"inputs: expected a tensor for the spec's input '{missing[0]}', got none")
        extra = [n for n in passed if n not in kernel.info.input_names]
        if extra:
            _fail(f"inputs: expected only the spec's inputs "
                  f"({', '.join(kernel.info.input_names) or 'none'}), got '{extra[0]}'")
        # (index in the passed list, dims, name) per declared input, in the kernel's order
        self.order = tuple(passed[n] + (n,) for n in kernel.info.input_names)


def _check_kernel(kernel: Kernel, q: Tensor, k: Tensor, v: Tensor, layout: str) -> None:
    """The tensors against the kernel's heads, head dims and dtype (a spec read from YAML states
    them itself, and the C API sizes the tensors by the kernel's)."""
    info = kernel.info
    h_axis, _ = _axes(layout)
    given = (q.shape[h_axis], k.shape[h_axis], q.shape[3], v.shape[3], _DTYPES[q.dtype])
    if given != (info.heads_q, info.heads_kv, info.head_dim, info.head_dim_v, info.dtype):
        _fail(f"q, k, v: expected the spec's heads ({info.heads_q}, {info.heads_kv}), head_dim "
              f"{info.head_dim}, head_dim_v {info.head_dim_v} and dtype {info.dtype}, got "
              f"({given[0]}, {given[1]}), {given[2]}, {given[3]} and {given[4]}")


def _launch_state(kernel: Kernel, description: str) -> _LaunchState:
    states = kernel._torch_state
    if states is None:
        states = kernel._torch_state = {}
    state = states.get(description)
    if state is None:
        state = states[description] = _LaunchState(kernel, description)
    return state


def _tensor_fields(t: Tensor, layout: str) -> tuple:
    """attnc_tensor's (data, stride_b, stride_h, stride_s) of a 4-d tensor that is only read."""
    shape = t.shape
    sb, s1, s2, _ = t.stride()
    # A dimension of extent 1 is never stepped: stride 0 spares it the multiple-of-8 rule (the
    # C API takes 0 for tensors it reads; those it writes are ours, allocated contiguous).
    sb = sb if shape[0] > 1 else 0
    s1 = s1 if shape[1] > 1 else 0
    s2 = s2 if shape[2] > 1 else 0
    if layout == "bhsd":
        return t.data_ptr(), sb, s1, s2
    return t.data_ptr(), sb, s2, s1


def _written_fields(t: Tensor, layout: str) -> tuple:
    """attnc_tensor's fields of a tensor the kernel writes: its own (positive) strides."""
    sb, s1, s2, _ = t.stride()
    if layout == "bhsd":
        return t.data_ptr(), sb, s1, s2
    return t.data_ptr(), sb, s2, s1


def _check_pointer(name: str, t: Tensor) -> None:
    if t.data_ptr() % _TENSOR_ALIGN:
        _fail(f"{name}: expected a {_TENSOR_ALIGN}-byte aligned data pointer, got one "
              f"{t.data_ptr() % _TENSOR_ALIGN} bytes past; pass {name}.contiguous() (a view "
              f"into the middle of a tensor: {name}.clone())")


def _inputs_array(state: _LaunchState, inputs: list) -> tuple:
    """(the attnc_input array or None, its address, its length) in the kernel's order."""
    if not state.order:
        return None, 0, 0
    structs = []
    for index, dims, name in state.order:
        t = inputs[index]
        if t.data_ptr() % _INPUT_ALIGN:
            _fail(f"inputs['{name}']: expected a {_INPUT_ALIGN}-byte aligned data pointer, got "
                  f"one {t.data_ptr() % _INPUT_ALIGN} bytes past; pass inputs['{name}'].clone()")
        strides = dict(zip(dims, t.stride()))
        structs.append(_capi.Input(t.data_ptr(), strides.get("b", 0), strides.get("h", 0),
                                   strides.get("pos", 0)))
    array = (_capi.Input * len(structs))(*structs)
    return array, ctypes.addressof(array), len(structs)


def _sizes(q: Tensor, k: Tensor, layout: str) -> tuple:
    s_axis = 2 if layout == "bhsd" else 1
    return q.shape[0], q.shape[s_axis], k.shape[s_axis]


def _device_of(t: Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


# attnc_forward_args and attnc_backward_args field by field (natural alignment, no padding):
# packed in one call into a per-thread struct, far cheaper than building nested ctypes structs.
_TENSOR_FORMAT = "Qqqq"
_FORWARD_FORMAT = struct.Struct("<" + _TENSOR_FORMAT * 4 + "Q" + "qqq" + "Qq" + "QQ")
_BACKWARD_FORMAT = struct.Struct("<" + _TENSOR_FORMAT * 8 + "Q" + "qqq" + "Qq" + "QQ" + "ii"
                                 + "Qq")
_per_thread = threading.local()


def _thread_structs(name: str, *types) -> tuple:
    """This thread's instances of the ctypes structs `types`, made once and refilled per call
    (a launch packs its arguments into them rather than allocating)."""
    structs = getattr(_per_thread, name, None)
    if structs is None:
        structs = tuple(t() for t in types)
        setattr(_per_thread, name, structs)
    return structs


def _args_structs() -> tuple:
    return _thread_structs("structs", _capi.ForwardArgs, _capi.BackwardArgs)


def _stream(device: int) -> int:
    """torch's current stream on `device`, as a CUstream address (the raw query where torch has
    it: no Stream object per call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return torch.cuda.current_stream(device).cuda_stream


def _on_device(device: int, launch: Any, args: Any) -> None:
    if torch.cuda.current_device() != device:
        with torch.cuda.device(device):
            launch(args, _stream(device))
    else:
        launch(args, _stream(device))


def _draw_philox(device: int, increment: int = _OFFSET_INCREMENT) -> tuple:
    """(seed, offset) for one dropout call from `device`'s CUDA generator, whose offset it
    advances, so the next call draws another mask and torch.manual_seed replays them."""
    if torch.cuda.is_current_stream_capturing():
        raise AttncError("dropout under CUDA graph capture: the kernels take the seed and offset "
                         "by value, so every replay would repeat the captured mask; capture "
                         "without dropout")
    generator = torch.cuda.default_generators[device]
    seed = generator.initial_seed()
    offset = generator.get_offset()
    generator.set_offset(offset + increment)
    return seed & _U64, offset


def _prepare_forward(kernel: Kernel, q: Tensor, k: Tensor, v: Tensor, inputs: list, seed: int,
                     offset: int, inputs_desc: str, layout: str, want_lse: bool = True) -> tuple:
    """(args, out, lse, inputs array): the forward's outputs allocated on q's device and its
    attnc_forward_args packed; the array must live until the launch returns. Without want_lse
    the kernel writes no LSE (lse is None): an inference call allocates only its output."""
    _check_kernel(kernel, q, k, v, layout)
    _check_pointer("q", q)
    _check_pointer("k", k)
    _check_pointer("v", v)
    batch, q_len, kv_len = _sizes(q, k, layout)
    out = torch.empty(q.shape[:3] + (v.shape[3],), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, kernel.info.heads_q, q_len), dtype=torch.float32,
                      device=q.device) if want_lse else None
    array, address, count = _inputs_array(_launch_state(kernel, inputs_desc), inputs)
    args = _args_structs()[0]
    _FORWARD_FORMAT.pack_into(args, 0, *_tensor_fields(q, layout), *_tensor_fields(k, layout),
                              *_tensor_fields(v, layout), *_written_fields(out, layout),
                              lse.data_ptr() if want_lse else 0, batch, q_len, kv_len, address,
                              count, seed, offset)
    return args, out, lse, array


def _forward_impl(q: Tensor, k: Tensor, v: Tensor, inputs: list, seed: int, offset: int,
                  text: str, inputs_desc: str, layout: str, backward: bool,
                  want_lse: bool = True) -> tuple:
    """Launches the forward of plan `text` on torch's current stream: (out, lse), lse None
    without want_lse."""
    device = _device_of(q)
    kernel = _kernel(text, q, k, v, layout, device, backward)
    args, out, lse, array = _prepare_forward(kernel, q, k, v, inputs, seed, offset,
                                             inputs_desc, layout, want_lse)
    _on_device(device, kernel.launch, args)
    return out, lse


def _launchable(t: Tensor) -> Tensor:
    """t (4-d, or 3-d packed rows), or a contiguous copy where its layout breaks the C API's
    rules (an incoming gradient may be a broadcast or a view)."""
    strides_ok = t.stride(-1) == 1 and all(
        t.shape[a] <= 1 or t.stride(a) % _STRIDE_MULTIPLE == 0 for a in range(t.dim() - 1))
    if strides_ok and t.data_ptr() % _TENSOR_ALIGN == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _prepare_backward(kernel: Kernel, grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor,
                      out: Tensor, lse: Tensor, inputs: list, seed: int, offset: int,
                      inputs_desc: str, layout: str, deterministic: bool) -> tuple:
    """(args, dq, dk, dv, what must live until the launch returns): the gradients and the
    workspace allocated on q's device and attnc_backward_args packed."""
    grad_out = _launchable(grad_out)
    batch, q_len, kv_len = _sizes(q, k, layout)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    array, address, count = _inputs_array(_launch_state(kernel, inputs_desc), inputs)
    workspace_bytes = kernel.backward_workspace_bytes(batch, q_len, deterministic)
    # From torch's allocator, per call: stream-ordered and capturable, where the kernel's own
    # workspace would be shared across streams and allocated with a synchronizing cuMemAlloc.
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    args = _args_structs()[1]
    _BACKWARD_FORMAT.pack_into(
        args, 0, *_tensor_fields(q, layout), *_tensor_fields(k, layout),
        *_tensor_fields(v, layout), *_tensor_fields(out, layout),
        *_tensor_fields(grad_out, layout), *_written_fields(dq, layout),
        *_written_fields(dk, layout), *_written_fields(dv, layout), lse.data_ptr(), batch, q_len,
        kv_len, address, count, seed, offset, int(deterministic), 0, workspace.data_ptr(),
        workspace_bytes)
    return args, dq, dk, dv, (array, workspace, grad_out)


def _backward_impl(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                   lse: Tensor, inputs: list, seed: int, offset: int, text: str,
                   inputs_desc: str, layout: str, deterministic: bool) -> tuple:
    """Launches the backward of plan `text` on torch's current stream: (dq, dk, dv)."""
    device = _device_of(q)
    kernel = _kernel(text, q, k, v, layout, device, True)
    args, dq, dk, dv, alive = _prepare_backward(kernel, grad_out, q, k, v, out, lse, inputs,
                                                seed, offset, inputs_desc, layout,
                                                deterministic)
    _on_device(device, kernel.launch_backward, args)
    return dq, dk, dv


# ---- the custom ops: what torch.compile, fake tensors and modes see ----

def _rng_values(rng: Optional[Tensor]) -> tuple:
    if rng is None:
        return 0, 0
    seed, offset = rng.tolist()
    return seed & _U64, offset & _U64


@torch.library.custom_op("attnc::philox_state", mutates_args=(), device_types="cuda",
                         tags=(torch.Tag.nondeterministic_seeded,))
def _philox_state(q: Tensor, increment: int) -> Tensor:
    """(seed, offset) of q's device's CUDA generator as int64 on the CPU (the seed's bits);
    advances the offset, so the next call draws another dropout mask."""
    seed, offset = _draw_philox(_device_of(q), increment)
    return torch.tensor([seed - (1 << 64) if seed >= (1 << 63) else seed, offset],
                        dtype=torch.int64)


@_philox_state.register_fake
def _philox_state_fake(q: Tensor, increment: int) -> Tensor:
    return torch.empty(2, dtype=torch.int64, device="cpu")


@torch.library.custom_op("attnc::forward", mutates_args=(), device_types="cuda")
def _forward(q: Tensor, k: Tensor, v: Tensor, inputs: list[Tensor], rng: Optional[Tensor],
             spec: str, inputs_desc: str, layout: str, backward: bool,
             deterministic: bool) -> tuple[Tensor, Tensor]:
    """out (shaped like q with v's head dim) and the LSE [B, Hq, Sq] float32 of the variant
    `spec` (a plan's text, see _make_plan); `backward`: compile the kernel with its backward
    kernels; `deterministic` is the backward's."""
    seed, offset = _rng_values(rng)
    return _forward_impl(q, k, v, inputs, seed, offset, spec, inputs_desc, layout, backward)


@_forward.register_fake
def _forward_fake(q: Tensor, k: Tensor, v: Tensor, inputs: list[Tensor], rng: Optional[Tensor],
                  spec: str, inputs_desc: str, layout: str, backward: bool,
                  deterministic: bool) -> tuple[Tensor, Tensor]:
    h_axis, s_axis = _axes(layout)
    out = q.new_empty(q.shape[:3] + (v.shape[3],))
    lse = q.new_empty((q.shape[0], q.shape[h_axis], q.shape[s_axis]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("attnc::backward", mutates_args=(), device_types="cuda")
def _backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
              inputs: list[Tensor], rng: Optional[Tensor], spec: str, inputs_desc: str,
              layout: str, deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of attnc::forward's out, given its gradient grad_out."""
    seed, offset = _rng_values(rng)
    return _backward_impl(grad_out, q, k, v, out, lse, inputs, seed, offset, spec, inputs_desc,
                          layout, deterministic)


@_backward.register_fake
def _backward_fake(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   inputs: list[Tensor], rng: Optional[Tensor], spec: str, inputs_desc: str,
                   layout: str, deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, input_tensors, rng, spec, inputs_desc, layout, _, deterministic = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, rng, *input_tensors)
    ctx.spec, ctx.inputs_desc, ctx.layout, ctx.deterministic = (spec, inputs_desc, layout,
                                                                deterministic)


def _autograd_backward(ctx: Any, grad_out: Tensor, grad_lse: Optional[Tensor]) -> tuple:
    q, k, v, out, lse, rng, *input_tensors = ctx.saved_tensors
    dq, dk, dv = torch.ops.attnc.backward(grad_out, q, k, v, out, lse, input_tensors, rng,
                                          ctx.spec, ctx.inputs_desc, ctx.layout,
                                          ctx.deterministic)
    return dq, dk, dv, [None] * len(input_tensors), None, None, None, None, None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


# ---- the eager path: the same launches without the dispatcher ----

class _EagerAttention(torch.autograd.Function):
    """attnc::forward with its autograd, for eager calls on plain CUDA tensors: the dispatcher
    costs tens of microseconds a call (docs: the 20 us overhead budget), autograd.Function a
    few. Same launches, same saved tensors and (seed, offset)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, inputs: list, seed: int,
                offset: int, text: str, inputs_desc: str, layout: str,
                deterministic: bool) -> tuple:
        out, lse = _forward_impl(q, k, v, inputs, seed, offset, text, inputs_desc, layout, True)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan = (inputs, seed, offset, text, inputs_desc, layout, deterministic)
        return out, lse

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, grad_lse: Optional[Tensor]) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward_impl(grad_out, q, k, v, out, lse, *ctx.plan)
        return dq, dk, dv, None, None, None, None, None, None, None


def _eager(q: Tensor) -> bool:
    """Whether a call may skip the custom ops: eager, a plain CUDA tensor, no dispatch mode."""
    return (type(q) is Tensor and q.is_cuda and not torch.compiler.is_compiling()
            and _current_dispatch_mode() is None)


# ---- varlen, paged K/V and the decode options: attnc::forward_ex (attnc_kernel_forward_ex) ----
#
# A second op, so that attnc::forward's schema stays as it is. No dropout: the decode kernel,
# which inference launches take, has none. Training on packed batches (q, k or v requiring grad
# with cu_seqlens_q/kv) takes one host copy of the cu_seqlens before the forward: with it the
# forward runs the forward kernels a sequence at a time (runtime/PerSequenceLaunch.cpp) where the
# decode kernel would not, and attnc::backward_ex (attnc_kernel_backward_ex) launches each
# sequence's backward from the same copy. Paged K/V and the decode options are inference only.

_DECODE_CHOICES = {"auto": _capi.ATTNC_DECODE_AUTO, "off": _capi.ATTNC_DECODE_OFF,
                   "on": _capi.ATTNC_DECODE_ON}
_MAX_SPLITS = 128  # attnc_forward_args_ex.num_splits: 0 (derived) or 1..128
_MAX_PAGE_SIZE = 256  # PagedKVArg.page_size: a power of two in [1, 256]
_MAX_BATCH = 65535  # the grid's z extent: sequences a launch takes


def _check_index(name: str, t: Any, q: Tensor, rank: int, what: str) -> tuple:
    """The shape of an int32 index tensor (cu_seqlens_*, block_table, seq_lens_kv) on q's device
    with a contiguous last dim; `what` says its shape in words."""
    if not isinstance(t, Tensor):
        _fail(f"{name}: expected a torch.Tensor ({what}), got {type(t).__name__}")
    if t.dtype != torch.int32:
        _fail(f"{name}: expected dtype torch.int32, got {t.dtype}")
    if t.device != q.device:
        _fail(f"{name}: expected a tensor on q's device {q.device} (the kernels read it; no host "
              f"copy is taken), got one on {t.device}")
    if t.dim() != rank:
        _fail(f"{name}: expected {rank} dim{'s' if rank > 1 else ''} ({what}), got shape "
              f"{tuple(t.shape)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        _fail(f"{name}: expected a contiguous last dim (stride 1), got strides "
              f"{tuple(t.stride())}; pass {name}.contiguous()")
    return tuple(t.shape)


def _check_length(name: str, value: Any, required: bool, tensor_len: Optional[int],
                  bound: Optional[int], bound_text: str) -> Optional[int]:
    """max_seqlen_q or max_seqlen_kv: an int >= 1 (symbolic under dynamic shapes), required with
    packed rows, equal to the tensor's length on a contiguous side, at most `bound`."""
    if value is None:
        if required:
            _fail(f"{name}: expected the longest sequence's length (an int >= 1; it sizes the "
                  f"grid without reading the lengths on the host), got None")
        return tensor_len
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        _fail(f"{name}: expected None or an int >= 1, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            _fail(f"{name}: expected None or an int >= 1, got {value}")
        if tensor_len is not None and value != tensor_len:
            _fail(f"{name}: expected None or the tensor's length {tensor_len}, got {value}")
        if bound is not None and value > bound:
            _fail(f"{name}: expected at most {bound_text} = {bound}, got {value}")
    return value


def _check_ex(q: Any, k: Any, v: Any, layout: str, cu_seqlens_q: Any, cu_seqlens_kv: Any,
              max_seqlen_q: Any, max_seqlen_kv: Any, block_table: Any, seq_lens_kv: Any,
              num_splits: Any, decode: Any) -> tuple:
    """(batch, heads_q, q_len, head_dim, heads_kv, kv_len, head_dim_v, total_q, page_size) of an
    inference call after every check of its tensors and options; q_len, kv_len the longest
    sequence's; total_q q's rows when packed (else 0), page_size 0 unless paged."""
    if layout != "bhsd" and layout != "bshd":
        _fail(f"layout: expected 'bhsd' or 'bshd', got {layout!r}")
    if not isinstance(decode, str) or decode not in _DECODE_CHOICES:
        _fail(f"decode: expected 'auto', 'on' or 'off', got {decode!r}")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not (
            0 <= num_splits <= _MAX_SPLITS):
        _fail(f"num_splits: expected an int in [0, {_MAX_SPLITS}] (0: derived from the device "
              f"and the lengths), got {num_splits!r}")
    h_axis, s_axis = _axes(layout)
    packed_q = cu_seqlens_q is not None
    packed_kv = cu_seqlens_kv is not None
    paged = block_table is not None or seq_lens_kv is not None
    if packed_kv and paged:
        _fail("cu_seqlens_kv: expected None with block_table (K/V are either packed or paged), "
              "got a tensor")
    if block_table is None and seq_lens_kv is not None:
        _fail("block_table: expected an int32 tensor [B, max_pages] with seq_lens_kv, got None")
    if block_table is not None and seq_lens_kv is None:
        _fail("seq_lens_kv: expected an int32 tensor [B] (each sequence's kv length) with "
              "block_table, got None")
    pool = "pages, page_size, H, D" if layout == "bshd" else "pages, H, page_size, D"
    shapes = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        if name == "q" and packed_q or name != "q" and packed_kv:
            rows = "total_q" if name == "q" else "total_kv"
            shapes[name] = _check_tensor(name, t, layout, f"{rows}, H, D: packed rows, as "
                                         f"cu_seqlens_{'q' if name == 'q' else 'kv'} is given",
                                         rank=3)
        elif name != "q" and paged:
            shapes[name] = _check_tensor(name, t, layout, f"{pool}: a paged pool for layout "
                                         f"'{layout}'")
        else:
            shapes[name] = _check_tensor(name, t, layout)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        _fail(f"k, v: expected q's dtype {q.dtype}, got k {k.dtype} and v {v.dtype}")
    if k.device != q.device or v.device != q.device:
        _fail(f"k, v: expected q's device {q.device}, got k on {k.device} and v on {v.device}")
    q_shape, k_shape, v_shape = shapes["q"], shapes["k"], shapes["v"]
    heads_q = q_shape[1] if packed_q else q_shape[h_axis]
    kv_h = 1 if packed_kv else h_axis
    kv_s = 0 if packed_kv else s_axis  # packed rows, or a pool's page rows
    heads_kv, head_dim, head_dim_v = k_shape[kv_h], q_shape[-1], v_shape[-1]
    if k_shape[-1] != head_dim:
        _fail(f"k: expected head dim {head_dim} (q's), got {k_shape[-1]}")
    if tuple(v_shape[:-1]) != tuple(k_shape[:-1]):
        _fail(f"v: expected k's shape but the head dim, {list(k_shape[:-1])} + [Dv], got "
              f"{list(v_shape)}")
    if any(n == 0 for n in (*q_shape, *k_shape, *v_shape)):
        _fail(f"q, k, v: expected non-empty tensors, got q {tuple(q_shape)}, k {tuple(k_shape)} "
              f"and v {tuple(v_shape)}")
    if heads_q % heads_kv:
        _fail(f"k: expected a head count that divides q's {heads_q}, got {heads_kv}")

    # The number of sequences: every tensor that has it must agree with the first.
    batch, first = None, None
    sources = []
    if packed_q:
        n = _check_index("cu_seqlens_q", cu_seqlens_q, q, 1, "[B + 1] row offsets")[0]
        sources.append(("cu_seqlens_q", n - 1, f"{n} entries"))
    else:
        sources.append(("q", q_shape[0], f"batch {q_shape[0]}"))
    if packed_kv:
        n = _check_index("cu_seqlens_kv", cu_seqlens_kv, q, 1, "[B + 1] row offsets")[0]
        sources.append(("cu_seqlens_kv", n - 1, f"{n} entries"))
    elif paged:
        rows, max_pages = _check_index("block_table", block_table, q, 2, "[B, max_pages] page ids")
        sources.append(("block_table", rows, f"{rows} rows"))
        n = _check_index("seq_lens_kv", seq_lens_kv, q, 1, "[B] kv lengths")[0]
        sources.append(("seq_lens_kv", n, f"{n} entries"))
    else:
        sources.append(("k", k_shape[0], f"batch {k_shape[0]}"))
    for name, n, given in sources:
        if batch is None:
            batch, first = n, name
            if not 1 <= n <= _MAX_BATCH:
                _fail(f"{name}: expected 1 to {_MAX_BATCH} sequences, got {given}")
        elif n != batch:
            _fail(f"{name}: expected {batch} sequences ({first}'s), got {given}")

    total_q = q_shape[0] if packed_q else 0
    q_len = _check_length("max_seqlen_q", max_seqlen_q, packed_q,
                          None if packed_q else q_shape[s_axis], total_q or None, "q's rows")
    page_size = 0
    if packed_kv:
        kv_len = _check_length("max_seqlen_kv", max_seqlen_kv, True, None, k_shape[0],
                               "k's rows")
    elif paged:
        page_size = k_shape[s_axis]
        if page_size > _MAX_PAGE_SIZE or page_size & (page_size - 1):
            _fail(f"k: expected a page size (dim {s_axis} of a pool in layout '{layout}') that "
                  f"is a power of two in [1, {_MAX_PAGE_SIZE}], got {page_size}")
        # Without max_seqlen_kv: the table's capacity, which sizes the splits for the longest
        # possible sequence (shorter ones skip the splits past their keys).
        capacity = max_pages * page_size
        kv_len = _check_length("max_seqlen_kv", max_seqlen_kv, False, None, capacity,
                               "block_table's max_pages x page_size")
        kv_len = capacity if kv_len is None else kv_len
    else:
        kv_len = _check_length("max_seqlen_kv", max_seqlen_kv, False, k_shape[s_axis], None, "")
    return (batch, heads_q, q_len, head_dim, heads_kv, kv_len, head_dim_v, total_q, page_size)


def _attention_ex(q: Tensor, k: Tensor, v: Tensor, tensors: list, text: str, description: str,
                  has_dropout: bool, layout: str, sizes: tuple, layout_args: dict,
                  num_splits: int, decode: str, deterministic: bool, return_lse: bool,
                  host_lens: Optional[Tensor] = None) -> Any:
    """attention() with varlen, paged K/V or decode options, through attnc::forward_ex (or its
    eager path) after the checks only this path has. host_lens: the caller's CPU copy of
    seq_lens_kv, or None."""
    given = [n for n, a in layout_args.items() if a is not None]
    given += [n for n, a in (("num_splits", num_splits), ("decode", decode != "auto")) if a]
    if has_dropout:
        _fail(f"dropout_p, spec: expected no dropout with {', '.join(given)} (the decode kernel "
              f"these launches take has none), got a variant with dropout")
    q_len, kv_len = sizes[2], sizes[5]
    choice = _DECODE_CHOICES[decode]
    cu_q, cu_kv = layout_args["cu_seqlens_q"], layout_args["cu_seqlens_kv"]
    table, lens = layout_args["block_table"], layout_args["seq_lens_kv"]
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                              or v.requires_grad)
    host_q = host_kv = None
    if needs_grad:
        _check_trainable(table is not None, num_splits, decode)
        host_q, host_kv = _host_copies(cu_q, cu_kv)
    if _eager(q):
        if needs_grad:
            out, lse = _EagerAttentionEx.apply(q, k, v, tensors, cu_q, cu_kv, host_q, host_kv,
                                               q_len, kv_len, text, description, layout,
                                               deterministic)
        else:
            out, lse = _forward_ex_impl(q, k, v, tensors, cu_q, cu_kv, table, lens, q_len,
                                        kv_len, text, description, layout, num_splits, choice,
                                        return_lse, host_lens=host_lens)
        return (out, lse) if return_lse else out
    out, lse = torch.ops.attnc.forward_ex(q, k, v, tensors, cu_q, cu_kv, table, lens, q_len,
                                          kv_len, text, description, layout, num_splits, choice,
                                          host_q, host_kv, host_lens, needs_grad, deterministic)
    return (out, lse) if return_lse else out


def _check_trainable(paged: bool, num_splits: int, decode: str) -> None:
    """The inference-only arguments are refused when a gradient is needed: the backward takes no
    paged K/V, and the decode options choose among inference kernels (a training call's forward
    is chosen as the backward needs it)."""
    advice = "; call under torch.no_grad() (or pass detached tensors) for inference"
    if paged:
        _fail(f"block_table: expected None when q, k or v requires grad (the backward takes no "
              f"paged K/V; pack K/V with cu_seqlens_kv to train), got a tensor{advice}")
    if num_splits:
        _fail(f"num_splits: expected 0 when q, k or v requires grad (split-KV is an inference "
              f"option), got {num_splits}{advice}")
    if decode != "auto":
        _fail(f"decode: expected 'auto' when q, k or v requires grad (the decode kernel is an "
              f"inference option), got {decode!r}{advice}")


def _host_copies(cu_q: Optional[Tensor], cu_kv: Optional[Tensor]) -> tuple:
    """(host cu_seqlens_q, host cu_seqlens_kv): CPU copies of those given, made by one
    device-to-host copy, which synchronizes with the device. Meta tensors stand for their own
    copies (nothing is launched from them)."""
    given = [t for t in (cu_q, cu_kv) if t is not None]
    if not given or given[0].is_meta:
        return cu_q, cu_kv
    host = torch.stack(given).cpu() if len(given) == 2 else given[0].cpu()[None]
    if cu_q is None:
        return None, host[0]
    return host[0], (host[1] if cu_kv is not None else None)


def _check_host(name: str, host: Optional[Tensor], device_array: Optional[Tensor]) -> None:
    """A host copy of a length array (cu_seqlens_*, seq_lens_kv), as the ops take it: int32 on
    the CPU, contiguous, shaped as the device array, and given exactly where it is."""
    if device_array is None:
        if host is not None:
            _fail(f"{name}: expected None without {name[5:]}, got a tensor")
        return
    if host is None:
        return
    if not isinstance(host, Tensor) or host.dtype != torch.int32 or host.device.type != "cpu" or \
            not host.is_contiguous() or host.shape != device_array.shape:
        given = (f"{type(host).__name__}" if not isinstance(host, Tensor) else
                 f"{host.dtype} {tuple(host.shape)} on {host.device}")
        _fail(f"{name}: expected a contiguous int32 CPU tensor of {name[5:]}'s shape "
              f"{tuple(device_array.shape)}, got {given}")


def _check_sequences_trainable(host_q: Optional[Tensor], host_kv: Optional[Tensor], batch: int,
                               q_len: int, kv_len: int) -> None:
    """Each sequence has both queries and keys, or neither: the backward of a sequence with
    queries over no keys (or keys under no queries) is refused, so the forward refuses it."""
    q_rows = (host_q[1:] - host_q[:-1]).tolist() if host_q is not None else [q_len] * batch
    kv_rows = (host_kv[1:] - host_kv[:-1]).tolist() if host_kv is not None else [kv_len] * batch
    for b, (nq, nkv) in enumerate(zip(q_rows, kv_rows)):
        if (nq == 0) != (nkv == 0):
            name = "cu_seqlens_kv" if nkv == 0 else "cu_seqlens_q"
            _fail(f"{name}: expected sequences with both queries and keys (or neither) when q, "
                  f"k or v requires grad (the backward takes no others), got sequence {b} with "
                  f"{nq} queries and {nkv} keys")


def _packed_fields(t: Tensor) -> tuple:
    """attnc_tensor's fields of packed rows [total, H, D] (stride_b is not used); extent-1 dims
    as in _tensor_fields."""
    rows, heads = t.shape[0], t.shape[1]
    return (t.data_ptr(), 0, t.stride(1) if heads > 1 else 0, t.stride(0) if rows > 1 else 0)


def _pool_fields(pool: Tensor, layout: str) -> tuple:
    """(attnc_tensor's fields, the page stride) of a paged pool: its page axis is the batch
    axis, which the C API does not use."""
    ptr, _, stride_h, stride_s = _tensor_fields(pool, layout)
    pages, page_size, heads = pool.shape[0], pool.shape[_axes(layout)[1]], pool.shape[_axes(
        layout)[0]]
    if pages > 1:
        stride_page = pool.stride(0)
    else:  # never stepped: the page's footprint, rounded up to the stride rule
        footprint = (page_size - 1) * stride_s + (heads - 1) * stride_h + pool.shape[3]
        stride_page = -(-footprint // _STRIDE_MULTIPLE) * _STRIDE_MULTIPLE
    return (ptr, 0, stride_h, stride_s), stride_page


# attnc_seq_layout and attnc_forward_args_ex field by field, as _FORWARD_FORMAT.
_SEQ_LAYOUT_FORMAT = struct.Struct("<II" + "QQ" + "qq" + "QQ" + "qqqq" + "qq" + "QQQQ")
_FORWARD_EX_FORMAT = struct.Struct("<Ii" + _FORWARD_FORMAT.format.lstrip("<") + "Q" + "ii"
                                   + "Qq" + "Q")


def _address(t: Optional[Tensor]) -> int:
    return t.data_ptr() if t is not None else 0


def _check_ex_kernel(kernel: Kernel, q: Tensor, k: Tensor, v: Tensor, packed_q: bool,
                     packed_kv: bool, layout: str) -> int:
    """heads_q, after the tensors' heads, head dims and dtype against the kernel's and their
    pointers' alignment."""
    info = kernel.info
    h_axis, _ = _axes(layout)
    heads_q = q.shape[1] if packed_q else q.shape[h_axis]
    heads_kv = k.shape[1] if packed_kv else k.shape[h_axis]
    given = (heads_q, heads_kv, q.shape[-1], v.shape[-1], _DTYPES[q.dtype])
    if given != (info.heads_q, info.heads_kv, info.head_dim, info.head_dim_v, info.dtype):
        _fail(f"q, k, v: expected the spec's heads ({info.heads_q}, {info.heads_kv}), head_dim "
              f"{info.head_dim}, head_dim_v {info.head_dim_v} and dtype {info.dtype}, got "
              f"({given[0]}, {given[1]}), {given[2]}, {given[3]} and {given[4]}")
    _check_pointer("q", q)
    _check_pointer("k", k)
    _check_pointer("v", v)
    return heads_q


def _ex_structs() -> tuple:
    return _thread_structs("ex_structs", _capi.ForwardArgsEx, _capi.SeqLayout)


def _prepare_forward_ex(kernel: Kernel, q: Tensor, k: Tensor, v: Tensor, inputs: list,
                        cu_q: Optional[Tensor], cu_kv: Optional[Tensor],
                        table: Optional[Tensor], lens: Optional[Tensor], q_len: int,
                        kv_len: int, inputs_desc: str, layout: str, num_splits: int,
                        decode: int, want_lse: bool = True, host_q: Optional[Tensor] = None,
                        host_kv: Optional[Tensor] = None,
                        host_lens: Optional[Tensor] = None) -> tuple:
    """(args, out, lse, what must live until the launch returns): the outputs allocated on q's
    device, attnc_forward_args_ex and its attnc_seq_layout packed, and the split partials'
    workspace from torch's allocator (stream-ordered, and capturable). host_q, host_kv: host
    copies of cu_seqlens_q/kv (checked by the C API, and with them a long sequence takes the
    forward kernels); host_lens: a host copy of seq_lens_kv (checked by the C API against the
    pages; with it the split count follows the batch's work)."""
    packed_q, packed_kv, paged = cu_q is not None, cu_kv is not None, table is not None
    heads_q = _check_ex_kernel(kernel, q, k, v, packed_q, packed_kv, layout)
    _check_host("host_cu_seqlens_q", host_q, cu_q)
    _check_host("host_cu_seqlens_kv", host_kv, cu_kv)
    _check_host("host_seq_lens_kv", host_lens, lens)
    dv = v.shape[-1]
    if packed_q:
        batch, total_q = cu_q.shape[0] - 1, q.shape[0]
        out = torch.empty((total_q, heads_q, dv), dtype=q.dtype, device=q.device)
        lse = torch.empty((heads_q, total_q), dtype=torch.float32,
                          device=q.device) if want_lse else None
        q_fields, o_fields = _packed_fields(q), (out.data_ptr(), 0, out.stride(1),
                                                 out.stride(0))
    else:
        batch, total_q = q.shape[0], 0
        out = torch.empty(q.shape[:3] + (dv,), dtype=q.dtype, device=q.device)
        lse = torch.empty((batch, heads_q, q.shape[_axes(layout)[1]]), dtype=torch.float32,
                          device=q.device) if want_lse else None
        q_fields, o_fields = _tensor_fields(q, layout), _written_fields(out, layout)
    stride_pages = (0, 0)
    if packed_kv:
        k_fields, v_fields = _packed_fields(k), _packed_fields(v)
    elif paged:
        (k_fields, k_page), (v_fields, v_page) = _pool_fields(k, layout), _pool_fields(v, layout)
        stride_pages = (k_page, v_page)
    else:
        k_fields, v_fields = _tensor_fields(k, layout), _tensor_fields(v, layout)
    array, address, count = _inputs_array(_launch_state(kernel, inputs_desc), inputs)
    args, seq = _ex_structs()
    layout_address = 0
    if packed_q or packed_kv or paged:
        page_size = k.shape[_axes(layout)[1]] if paged else 0
        table_stride = (table.stride(0) if table.shape[0] > 1 else table.shape[1]) if paged else 0
        _SEQ_LAYOUT_FORMAT.pack_into(
            seq, 0, _SEQ_LAYOUT_FORMAT.size, 0, cu_q.data_ptr() if packed_q else 0,
            cu_kv.data_ptr() if packed_kv else 0, total_q, k.shape[0] if packed_kv else 0,
            table.data_ptr() if paged else 0, lens.data_ptr() if paged else 0, table_stride,
            table.shape[1] if paged else 0, page_size, k.shape[0] if paged else 0,
            *stride_pages, _address(host_q), _address(host_kv), 0, _address(host_lens))
        layout_address = ctypes.addressof(seq)
    _FORWARD_EX_FORMAT.pack_into(args, 0, _FORWARD_EX_FORMAT.size, decode, *q_fields, *k_fields,
                                 *v_fields, *o_fields, lse.data_ptr() if want_lse else 0, batch,
                                 q_len, kv_len, address, count, 0, 0, layout_address, num_splits,
                                 0, 0, 0, 0)
    # The partials' bytes follow from the lengths, the options and the device's SMs alone; with
    # host copies also from each sequence's length (the split rule sizes a mixed batch by its
    # work), so those calls ask every time.
    shape = (q.device, batch, q_len, kv_len, total_q, packed_kv, paged, num_splits, decode)
    with_host = host_q is not None or host_kv is not None or host_lens is not None
    workspace_bytes = None if with_host else kernel._torch_workspaces.get(shape)
    if workspace_bytes is None:
        workspace_bytes = kernel.forward_workspace_bytes(args)
        if not with_host:
            kernel._torch_workspaces[shape] = workspace_bytes
    workspace = None
    if workspace_bytes:
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=q.device)
        args.workspace, args.workspace_bytes = workspace.data_ptr(), workspace_bytes
    return args, out, lse, (array, workspace)


def _ex_kernel(text: str, q: Tensor, k: Tensor, v: Tensor, cu_q: Optional[Tensor],
               cu_kv: Optional[Tensor], layout: str, device: Any, backward: bool) -> Kernel:
    """The kernel of plan `text` for a forward_ex or backward_ex call: heads from packed rows
    [total, H, D] where cu_seqlens are given, else from `layout`."""
    h_axis, _ = _axes(layout)
    heads_q = q.shape[1] if cu_q is not None else q.shape[h_axis]
    heads_kv = k.shape[1] if cu_kv is not None else k.shape[h_axis]
    return _kernel_sized(text, _DTYPES[q.dtype], q.shape[-1], v.shape[-1], heads_q, heads_kv,
                         device, backward)


def _forward_ex_impl(q: Tensor, k: Tensor, v: Tensor, inputs: list, cu_q: Optional[Tensor],
                     cu_kv: Optional[Tensor], table: Optional[Tensor], lens: Optional[Tensor],
                     q_len: int, kv_len: int, text: str, inputs_desc: str, layout: str,
                     num_splits: int, decode: int, want_lse: bool = True,
                     host_q: Optional[Tensor] = None, host_kv: Optional[Tensor] = None,
                     backward: bool = False, host_lens: Optional[Tensor] = None) -> tuple:
    """Launches the forward of plan `text` through attnc_kernel_forward_ex on torch's current
    stream: (out, lse), lse None without want_lse. backward: a gradient will be needed (the
    kernel is compiled with its backward, and what the backward refuses is refused now)."""
    device = _device_of(q)
    kernel = _ex_kernel(text, q, k, v, cu_q, cu_kv, layout, device, backward)
    if backward:
        _check_trainable(table is not None, 0, "auto")
    args, out, lse, alive = _prepare_forward_ex(kernel, q, k, v, inputs, cu_q, cu_kv, table,
                                                lens, q_len, kv_len, inputs_desc, layout,
                                                num_splits, decode, want_lse, host_q, host_kv,
                                                host_lens)
    if backward and (host_q is not None or host_kv is not None):
        kernel.validate_ex(args)  # the offsets themselves before they are read as lengths
        _check_sequences_trainable(host_q, host_kv, args.base.batch, q_len, kv_len)
    _on_device(device, kernel.launch_ex, args)
    return out, lse


@torch.library.custom_op("attnc::forward_ex", mutates_args=(), device_types="cuda")
def _forward_ex(q: Tensor, k: Tensor, v: Tensor, inputs: list[Tensor],
                cu_seqlens_q: Optional[Tensor], cu_seqlens_kv: Optional[Tensor],
                block_table: Optional[Tensor], seq_lens_kv: Optional[Tensor], max_seqlen_q: int,
                max_seqlen_kv: int, spec: str, inputs_desc: str, layout: str, num_splits: int,
                decode: int, host_cu_seqlens_q: Optional[Tensor],
                host_cu_seqlens_kv: Optional[Tensor], host_seq_lens_kv: Optional[Tensor],
                backward: bool, deterministic: bool) -> tuple[Tensor, Tensor]:
    """out and LSE of a varlen, paged or decode launch (attnc_kernel_forward_ex): packed q
    [total_q, Hq, D] gives out [total_q, Hq, Dv] and LSE [Hq, total_q], else out shaped like q
    with Dv and LSE [B, Hq, Sq]; max_seqlen_*: the longest sequence's lengths; decode:
    attnc_forward_args_ex's. host_cu_seqlens_*: CPU copies of cu_seqlens_* (or None), which the
    backward needs; host_seq_lens_kv: a CPU copy of seq_lens_kv (or None), for the split count;
    `backward`: compile the kernel with its backward kernels; `deterministic` is the backward's.
    No defaults: the dispatcher drops trailing arguments equal to theirs, which would change the
    count of gradients the autograd formula must return."""
    return _forward_ex_impl(q, k, v, inputs, cu_seqlens_q, cu_seqlens_kv, block_table,
                            seq_lens_kv, max_seqlen_q, max_seqlen_kv, spec, inputs_desc, layout,
                            num_splits, decode, True, host_cu_seqlens_q, host_cu_seqlens_kv,
                            backward, host_seq_lens_kv)


@_forward_ex.register_fake
def _forward_ex_fake(q: Tensor, k: Tensor, v: Tensor, inputs: list[Tensor],
                     cu_seqlens_q: Optional[Tensor], cu_seqlens_kv: Optional[Tensor],
                     block_table: Optional[Tensor], seq_lens_kv: Optional[Tensor],
                     max_seqlen_q: int, max_seqlen_kv: int, spec: str, inputs_desc: str,
                     layout: str, num_splits: int, decode: int,
                     host_cu_seqlens_q: Optional[Tensor], host_cu_seqlens_kv: Optional[Tensor],
                     host_seq_lens_kv: Optional[Tensor], backward: bool,
                     deterministic: bool) -> tuple[Tensor, Tensor]:
    if q.dim() == 3:
        out = q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))
        return out, q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    h_axis, s_axis = _axes(layout)
    out = q.new_empty(q.shape[:3] + (v.shape[-1],))
    return out, q.new_empty((q.shape[0], q.shape[h_axis], q.shape[s_axis]), dtype=torch.float32)


# ---- the varlen backward: attnc::backward_ex (attnc_kernel_backward_ex) ----

# attnc_backward_args_ex field by field, as _FORWARD_EX_FORMAT.
_BACKWARD_EX_FORMAT = struct.Struct("<Ii" + _BACKWARD_FORMAT.format.lstrip("<") + "Q")


def _backward_ex_structs() -> tuple:
    return _thread_structs("backward_ex_structs", _capi.BackwardArgsEx, _capi.SeqLayout)


def _prepare_backward_ex(kernel: Kernel, grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor,
                         out: Tensor, lse: Tensor, inputs: list, cu_q: Optional[Tensor],
                         cu_kv: Optional[Tensor], host_q: Optional[Tensor],
                         host_kv: Optional[Tensor], q_len: int, kv_len: int, inputs_desc: str,
                         layout: str, deterministic: bool) -> tuple:
    """(args, dq, dk, dv, what must live until the launch returns): the gradients allocated like
    q, k, v, attnc_backward_args_ex and its attnc_seq_layout (the varlen part, with the host
    copies) packed, and the workspace from torch's allocator, sized for the longest sequence
    (each sequence's launch reuses it in stream order)."""
    packed_q, packed_kv = cu_q is not None, cu_kv is not None
    _check_ex_kernel(kernel, q, k, v, packed_q, packed_kv, layout)
    for name, host, array in (("host_cu_seqlens_q", host_q, cu_q),
                              ("host_cu_seqlens_kv", host_kv, cu_kv)):
        _check_host(name, host, array)
        if array is not None and host is None:
            _fail(f"{name}: expected a CPU copy of {name[5:]} (the backward launches each "
                  f"sequence from it), got None")
    grad_out = _launchable(grad_out)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)

    def read(t: Tensor, packed: bool) -> tuple:
        return _packed_fields(t) if packed else _tensor_fields(t, layout)

    def written(t: Tensor, packed: bool) -> tuple:
        return ((t.data_ptr(), 0, t.stride(1), t.stride(0)) if packed else
                _written_fields(t, layout))
    batch = (cu_q.shape[0] - 1 if packed_q else cu_kv.shape[0] - 1 if packed_kv
             else q.shape[0])
    array, address, count = _inputs_array(_launch_state(kernel, inputs_desc), inputs)
    # With a layout each sequence is a launch of batch 1 (runtime/PerSequenceLaunch.cpp).
    workspace_bytes = kernel.backward_workspace_bytes(1 if packed_q or packed_kv else batch,
                                                      q_len, deterministic)
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    args, seq = _backward_ex_structs()
    layout_address = 0
    if packed_q or packed_kv:
        _SEQ_LAYOUT_FORMAT.pack_into(
            seq, 0, _SEQ_LAYOUT_FORMAT.size, 0, _address(cu_q), _address(cu_kv),
            q.shape[0] if packed_q else 0, k.shape[0] if packed_kv else 0, 0, 0, 0, 0, 0, 0, 0,
            0, _address(host_q), _address(host_kv), 0, 0)
        layout_address = ctypes.addressof(seq)
    _BACKWARD_EX_FORMAT.pack_into(
        args, 0, _BACKWARD_EX_FORMAT.size, 0, *read(q, packed_q), *read(k, packed_kv),
        *read(v, packed_kv), *read(out, packed_q), *read(grad_out, packed_q),
        *written(dq, packed_q), *written(dk, packed_kv), *written(dv, packed_kv),
        lse.data_ptr(), batch, q_len, kv_len, address, count, 0, 0, int(deterministic), 0,
        workspace.data_ptr(), workspace_bytes, layout_address)
    return args, dq, dk, dv, (array, workspace, grad_out)


def _backward_ex_impl(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                      lse: Tensor, inputs: list, cu_q: Optional[Tensor], cu_kv: Optional[Tensor],
                      host_q: Optional[Tensor], host_kv: Optional[Tensor], q_len: int,
                      kv_len: int, text: str, inputs_desc: str, layout: str,
                      deterministic: bool) -> tuple:
    """Launches the backward of a forward_ex call on torch's current stream: (dq, dk, dv)."""
    device = _device_of(q)
    kernel = _ex_kernel(text, q, k, v, cu_q, cu_kv, layout, device, True)
    args, dq, dk, dv, alive = _prepare_backward_ex(kernel, grad_out, q, k, v, out, lse, inputs,
                                                   cu_q, cu_kv, host_q, host_kv, q_len, kv_len,
                                                   inputs_desc, layout, deterministic)
    _on_device(device, kernel.launch_backward_ex, args)
    return dq, dk, dv


@torch.library.custom_op("attnc::backward_ex", mutates_args=(), device_types="cuda")
def _backward_ex(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 inputs: list[Tensor], cu_seqlens_q: Optional[Tensor],
                 cu_seqlens_kv: Optional[Tensor], host_cu_seqlens_q: Optional[Tensor],
                 host_cu_seqlens_kv: Optional[Tensor], max_seqlen_q: int, max_seqlen_kv: int,
                 spec: str, inputs_desc: str, layout: str,
                 deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv of attnc::forward_ex's out (packed or contiguous Q and K/V, no paged K/V),
    given its gradient grad_out; host_cu_seqlens_*: CPU copies of the cu_seqlens given
    (required with them: each sequence is a launch)."""
    return _backward_ex_impl(grad_out, q, k, v, out, lse, inputs, cu_seqlens_q, cu_seqlens_kv,
                             host_cu_seqlens_q, host_cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
                             spec, inputs_desc, layout, deterministic)


@_backward_ex.register_fake
def _backward_ex_fake(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                      lse: Tensor, inputs: list[Tensor], cu_seqlens_q: Optional[Tensor],
                      cu_seqlens_kv: Optional[Tensor], host_cu_seqlens_q: Optional[Tensor],
                      host_cu_seqlens_kv: Optional[Tensor], max_seqlen_q: int,
                      max_seqlen_kv: int, spec: str, inputs_desc: str, layout: str,
                      deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context_ex(ctx: Any, inputs: tuple, output: tuple) -> None:
    (q, k, v, input_tensors, cu_q, cu_kv, table, _, q_len, kv_len, spec, inputs_desc, layout, _,
     _, host_q, host_kv, _, _, deterministic) = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_kv, host_q, host_kv, *input_tensors)
    ctx.paged = table is not None
    ctx.plan = (q_len, kv_len, spec, inputs_desc, layout, deterministic)


def _autograd_backward_ex(ctx: Any, grad_out: Tensor, grad_lse: Optional[Tensor]) -> tuple:
    if ctx.paged:
        _check_trainable(True, 0, "auto")
    q, k, v, out, lse, cu_q, cu_kv, host_q, host_kv, *input_tensors = ctx.saved_tensors
    if (cu_q is not None and host_q is None) or (cu_kv is not None and host_kv is None):
        # A direct call of the op without the host copies: they are taken here (a sync).
        host_q, host_kv = _host_copies(cu_q, cu_kv)
    dq, dk, dv = torch.ops.attnc.backward_ex(grad_out, q, k, v, out, lse, input_tensors, cu_q,
                                             cu_kv, host_q, host_kv, *ctx.plan)
    return (dq, dk, dv, [None] * len(input_tensors)) + (None,) * 16


_forward_ex.register_autograd(_autograd_backward_ex, setup_context=_setup_context_ex)


class _EagerAttentionEx(torch.autograd.Function):
    """attnc::forward_ex with its autograd, for eager calls on plain CUDA tensors (as
    _EagerAttention): packed or contiguous q, k, v, no paged K/V, no decode options."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, inputs: list,
                cu_q: Optional[Tensor], cu_kv: Optional[Tensor], host_q: Optional[Tensor],
                host_kv: Optional[Tensor], q_len: int, kv_len: int, text: str,
                inputs_desc: str, layout: str, deterministic: bool) -> tuple:
        out, lse = _forward_ex_impl(q, k, v, inputs, cu_q, cu_kv, None, None, q_len, kv_len,
                                    text, inputs_desc, layout, 0, _capi.ATTNC_DECODE_AUTO, True,
                                    host_q, host_kv, True)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan = (inputs, cu_q, cu_kv, host_q, host_kv, q_len, kv_len, text, inputs_desc,
                    layout, deterministic)
        return out, lse

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, grad_lse: Optional[Tensor]) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward_ex_impl(grad_out, q, k, v, out, lse, *ctx.plan)
        return (dq, dk, dv) + (None,) * 11
