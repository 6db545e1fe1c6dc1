"""The varlen, paged K/V and decode options through ctypes (attnc._capi's mirrors and
test/gpu/attnc_ctypes.py's make_args_ex) without a GPU: the structs' sizes match attnc_c.h, the
library's validation messages reach Python field by field, and with no layout the _ex call is the
plain one. Device pointers are made-up addresses: validation never reads them."""
import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import attnc_ctypes  # noqa: E402
from attnc import _capi  # noqa: E402

# A decode spec's shape: GQA 8/2, head dim 128.
_SPEC = "name: py_seq_layout\nhead_dim: 128\nheads: {q: 8, kv: 2}\nmask: causal\n"
_DIM, _HEADS_Q, _HEADS_KV = 128, 8, 2
_BATCH, _PAGE, _PAGES, _TABLE = 4, 16, 64, 8
# Made-up device addresses 256 MiB apart, one a tensor or array.
_SLOT = 256 << 20


def _slot(i):
    return (1 << 32) + i * _SLOT


@pytest.fixture(scope="module")
def kernel():
    return attnc_ctypes.Library().compile_text(_SPEC, target="sm_80")


def _base(q_len=1, kv_len=_PAGE * _TABLE):
    """ForwardArgs of a decode step: Q, O [batch, heads_q, q_len, dim]; K, V pools of pages
    [pages, page_size, heads_kv, dim] (their batch stride is not used)."""
    args = attnc_ctypes.ForwardArgs()
    q_strides = (_HEADS_Q * q_len * _DIM, q_len * _DIM, _DIM)
    args.q = attnc_ctypes.Tensor(_slot(0), *q_strides)
    args.o = attnc_ctypes.Tensor(_slot(1), *q_strides)
    args.k = attnc_ctypes.Tensor(_slot(2), 0, _DIM, _HEADS_KV * _DIM)
    args.v = attnc_ctypes.Tensor(_slot(3), 0, _DIM, _HEADS_KV * _DIM)
    args.batch, args.q_len, args.kv_len = _BATCH, q_len, kv_len
    return args


def _paged(**changes):
    """The keywords of a valid paged layout for _base(), with `changes`."""
    lens = [128, 1, 0, 100]
    table = [[b * _TABLE + j if j * _PAGE < lens[b] else -1 for j in range(_TABLE)]
             for b in range(_BATCH)]
    options = dict(block_table=_slot(4), seq_lens_kv=_slot(5), block_table_stride=_TABLE,
                   max_pages=_TABLE, page_size=_PAGE, num_pages=_PAGES,
                   k_stride_page=_PAGE * _HEADS_KV * _DIM, v_stride_page=_PAGE * _HEADS_KV * _DIM,
                   host_block_table=[x for row in table for x in row], host_seq_lens_kv=lens)
    options.update(changes)
    return options


def test_struct_sizes_match_the_header():
    assert ctypes.sizeof(_capi.SeqLayout) == 136
    assert ctypes.sizeof(_capi.ForwardArgsEx) == 240
    assert ctypes.sizeof(_capi.DecodePlan) == 32
    assert _capi.ForwardArgsEx.layout.offset == 200


def test_valid_layouts_pass(kernel):
    assert kernel.validate_ex(attnc_ctypes.make_args_ex(_base(), **_paged())) is None
    packed_q = attnc_ctypes.make_args_ex(_base(), **_paged(cu_seqlens_q=_slot(6), total_q=4,
                                                           host_cu_seqlens_q=[0, 1, 2, 3, 4]))
    packed_q.base.q = attnc_ctypes.Tensor(_slot(0), 0, _DIM, _HEADS_Q * _DIM)
    packed_q.base.o = attnc_ctypes.Tensor(_slot(1), 0, _DIM, _HEADS_Q * _DIM)
    assert kernel.validate_ex(packed_q) is None


@pytest.mark.parametrize("changes, message", [
    (dict(page_size=48), "ForwardArgs.paged.page_size = 48: a power of two in [1, 256]"),
    (dict(host_seq_lens_kv=[128, 1, 200, 0]),
     "ForwardArgs.paged.seq_lens_kv[2] = 200 needs 13 pages of 16; the table row has 8"),
    (dict(num_splits=200),
     "ForwardArgs.num_splits = 200: in [0, 128] (0: derived from the device and the lengths)"),
    (dict(decode="off"), "ForwardArgs.decode = Off: Auto or On with paged (the forward kernel "
                         "takes contiguous Q, K, V only)"),
    (dict(seq_lens_kv=None), "ForwardArgs.paged.seq_lens_kv = null: a device pointer (int32) "
                             "(required with block_table)"),
    (dict(cu_seqlens_kv=_slot(6), total_kv=64),
     "ForwardArgs.varlen.cu_seqlens_kv = 0x160000000: null with paged.block_table (either "
     "packed K/V or a paged pool)"),
])
def test_messages_name_the_field(kernel, changes, message):
    assert kernel.validate_ex(attnc_ctypes.make_args_ex(_base(), **_paged(**changes))) == message


def test_host_block_table_entries_are_checked(kernel):
    options = _paged()
    options["host_block_table"][3 * _TABLE + 6] = 912  # sequence 3 uses 7 pages
    assert (kernel.validate_ex(attnc_ctypes.make_args_ex(_base(), **options)) ==
            "ForwardArgs.paged.block_table[3][6] = 912: outside [0, 64) pages")
    options["host_block_table"][3 * _TABLE + 6] = -1
    assert kernel.validate_ex(attnc_ctypes.make_args_ex(_base(), **options)) == (
        "ForwardArgs.paged.block_table[3][6] = -1: outside [0, 64) pages")
    options["host_block_table"][3 * _TABLE + 7] = 912  # past sequence 3's pages: unused
    options["host_block_table"][3 * _TABLE + 6] = 5
    assert kernel.validate_ex(attnc_ctypes.make_args_ex(_base(), **options)) is None


def test_varlen_offsets_are_checked(kernel):
    base = _base(q_len=16, kv_len=128)
    base.q = attnc_ctypes.Tensor(_slot(0), 0, _DIM, _HEADS_Q * _DIM)
    base.o = attnc_ctypes.Tensor(_slot(1), 0, _DIM, _HEADS_Q * _DIM)
    base.k = attnc_ctypes.Tensor(_slot(2), 0, _DIM, _HEADS_KV * _DIM)
    base.v = attnc_ctypes.Tensor(_slot(3), 0, _DIM, _HEADS_KV * _DIM)
    varlen = dict(cu_seqlens_q=_slot(6), cu_seqlens_kv=_slot(7), total_q=40, total_kv=300,
                  host_cu_seqlens_q=[0, 16, 20, 36, 40], host_cu_seqlens_kv=[0, 128, 130, 200, 300])
    assert kernel.validate_ex(attnc_ctypes.make_args_ex(base, **varlen)) is None
    cases = [
        ([3, 16, 20, 36, 40], "ForwardArgs.varlen.cu_seqlens_q[0] = 3: the first offset is 0"),
        ([0, 16, 15, 36, 40],
         "ForwardArgs.varlen.cu_seqlens_q[2] = 15 < cu_seqlens_q[1] = 16: not increasing"),
        ([0, 16, 20, 36, 41], "ForwardArgs.varlen.cu_seqlens_q[4] = 41 > total_q = 40"),
    ]
    for offsets, message in cases:
        ex = attnc_ctypes.make_args_ex(base, **dict(varlen, host_cu_seqlens_q=offsets))
        assert kernel.validate_ex(ex) == message


def test_no_layout_is_the_plain_call(kernel):
    base = _base(q_len=64, kv_len=64)
    base.k = attnc_ctypes.Tensor(_slot(2), _HEADS_KV * 64 * _DIM, 64 * _DIM, _DIM)
    base.v = attnc_ctypes.Tensor(_slot(3), _HEADS_KV * 64 * _DIM, 64 * _DIM, _DIM)
    ex = attnc_ctypes.make_args_ex(base)
    assert not ex.layout
    assert kernel.validate_ex(ex) is None and kernel.validate(base) is None
    base.q_len = 0
    ex = attnc_ctypes.make_args_ex(base)
    assert kernel.validate_ex(ex) == kernel.validate(base) is not None
    assert kernel.forward_workspace_bytes(ex) == -1


def test_decode_plan_refuses_what_validation_refuses(kernel):
    ex = attnc_ctypes.make_args_ex(_base(), **_paged(page_size=3))
    with pytest.raises(attnc_ctypes.AttncError, match=r"paged\.page_size = 3"):
        kernel.decode_plan(ex, num_sms=132)
    assert kernel.forward_workspace_bytes(ex) == -1
    assert kernel.forward_workspace_bytes(attnc_ctypes.make_args_ex(_base(), **_paged())) >= 0
