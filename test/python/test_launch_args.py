"""The launch structs attnc.torch_ops packs with struct.pack_into hold, field by field, what the
ctypes mirrors of attnc_c.h read: the packed formats and attnc._capi's layouts agree. And the
layout of torch tensors in them (strides per layout, extent-1 dims)."""
import ctypes

import pytest
import torch

import attnc
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


# What the C API's own checks (attnc_kernel_validate, _backward_validate; no GPU) say of the
# structs the launches pack, for host tensors standing in for device ones.
VALIDATE_CASES = {  # name: (layout, batch, heads q, heads kv, q_len, kv_len, head_dim, head_dim_v)
    "bhsd": ("bhsd", 2, 4, 4, 64, 64, 64, 64),
    "bshd_gqa": ("bshd", 2, 8, 2, 48, 80, 64, 64),
    "decode": ("bshd", 1, 8, 2, 1, 300, 128, 128),
    "head_dim_v": ("bhsd", 3, 4, 1, 16, 40, 96, 64),
}


def _tensors(case):
    layout, b, hq, hkv, sq, skv, d, dv = VALIDATE_CASES[case]

    def make(heads, length, dim):
        shape = (b, heads, length, dim) if layout == "bhsd" else (b, length, heads, dim)
        return torch.randn(shape).to(torch.bfloat16)
    return layout, make(hq, sq, d), make(hkv, skv, d), make(hkv, skv, dv)


@pytest.mark.parametrize("case", sorted(VALIDATE_CASES))
def test_c_api_accepts_the_packed_structs(case):
    layout, q, k, v = _tensors(case)
    hkv = k.shape[1] if layout == "bhsd" else k.shape[2]
    hq = q.shape[1] if layout == "bhsd" else q.shape[2]
    skv = k.shape[2] if layout == "bhsd" else k.shape[1]
    spec = attnc.Spec(q.shape[3], heads=(hq, hkv), head_dim_v=v.shape[3],
                      mask={"document": "doc", "causal": True},
                      inputs={"doc": {"dtype": "i32", "dims": ["b", "pos"]}}, dropout=0.1)
    kernel = attnc.compile(spec, target="sm_80", backward=True)
    doc = torch.zeros(q.shape[0], max(skv, q.shape[1] if layout == "bshd" else q.shape[2]),
                      dtype=torch.int32)
    args, out, lse, array = torch_ops._prepare_forward(kernel, q, k, v, [doc], 5, 8, "doc:b,pos",
                                                       layout)
    kernel.validate(args)
    assert out.shape == q.shape[:3] + (v.shape[3],)
    assert args.lse == lse.data_ptr() != 0
    # An inference call: no LSE allocated, a null pointer the C API accepts.
    args, _, no_lse, _ = torch_ops._prepare_forward(kernel, q, k, v, [doc], 5, 8, "doc:b,pos",
                                                    layout, want_lse=False)
    assert no_lse is None and not args.lse
    kernel.validate(args)
    args, out, lse, array = torch_ops._prepare_forward(kernel, q, k, v, [doc], 5, 8, "doc:b,pos",
                                                       layout)
    grad_out = torch.ones(1, dtype=torch.bfloat16).expand(out.shape)  # as from out.sum()
    for deterministic in (False, True):
        args, dq, dk, dv, alive = torch_ops._prepare_backward(
            kernel, grad_out, q, k, v, out, lse, [doc], 5, 8, "doc:b,pos", layout,
            deterministic)
        kernel.validate_backward(args)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


class _Unaligned:
    """A stand-in for an int32 tensor 2 bytes past an aligned address (torch makes none)."""

    def __init__(self, t):
        self.t = t

    def data_ptr(self):
        return self.t.data_ptr() + 2

    def stride(self):
        return self.t.stride()


def test_inputs_follow_the_kernel_order_and_check_alignment():
    spec = attnc.Spec(64, heads=4, mask="doc[q] == doc[k] && pad[b, k] == 0",
                      inputs={"doc": {"dtype": "i32", "dims": ["pos"]},
                              "pad": {"dtype": "i32", "dims": ["b", "pos"]}})
    kernel = attnc.compile(spec, target="sm_80")
    state = torch_ops._LaunchState(kernel, "pad:b,pos;doc:pos")  # passed in the other order
    pad, doc = torch.zeros(2, 64, dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
    array, address, count = torch_ops._inputs_array(state, [pad, doc])
    assert count == 2 and address == ctypes.addressof(array)
    assert (array[0].data, array[0].stride_pos) == (doc.data_ptr(), 1)
    assert (array[1].data, array[1].stride_b, array[1].stride_pos) == (pad.data_ptr(), 64, 1)
    odd = _Unaligned(doc)
    with pytest.raises(attnc.ArgumentError, match=r"^inputs\['doc'\]: expected a 4-byte"):
        torch_ops._inputs_array(state, [pad, odd])


def test_eager_autograd_path_validates_forward_and_backward(monkeypatch):
    """The eager path end to end on host tensors, with each launch replaced by the C API's
    validation of the very struct it would launch."""
    layout, q, k, v = _tensors("bshd_gqa")
    spec = attnc.Spec(64, heads=(8, 2), mask="causal")
    kernel = attnc.compile(spec, target="sm_80", backward=True)
    launched = []

    def validate(device, launch, args):
        check = kernel.validate if launch == kernel.launch else kernel.validate_backward
        check(args)
        launched.append(launch.__name__)
    monkeypatch.setattr(torch_ops, "_kernel", lambda *args: kernel)
    monkeypatch.setattr(torch_ops, "_on_device", validate)
    monkeypatch.setattr(torch_ops, "_device_of", lambda t: 0)
    for t in (q, k, v):
        t.requires_grad_()
    out, lse = torch_ops._EagerAttention.apply(q, k, v, [], 0, 0, "plan", "", layout, False)
    assert out.requires_grad and not lse.requires_grad
    out.float().sum().backward()
    assert launched == ["launch", "launch_backward"]
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)
