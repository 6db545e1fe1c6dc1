"""attnc.attention's varlen, paged K/V and decode arguments without a GPU: the second op
attnc::forward_ex (its schema, and attnc::forward's unchanged), the shapes its fake kernel gives
for each layout, torch.compile(fullgraph=True) tracing it, every argument error with its message
before any op runs, and the structs it packs against the C API's own checks (host tensors
standing in for device ones)."""

import ctypes

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import attnc
from attnc import _capi, torch_ops
from ctypes_fields import assert_format_matches

HQ, HKV, D, DV = 8, 2, 64, 64
Q_LENS, KV_LENS = [3, 1, 6], [40, 17, 5]
PAGE, PAGES, MAX_PAGES = 16, 9, 4
KV_CONTIGUOUS = 400  # 7 kv tiles of 64: room for 3 splits
BF16 = torch.bfloat16

# attnc::forward's schema as it was before forward_ex: a traced graph or an AOT-compiled model
# that names it keeps working.
FORWARD_SCHEMA = ("attnc::forward(Tensor q, Tensor k, Tensor v, Tensor[] inputs, Tensor? rng, "
                  "str spec, str inputs_desc, str layout, bool backward, bool deterministic) -> "
                  "(Tensor, Tensor)")


def layouts(device="meta", layout="bshd"):
    """Per layout name: (q, k, v, the call's keyword arguments, out shape, LSE shape)."""
    batch, total_q, total_kv = len(Q_LENS), sum(Q_LENS), sum(KV_LENS)

    def t(*shape, dtype=BF16):
        return torch.zeros(shape, dtype=dtype, device=device)
    pool = (PAGES, PAGE, HKV, D) if layout == "bshd" else (PAGES, HKV, PAGE, D)
    q4 = (batch, 2, HQ, D) if layout == "bshd" else (batch, HQ, 2, D)
    paged = {"block_table": t(batch, MAX_PAGES, dtype=torch.int32),
             "seq_lens_kv": t(batch, dtype=torch.int32)}
    cu_q = {"cu_seqlens_q": t(batch + 1, dtype=torch.int32), "max_seqlen_q": max(Q_LENS)}
    cu_kv = {"cu_seqlens_kv": t(batch + 1, dtype=torch.int32), "max_seqlen_kv": max(KV_LENS)}
    contiguous_kv = ((batch, KV_CONTIGUOUS, HKV, D) if layout == "bshd"
                     else (batch, HKV, KV_CONTIGUOUS, D))
    return {
        "varlen": (t(total_q, HQ, D), t(total_kv, HKV, D), t(total_kv, HKV, DV),
                   {**cu_q, **cu_kv}, (total_q, HQ, DV), (HQ, total_q)),
        "paged_varlen": (t(total_q, HQ, D), t(*pool), t(*pool), {**cu_q, **paged},
                         (total_q, HQ, DV), (HQ, total_q)),
        "paged": (t(*q4), t(*pool), t(*pool), dict(paged), q4, (batch, HQ, 2)),
        "varlen_q": (t(total_q, HQ, D), t(*contiguous_kv), t(*contiguous_kv), dict(cu_q),
                     (total_q, HQ, DV), (HQ, total_q)),
        "splits": (t(*q4), t(*contiguous_kv), t(*contiguous_kv), {"num_splits": 3},
                   q4, (batch, HQ, 2)),
    }


CASES = sorted(layouts())


def _call(name, layout="bshd", device="meta", **extra):
    q, k, v, kwargs, out_shape, lse_shape = layouts(device, layout)[name]
    return attnc.attention(q, k, v, layout=layout, return_lse=True, **kwargs, **extra), \
        out_shape, lse_shape


def test_forward_ex_is_registered_beside_an_unchanged_forward():
    assert str(torch.ops.attnc.forward.default._schema) == FORWARD_SCHEMA
    schema = str(torch.ops.attnc.forward_ex.default._schema)
    assert schema.startswith("attnc::forward_ex(Tensor q, Tensor k, Tensor v, Tensor[] inputs, "
                             "Tensor? cu_seqlens_q, Tensor? cu_seqlens_kv, Tensor? block_table, "
                             "Tensor? seq_lens_kv, SymInt max_seqlen_q, SymInt max_seqlen_kv")
    assert schema.endswith("-> (Tensor, Tensor)")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("case", CASES)
def test_meta_shapes(case, layout):
    (out, lse), out_shape, lse_shape = _call(case, layout, mask="causal")
    assert tuple(out.shape) == out_shape and out.dtype == BF16 and out.is_contiguous()
    assert tuple(lse.shape) == lse_shape and lse.dtype == torch.float32


@pytest.mark.parametrize("case", CASES)
def test_fake_shapes_on_cuda(case):
    with FakeTensorMode():
        (out, lse), out_shape, lse_shape = _call(case, device="cuda", mask={"window": 8})
    assert out.device.type == "cuda" and tuple(out.shape) == out_shape
    assert tuple(lse.shape) == lse_shape


def test_without_return_lse_only_out():
    q, k, v, kwargs, out_shape, _ = layouts()["paged_varlen"]
    out = attnc.attention(q, k, v, layout="bshd", **kwargs)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == out_shape


def test_plain_calls_keep_attnc_forward():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    q, k, v, kwargs, _, _ = layouts()["paged"]
    plain = layouts()["splits"][:3]

    def run(q, k, v, table, lens, pq, pk, pv):
        return (attnc.attention(q, k, v, layout="bshd", block_table=table, seq_lens_kv=lens),
                attnc.attention(pq, pk, pv, layout="bshd"))
    torch.compile(run, fullgraph=True, backend=record)(q, k, v, kwargs["block_table"],
                                                       kwargs["seq_lens_kv"], *plain)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count("attnc.forward_ex") == 1 and targets.count("attnc.forward") == 1


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_forward_ex(dynamic):
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(q, k, v, cu_q, table, lens, doc, max_q):
        return attnc.attention(q, k, v, layout="bshd", cu_seqlens_q=cu_q, max_seqlen_q=max_q,
                               block_table=table, seq_lens_kv=lens, num_splits=2,
                               mask={"document": "doc", "causal": True}, inputs={"doc": doc},
                               score={"softcap": 30.0}, return_lse=True)
    compiled = torch.compile(step, fullgraph=True, dynamic=dynamic, backend=record)
    for total_q, max_q in ((10, 6), (12, 7)):
        q, k, v, kwargs, _, _ = layouts()["paged_varlen"]
        q = torch.zeros(total_q, HQ, D, dtype=BF16, device="meta")
        doc = torch.zeros(len(Q_LENS), MAX_PAGES * PAGE, dtype=torch.int32, device="meta")
        out, lse = compiled(q, k, v, kwargs["cu_seqlens_q"], kwargs["block_table"],
                            kwargs["seq_lens_kv"], doc, max_q)
        assert tuple(out.shape) == (total_q, HQ, DV) and tuple(lse.shape) == (HQ, total_q)
    traced = [g for g in graphs if any(str(n.target) == "attnc.forward_ex"
                                       for n in g.graph.nodes)]
    assert len(traced) == (1 if dynamic else 2)


def test_opcheck_forward_ex():
    q, k, v, kwargs, _, _ = layouts()["paged_varlen"]
    spec = repr((attnc.Spec(D, heads=(HQ, HKV)).key(), None, None, None, 0.0, ()))
    args = (q, k, v, [], kwargs["cu_seqlens_q"], None, kwargs["block_table"],
            kwargs["seq_lens_kv"], 6, MAX_PAGES * PAGE, spec, "", "bshd", 0,
            _capi.ATTNC_DECODE_AUTO, None, None, None, False, False)
    assert set(torch.library.opcheck(torch.ops.attnc.forward_ex.default, args).values()) \
        == {"SUCCESS"}


def test_kernel_call_takes_the_inference_arguments():
    spec = attnc.Spec(D, heads=(HQ, HKV), dtype="bf16", mask="causal", name="paged_kernel")
    kernel = attnc.compile(spec, target="sm_80")
    q, k, v, kwargs, out_shape, _ = layouts()["paged_varlen"]
    assert tuple(kernel(q, k, v, layout="bshd", **kwargs).shape) == out_shape


# ---- Argument errors: each names its argument, expected vs given, before any op ----

def raises(prefix, case="paged_varlen", layout="bshd", replace=None, drop=(), **extra):
    q, k, v, kwargs, _, _ = layouts(layout=layout)[case]
    tensors = {"q": q, "k": k, "v": v}
    for name, value in (replace or {}).items():
        (tensors if name in tensors else kwargs)[name] = value
    for name in drop:
        kwargs.pop(name)
    with pytest.raises(attnc.ArgumentError) as error:
        attnc.attention(tensors["q"], tensors["k"], tensors["v"], layout=layout, **kwargs,
                        **extra)
    message = str(error.value)
    assert message.startswith(prefix), message
    return message


def meta(*shape, dtype=torch.int32):
    return torch.zeros(shape, dtype=dtype, device="meta")


BAD = {  # name: (message prefix, arguments of raises())
    "decode": ("decode: expected 'auto', 'on' or 'off', got 'yes'", {"decode": "yes"}),
    "num_splits range": ("num_splits: expected an int in [0, 128]", {"num_splits": 129}),
    "num_splits type": ("num_splits: expected an int in [0, 128]", {"num_splits": 2.0}),
    "packed and paged kv": ("cu_seqlens_kv: expected None with block_table",
                            {"cu_seqlens_kv": meta(4), "max_seqlen_kv": 40}),
    "table without lengths": ("seq_lens_kv: expected an int32 tensor [B]",
                              {"drop": ("seq_lens_kv",)}),
    "lengths without table": ("block_table: expected an int32 tensor [B, max_pages]",
                              {"drop": ("block_table",)}),
    "packed q rank": ("q: expected 3 dims (total_q, H, D: packed rows",
                      {"replace": {"q": meta(1, 10, HQ, D, dtype=BF16)}}),
    "pool rank": ("k: expected 4 dims (pages, page_size, H, D: a paged pool",
                  {"replace": {"k": meta(PAGES * PAGE, HKV, D, dtype=BF16)}}),
    "cu_seqlens dtype": ("cu_seqlens_q: expected dtype torch.int32, got torch.int64",
                         {"replace": {"cu_seqlens_q": meta(4, dtype=torch.int64)}}),
    "cu_seqlens rank": ("cu_seqlens_q: expected 1 dim ([B + 1] row offsets), got shape (4, 1)",
                        {"replace": {"cu_seqlens_q": meta(4, 1)}}),
    "cu_seqlens strided": ("cu_seqlens_q: expected a contiguous last dim",
                           {"replace": {"cu_seqlens_q": meta(8)[::2]}}),
    "cu_seqlens device": ("cu_seqlens_q: expected a tensor on q's device meta",
                          {"replace": {"cu_seqlens_q": torch.zeros(4, dtype=torch.int32)}}),
    "no sequences": ("cu_seqlens_q: expected 1 to 65535 sequences, got 1 entries",
                     {"replace": {"cu_seqlens_q": meta(1)}}),
    "table rows": ("block_table: expected 3 sequences (cu_seqlens_q's), got 2 rows",
                   {"replace": {"block_table": meta(2, MAX_PAGES)}}),
    "lengths entries": ("seq_lens_kv: expected 3 sequences (cu_seqlens_q's), got 4 entries",
                        {"replace": {"seq_lens_kv": meta(4)}}),
    "table dtype": ("block_table: expected dtype torch.int32",
                    {"replace": {"block_table": meta(3, MAX_PAGES, dtype=torch.int64)}}),
    "page size": ("k: expected a page size (dim 1 of a pool in layout 'bshd') that is a power "
                  "of two in [1, 256], got 24",
                  {"replace": {"k": meta(PAGES, 24, HKV, D, dtype=BF16),
                               "v": meta(PAGES, 24, HKV, D, dtype=BF16)}}),
    "v pool": ("v: expected k's shape but the head dim",
               {"replace": {"v": meta(PAGES + 1, PAGE, HKV, D, dtype=BF16)}}),
    "max_seqlen_q missing": ("max_seqlen_q: expected the longest sequence's length",
                             {"drop": ("max_seqlen_q",)}),
    "max_seqlen_q zero": ("max_seqlen_q: expected None or an int >= 1, got 0",
                          {"replace": {"max_seqlen_q": 0}}),
    "max_seqlen_q type": ("max_seqlen_q: expected None or an int >= 1, got 6.0",
                          {"replace": {"max_seqlen_q": 6.0}}),
    "max_seqlen_q bool": ("max_seqlen_q: expected None or an int >= 1, got True",
                          {"replace": {"max_seqlen_q": True}}),
    "max_seqlen_q rows": ("max_seqlen_q: expected at most q's rows = 10, got 11",
                          {"replace": {"max_seqlen_q": 11}}),
    "max_seqlen_kv pages": ("max_seqlen_kv: expected at most block_table's max_pages x "
                            "page_size = 64, got 65", {"max_seqlen_kv": 65}),
    "heads divide": ("k: expected a head count that divides q's 8, got 3",
                     {"replace": {"k": meta(PAGES, PAGE, 3, D, dtype=BF16),
                                  "v": meta(PAGES, PAGE, 3, D, dtype=BF16)}}),
    "head dim": ("k: expected head dim 64 (q's), got 32",
                 {"replace": {"k": meta(PAGES, PAGE, HKV, 32, dtype=BF16)}}),
    "dtype": ("k, v: expected q's dtype torch.bfloat16",
              {"replace": {"k": meta(PAGES, PAGE, HKV, D, dtype=torch.float16),
                           "v": meta(PAGES, PAGE, HKV, D, dtype=torch.float16)}}),
    "layout": ("layout: expected 'bhsd' or 'bshd', got 'thd'", {"layout": "thd"}),
    "dropout": ("dropout_p, spec: expected no dropout with cu_seqlens_q, max_seqlen_q, "
                "block_table, seq_lens_kv (the decode kernel", {"dropout_p": 0.1}),
    "spec dropout": ("dropout_p, spec: expected no dropout",
                     {"spec": attnc.Spec(dropout={"p": 0.1, "rounds": 7})}),
    "host lengths dtype": ("host_seq_lens_kv: expected a contiguous int32 CPU tensor of "
                           "seq_lens_kv's shape (3,), got torch.int64 (3,) on cpu",
                           {"host_seq_lens_kv": torch.zeros(3, dtype=torch.int64)}),
    "host lengths device": ("host_seq_lens_kv: expected a contiguous int32 CPU tensor of "
                            "seq_lens_kv's shape (3,), got torch.int32 (3,) on meta",
                            {"host_seq_lens_kv": meta(3)}),
    "host lengths shape": ("host_seq_lens_kv: expected a contiguous int32 CPU tensor of "
                           "seq_lens_kv's shape (3,), got torch.int32 (4,) on cpu",
                           {"host_seq_lens_kv": torch.zeros(4, dtype=torch.int32)}),
    "host lengths list": ("host_seq_lens_kv: expected a contiguous int32 CPU tensor of "
                          "seq_lens_kv's shape (3,), got list", {"host_seq_lens_kv": [1, 2, 3]}),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_argument_errors(name):
    prefix, arguments = BAD[name]
    raises(prefix, **arguments)


@pytest.mark.parametrize("case", ["paged", "paged_varlen"])
def test_meta_shapes_with_host_lengths(case):
    (out, lse), out_shape, lse_shape = _call(case, host_seq_lens_kv=torch.tensor(
        KV_LENS, dtype=torch.int32))
    assert tuple(out.shape) == out_shape and tuple(lse.shape) == lse_shape


def test_host_lengths_need_a_paged_cache():
    for case in ("varlen", "splits"):
        raises("host_seq_lens_kv: expected None without seq_lens_kv, got a tensor", case=case,
               host_seq_lens_kv=torch.zeros(3, dtype=torch.int32))


def test_contiguous_max_seqlen_must_match_the_tensor():
    raises("max_seqlen_kv: expected None or the tensor's length 400, got 399", case="splits",
           max_seqlen_kv=399)


def test_dropout_with_decode_options_names_them():
    message = raises("dropout_p, spec: expected no dropout with num_splits", case="splits",
                     dropout_p=0.1)
    assert "the decode kernel" in message


def test_declared_inputs_span_the_launch_positions():
    """Inputs are [B, L] with B the sequences and L = max(max_seqlen_q, max_seqlen_kv)."""
    raises("inputs['doc']: expected shape [L], [B, L]", mask={"document": "doc"},
           inputs={"doc": meta(3, MAX_PAGES * PAGE - 1)})
    q, k, v, kwargs, _, _ = layouts()["paged_varlen"]
    attnc.attention(q, k, v, layout="bshd", mask={"document": "doc"},
                    inputs={"doc": meta(3, MAX_PAGES * PAGE)}, **kwargs)


# ---- The structs forward_ex packs, against ctypes and the C API's checks ----

@pytest.mark.parametrize("fmt,cls", [(torch_ops._FORWARD_EX_FORMAT, _capi.ForwardArgsEx),
                                     (torch_ops._SEQ_LAYOUT_FORMAT, _capi.SeqLayout)])
def test_ex_formats_match_the_ctypes_structs(fmt, cls):
    assert_format_matches(fmt, cls)


@pytest.fixture(scope="module")
def kernel():
    spec = attnc.Spec(D, heads=(HQ, HKV), mask={"document": "doc", "causal": True},
                      inputs={"doc": {"dtype": "i32", "dims": ["b", "pos"]}})
    return attnc.compile(spec, target="sm_80")


def _host_case(name, layout):
    """A case's tensors on the host with valid contents, as the launch would get them."""
    q, k, v, kwargs, out_shape, lse_shape = layouts("cpu", layout)[name]
    q, k, v = (torch.randn(t.shape).to(BF16) for t in (q, k, v))
    cu = [0]
    for n in Q_LENS:
        cu.append(cu[-1] + n)
    cu_kv = [0]
    for n in KV_LENS:
        cu_kv.append(cu_kv[-1] + n)
    values = {"cu_seqlens_q": torch.tensor(cu, dtype=torch.int32),
              "cu_seqlens_kv": torch.tensor(cu_kv, dtype=torch.int32),
              "block_table": torch.randint(0, PAGES, (len(Q_LENS), MAX_PAGES),
                                           dtype=torch.int32),
              "seq_lens_kv": torch.tensor(KV_LENS, dtype=torch.int32)}
    for key in values:
        if key in kwargs:
            kwargs[key] = values[key]
    return q, k, v, kwargs, out_shape, lse_shape


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("case", CASES)
def test_c_api_accepts_the_packed_ex_structs(kernel, case, layout):
    q, k, v, kwargs, out_shape, lse_shape = _host_case(case, layout)
    batch = len(Q_LENS)
    q_len = max(Q_LENS) if "cu_seqlens_q" in kwargs else 2
    kv_len = (max(KV_LENS) if "cu_seqlens_kv" in kwargs else
              MAX_PAGES * PAGE if "block_table" in kwargs else KV_CONTIGUOUS)
    doc = torch.zeros(batch, max(q_len, kv_len), dtype=torch.int32)
    args, out, lse, alive = torch_ops._prepare_forward_ex(
        kernel, q, k, v, [doc], kwargs.get("cu_seqlens_q"), kwargs.get("cu_seqlens_kv"),
        kwargs.get("block_table"), kwargs.get("seq_lens_kv"), q_len, kv_len, "doc:b,pos", layout,
        kwargs.get("num_splits", 0), _capi.ATTNC_DECODE_AUTO)
    kernel.validate_ex(args)
    assert tuple(out.shape) == out_shape and tuple(lse.shape) == lse_shape
    assert args.base.lse == lse.data_ptr() and args.num_splits == kwargs.get("num_splits", 0)
    plan = kernel.decode_plan(args, 132)
    assert plan.decode == 1
    if "block_table" in kwargs:
        seq = args.layout.contents
        assert (seq.page_size, seq.num_pages, seq.max_pages) == (PAGE, PAGES, MAX_PAGES)
        assert seq.k_stride_page == k.stride(0) and seq.block_table_stride == MAX_PAGES
        assert args.base.kv_len == MAX_PAGES * PAGE  # the table's capacity by default
    if "cu_seqlens_q" in kwargs:
        assert args.layout.contents.total_q == sum(Q_LENS) and args.base.q_len == max(Q_LENS)
    if case == "splits":
        assert not args.layout and plan.splits == 3


def test_host_lengths_reach_the_layout_and_are_checked(kernel):
    """host_seq_lens_kv is attnc_seq_layout's host copy: the C API reads it (a length beyond its
    sequence's pages is refused before launch; the split rule's use of it is DecodePlan.*'s)."""
    q, k, v, kwargs, _, _ = _host_case("paged", "bshd")
    doc = torch.zeros(3, MAX_PAGES * PAGE, dtype=torch.int32)
    lens = kwargs["seq_lens_kv"]

    def prepare(host):
        return torch_ops._prepare_forward_ex(
            kernel, q, k, v, [doc], None, None, kwargs["block_table"], lens, 2,
            MAX_PAGES * PAGE, "doc:b,pos", "bshd", 0, _capi.ATTNC_DECODE_AUTO, host_lens=host)
    host = lens.clone()
    args, _, _, _ = prepare(host)
    assert ctypes.addressof(args.layout.contents.host_seq_lens_kv.contents) == host.data_ptr()
    kernel.validate_ex(args)
    args, _, _, _ = prepare(None)
    assert not args.layout.contents.host_seq_lens_kv
    beyond = torch.tensor([KV_LENS[0], MAX_PAGES * PAGE + 1, KV_LENS[2]], dtype=torch.int32)
    with pytest.raises(attnc.ArgumentError, match=r"seq_lens_kv\[1\] = 65"):
        prepare(beyond)


def test_decode_choice_reaches_the_struct(kernel):
    q, k, v, kwargs, _, _ = _host_case("splits", "bshd")
    doc = torch.zeros(3, KV_CONTIGUOUS, dtype=torch.int32)
    for name, value in (("auto", 0), ("off", 1), ("on", 2)):
        args, _, _, _ = torch_ops._prepare_forward_ex(
            kernel, q, k, v, [doc], None, None, None, None, 2, KV_CONTIGUOUS, "doc:b,pos",
            "bshd", 0, torch_ops._DECODE_CHOICES[name])
        assert args.decode == value
        kernel.validate_ex(args)
    args, _, _, _ = torch_ops._prepare_forward_ex(
        kernel, q, k, v, [doc], None, None, None, None, 2, KV_CONTIGUOUS, "doc:b,pos", "bshd", 0,
        _capi.ATTNC_DECODE_OFF)
    assert kernel.decode_plan(args, 132).decode == 0  # off: the forward kernel


def test_a_spec_with_other_heads_is_refused_before_launch(kernel):
    q, k, v, kwargs, _, _ = _host_case("paged_varlen", "bshd")
    q = torch.randn(10, 4, D).to(BF16)
    with pytest.raises(attnc.ArgumentError, match=r"q, k, v: expected the spec's heads \(8, 2\)"):
        torch_ops._prepare_forward_ex(kernel, q, k, v, [], kwargs["cu_seqlens_q"], None,
                                      kwargs["block_table"], kwargs["seq_lens_kv"], 6, 64,
                                      "doc:b,pos", "bshd", 0, 0)


def test_c_api_refusals_are_argument_errors_before_launch(kernel):
    """What only the C API checks (decode="off" with a layout) is raised while the launch is
    prepared, before anything could be launched."""
    q, k, v, kwargs, _, _ = _host_case("paged_varlen", "bshd")
    doc = torch.zeros(3, MAX_PAGES * PAGE, dtype=torch.int32)
    with pytest.raises(attnc.ArgumentError, match=r"^ForwardArgs\.decode = Off"):
        torch_ops._prepare_forward_ex(kernel, q, k, v, [doc], kwargs["cu_seqlens_q"], None,
                                      kwargs["block_table"], kwargs["seq_lens_kv"], 6, 64,
                                      "doc:b,pos", "bshd", 0, _capi.ATTNC_DECODE_OFF)
