"""CPU dry run of test/gpu/test_python_varlen.py: every case's tensors and arguments pass
attnc.attention's checks (on meta copies, with the shapes the GPU run will get), and its
per-sequence checking passes a simulated op that computes the float64 reference through the
call's own layout (packed rows, pages through the block table) and fails one that misplaces
sequences or ignores the block table. The backward cases likewise: their training calls pass the
op's checks with gradients of the tensors' shapes, and their per-sequence gradient checks pass
the simulated op (differentiable) and fail one whose gradient is wrong. No GPU, no library
launch."""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
import test_decode as td  # noqa: E402
import test_forward as tf  # noqa: E402
import test_python_varlen as tv  # noqa: E402

import attnc  # noqa: E402

CPU = torch.device("cpu")
CASES = {case.name(): case for case in tv.plan()}
BACKWARD_CASES = {case.name(): case for case in tv.backward_plan()}


def simulated(var, broken=None):
    """attnc.attention's inference call as the float64 reference of each sequence, read
    through the call's layout, differentiable in q, k and v. broken: "order" returns the
    sequences reversed, "table" reads pages through a shifted block table row, "grad" gives the
    right output with half its gradient."""
    def attention(q, k, v, *, mask, score, inputs, return_lse, layout, cu_seqlens_q=None,
                  cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, block_table=None,
                  seq_lens_kv=None, num_splits=0, decode="auto", deterministic=False,
                  host_seq_lens_kv=None):
        bhsd = layout == "bhsd"
        if host_seq_lens_kv is not None:  # the host copy the op takes: on the CPU, the same
            assert host_seq_lens_kv.device.type == "cpu"
            assert host_seq_lens_kv.tolist() == seq_lens_kv.tolist()

        def rows(t):  # a 4-d tensor as [B, S, H, D]
            return t.transpose(1, 2) if bhsd else t
        if cu_seqlens_q is not None:
            cu = cu_seqlens_q.tolist()
            qs = [q[cu[b]:cu[b + 1]] for b in range(len(cu) - 1)]
        else:
            qs = list(rows(q))
        if block_table is not None:
            pk, pv = rows(k), rows(v)
            table = torch.roll(block_table, 1, 1) if broken == "table" else block_table
            lens = seq_lens_kv.tolist()
            ks = [td.gather_pages(pk, table[b], lens[b], pk.shape[1]) for b in range(len(qs))]
            vs = [td.gather_pages(pv, table[b], lens[b], pv.shape[1]) for b in range(len(qs))]
        elif cu_seqlens_kv is not None:
            cu = cu_seqlens_kv.tolist()
            ks = [k[cu[b]:cu[b + 1]] for b in range(len(qs))]
            vs = [v[cu[b]:cu[b + 1]] for b in range(len(qs))]
        else:
            ks, vs = list(rows(k)), list(rows(v))
        hq, hkv = qs[0].shape[1], ks[0].shape[1]
        outs, lses = [], []
        for b in range(len(qs)):
            o, lse, _, _ = tf.reference(qs[b][None], ks[b][None], vs[b][None],
                                        1.0 / math.sqrt(q.shape[-1]), var, 1, hq, hkv,
                                        qs[b].shape[0], ks[b].shape[0],
                                        td.sequence_inputs(var, inputs or {}, b), CPU)
            o = o[0].to(q.dtype)
            outs.append(o.detach() + 0.5 * (o - o.detach()) if broken == "grad" else o)
            lses.append(lse[0].float())
        if broken == "order":
            outs, lses = outs[::-1], lses[::-1]
        if cu_seqlens_q is not None:
            out, lse = torch.cat(outs), torch.cat(lses, 1)
        else:
            out, lse = torch.stack(outs), torch.stack(lses)
            out = out.transpose(1, 2) if bhsd else out
        return (out, lse) if return_lse else out
    return attention


def to_meta(x):
    return x.to("meta") if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_passes_the_op_checks_with_the_expected_shapes(name):
    case = CASES[name]
    qs, _, _, q, k, v, kwargs, inputs = tv.build(case, CPU)
    out, lse = attnc.attention(to_meta(q), to_meta(k), to_meta(v), mask=case.family.mask,
                               score=case.family.score,
                               inputs={n: to_meta(t) for n, t in inputs.items()} or None,
                               return_lse=True,
                               **{n: a if n.startswith("host_") else to_meta(a)
                                  for n, a in kwargs.items()})
    total = sum(case.q_lens)
    if case.packed_q:
        assert tuple(out.shape) == (total, case.hq, case.d)
        assert tuple(lse.shape) == (case.hq, total)
    else:
        assert tuple(out.shape) == q.shape[:3] + (case.d,)
        assert tuple(lse.shape) == (len(qs), case.hq, max(case.q_lens))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_passes_a_correct_op(name):
    case = CASES[name]
    res = tv.Results()
    problems = tv.run_case(case, res, CPU, simulated(case.family.ref))
    assert not problems and not res.failures


@pytest.mark.parametrize("broken", ["order", "table"])
def test_a_wrong_op_fails(broken):
    case = next(c for c in CASES.values() if c.layout == "paged_varlen"
                and c.family.name == "causal" and not c.num_splits)
    res = tv.Results()
    assert tv.run_case(case, res, CPU, simulated(case.family.ref, broken))
    assert res.failures


def test_graph_check_appends_within_each_sequence_pages():
    """The CUDA graph check writes 3 appended tokens into the last page of each sequence (no
    page shared with another sequence, none past the table)."""
    case = tv.Case("causal", "paged", [1, 1, 1], [40, 17, 100], page_size=16, max_kv=False)
    _, _, _, _, k, _, kwargs, _ = tv.build(case, CPU)
    table = kwargs["block_table"]
    written = []
    for b, n in enumerate(case.kv_lens):
        for step in range(3):
            written.append(int(table[b, (n + step) // case.page_size]))
        assert (n + 2) // case.page_size == (n - 1) // case.page_size  # the last page's slots
    owned = {int(table[b, j]) for b in range(3)
             for j in range(math.ceil(case.kv_lens[b] / case.page_size))}
    assert set(written) <= owned
    assert len({(p, (n + s) % 16) for p, n, s in zip(written, [40] * 3 + [17] * 3 + [100] * 3,
                                                     [0, 1, 2] * 3)}) == 9


@pytest.mark.parametrize("name", sorted(BACKWARD_CASES))
def test_each_backward_case_passes_the_op_checks_with_gradients(name):
    case = BACKWARD_CASES[name]
    _, _, _, q, k, v, kwargs, inputs = tv.build(case, CPU)
    leaves = [to_meta(t).requires_grad_() for t in (q, k, v)]
    out = attnc.attention(*leaves, mask=case.family.mask, score=case.family.score,
                          inputs={n: to_meta(t) for n, t in inputs.items()} or None,
                          deterministic=case.deterministic,
                          **{n: to_meta(a) for n, a in kwargs.items()})
    grads = torch.autograd.grad(out.float().sum(), leaves)
    assert [g.shape for g in grads] == [t.shape for t in (q, k, v)]


@pytest.mark.parametrize("name", sorted(BACKWARD_CASES))
def test_each_backward_case_passes_a_correct_op(name):
    case = BACKWARD_CASES[name]
    res = tv.Results()
    problems = tv.run_backward_case(case, res, CPU, simulated(case.family.ref))
    assert not problems and not res.failures


@pytest.mark.parametrize("broken", ["order", "grad"])
def test_a_wrong_backward_fails(broken):
    case = next(c for c in BACKWARD_CASES.values() if c.family.name == "causal"
                and c.layout == "varlen" and len(c.q_lens) == 4 and not c.deterministic)
    res = tv.Results()
    problems = tv.run_backward_case(case, res, CPU, simulated(case.family.ref, broken))
    assert res.failures and any("relerr" in p for p in problems)
