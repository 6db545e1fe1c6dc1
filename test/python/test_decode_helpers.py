"""CPU checks of the decode GPU suite and bench (test/gpu/test_decode.py, bench/bench_decode.py,
bench/decode_page.py): the ctypes mirrors of attnc_c.h's inference structs, the case plan, the
paging (pools, shuffled tables, shared prefixes, NaN where nothing may be read), the per-sequence
views of O and LSE against the float64 reference, the bench's bytes and reference, and the page
renderer. torch on the CPU only; no library, no GPU."""
import ctypes
import functools
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "test", "gpu"), os.path.join(ROOT, "bench")]
import attnc_ctypes  # noqa: E402
import attnc_decode_ctypes as dx  # noqa: E402
import bench_decode  # noqa: E402
import decode_page  # noqa: E402
import test_decode as td  # noqa: E402
import test_forward as tf  # noqa: E402

CPU = torch.device("cpu")


class StubKernel:
    """What forward_args_ex needs of attnc_ctypes.Kernel, without a library."""
    make_args = functools.partial(attnc_ctypes.Kernel.make_args, None)


# ---- The ctypes structs against the C header ----

C_STRUCTS = {"attnc_seq_layout": dx.SeqLayout, "attnc_forward_args_ex": dx.ForwardArgsEx,
             "attnc_decode_plan": dx.DecodePlan}


def test_structs_match_the_c_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "attnc/attnc_c.h"',
             "int main(void) {"]
    for cname, cls in C_STRUCTS.items():
        lines.append(f'  printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'  printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines.append("  return 0;\n}")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)],
                   check=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        cname, field, value = line.split()
        got[(cname, field)] = int(value)
    for cname, cls in C_STRUCTS.items():
        assert got[(cname, "size")] == ctypes.sizeof(cls), cname
        for field, _ in cls._fields_:
            assert got[(cname, field)] == getattr(cls, field).offset, (cname, field)


# ---- The case plan ----

def test_tiny_compiles_at_most_six_kernels_and_sanitize_keeps_caches_short():
    groups = td.plan("tiny")
    assert len(groups) <= 6
    assert len({key for key, _ in groups}) == len(groups)  # each spec compiled once
    for _, cases in td.plan("tiny", sanitize=True):
        assert all(kv <= td.SANITIZE_KV_MAX for c in cases for kv in c.kv_lens)
    assert [key for key, _ in td.plan("small", only=["causal"])] == [
        key for key in td.kernel_keys("small") if key[0] == "causal"]


@pytest.mark.parametrize("subset", ["tiny", "small", "full"])
def test_plan_covers_every_axis(subset):
    groups = td.plan(subset)
    cases = [c for _, cs in groups for c in cs]
    keys = [key for key, _ in groups]
    assert {c.layout for c in cases} == set(td.LAYOUTS)
    assert {q for c in cases for q in c.q_lens} == set(td.Q_LENS)
    assert {c.page_size for c in cases if c.paged} == set(td.PAGE_SIZES)
    assert {c.num_splits for c in cases} == set(td.SPLITS)
    assert {kv for c in cases for kv in c.kv_lens} == set(td.KV_LENS[subset])
    assert {dtype for _, _, dtype, _, _ in keys} == {"bf16", "fp16"}
    assert {(hq, hkv) for _, _, _, hq, hkv in keys} == set(td.HEADS)  # G = 1..16
    if subset != "tiny":  # tiny: six of the families
        assert {key[0] for key in keys} == set(td.VARIANTS)
    # decode=On past the packed rows Auto takes, on a kernel where G x q_len can exceed 64
    assert any(c.decode == dx.DECODE_ON and (c.key[3] // c.key[4]) * c.q_lens[0] > 64
               for c in cases)
    assert any(c.workspace for c in cases) and any(not c.lse for c in cases)
    assert any(c.decode == dx.DECODE_OFF for c in cases)
    for c in cases:
        if c.layout in ("bshd", "bhsd", "paged"):
            assert len(set(c.q_lens)) == 1  # Q is [B, q_len, ...]: one length
        if c.layout in ("bshd", "bhsd"):
            assert len(set(c.kv_lens)) == 1 and c.kv_lens[0] >= 1


# ---- Paging ----

def sequences(kv_lens, hkv=2, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ks = [torch.randn(n, hkv, d, generator=gen) for n in kv_lens]
    vs = [torch.randn(n, hkv, d, generator=gen) for n in kv_lens]
    return ks, vs


@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
def test_pages_gather_back_to_each_sequence(page_size):
    kv_lens = [0, 1, 17, 300, 600, 45]
    ks, vs = sequences(kv_lens)
    rng = random.Random(page_size)
    shared = td.share_prefixes(ks, vs, kv_lens, page_size, rng)
    k_pool, v_pool, table, max_pages = td.build_pages(ks, vs, kv_lens, page_size, rng, shared)
    assert k_pool.shape[1] == page_size and table.dtype == torch.int32
    assert int(table.min()) >= 0 and int(table.max()) < k_pool.shape[0]
    for b, n in enumerate(kv_lens):
        assert torch.equal(td.gather_pages(k_pool, table[b], n, page_size), ks[b])
        assert torch.equal(td.gather_pages(v_pool, table[b], n, page_size), vs[b])
    used = set()
    for b, n in enumerate(kv_lens):
        pages = -(-n // page_size)
        used |= set(table[b, :pages].tolist())
        # slots past the sequence: a page nobody owns, all NaN
        for page in table[b, pages:].tolist():
            assert torch.isnan(k_pool[page]).all() and torch.isnan(v_pool[page]).all()
        if n % page_size:  # the unused rows of the last page
            last = int(table[b, pages - 1])
            assert torch.isnan(k_pool[last, n % page_size:]).all()
    unused = set(range(k_pool.shape[0])) - used
    assert unused and all(torch.isnan(k_pool[p]).all() for p in unused)
    if page_size <= 16:
        assert any(shared)
        b = shared.index(max(shared))
        assert torch.equal(table[b, :shared[b]], table[b - 1, :shared[b]])


def test_pages_are_shuffled_and_each_owned_page_is_used_once():
    kv_lens = [300] * 4
    ks, vs = sequences(kv_lens)
    _, _, table, max_pages = td.build_pages(ks, vs, kv_lens, 16, random.Random(3))
    owned = table[:, :max_pages].flatten().tolist()
    assert len(set(owned)) == len(owned)
    assert owned != sorted(owned)


def test_cu_seqlens():
    assert td.cu_seqlens([3, 0, 5]).tolist() == [0, 3, 3, 8]
    assert td.cu_seqlens([3, 0, 5]).dtype == torch.int32


# ---- Launch views and the per-sequence reference ----

def perfect_launch(case, var, scale=0.125):
    """A Launch whose O and LSE hold the float64 reference of every sequence, written through
    the views the suite reads back (as a correct kernel would write them)."""
    _, hd, _, hq, hkv = case.key
    qs, ks, vs, rng = td.make_sequences(case, hq, hkv, hd, hd, torch.bfloat16, CPU)
    launch = td.Launch(case, qs, ks, vs, hq, hd, CPU, rng)
    refs = []
    for b in range(launch.batch):
        ql, kl = case.q_lens[b], case.kv_lens[b]
        ref, ref_lse, fully, _ = tf.reference(qs[b][None], ks[b][None], vs[b][None], scale, var,
                                              1, hq, hkv, ql, kl, {}, CPU)
        o_b, lse_b = launch.out(b)
        o_b[:ql] = ref[0].to(o_b.dtype)
        if lse_b is not None:
            lse_b[:, :ql] = ref_lse[0].float()
        refs.append((ref, ref_lse, fully))
    return launch, refs


@pytest.mark.parametrize("layout", td.LAYOUTS)
def test_every_row_is_read_back_per_sequence(layout):
    var = tf.V["causal"]
    q_lens = [2] * 4 if layout in ("bshd", "bhsd", "paged") else [1, 7, 2, 16]
    kv_lens = [17] * 4 if layout in ("bshd", "bhsd") else [0, 17, 1, 40]
    case = td.Case(("causal", 16, "bf16", 4, 2), layout, q_lens, kv_lens,
                   page_size=16 if layout.startswith("paged") else 0, share=True, seed=5)
    launch, refs = perfect_launch(case, var)
    assert not torch.isnan(launch.o).any()  # the views cover every row
    for b, (ref, ref_lse, fully) in enumerate(refs):
        o_b, lse_b = launch.out(b)
        ql = case.q_lens[b]
        err, _, problems = td.check_sequence(o_b[:ql], lse_b[:, :ql], ref, ref_lse, fully,
                                             tf.TOL["bf16"])
        assert not problems, (b, problems)
    # a sequence's rows read from another's place fail
    if launch.batch > 1 and case.q_lens[0] == case.q_lens[1]:
        o_0, lse_0 = launch.out(0)
        err, _, problems = td.check_sequence(launch.out(1)[0][:case.q_lens[0]], lse_0,
                                             *refs[0], tf.TOL["bf16"])
        assert problems


def test_empty_sequence_is_zero_with_lse_minus_infinity():
    var = tf.V["full"]
    q = torch.randn(1, 3, 4, 16, dtype=torch.bfloat16)
    k = torch.zeros(1, 0, 2, 16, dtype=torch.bfloat16)
    ref, ref_lse, fully, _ = tf.reference(q, k, k, 0.25, var, 1, 4, 2, 3, 0, {}, CPU)
    assert fully.all() and (ref == 0).all() and (ref_lse == float("-inf")).all()
    o = torch.zeros(3, 4, 16)
    lse = torch.full((4, 3), float("-inf"))
    assert not td.check_sequence(o, lse, ref, ref_lse, fully, 5e-3)[2]
    assert td.check_sequence(o.fill_(float("nan")), lse, ref, ref_lse, fully, 5e-3)[2]
    o.zero_()
    assert td.check_sequence(o, lse.zero_(), ref, ref_lse, fully, 5e-3)[2]


def test_reference_aligns_causal_bottom_right_per_sequence():
    """q_len_b < kv_len_b: the last query sees every key, the first kv_len_b - q_len_b + 1."""
    var = tf.V["causal"]
    q = torch.randn(1, 3, 2, 8, dtype=torch.float64)
    k = torch.randn(1, 10, 2, 8, dtype=torch.float64)
    _, _, _, keep = tf.reference(q, k, k, 1.0, var, 1, 2, 2, 3, 10, {}, CPU)
    assert keep[0, 0].sum(-1).tolist() == [8, 9, 10]


def test_sequence_inputs_slice_batch_dims_only():
    var = tf.V["document_causal"]
    doc = torch.arange(12).view(3, 4)
    assert torch.equal(td.sequence_inputs(var, {"doc": doc}, 1)["doc"], doc[1:2])
    var = tf.V["document"]  # dims [pos]: one document row for every sequence
    assert torch.equal(td.sequence_inputs(var, {"doc": doc[0]}, 2)["doc"], doc[0])


# ---- run_case end to end, with a stand-in kernel on the CPU ----

class SimulatedKernel(StubKernel):
    """A kernel that reads a Launch's layout as attnc's must (packed rows through cu_seqlens,
    pages through the block table) and writes the float64 reference into O and LSE; `skew`
    aligns causal masks top-left instead (a per-sequence alignment bug)."""

    def __init__(self, key, skew=False):
        variant, hd, dtype, hq, hkv = key
        self.var, self.skew = tf.V[variant], skew
        self.info = {"head_dim": hd, "head_dim_v": hd, "dtype": dtype, "heads_q": hq,
                     "heads_kv": hkv, "scale": 0.25}
        self.input_names = list(self.var.inputs)

    def run(self, launch):
        case = launch.case
        for b in range(launch.batch):
            ql, kl = case.q_lens[b], case.kv_lens[b]
            if case.packed_q:
                q = launch.q[0, int(launch.cu_q[b]):int(launch.cu_q[b + 1])]
            else:
                q = launch.q[b] if launch.layout == "bshd" else launch.q[b].transpose(0, 1)
                q = q[:ql]
            if case.paged:
                k, v = (td.gather_pages(t, launch.table[b], kl, case.page_size)
                        for t in (launch.k, launch.v))
            elif case.packed_kv:
                rows = slice(int(launch.cu_kv[b]), int(launch.cu_kv[b + 1]))
                k, v = launch.k[0, rows], launch.v[0, rows]
            else:
                k, v = ((t[b] if launch.layout == "bshd" else t[b].transpose(0, 1))
                        for t in (launch.k, launch.v))
            if self.skew:  # queries at positions 0.. (zero rows pad them up to the keys)
                q = torch.cat([q, q.new_zeros(max(0, kl - ql), *q.shape[1:])])
            inputs = td.sequence_inputs(self.var, self.inputs, b)
            ref, ref_lse, _, _ = tf.reference(q[None], k[None], v[None], 0.25, self.var, 1,
                                              q.shape[1], k.shape[1], q.shape[0], kl, inputs,
                                              CPU)
            o_b, lse_b = launch.out(b)
            o_b[:ql] = ref[0, :ql].to(o_b.dtype)
            if lse_b is not None:
                lse_b[:, :ql] = ref_lse[0, :, :ql].float()


@pytest.fixture
def simulated(monkeypatch):
    """dx's calls routed to a SimulatedKernel: Launch.args remembers its Launch and inputs."""
    original = td.Launch.args

    def args(self, kern, inputs, workspace=None):
        made = original(self, kern, inputs, workspace)
        made._launch = self
        kern.inputs = {n: t for n, (t, _) in zip(kern.input_names, inputs)}
        return made
    monkeypatch.setattr(td.Launch, "args", args)
    monkeypatch.setattr(dx, "launch_ex", lambda kern, a, stream=None: kern.run(a._launch))
    monkeypatch.setattr(dx, "decode_plan", lambda kern, a, num_sms=0: {
        "decode": 1, "rows": 16, "row_tiles": 1, "splits": 1})
    monkeypatch.setattr(dx, "workspace_bytes", lambda kern, a: 256)


@pytest.mark.parametrize("variant", ["causal", "document_causal", "alibi"])
def test_run_case_passes_a_correct_kernel_and_fails_a_misaligned_one(simulated, variant):
    key = (variant, 16, "bf16", 4, 2)
    for layout in td.LAYOUTS:
        q_lens = [2, 2, 2] if layout in ("bshd", "bhsd", "paged") else [2, 1, 3]
        kv_lens = [19, 19, 19] if layout in ("bshd", "bhsd") else [19, 0, 40]
        case = td.Case(key, layout, q_lens, kv_lens, page_size=16 if "paged" in layout else 0,
                       share=True, workspace=layout == "paged", seed=9)
        res = tf.Results()
        record = td.run_case(SimulatedKernel(key), tf.V[variant], case, res, CPU, "row", CPU)
        assert record["ok"], (layout, record["problems"])
        record = td.run_case(SimulatedKernel(key, skew=True), tf.V[variant], case, res, CPU,
                             "row", CPU)
        assert not record["ok"], layout
        idle = SimulatedKernel(key)
        idle.run = lambda launch: None  # writes nothing: the poison shows
        record = td.run_case(idle, tf.V[variant], case, res, CPU, "row", CPU)
        assert not record["ok"] and "NaN" in " ".join(record["problems"]), layout


def host_checks(args):
    """What attnc's validation finds in the host copies a struct points at (attnc.h's rules),
    as the name of the first bad argument, or None."""
    seq, base = args.layout.contents, args.base

    def host(name, n):
        address = ctypes.cast(getattr(seq, "host_" + name), ctypes.c_void_p).value
        return list((ctypes.c_int32 * n).from_address(address)) if address else None
    if args.decode == dx.DECODE_OFF:
        return "decode"
    if seq.page_size & (seq.page_size - 1) or not 1 <= seq.page_size <= 256:
        return "page_size"
    table = host("block_table", base.batch * seq.block_table_stride)
    for b in range(base.batch):
        row = table[b * seq.block_table_stride:][:seq.max_pages]
        if any(not 0 <= page < seq.num_pages for page in row):
            return "block_table"
    cu = host("cu_seqlens_q", base.batch + 1)
    if cu and any(x > y for x, y in zip(cu, cu[1:])):
        return "cu_seqlens_q"
    lens = host("seq_lens_kv", base.batch)
    if any(not 0 <= n <= min(base.kv_len, seq.max_pages * seq.page_size) for n in lens):
        return "seq_lens_kv"
    return None


def test_argument_checks_feed_each_bad_value_through_the_host_copies(monkeypatch):
    def launch(kern, args, stream=None):
        bad = host_checks(args)
        if bad:
            raise attnc_ctypes.AttncError(f"ForwardArgs.{bad}: bad")
    monkeypatch.setattr(dx, "launch_ex", launch)
    monkeypatch.setattr(dx, "validate_ex", lambda kern, args: host_checks(args))
    kern = SimulatedKernel(("causal", 16, "bf16", 4, 2))
    assert host_checks(td.small_paged(kern, CPU).args(kern, [])) is None
    res = tf.Results()
    td.bad_argument_checks(kern, res, CPU)
    assert res.rows["bad arguments"] == {"cases": 5, "pass": 5, "err": 0.0, "lse": 0.0,
                                         "sdpa": None}, res.failures
    monkeypatch.setattr(dx, "launch_ex", lambda kern, args, stream=None: None)
    td.bad_device_checks(kern, res, CPU)
    assert res.rows["bad device values"]["pass"] == 3


# ---- The C struct a case builds ----

def test_paged_varlen_args_carry_the_layout():
    case = td.Case(("causal", 16, "bf16", 4, 2), "paged_varlen", [1, 7, 2], [0, 40, 17],
                   page_size=16, num_splits=3, decode=dx.DECODE_ON, seed=1)
    qs, ks, vs, rng = td.make_sequences(case, 4, 2, 16, 16, torch.bfloat16, CPU)
    launch = td.Launch(case, qs, ks, vs, 4, 16, CPU, rng)
    args = launch.args(StubKernel(), [])
    assert args.struct_size == ctypes.sizeof(dx.ForwardArgsEx)
    assert (args.decode, args.num_splits) == (dx.DECODE_ON, 3)
    assert (args.base.batch, args.base.q_len, args.base.kv_len) == (3, 7, 40)
    assert args.base.q.stride_h == 16 and args.base.q.stride_s == 4 * 16  # packed [total, H, D]
    assert args.base.k.stride_h == 16 and args.base.k.stride_s == 2 * 16  # a page's rows
    seq = args.layout.contents
    assert seq.struct_size == ctypes.sizeof(dx.SeqLayout)
    assert seq.page_size == 16 and seq.k_stride_page == 16 * 2 * 16 == seq.v_stride_page
    assert seq.num_pages == launch.k.shape[0] and seq.total_q == 10
    assert seq.max_pages == 3 and seq.block_table_stride >= seq.max_pages
    assert ctypes.cast(seq.host_block_table, ctypes.c_void_p).value == launch.table.data_ptr()
    assert seq.host_cu_seqlens_q and seq.cu_seqlens_q and not seq.cu_seqlens_kv
    assert args.base.lse == launch.lse.data_ptr() and launch.lse.shape == (4, 10)


def test_contiguous_args_have_no_layout():
    case = td.Case(("full", 16, "bf16", 4, 2), "bhsd", [2, 2], [17, 17], seed=2)
    qs, ks, vs, rng = td.make_sequences(case, 4, 2, 16, 16, torch.bfloat16, CPU)
    launch = td.Launch(case, qs, ks, vs, 4, 16, CPU, rng)
    args = launch.args(StubKernel(), [])
    assert not args.layout and args.base.k.stride_s == 16 and args.base.k.stride_h == 17 * 16


# ---- The bench ----

def test_bench_rows_and_bytes():
    quick = bench_decode.rows(True)
    assert len(quick) == 16 and {r.layout for r in quick} == {"contiguous", "paged256"}
    full = bench_decode.rows(False)
    assert {(r.hq, r.hkv) for r in full} == {(32, 8), (64, 8)}
    assert {r.batch for r in full} == {1, 8, 64} and {r.q_len for r in full} == {1, 8}
    assert all(r.kv_bytes() <= bench_decode.MAX_KV_BYTES for r in full)
    row = bench_decode.Row(32, 8, 8, 32768, 1, "paged16")
    assert row.page_size == 16
    assert row.kv_bytes() == 8 * 32768 * 8 * 256 * 2
    assert row.bytes() == row.kv_bytes() + 8 * 32 * (128 * 2 + 128 * 2 + 4)
    small = bench_decode.Row(32, 8, 1, 2048, 1, "contiguous").kv_bytes()
    assert bench_decode.copies_for(small, 50 << 20) * small > 4 * (50 << 20)
    assert bench_decode.copies_for(row.kv_bytes(), 50 << 20) == 1


def test_bench_reference_matches_the_float64_one():
    q = torch.randn(3, 4, 16, dtype=torch.bfloat16)
    k = torch.randn(40, 2, 16, dtype=torch.bfloat16)
    v = torch.randn(40, 2, 16, dtype=torch.bfloat16)
    ref, _, _, _ = tf.reference(q[None], k[None], v[None], 0.25, tf.V["causal"], 1, 4, 2, 3,
                                40, {}, CPU)
    assert bench_decode.relerr(bench_decode.reference_rows(q, k, v, 0.25), ref[0]) < 1e-5


@pytest.mark.parametrize("q_len", [1, 8])
def test_bench_sdpa_peer_computes_what_attnc_does(q_len):
    """The SDPA peer (its math backend here) is bottom-right causal with GQA, as the rows are."""
    from torch.nn.attention import SDPBackend
    row = bench_decode.Row(32, 8, 2, 300, q_len, "contiguous")
    cache = bench_decode.Cache(row, CPU, 1)
    out = bench_decode.sdpa_peer(SDPBackend.MATH, cache, row)().transpose(1, 2)
    ref = bench_decode.reference_rows(cache.q[1], cache.k[1], cache.v[1], 128 ** -0.5)
    assert bench_decode.relerr(out[1], ref) < 5e-3


def test_bench_paged_cache_gathers_to_its_sequences():
    k, v, table, lens = bench_decode.paged_cache(2, 40, 2, 8, 16, CPU, seed=1)
    assert k.shape == (6, 16, 2, 8) and sorted(table.flatten().tolist()) == list(range(6))
    assert lens.tolist() == [40, 40]
    rows = bench_decode.gather(k, table[1], 40, 16)
    assert torch.equal(rows[17], k[int(table[1, 1]), 1])


def test_varlen_flops_count_the_causal_pairs():
    lens = bench_decode.varlen_lengths()
    assert len(lens) == 8 and all(100 <= n <= 8192 for n in lens)
    assert lens == bench_decode.varlen_lengths()  # seeded
    assert bench_decode.varlen_flops([2, 3], 1, 1) == 4 * (3 + 6)


def test_a_failed_graph_capture_is_timed_eagerly_with_a_note(monkeypatch):
    def time_call(fn, graphs):
        if graphs:
            raise RuntimeError("operation not permitted when stream is capturing")
        return 2.0
    monkeypatch.setattr(bench_decode, "time_call", time_call)
    monkeypatch.setattr(bench_decode, "GRAPHS", True)
    res = {"ms": {}, "note": {}}
    rates = {}
    bench_decode.timed(res, {"attnc": None}, 4.0, rates)
    assert rates == {"attnc": 2000.0} and res["timing"] == {"attnc": "eager"}
    assert "graph capture failed" in res["note"]["attnc"]


# ---- The page ----

def made_up_run():
    rows = []
    for layout, attnc, cudnn in (("contiguous", 3000.0, 2000.0), ("paged256", 2800.0, None)):
        row = bench_decode.Row(32, 8, 8, 32768, 1, layout)
        gbps = {"attnc": attnc}
        if cudnn:
            gbps["cudnn"] = cudnn
        rows.append({"row": row.name, "hq": 32, "hkv": 8, "B": 8, "kv": 32768, "q_len": 1,
                     "layout": layout, "bytes": row.bytes(), "gbps": gbps, "note": {},
                     "plan": {"decode": 1, "rows": 16, "row_tiles": 1, "splits": 4}})
    bench_decode.summarize(rows, 3300.0)
    varlen = {"row": "varlen prefill", "lens": [100, 200], "tflops": {"attnc": 500.0,
              "cudnn-ragged": 450.0}, "peer": "cudnn-ragged", "vs_peer": 500 / 450, "note": {}}
    facts = {"date": "2030-01-02", "gpu": "Test GPU", "command": "python3 bench/bench_decode.py"}
    return {"facts": facts, "copy_gbps": 3300.0, "results": rows, "varlen": varlen}


def test_page_renders_header_once_and_names_missed_targets(tmp_path):
    run = made_up_run()
    paged = run["results"][1]
    assert paged["best_peer"] == "cudnn" and abs(paged["vs_contiguous"] - 2800 / 3000) < 1e-9
    path = tmp_path / "decode.json"
    path.write_text(json.dumps(run))
    text = decode_page.page([run], [str(path)])
    assert text.count("- run: 2030-01-02, Test GPU") == 1 and text.count("# attnc decode") == 1
    assert "| GQA 32/8 B8 kv32K q1 contiguous |" in text
    # 3000 / 3300 = 91% (met); paged 2800 / 3300 = 85% (missed), 0.93x contiguous (missed)
    assert "not met: GQA 32/8 B8 kv32K q1 paged256: 85%" in text
    assert "not met: GQA 32/8 B8 kv32K q1 paged256: 0.93x" in text
    assert "not met: GQA 32/8 B8 kv32K q1 contiguous" not in text
    page = tmp_path / "decode.md"
    assert decode_page.main([str(path), "-o", str(page)]) == 0
    assert decode_page.main([str(path), "--check", str(page)]) == 0
    page.write_text(page.read_text() + "appended\n")
    assert decode_page.main([str(path), "--check", str(page)]) == 1


def test_page_joins_runs_in_order_with_each_command():
    first, second = made_up_run(), made_up_run()
    second["facts"]["command"] = "python3 bench/bench_decode.py --only 64/8"
    second["copy_gbps"] = 3200.0
    for r in second["results"]:
        r["row"] = r["row"].replace("32/8", "64/8")
    second["varlen"] = None
    text = decode_page.page([first, second], ["a.json", "b.json"])
    assert "--only 64/8`" in text and "copy bandwidth: 3300, 3200 GB/s" in text
    assert text.index("GQA 32/8 B8") < text.index("GQA 64/8 B8")
    assert "decode_page.py docs/perf/a.json docs/perf/b.json -o docs/perf/a.md" in text
    assert text.count("## Varlen prefill") == 1


def test_page_names_each_runs_build_where_they_differ():
    first, second = made_up_run(), made_up_run()
    second["results"] = []
    first["facts"]["commit"], second["facts"]["commit"] = "aaaaaaa", "bbbbbbb"
    text = decode_page.page([first, second], ["a.json", "b.json"])
    assert "(attnc at aaaaaaa)" in text and "(attnc at bbbbbbb)" in text
    second["facts"]["commit"] = "aaaaaaa"
    assert "(attnc at" not in decode_page.page([first, second], ["a.json", "b.json"])


def test_page_refuses_runs_of_different_gpus(tmp_path, capsys):
    first, second = made_up_run(), made_up_run()
    second["facts"]["gpu"] = "Other GPU"
    with pytest.raises(ValueError, match="b.json ran on Other GPU, a.json on Test GPU"):
        decode_page.page([first, second], ["a.json", "b.json"])
    paths = []
    for name, run in (("a.json", first), ("b.json", second)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(run))
    page = tmp_path / "a.md"
    assert decode_page.main([str(p) for p in paths] + ["-o", str(page)]) == 2
    assert not page.exists()
    assert "a page holds one GPU's runs" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["test/gpu/test_decode.py", "bench/bench_decode.py",
                                    "bench/decode_page.py"])
def test_scripts_answer_help_without_a_gpu(script):
    out = subprocess.run([sys.executable, os.path.join(ROOT, script), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
