"""attnc.attention's argument checks, on meta and CPU tensors (no GPU): each bad argument raises
ArgumentError naming it, before any op runs."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import attnc
from attnc import torch_ops

B, HQ, HKV, SQ, SKV, D = 2, 8, 2, 64, 128, 64


def qkv(layout="bhsd", dtype=torch.bfloat16, device="meta", d=D, dv=D):
    def make(heads, length, dim):
        shape = (B, heads, length, dim) if layout == "bhsd" else (B, length, heads, dim)
        return torch.empty(shape, dtype=dtype, device=device)
    return make(HQ, SQ, d), make(HKV, SKV, d), make(HKV, SKV, dv)


def raises(argument, q, k, v, **kwargs):
    with pytest.raises(attnc.ArgumentError) as error:
        attnc.attention(q, k, v, **kwargs)
    assert str(error.value).startswith(argument), str(error.value)
    return str(error.value)


def test_valid_call_passes_the_checks():
    q, k, v = qkv()
    assert attnc.attention(q, k, v, mask="causal").shape == (B, HQ, SQ, D)


def test_layout():
    raises("layout: expected 'bhsd' or 'bshd', got 'bsdh'", *qkv(), layout="bsdh")


def test_device_cpu():
    message = raises("q: expected a CUDA tensor", *qkv(device="cpu"))
    assert "cpu" in message


def test_devices_differ():
    with FakeTensorMode():  # CUDA tensors of two devices, without a GPU
        q, k, v = qkv(device="cuda:0")
        message = raises("k, v: expected q's device cuda:0", q, k.to("cuda:1"), v)
    assert "cuda:1" in message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_dtype(dtype):
    raises("q: expected dtype torch.bfloat16 or torch.float16", *qkv(dtype=dtype))


def test_dtypes_differ():
    q, k, v = qkv()
    raises("k, v: expected q's dtype", q, k.half(), v)


def test_rank():
    q, k, v = qkv()
    raises("q: expected 4 dims", q[0], k, v)


def test_batch():
    q, k, v = qkv()
    raises("k, v: expected batch 2", q, k[:1], v[:1])


def test_head_dim():
    q, _, _ = qkv()
    _, k, v = qkv(d=32)
    raises("k: expected head dim 64", q, k, v)


def test_heads_divide():
    q, k, v = qkv()
    raises("k: expected a head count that divides q's 8", q, k.new_empty(B, 3, SKV, D),
           v.new_empty(B, 3, SKV, D))


def test_kv_lengths():
    q, k, v = qkv()
    raises("v: expected 2 heads and length 128", q, k, v[:, :, :SKV // 2])


def test_last_dim_contiguous():
    q, k, v = qkv()
    q_t = torch.empty_strided(q.shape, (HQ * SQ * D, SQ * D, 1, SQ), dtype=q.dtype,
                              device="meta")
    message = raises("q: expected a contiguous last dim", q_t, k, v)
    assert "q.contiguous()" in message


def test_strides_multiple_of_eight():
    q, k, v = qkv()
    k_odd = torch.empty_strided(k.shape, (HKV * SKV * 68, SKV * 68, 68, 1),
                                dtype=k.dtype, device="meta")
    message = raises("k: expected strides that are multiples of 8", q, k_odd, v)
    assert "k.contiguous()" in message


def test_extent_one_dims_need_no_stride_rule():
    q = torch.empty_strided((B, HQ, 1, D), (HQ * 72, 72, 3, 1), dtype=torch.bfloat16,
                            device="meta")
    _, k, v = qkv()
    assert attnc.attention(q, k, v).shape == (B, HQ, 1, D)


@pytest.mark.parametrize("p", [1.0, -0.1, 2, "0.1", True])
def test_dropout_p(p):
    raises("dropout_p: expected a probability in [0, 1)", *qkv(), dropout_p=p)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), "auto"])
def test_scale(scale):
    raises("scale: expected None or a positive finite number", *qkv(), scale=scale)


def test_inputs_not_a_dict():
    raises("inputs: expected a dict", *qkv(), inputs=[torch.empty(SKV)])


def test_input_dtype():
    raises("inputs['doc']: expected dtype torch.int32 or torch.float32", *qkv(),
           mask={"document": "doc"}, inputs={"doc": torch.empty(SKV, dtype=torch.int64,
                                                                 device="meta")})


def test_input_device():
    raises("inputs['doc']: expected q's device", *qkv(), mask={"document": "doc"},
           inputs={"doc": torch.empty(SKV, dtype=torch.int32)})


def test_input_shape_not_inferable():
    raises("inputs['doc']: expected shape", *qkv(), mask={"document": "doc"},
           inputs={"doc": torch.empty(SKV - 1, dtype=torch.int32, device="meta")})


def test_input_requires_grad():
    slopes = torch.empty(HQ, dtype=torch.float32, device="meta", requires_grad=True)
    message = raises("inputs['slopes']: requires grad", *qkv(), score={"alibi": "slopes"},
                     inputs={"slopes": slopes})
    assert "not differentiable yet" in message


def test_input_not_declared_by_the_spec():
    spec = attnc.Spec(mask={"document": "doc"},
                      inputs={"doc": {"dtype": "i32", "dims": ["pos"]}})
    doc = torch.empty(SKV, dtype=torch.int32, device="meta")
    raises("inputs: expected only the spec's inputs (doc), got 'extra'", *qkv(), spec=spec,
           inputs={"doc": doc, "extra": doc})


def test_input_declared_but_missing():
    spec = attnc.Spec(mask={"document": "doc"},
                      inputs={"doc": {"dtype": "i32", "dims": ["pos"]}})
    raises("inputs: expected a tensor for every input the spec declares", *qkv(), spec=spec)


def test_input_shape_against_declaration():
    spec = attnc.Spec(mask={"document": "doc"},
                      inputs={"doc": {"dtype": "i32", "dims": ["b", "pos"]}})
    raises("inputs['doc']: expected shape [b=2, pos=128+]", *qkv(), spec=spec,
           inputs={"doc": torch.empty(3, SKV, dtype=torch.int32, device="meta")})


def test_spec_fields_against_tensors():
    raises("q: expected the spec's 128", *qkv(), spec=attnc.Spec(128))
    raises("q: expected the spec's 'fp16'", *qkv(), spec=attnc.Spec(dtype="fp16"))
    raises("q, k: expected the spec's heads (4, 4)", *qkv(), spec=attnc.Spec(heads=4))
    raises("mask: expected the spec's 'causal'", *qkv(), spec=attnc.Spec(mask="causal"),
           mask={"window": 3})
    raises("dropout_p: expected the spec's 0.1", *qkv(),
           spec=attnc.Spec(dropout={"p": 0.1, "rounds": 10}), dropout_p=0.2)


def test_yaml_spec_takes_no_variant_arguments():
    spec = attnc.Spec.from_yaml("name: y\nhead_dim: 64\nheads: {q: 8, kv: 2}\n")
    raises("mask, score, scale, dropout_p: expected None", *qkv(), spec=spec, mask="causal")


@pytest.mark.parametrize("flag", ["deterministic", "return_lse"])
def test_flags_are_bools(flag):
    raises(f"{flag}: expected a bool", *qkv(), **{flag: "yes"})


def test_pointer_alignment_names_the_tensor():
    base = torch.empty(B * HQ * SQ * D + 8, dtype=torch.bfloat16)
    q = base[1:1 + B * HQ * SQ * D].view(B, HQ, SQ, D)  # 2 bytes past an aligned address
    with pytest.raises(attnc.ArgumentError, match=r"^q: expected a 16-byte aligned .*q\.clone"):
        torch_ops._check_pointer("q", q)
    torch_ops._check_pointer("q", base[8:].view(B, HQ, SQ, D))  # 16 bytes past: aligned


def test_incoming_gradient_is_made_launchable():
    grad = torch.ones(1, dtype=torch.bfloat16).expand(B, HQ, SQ, D)
    fixed = torch_ops._launchable(grad)
    assert fixed.is_contiguous() and fixed.data_ptr() % 16 == 0
    ready = torch.empty(B, HQ, SQ, D, dtype=torch.bfloat16)
    assert torch_ops._launchable(ready) is ready
