"""The varlen backward of attnc.attention without a GPU: attnc::backward_ex and the autograd of
attnc::forward_ex (registration, the gradients' shapes on meta and fake tensors,
torch.compile(fullgraph=True) tracing forward and backward), the arguments refused when a
gradient is needed, and the structs both launches pack (host tensors standing in for device
ones, the launches recorded instead of run) against the C API's own checks."""
import ctypes

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import attnc
from attnc import _capi, torch_ops
from ctypes_fields import assert_format_matches
from compile_graphs import call_targets, recording_backend

HQ, HKV, D, DV = 8, 2, 64, 64
Q_LENS, KV_LENS = [3, 1, 6], [40, 17, 5]
KV_CONTIGUOUS = 48
BF16 = torch.bfloat16
# forward_ex's arguments (with the host copies of the cu_seqlens and of seq_lens_kv, backward
# on): 20 in all, one gradient (or None) each.
FORWARD_EX_ARGS = 20


def offsets(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def layouts(device="meta", layout="bshd", requires_grad=True):
    """Per trainable layout: (q, k, v, the call's keyword arguments)."""
    batch, total_q, total_kv = len(Q_LENS), sum(Q_LENS), sum(KV_LENS)

    def t(*shape, dtype=BF16, grad=requires_grad):
        x = torch.zeros(shape, dtype=dtype, device=device)
        return x.requires_grad_() if grad and dtype == BF16 else x
    cu_q = {"cu_seqlens_q": torch.tensor(offsets(Q_LENS), dtype=torch.int32).to(device),
            "max_seqlen_q": max(Q_LENS)}
    cu_kv = {"cu_seqlens_kv": torch.tensor(offsets(KV_LENS), dtype=torch.int32).to(device),
             "max_seqlen_kv": max(KV_LENS)}
    kv4 = (batch, KV_CONTIGUOUS, HKV, D) if layout == "bshd" else (batch, HKV, KV_CONTIGUOUS, D)
    q4 = (batch, 6, HQ, D) if layout == "bshd" else (batch, HQ, 6, D)
    return {
        "varlen": (t(total_q, HQ, D), t(total_kv, HKV, D), t(total_kv, HKV, DV),
                   {**cu_q, **cu_kv}),
        "varlen_q": (t(total_q, HQ, D), t(*kv4), t(*kv4), dict(cu_q)),
        "varlen_kv": (t(*q4), t(total_kv, HKV, D), t(total_kv, HKV, DV), dict(cu_kv)),
    }


CASES = sorted(layouts())


def test_backward_ex_is_registered_with_forward_ex_autograd():
    schema = str(torch.ops.attnc.backward_ex.default._schema)
    assert schema.startswith("attnc::backward_ex(Tensor grad_out, Tensor q, Tensor k, Tensor v, "
                             "Tensor out, Tensor lse, Tensor[] inputs, Tensor? cu_seqlens_q, "
                             "Tensor? cu_seqlens_kv, Tensor? host_cu_seqlens_q, "
                             "Tensor? host_cu_seqlens_kv, SymInt max_seqlen_q")
    assert schema.endswith("bool deterministic) -> (Tensor, Tensor, Tensor)")
    forward = torch.ops.attnc.forward_ex.default._schema
    assert len(forward.arguments) == FORWARD_EX_ARGS
    # No defaults: the dispatcher would drop trailing arguments equal to them, and the autograd
    # formula's count of gradients with them.
    assert not any(a.has_default_value() for a in forward.arguments)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("case", CASES)
def test_meta_gradients(case, layout):
    q, k, v, kwargs = layouts("meta", layout)[case]
    out, lse = attnc.attention(q, k, v, layout=layout, mask="causal", return_lse=True, **kwargs)
    assert out.requires_grad and not lse.requires_grad
    out.float().square().sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype


@pytest.mark.parametrize("case", CASES)
def test_fake_shapes_on_cuda(case):
    """Under FakeTensorMode (torch.compile's tracing) the host copies are fake CPU tensors and
    backward_ex's fake gives each gradient its tensor's shape. (The autograd engine itself
    wants a CUDA device for fake CUDA tensors: the meta test above runs it.)"""
    with FakeTensorMode():
        q, k, v, kwargs = layouts("cuda")[case]
        out, lse = attnc.attention(q, k, v, layout="bshd", mask={"window": 8}, return_lse=True,
                                   **kwargs)
        cu_q, cu_kv = kwargs.get("cu_seqlens_q"), kwargs.get("cu_seqlens_kv")
        host_q, host_kv = torch_ops._host_copies(cu_q, cu_kv)
        spec = repr((attnc.Spec(D, heads=(HQ, HKV)).key(), None, None, None, 0.0, ()))
        dq, dk, dv = torch.ops.attnc.backward_ex(
            out, q, k, v, out, lse, [], cu_q, cu_kv, host_q, host_kv,
            kwargs.get("max_seqlen_q", 6), kwargs.get("max_seqlen_kv", KV_CONTIGUOUS), spec, "",
            "bshd", False)
    assert out.requires_grad and out.device.type == "cuda"
    assert all(h is None or h.device.type == "cpu" for h in (host_q, host_kv))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.device.type == "cuda"


def test_inference_takes_no_host_copy(monkeypatch):
    """Without a gradient (grad mode off, or no tensor requiring it) nothing is copied to the
    host: an inference call does not synchronize."""
    def copies(*args):
        raise AssertionError("a host copy without a gradient")
    monkeypatch.setattr(torch_ops, "_host_copies", copies)
    q, k, v, kwargs = layouts()["varlen"]
    with torch.no_grad():
        assert not attnc.attention(q, k, v, layout="bshd", **kwargs).requires_grad
    q, k, v, kwargs = layouts(requires_grad=False)["varlen"]
    assert attnc.attention(q, k, v, layout="bshd", **kwargs).grad_fn is None


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_forward_ex_and_backward_ex(dynamic):
    graphs = {"dynamo": [], "forward": [], "backward": []}

    def loss(q, k, v, cu_q, cu_kv, doc, max_q, max_kv):
        out = attnc.attention(q, k, v, layout="bshd", cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                              max_seqlen_q=max_q, max_seqlen_kv=max_kv, deterministic=True,
                              mask={"document": "doc", "causal": True}, inputs={"doc": doc},
                              score={"softcap": 30.0})
        return out.float().square().sum()
    compiled = torch.compile(loss, fullgraph=True, dynamic=dynamic,
                             backend=recording_backend(graphs))
    for extra in (0, 2):
        q, k, v, kwargs = layouts()["varlen"]
        if extra:
            q = torch.zeros(q.shape[0] + extra, HQ, D, dtype=BF16, device="meta",
                            requires_grad=True)
        doc = torch.zeros(len(Q_LENS), max(KV_LENS), dtype=torch.int32, device="meta")
        compiled(q, k, v, kwargs["cu_seqlens_q"], kwargs["cu_seqlens_kv"], doc,
                 kwargs["max_seqlen_q"], kwargs["max_seqlen_kv"]).backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape
    forward = [n for g in graphs["forward"] for n in g.graph.nodes
               if str(n.target) == "attnc.forward_ex.default"]
    assert forward and all(n.args[18] is True and n.args[19] is True for n in forward)
    assert all("attnc.backward_ex.default" in call_targets(g) for g in graphs["backward"])
    assert len(graphs["backward"]) == (1 if dynamic else 2)


# ---- What a gradient rules out: each names its argument, before any op ----

def paged(requires_grad=True):
    """A paged varlen call's tensors (q packed over pools) and its keyword arguments."""
    q = torch.zeros(sum(Q_LENS), HQ, D, dtype=BF16, device="meta",
                    requires_grad=requires_grad)
    pool = torch.zeros(9, 16, HKV, D, dtype=BF16, device="meta")
    kwargs = {"cu_seqlens_q": torch.zeros(4, dtype=torch.int32, device="meta"),
              "max_seqlen_q": 6,
              "block_table": torch.zeros(3, 4, dtype=torch.int32, device="meta"),
              "seq_lens_kv": torch.zeros(3, dtype=torch.int32, device="meta")}
    return q, pool, pool, kwargs


REFUSED = {  # name: (message prefix, the call's case, extra arguments)
    "paged": ("block_table: expected None when q, k or v requires grad (the backward takes no "
              "paged K/V; pack K/V with cu_seqlens_kv to train), got a tensor; call under "
              "torch.no_grad()", "paged", {}),
    "num_splits": ("num_splits: expected 0 when q, k or v requires grad (split-KV is an "
                   "inference option), got 3", "varlen", {"num_splits": 3}),
    "decode": ("decode: expected 'auto' when q, k or v requires grad (the decode kernel is an "
               "inference option), got 'on'", "varlen", {"decode": "on"}),
    "dropout": ("dropout_p, spec: expected no dropout with cu_seqlens_q", "varlen",
                {"dropout_p": 0.1}),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_inference_arguments_with_grad_are_refused(name):
    prefix, case, extra = REFUSED[name]
    q, k, v, kwargs = paged() if case == "paged" else layouts()[case]
    with pytest.raises(attnc.ArgumentError) as error:
        attnc.attention(q, k, v, layout="bshd", **kwargs, **extra)
    assert str(error.value).startswith(prefix), str(error.value)
    if name != "dropout":
        with torch.no_grad():  # the same call for inference is fine
            attnc.attention(q, k, v, layout="bshd", **kwargs, **extra)


def test_a_paged_forward_ex_with_grad_has_no_backward():
    """A direct call of the op on a paged pool with q requiring grad: the backward raises,
    naming block_table, instead of launching."""
    q, k, v, kwargs = paged()
    spec = repr((attnc.Spec(D, heads=(HQ, HKV)).key(), None, None, None, 0.0, ()))
    out, _ = torch.ops.attnc.forward_ex(q, k, v, [], kwargs["cu_seqlens_q"], None,
                                        kwargs["block_table"], kwargs["seq_lens_kv"], 6, 64,
                                        spec, "", "bshd", 0, 0, None, None, None, False,
                                        False)
    with pytest.raises(attnc.ArgumentError, match=r"^block_table: expected None when q, k"):
        out.sum().backward()


def test_sequences_without_keys_are_refused_for_training():
    host_q = torch.tensor([0, 3, 4, 10], dtype=torch.int32)
    host_kv = torch.tensor([0, 40, 57, 57], dtype=torch.int32)
    with pytest.raises(attnc.ArgumentError) as error:
        torch_ops._check_sequences_trainable(host_q, host_kv, 3, 6, 40)
    assert str(error.value) == (
        "cu_seqlens_kv: expected sequences with both queries and keys (or neither) when q, k or "
        "v requires grad (the backward takes no others), got sequence 2 with 6 queries and 0 "
        "keys")
    with pytest.raises(attnc.ArgumentError, match=r"^cu_seqlens_q: .* sequence 1 with 0 "
                       r"queries and 40 keys$"):
        torch_ops._check_sequences_trainable(torch.tensor([0, 3, 3, 9], dtype=torch.int32),
                                             None, 3, 6, 40)
    torch_ops._check_sequences_trainable(host_q, torch.tensor([0, 1, 2, 3], dtype=torch.int32),
                                         3, 6, 1)


# ---- The structs, against ctypes and the C API's checks ----

def test_backward_ex_format_matches_the_ctypes_struct():
    assert ctypes.sizeof(_capi.BackwardArgsEx) == 360
    assert_format_matches(torch_ops._BACKWARD_EX_FORMAT, _capi.BackwardArgsEx)


@pytest.fixture(scope="module")
def kernel():
    spec = attnc.Spec(D, heads=(HQ, HKV), mask={"document": "doc", "causal": True},
                      inputs={"doc": {"dtype": "i32", "dims": ["b", "pos"]}})
    return attnc.compile(spec, target="sm_80", backward=True)


@pytest.fixture
def recorded(kernel, monkeypatch):
    """The eager path on host tensors: `kernel` serves every call and each launch is recorded
    as (launch method name, a copy of its struct, a copy of its layout) instead of run; the
    copy's inputs array is a copy too (the launch's lives until it returns)."""
    launches, arrays = [], []

    def on_device(device, launch, args):
        copy = type(args)()
        ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(args), ctypes.sizeof(args))
        count = copy.base.num_inputs
        arrays.append((_capi.Input * count)(*copy.base.inputs[:count]))
        copy.base.inputs = ctypes.cast(arrays[-1], ctypes.POINTER(_capi.Input))
        seq = ctypes.cast(args.layout, ctypes.c_void_p).value
        layout = _capi.SeqLayout.from_buffer_copy(
            (ctypes.c_char * ctypes.sizeof(_capi.SeqLayout)).from_address(seq)) if seq else None
        launches.append((launch.__name__, copy, layout))
    check_tensor = torch_ops._check_tensor
    monkeypatch.setattr(torch_ops, "_check_tensor", lambda name, t, *args, **kwargs: check_tensor(
        name, t.detach().to("meta"), *args, **kwargs))  # host tensors pass as CUDA ones
    monkeypatch.setattr(torch_ops, "_on_device", on_device)
    monkeypatch.setattr(torch_ops, "_eager", lambda q: True)
    monkeypatch.setattr(torch_ops, "_device_of", lambda t: 0)
    monkeypatch.setattr(torch_ops, "_kernel_sized", lambda *args: kernel)
    return launches


def _host_call(case, layout="bshd", **extra):
    """A training call on host tensors with valid contents: (q, k, v, out, kwargs)."""
    q, k, v, kwargs = layouts("cpu", layout, requires_grad=False)[case]
    q, k, v = (torch.randn(t.shape).to(BF16).requires_grad_() for t in (q, k, v))
    max_pos = max(kwargs.get("max_seqlen_q", 6), kwargs.get("max_seqlen_kv", KV_CONTIGUOUS))
    doc = torch.zeros(len(Q_LENS), max_pos, dtype=torch.int32)
    out = attnc.attention(q, k, v, layout=layout, mask={"document": "doc", "causal": True},
                          inputs={"doc": doc}, **kwargs, **extra)
    return q, k, v, out, kwargs


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("case", CASES)
def test_training_call_passes_host_copies_to_both_launches(kernel, recorded, case, layout):
    q, k, v, out, kwargs = _host_call(case, layout, deterministic=True)
    grad_out = torch.ones_like(out)
    out.backward(grad_out, retain_graph=True)  # the host copies stay alive with the graph
    (fwd_name, fwd, fwd_seq), (bwd_name, bwd, bwd_seq) = recorded
    assert (fwd_name, bwd_name) == ("launch_ex", "launch_backward_ex")
    packed_q, packed_kv = "cu_seqlens_q" in kwargs, "cu_seqlens_kv" in kwargs
    host_q = ctypes.cast(bwd_seq.host_cu_seqlens_q, ctypes.c_void_p).value
    host_kv = ctypes.cast(bwd_seq.host_cu_seqlens_kv, ctypes.c_void_p).value
    # One host copy serves both: the forward's layout points at the same host arrays.
    assert ctypes.cast(fwd_seq.host_cu_seqlens_q, ctypes.c_void_p).value == host_q
    assert ctypes.cast(fwd_seq.host_cu_seqlens_kv, ctypes.c_void_p).value == host_kv
    assert bool(host_q) == packed_q and bool(host_kv) == packed_kv
    if packed_q:
        assert bwd_seq.host_cu_seqlens_q[len(Q_LENS)] == sum(Q_LENS)
        assert bwd_seq.cu_seqlens_q == kwargs["cu_seqlens_q"].data_ptr()
    if packed_kv:
        assert list(bwd_seq.host_cu_seqlens_kv[:len(KV_LENS) + 1]) == offsets(KV_LENS)
    assert (bwd_seq.total_q, bwd_seq.total_kv) == (sum(Q_LENS) if packed_q else 0,
                                                   sum(KV_LENS) if packed_kv else 0)
    assert bwd_seq.block_table is None and bwd_seq.page_size == 0
    base = bwd.base
    assert (base.batch, base.q_len, base.kv_len) == (fwd.base.batch, fwd.base.q_len,
                                                     fwd.base.kv_len)
    assert base.batch == len(Q_LENS) and base.deterministic == 1
    assert base.lse == fwd.base.lse and base.o.data == fwd.base.o.data == out.data_ptr()
    assert (base.q.data, base.k.data, base.v.data) == (q.data_ptr(), k.data_ptr(), v.data_ptr())
    assert base.dq.data == q.grad.data_ptr() and base.dv.data == v.grad.data_ptr()
    if packed_q:  # packed rows: the row stride, no batch stride
        assert (base.dq.stride_b, base.dq.stride_h, base.dq.stride_s) == (0, D, HQ * D)
    # Each sequence is a launch of batch 1: the workspace holds the longest one's.
    assert base.workspace_bytes == kernel.backward_workspace_bytes(1, base.q_len, True)
    assert base.num_inputs == 1 and fwd.base.num_inputs == 1
    # The C API takes both structs as they were packed (their tensors are still alive here).
    fwd.layout = ctypes.pointer(fwd_seq)
    kernel.validate_ex(fwd)
    bwd.layout = ctypes.pointer(bwd_seq)
    kernel.validate_backward_ex(bwd)


def test_training_call_checks_the_offsets_before_the_sequences(kernel, recorded):
    """Offsets that do not increase are the C API's error, named by element, before the
    per-sequence check reads them as lengths; nothing is launched."""
    q, k, v, kwargs = layouts("cpu", requires_grad=False)["varlen"]
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    kwargs["cu_seqlens_q"] = torch.tensor([0, 3, 1, 10], dtype=torch.int32)
    kwargs["cu_seqlens_kv"] = torch.tensor([0, 40, 40, 62], dtype=torch.int32)
    with pytest.raises(attnc.ArgumentError) as error:
        attnc.attention(q, k, v, layout="bshd", mask={"document": "doc", "causal": True},
                        inputs={"doc": torch.zeros(3, 40, dtype=torch.int32)}, **kwargs)
    assert str(error.value) == ("ForwardArgs.varlen.cu_seqlens_q[2] = 1 < cu_seqlens_q[1] = 3: "
                                "not increasing")
    assert recorded == []


def _backward_args(kernel, host_q=None, host_kv=None):
    """_prepare_backward_ex of a varlen call on host tensors: (args, what keeps them alive)."""
    q, k, v, kwargs = layouts("cpu", requires_grad=False)["varlen"]
    cu_q, cu_kv = kwargs["cu_seqlens_q"], kwargs["cu_seqlens_kv"]
    out, lse = torch.zeros(q.shape, dtype=BF16), torch.zeros(HQ, q.shape[0])
    doc = torch.zeros(3, 40, dtype=torch.int32)
    host_q = cu_q if host_q is None else host_q
    host_kv = cu_kv if host_kv is None else host_kv
    args, dq, dk, dv, alive = torch_ops._prepare_backward_ex(
        kernel, out, q, k, v, out, lse, [doc], cu_q, cu_kv, host_q, host_kv, 6, 40, "doc:b,pos",
        "bshd", False)
    return args, (q, k, v, out, lse, doc, cu_q, cu_kv, host_q, host_kv, dq, dk, dv, alive)


def test_backward_ex_refusals_come_through_as_argument_errors(kernel):
    """What only the C API checks is raised with its message (here a host copy of cu_seqlens_q
    that does not increase), as ArgumentError."""
    args, alive = _backward_args(kernel)
    kernel.validate_backward_ex(args)
    args, alive = _backward_args(kernel, host_q=torch.tensor([0, 3, 2, 10], dtype=torch.int32))
    with pytest.raises(attnc.ArgumentError) as error:
        kernel.validate_backward_ex(args)
    assert str(error.value) == ("BackwardArgs.varlen.cu_seqlens_q[2] = 2 < cu_seqlens_q[1] = 3: "
                                "not increasing")


def test_host_copies_are_checked_by_name(kernel):
    q, k, v, kwargs = layouts("cpu", requires_grad=False)["varlen"]
    cu_q, cu_kv = kwargs["cu_seqlens_q"], kwargs["cu_seqlens_kv"]
    out, lse = torch.zeros(q.shape, dtype=BF16), torch.zeros(HQ, q.shape[0])

    def prepare(host_q, host_kv):
        torch_ops._prepare_backward_ex(kernel, out, q, k, v, out, lse, [torch.zeros(
            3, 40, dtype=torch.int32)], cu_q, cu_kv, host_q, host_kv, 6, 40, "doc:b,pos",
            "bshd", False)
    with pytest.raises(attnc.ArgumentError, match=r"^host_cu_seqlens_q: expected a CPU copy of "
                       r"cu_seqlens_q \(the backward launches each sequence from it\), got None"):
        prepare(None, cu_kv)
    with pytest.raises(attnc.ArgumentError, match=r"^host_cu_seqlens_kv: expected a contiguous "
                       r"int32 CPU tensor of cu_seqlens_kv's shape \(4,\), got torch.int64 \(4,\)"):
        prepare(cu_q, cu_kv.long())
    with pytest.raises(attnc.ArgumentError, match=r"^host_cu_seqlens_q: expected a contiguous "
                       r"int32 CPU tensor .* got torch.int32 \(5,\)"):
        prepare(torch.zeros(5, dtype=torch.int32), cu_kv)
    prepare(cu_q, cu_kv)


def test_host_copies_are_one_transfer():
    cu_q = torch.tensor([0, 3, 4], dtype=torch.int32)
    cu_kv = torch.tensor([0, 7, 9], dtype=torch.int32)
    host_q, host_kv = torch_ops._host_copies(cu_q, cu_kv)
    assert host_q.tolist() == [0, 3, 4] and host_kv.tolist() == [0, 7, 9]
    assert host_q.untyped_storage().data_ptr() == host_kv.untyped_storage().data_ptr()
    assert torch_ops._host_copies(None, cu_kv)[0] is None
    assert torch_ops._host_copies(None, cu_kv)[1].tolist() == [0, 7, 9]

