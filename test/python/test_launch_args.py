"""The launch structs attnc.torch_ops packs with struct.pack_into hold, field by field, what the
ctypes mirrors of attnc_c.h read: the packed formats and attnc._capi's layouts agree. And the
layout of torch tensors in them (strides per layout, extent-1 dims)."""
import ctypes

import torch

from attnc import _capi, torch_ops


def _flatten(struct):
    """Every scalar field of a ctypes struct, in declaration order, nested structs expanded."""
    values = []
    for name, kind in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, ctypes.Structure):
            values.extend(_flatten(value))
        elif name in ("lse", "workspace", "inputs"):
            values.append(ctypes.cast(value, ctypes.c_void_p).value or 0)
        else:
            values.append(value)
    return values


def _distinct_values(fmt):
    """A value per field of a struct.Struct format, each different (and in range)."""
    values = []
    for i, code in enumerate(fmt.format.lstrip("<")):
        values.append(1000 + i if code in "qi" else (1 << 40) + 16 * i)
    return values


def test_forward_format_matches_the_ctypes_struct():
    args = _capi.ForwardArgs()
    assert torch_ops._FORWARD_FORMAT.size == ctypes.sizeof(_capi.ForwardArgs) == 192
    values = _distinct_values(torch_ops._FORWARD_FORMAT)
    torch_ops._FORWARD_FORMAT.pack_into(args, 0, *values)
    assert _flatten(args) == values


def test_backward_format_matches_the_ctypes_struct():
    args = _capi.BackwardArgs()
    assert torch_ops._BACKWARD_FORMAT.size == ctypes.sizeof(_capi.BackwardArgs)
    values = _distinct_values(torch_ops._BACKWARD_FORMAT)
    torch_ops._BACKWARD_FORMAT.pack_into(args, 0, *values)
    assert _flatten(args) == values


def test_tensor_fields_per_layout():
    bhsd = torch.empty(2, 4, 16, 64, dtype=torch.bfloat16)
    assert torch_ops._tensor_fields(bhsd, "bhsd")[1:] == (4 * 16 * 64, 16 * 64, 64)
    bshd = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16)
    assert torch_ops._tensor_fields(bshd, "bshd")[1:] == (16 * 4 * 64, 64, 4 * 64)
    assert torch_ops._tensor_fields(bshd, "bshd")[0] == bshd.data_ptr()


def test_extent_one_dims_get_stride_zero():
    decode = torch.empty(1, 1, 8, 64, dtype=torch.bfloat16)  # bshd, one token, one batch
    assert torch_ops._tensor_fields(decode, "bshd")[1:] == (0, 64, 0)


def test_eager_path_only_for_plain_cuda_tensors():
    assert not torch_ops._eager(torch.empty(1, device="meta"))
    assert not torch_ops._eager(torch.empty(1))
