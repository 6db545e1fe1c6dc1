"""The varlen backward through ctypes (attnc._capi.BackwardArgsEx and test/gpu/attnc_ctypes.py's
backward_ex) without a GPU: the struct matches attnc_c.h, the library's validation messages reach
Python, and with no layout the _ex call is the plain one. Host tensors stand in for device ones:
validation reads only their addresses (and the host copies of cu_seqlens)."""
import ctypes
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import attnc_ctypes  # noqa: E402
from attnc import _capi  # noqa: E402

_SPEC = "name: py_backward_varlen\nhead_dim: 64\nheads: {q: 4, kv: 2}\nmask: causal\n"
_HEADS_Q, _HEADS_KV, _DIM = 4, 2, 64
_Q_LENS, _KV_LENS = [5, 1, 12], [7, 1, 30]


@pytest.fixture(scope="module")
def kernel():
    return attnc_ctypes.Library().compile_text(_SPEC, target="sm_80", backward=True)


def _offsets(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def _packed():
    """The backward's tensors of a packed batch (q, k, v, o, d_o, lse, dq, dk, dv) and its
    cu_seqlens as int32 tensors."""
    total_q, total_kv = sum(_Q_LENS), sum(_KV_LENS)

    def rows(total, heads):
        return torch.zeros(total, heads, _DIM, dtype=torch.bfloat16)
    q, o, d_o, dq = (rows(total_q, _HEADS_Q) for _ in range(4))
    k, v, dk, dv = (rows(total_kv, _HEADS_KV) for _ in range(4))
    lse = torch.zeros(_HEADS_Q, total_q, dtype=torch.float32)
    cu_q = torch.tensor(_offsets(_Q_LENS), dtype=torch.int32)
    cu_kv = torch.tensor(_offsets(_KV_LENS), dtype=torch.int32)
    return (q, k, v, o, d_o, lse, dq, dk, dv), cu_q, cu_kv


def test_struct_matches_the_header():
    # test/unit/CApiTest.cpp asserts the same numbers of attnc_c.h.
    assert ctypes.sizeof(_capi.BackwardArgs) == 344
    assert ctypes.sizeof(_capi.BackwardArgsEx) == 360
    assert _capi.BackwardArgsEx.base.offset == 8
    assert _capi.BackwardArgsEx.layout.offset == 352


def test_packed_batch_passes_with_derived_sizes(kernel):
    tensors, cu_q, cu_kv = _packed()
    ex = kernel.make_backward_args_ex(*tensors, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert (ex.base.batch, ex.base.q_len, ex.base.kv_len) == (3, 12, 30)
    assert (ex.layout.contents.total_q, ex.layout.contents.total_kv) == (18, 38)
    assert ex.layout.contents.host_cu_seqlens_kv[3] == 38
    assert kernel.validate_backward_ex(ex) is None


def test_messages_come_through(kernel):
    tensors, cu_q, cu_kv = _packed()
    args = kernel.make_backward_args_ex(*tensors, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    without_host = attnc_ctypes.make_backward_args_ex(
        args.base, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, total_q=18, total_kv=38,
        host_cu_seqlens_kv=_offsets(_KV_LENS))
    assert kernel.validate_backward_ex(without_host) == (
        "BackwardArgs.varlen.host_cu_seqlens_q: required with cu_seqlens_q (the backward runs a "
        "launch per sequence), got null")
    with pytest.raises(attnc_ctypes.AttncError, match=r"host_cu_seqlens_q: required"):
        kernel.launch_backward_ex(without_host, stream=0)  # refused before it looks for a GPU
    decreasing = kernel.make_backward_args_ex(*tensors, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                              host_cu_seqlens_q=[0, 5, 4, 18])
    assert kernel.validate_backward_ex(decreasing) == (
        "BackwardArgs.varlen.cu_seqlens_q[2] = 4 < cu_seqlens_q[1] = 5: not increasing")
    paged = attnc_ctypes.make_backward_args_ex(args.base, page_size=16)
    assert kernel.validate_backward_ex(paged) == (
        "attnc_backward_args_ex.layout->page_size: expected 0 (the backward takes no paged K/V), "
        "got 16")
    args.struct_size = 8
    assert kernel.validate_backward_ex(args).startswith(
        "attnc_backward_args_ex.struct_size: expected at least 360 (through layout")


def test_no_layout_is_the_plain_call(kernel):
    heads = dict(q=_HEADS_Q, k=_HEADS_KV, v=_HEADS_KV, o=_HEADS_Q, d_o=_HEADS_Q, dq=_HEADS_Q,
                 dk=_HEADS_KV, dv=_HEADS_KV)
    q, k, v, o, d_o, dq, dk, dv = (torch.zeros(2, 16, h, _DIM, dtype=torch.bfloat16)
                                   for h in heads.values())
    lse = torch.zeros(2, _HEADS_Q, 16, dtype=torch.float32)
    base = kernel.make_backward_args(q, k, v, o, d_o, lse, dq, dk, dv)
    ex = attnc_ctypes.make_backward_args_ex(base)
    assert not ex.layout
    assert kernel.validate_backward_ex(ex) is None and kernel.validate_backward(base) is None
    base.q_len = 0
    ex = attnc_ctypes.make_backward_args_ex(base)
    assert kernel.validate_backward_ex(ex) == kernel.validate_backward(base) is not None
