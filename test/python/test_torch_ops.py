"""attnc's custom ops without a GPU: their registration and schemas, the shapes their fake
kernels give (BHSD, BSHD, GQA, head_dim_v, the LSE) under FakeTensorMode and on meta tensors,
autograd's wiring, torch.library.opcheck, and torch.compile(fullgraph=True) tracing forward and
backward into one graph each through aot_autograd."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import attnc
import attnc.torch_ops  # noqa: F401  (registers torch.ops.attnc.*)
from compile_graphs import call_targets, recording_backend

CASES = {  # name: (layout, heads q, heads kv, q_len, kv_len, head_dim, head_dim_v)
    "bhsd": ("bhsd", 8, 8, 64, 64, 64, 64),
    "bshd": ("bshd", 8, 8, 64, 64, 64, 64),
    "gqa": ("bhsd", 8, 2, 32, 96, 128, 128),
    "mqa_bshd": ("bshd", 4, 1, 1, 200, 64, 64),
    "head_dim_v": ("bshd", 4, 2, 16, 48, 192, 128),
}


def make(case, device, requires_grad=False):
    layout, hq, hkv, sq, skv, d, dv = CASES[case]

    def tensor(heads, length, dim):
        shape = (3, heads, length, dim) if layout == "bhsd" else (3, length, heads, dim)
        return torch.empty(shape, dtype=torch.float16, device=device,
                           requires_grad=requires_grad)
    return layout, tensor(hq, sq, d), tensor(hkv, skv, d), tensor(hkv, skv, dv)


def expected_out(case):
    layout, hq, _, sq, _, _, dv = CASES[case]
    return (3, hq, sq, dv) if layout == "bhsd" else (3, sq, hq, dv)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fake_shapes(case):
    with FakeTensorMode():
        layout, q, k, v = make(case, "cuda")
        out, lse = attnc.attention(q, k, v, mask="causal", layout=layout, return_lse=True)
    _, hq, _, sq, _, _, _ = CASES[case]
    assert tuple(out.shape) == expected_out(case)
    assert out.dtype == torch.float16 and out.device.type == "cuda" and out.is_contiguous()
    assert tuple(lse.shape) == (3, hq, sq) and lse.dtype == torch.float32


@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_shapes_and_gradients(case):
    layout, q, k, v = make(case, "meta", requires_grad=True)
    out = attnc.attention(q, k, v, layout=layout, score={"softcap": 30.0})
    assert tuple(out.shape) == expected_out(case)
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype


def test_lse_is_not_differentiable():
    _, q, k, v = make("bhsd", "meta", requires_grad=True)
    out, lse = attnc.attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


def test_ops_are_registered():
    for name in ("forward", "backward", "philox_state"):
        assert hasattr(torch.ops.attnc, name)
    forward = str(torch.ops.attnc.forward.default._schema)
    assert forward.startswith("attnc::forward(Tensor q, Tensor k, Tensor v, Tensor[] inputs")
    assert forward.endswith("-> (Tensor, Tensor)")
    backward = str(torch.ops.attnc.backward.default._schema)
    assert backward.endswith("-> (Tensor, Tensor, Tensor)")
    assert torch.Tag.nondeterministic_seeded in torch.ops.attnc.philox_state.default.tags


def test_opcheck_forward_and_backward():
    _, q, k, v = make("gqa", "meta", requires_grad=True)
    spec = repr(attnc.Spec(128, heads=(8, 2)).key())
    forward_args = (q, k, v, [], None, spec, "", "bhsd", True, False)
    assert set(torch.library.opcheck(torch.ops.attnc.forward.default, forward_args).values()) \
        == {"SUCCESS"}
    out, lse = torch.ops.attnc.forward(*forward_args)
    backward_args = (out.detach(), q.detach(), k.detach(), v.detach(), out.detach(),
                     lse, [], None, spec, "", "bhsd", False)
    assert set(torch.library.opcheck(torch.ops.attnc.backward.default,
                                     backward_args).values()) == {"SUCCESS"}


def test_dropout_draws_seed_and_offset_through_its_op():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    _, q, k, v = make("bhsd", "meta")

    def run(q, k, v):
        return attnc.attention(q, k, v, dropout_p=0.1) + attnc.attention(q, k, v)
    torch.compile(run, fullgraph=True, backend=record)(q, k, v)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count("attnc.philox_state") == 1
    assert targets.count("attnc.forward") == 2


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_compile_fullgraph_traces_forward_and_backward(layout):
    graphs = {"dynamo": [], "forward": [], "backward": []}
    case = "gqa" if layout == "bhsd" else "head_dim_v"
    _, q, k, v = make(case, "meta", requires_grad=True)
    skv = k.shape[2] if layout == "bhsd" else k.shape[1]
    doc = torch.empty(3, skv, dtype=torch.int32, device="meta")

    def loss(q, k, v, doc):
        out = attnc.attention(q, k, v, mask={"document": "doc", "causal": True},
                              inputs={"doc": doc}, score="30 * tanh(score / 30)",
                              dropout_p=0.1, layout=layout)
        return out.float().square().sum()
    compiled = torch.compile(loss, fullgraph=True, backend=recording_backend(graphs))
    compiled(q, k, v, doc).backward()
    assert len(graphs["dynamo"]) == 1
    assert "attnc.forward" in call_targets(graphs["dynamo"][0])
    assert len(graphs["forward"]) == 1 and len(graphs["backward"]) == 1
    assert "attnc.forward.default" in call_targets(graphs["forward"][0])
    assert "attnc.backward.default" in call_targets(graphs["backward"][0])
    assert q.grad.shape == q.shape and v.grad.shape == v.shape

    q.grad = k.grad = v.grad = None
    compiled(q, k, v, doc).backward()  # same shapes: no second trace
    assert len(graphs["dynamo"]) == 1


def test_compile_with_dynamic_shapes_keeps_one_graph():
    graphs = {"dynamo": [], "forward": [], "backward": []}

    def run(q, k, v):
        return attnc.attention(q, k, v, mask="causal", layout="bshd")
    compiled = torch.compile(run, fullgraph=True, dynamic=True,
                             backend=recording_backend(graphs))
    for length in (16, 48):
        q, k, v = (torch.empty(2, length, heads, 64, dtype=torch.bfloat16, device="meta")
                   for heads in (8, 2, 2))
        assert tuple(compiled(q, k, v).shape) == (2, length, 8, 64)
    traced = [g for g in graphs["dynamo"] if "attnc.forward" in call_targets(g)]
    assert len(traced) == 1 and len(graphs["forward"]) == 1


def test_kernel_call_traces_with_the_kernel_spec():
    graphs = {"dynamo": [], "forward": [], "backward": []}
    _, q, k, v = make("bhsd", "meta")
    spec = attnc.Spec(64, heads=8, dtype="fp16", mask={"window": 16}, name="windowed")
    kernel = attnc.compile(spec, target="sm_80")
    out = torch.compile(lambda q, k, v: kernel(q, k, v), fullgraph=True,
                        backend=recording_backend(graphs))(q, k, v)
    assert tuple(out.shape) == expected_out("bhsd")
    forward = [n for n in graphs["forward"][0].graph.nodes
               if str(n.target) == "attnc.forward.default"]
    assert len(forward) == 1 and repr(spec.key()) in forward[0].args[5]


def test_compile_fullgraph_with_a_yaml_spec():
    graphs = {"dynamo": [], "forward": [], "backward": []}
    spec = attnc.Spec.from_yaml("name: from_yaml_traced\nhead_dim: 64\nheads: 8\n"
                                "dtype: fp16\nmask: causal\n")
    _, q, k, v = make("bshd", "meta")
    out = torch.compile(lambda q, k, v: attnc.attention(q, k, v, layout="bshd", spec=spec),
                        fullgraph=True, backend=recording_backend(graphs))(q, k, v)
    assert tuple(out.shape) == expected_out("bshd")
    assert len(graphs["dynamo"]) == 1 and "attnc.forward" in call_targets(graphs["dynamo"][0])


def _yaml_spec_has_dropout(text):
    from attnc import torch_ops
    key = (attnc.Spec.from_yaml(text).key(), None, None, None, 0.0, ())
    torch_ops._plans.pop(key, None)
    return torch_ops._make_plan(key)[2]


NO_DROPOUT = "name: causal_no_dropout\nhead_dim: 64\nheads: 4\nmask: causal\ndropout: 0\n"
DROPOUT = "name: causal\nhead_dim: 64\nheads: 4\nmask: causal\ndropout: {p: 0.1, rounds: 10}\n"


@pytest.mark.parametrize("pyyaml", [True, False])
def test_a_yaml_spec_has_dropout_only_by_its_dropout_field(pyyaml, monkeypatch):
    """The word 'dropout' in a name or a zero probability draws no seed (which would advance
    torch's generator and refuse CUDA graph capture); with or without PyYAML."""
    if not pyyaml:
        monkeypatch.setattr(attnc.spec, "_read_fields", lambda text: {})
    assert _yaml_spec_has_dropout(NO_DROPOUT) is False
    assert _yaml_spec_has_dropout(DROPOUT) is True


def test_dropout_p_keeps_the_spec_dropout_rounds():
    from attnc import torch_ops
    spec = attnc.Spec(dropout={"p": 0.1, "rounds": 10})
    key = (spec.key(), None, None, None, 0.1, ())
    text = torch_ops._make_plan(key)[0]
    resolved, _ = torch_ops._resolve(text, "bf16", 64, 64, 4, 4)
    assert "rounds: 10" in resolved.to_yaml()


def test_replace_of_a_yaml_spec_without_pyyaml_is_an_error(monkeypatch):
    monkeypatch.setattr(attnc.spec, "_read_fields", lambda text: {})
    with pytest.raises(attnc.ArgumentError, match="PyYAML"):
        attnc.Spec.from_yaml(DROPOUT).replace(head_dim=128)
