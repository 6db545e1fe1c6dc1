"""GPU tests of attnc's forward kernels through the C API (ctypes): each case against a float64
torch reference computed on the device, with poisoned outputs and fresh random inputs; masks,
score mods, GQA/MQA, head_dim_v != head_dim, dtypes, layouts, odd lengths, fully masked rows,
dropout (against a host rebuild of the Philox mask), argument validation, and per kernel one case
whose scores grow along the keys (O rescaled mid-row, past the sm_90a forward's lazy row maxima).
Prints a summary table last.

  python3 test/gpu/test_forward.py [--subset all|small] [--ref-device cuda|cpu] [--results PATH]

ATTNC_TEST_BREAK_MASK=1 feeds attnc a subtly different mask than the reference checks (the suite
must then fail): it only changes the spec text, never the kernels or the reference."""
import argparse
import concurrent.futures
import contextlib
import functools
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnc_ctypes  # noqa: E402
import philox_host  # noqa: E402
import results_page  # noqa: E402

TOL = {"bf16": 5e-3, "fp16": 1e-3}
LSE_TOL = 1e-3
SDPA_FACTOR = 2.0
SDPA_FLOOR = 1e-4  # where SDPA is exact (e.g. kv_len = 1), attnc may still differ by a rounding
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
BREAK = os.environ.get("ATTNC_TEST_BREAK_MASK") == "1"


# ---- Reference masks and scores (float64 / int64 torch, broadcast over [B, H, Sq, Skv]) ----

class Ctx:
    """Index grids for a reference: b [B,1,1,1], h [1,H,1,1], q [1,1,Sq,1], k [1,1,1,Skv]."""

    def __init__(self, B, H, ql, kl, inputs, dev):
        self.b = torch.arange(B, device=dev).view(B, 1, 1, 1)
        self.h = torch.arange(H, device=dev).view(1, H, 1, 1)
        self.q = torch.arange(ql, device=dev).view(1, 1, ql, 1)
        self.k = torch.arange(kl, device=dev).view(1, 1, 1, kl)
        self.ql, self.kl = ql, kl
        self.qp = self.q + (kl - ql)  # bottom-right aligned query position
        self.npos = max(ql, kl)
        self.inputs = inputs

    def pos(self, i):  # attnc clamps input indices into the input's extent
        return i.clamp(0, self.npos - 1)


def alibi_slopes_paper(n):
    """The ALiBi paper's get_slopes (Press et al., reference implementation)."""
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + alibi_slopes_paper(2 * closest)[0::2][:n - closest]


def m_causal(c): return c.k <= c.qp
def m_causal_tl(c): return c.k <= c.q
def m_window(w): return lambda c: (c.k <= c.qp) & (c.k > c.qp - w)
def m_prefix(p): return lambda c: (c.k < p) | (c.k <= c.qp)


def m_doc(causal):
    def f(c):
        doc = c.inputs["doc"]  # [pos] or [B, pos]
        if doc.dim() == 1:
            same = doc[c.pos(c.qp)] == doc[c.pos(c.k)]
        else:
            same = doc[c.b, c.pos(c.qp)] == doc[c.b, c.pos(c.k)]
        return same & (c.k <= c.qp) if causal else same
    return f


def m_head_doc(c):  # "doc[b, h, q] == doc[b, h, k]": documents per head
    doc = c.inputs["doc"]  # [B, H, pos]
    return doc[c.b, c.h, c.pos(c.q)] == doc[c.b, c.h, c.pos(c.k)]


def gen_head_docs(B, H, npos, dev):
    return torch.sort(torch.randint(0, 6, (B, H, npos), device=dev, dtype=torch.int32), dim=-1).values


def gen_many_docs(B, npos, dev):
    # Packed documents of 1-200 positions: many tiles to skip, documents cut at summary blocks.
    ids = torch.cumsum((torch.rand(B, npos, device=dev) < 1 / 100).to(torch.int32), dim=-1)
    return ids.to(torch.int32)


def gen_weight(B, npos, dev):
    # Mostly positive weights, runs of negative ones, and NaN (never kept: NaN > 0 is false).
    w = torch.randn(B, npos, device=dev).abs() + 0.1
    w[:, (torch.arange(npos, device=dev) // 300) % 4 == 1] *= -1
    w[torch.rand(B, npos, device=dev) < 0.002] = float("nan")
    return w


def m_weight(c):  # "w[b, k] > 0.0 && q >= k" (bottom-right: q is aligned)
    w = c.inputs["w"][c.b, c.pos(c.k)]
    return (w > 0.0) & (c.k <= c.qp)


def m_custom(c):  # "(q + k) % 3 != 0 && allow[b, k] == 1"
    return ((c.q + c.k) % 3 != 0) & (c.inputs["allow"][c.b, c.pos(c.k)] == 1)


def s_softcap(cap): return lambda s, c: cap * torch.tanh(s / cap)


def s_alibi(slopes_of):
    return lambda s, c: s - slopes_of(c).view(1, -1, 1, 1) * (c.qp - c.k).abs().double()


def s_custom(s, c):  # "score * gain[h] - 0.05 * abs(q - k) + bias[b, k]"
    gain = c.inputs["gain"].view(1, -1, 1, 1)
    return s * gain - 0.05 * (c.q - c.k).abs().double() + c.inputs["bias"][c.b, c.pos(c.k)]


# ---- Variants: one spec each (per head dim / dtype) ----

def gen_doc(B, H, npos, dev, dims):
    n = (B, npos) if dims == "b,pos" else (npos,)
    return torch.sort(torch.randint(0, 6, n, device=dev, dtype=torch.int32), dim=-1).values


class Variant:
    def __init__(self, name, mask="none", score="none", ref_mask=None, ref_score=None, inputs=None,
                 sdpa=None, broken_mask=None, hq=4, hkv=None, dropout=0.0, dropout_rounds=None):
        self.name, self.mask, self.score = name, mask, score
        self.ref_mask, self.ref_score = ref_mask, ref_score
        self.inputs = inputs or {}  # name -> (dtype, dims, generator(B, H, npos, dev))
        self.sdpa = sdpa  # None | "plain" | "causal_tl" | "causal_br" (only when Sq == Skv)
        self.broken_mask = broken_mask
        self.hq, self.hkv = hq, hkv or hq
        self.dropout = dropout
        self.dropout_rounds = dropout_rounds  # None: the spec's default

    def spec(self, hd, dtype, hq=None, hkv=None):
        hq, hkv = hq or self.hq, hkv or self.hkv
        mask = self.broken_mask if (BREAK and self.broken_mask) else self.mask
        lines = [f"name: attnctest_{self.name.replace('.', '_')}_{dtype}_hd{hd}_{hq}_{hkv}", f"head_dim: {hd}", f"dtype: {dtype}",
                 f"heads: {{q: {hq}, kv: {hkv}}}", f"mask: {mask}", f"score: {self.score}"]
        if self.dropout and self.dropout_rounds:
            lines.append(f"dropout: {{p: {self.dropout}, rounds: {self.dropout_rounds}}}")
        elif self.dropout:
            lines.append(f"dropout: {self.dropout}")
        if self.inputs:
            lines.append("inputs:")
            for name, (dt, dims, _) in self.inputs.items():
                lines.append(f"  {name}: {{dtype: {dt}, dims: [{dims}]}}")
        return "\n".join(lines) + "\n"


V = {}
for v in [
    Variant("full", sdpa="plain"),
    Variant("causal", "causal", ref_mask=m_causal, sdpa="causal_br",
            broken_mask='"k < q + kv_len - q_len"'),
    Variant("causal_top_left", "{causal: top_left}", ref_mask=m_causal_tl, sdpa="causal_tl",
            broken_mask='"k <= q + 1"'),
    Variant("window64", "{window: 64}", ref_mask=m_window(64), broken_mask="{window: 65}"),
    Variant("prefix50", "{prefix: 50}", ref_mask=m_prefix(50), broken_mask="{prefix: 49}"),
    Variant("document", "{document: doc}", ref_mask=m_doc(False),
            inputs={"doc": ("i32", "pos", lambda B, H, n, d: gen_doc(B, H, n, d, "pos"))}),
    Variant("document_causal", "{document: doc, causal: true}", ref_mask=m_doc(True),
            inputs={"doc": ("i32", "b, pos", lambda B, H, n, d: gen_doc(B, H, n, d, "b,pos"))}),
    # Block summaries (templates/attnc/common/summary.h): many documents, an f32 mask input with NaN.
    Variant("document_many", "{document: doc, causal: true}", ref_mask=m_doc(True),
            inputs={"doc": ("i32", "b, pos", lambda B, H, n, d: gen_many_docs(B, n, d))}),
    # A mask that reads the head: tile classes per head (kv_tiles.h tileClassHeads; every other
    # mask with inputs here ignores the head, and its classes are made for one head).
    Variant("head_document", '"doc[b, h, q] == doc[b, h, k]"', ref_mask=m_head_doc,
            inputs={"doc": ("i32", "b, h, pos", lambda B, H, n, d: gen_head_docs(B, H, n, d))}),
    Variant("weight_mask", '"w[b, k] > 0.0 && q + kv_len - q_len >= k"', ref_mask=m_weight,
            inputs={"w": ("f32", "b, pos", lambda B, H, n, d: gen_weight(B, n, d))}),
    Variant("softcap", "causal", "{softcap: 2.5}", ref_mask=m_causal, ref_score=s_softcap(2.5)),
    # Gemma's cap: tanh's absolute error times 30 (its "growing" case saturates it at +-30).
    Variant("softcap30", "causal", "{softcap: 30}", ref_mask=m_causal, ref_score=s_softcap(30.0)),
    Variant("alibi", "none", "alibi", ref_score=s_alibi(
        lambda c: torch.tensor(alibi_slopes_paper(c.h.numel()), dtype=torch.float64, device=c.h.device)),
        hq=6),
    Variant("alibi_slopes", "causal", "{alibi: slopes}", ref_mask=m_causal,
            ref_score=s_alibi(lambda c: c.inputs["slopes"]),
            inputs={"slopes": ("f32", "h", lambda B, H, n, d: torch.rand(H, device=d) * 0.5)}),
    # A join as key ranges (MaskSplit.cpp emitJoinRanges): unsorted groups (several ballot rounds a
    # warp), a per-row key limit and a position bound.
    Variant("key_ranges", '"grp[b, q] == grp[b, k] && k <= lim[b, q] && k > q - 300"',
            ref_mask=lambda c: ((c.inputs["grp"][c.b, c.pos(c.q)] == c.inputs["grp"][c.b, c.pos(c.k)])
                                & (c.k <= c.inputs["lim"][c.b, c.pos(c.q)]) & (c.k > c.q - 300)),
            inputs={"grp": ("i32", "b, pos", lambda B, H, n, d: torch.randint(0, 3, (B, n), device=d, dtype=torch.int32)),
                    "lim": ("i32", "b, pos", lambda B, H, n, d: torch.randint(0, n, (B, n), device=d, dtype=torch.int32))}),
    Variant("custom_mask", '"(q + k) % 3 != 0 && allow[b, k] == 1"', ref_mask=m_custom,
            broken_mask='"(q + k) % 3 != 1 && allow[b, k] == 1"',
            inputs={"allow": ("i32", "b, pos",
                              lambda B, H, n, d: (torch.rand(B, n, device=d) < 0.7).to(torch.int32))}),
    Variant("custom_score", "causal", '"score * gain[h] - 0.05 * abs(q - k) + bias[b, k]"',
            ref_mask=m_causal, ref_score=s_custom,
            inputs={"gain": ("f32", "h", lambda B, H, n, d: 0.5 + torch.rand(H, device=d)),
                    "bias": ("f32", "b, pos", lambda B, H, n, d: torch.randn(B, n, device=d))}),
    # examples/custom_score.yaml: a log in the score (expr.h: lg2.approx on the device).
    Variant("log_score", "causal", '"score - 0.1 * log(1.0 + abs(q - k))"', ref_mask=m_causal,
            ref_score=lambda s, c: s - 0.1 * torch.log(1.0 + (c.q - c.k).abs().double())),
    Variant("gqa8", "causal", ref_mask=m_causal, sdpa="causal_br", hq=16, hkv=2),
    Variant("mqa", "none", sdpa="plain", hq=8, hkv=1),
    Variant("dropout0.1", "causal", ref_mask=m_causal, dropout=0.1),
    Variant("dropout0.3", "none", dropout=0.3),
    # Random123's default of 10 Philox rounds (the spec's default is 7).
    Variant("dropout0.1r10", "causal", ref_mask=m_causal, dropout=0.1, dropout_rounds=10),
]:
    V[v.name] = v

# Mask and score hooks of more than 64 operations, which CodeGen emits as functions of their own
# (__noinline__, EmitVariant.cpp kOutlinedHookOps) instead of inlining them per element.
OUTLINED_MASK_TERMS = [(7 + 2 * i, i % 5) for i in range(18)]
OUTLINED_SCORE_TERMS = [1.5 + i for i in range(20)]
V["outlined_mask"] = Variant(
    "outlined_mask",
    '"k <= q + kv_len - q_len && ' + " && ".join(f"(q + k) % {m} != {r}"
                                                 for m, r in OUTLINED_MASK_TERMS) + '"',
    ref_mask=lambda c: functools.reduce(
        lambda keep, t: keep & ((c.q + c.k) % t[0] != t[1]), OUTLINED_MASK_TERMS, c.k <= c.qp))
V["outlined_score"] = Variant(
    "outlined_score", "causal",
    '"score + ' + " + ".join(f"0.02 * tanh(score / {d})" for d in OUTLINED_SCORE_TERMS) + '"',
    ref_mask=m_causal,
    ref_score=lambda s, c: s + sum(0.02 * torch.tanh(s / d) for d in OUTLINED_SCORE_TERMS))

ALL_LENS = [1, 17, 127, 128, 129, 1000, 4097]


def plan(subset):
    """(variant, head_dim or (head_dim, head_dim_v), dtype, [(Sq, Skv), ...], batch) groups."""
    if subset == "small":
        small = [(1, 1), (17, 129), (129, 17), (128, 128)]
        return [("full", 64, "bf16", small, 2), ("causal", 128, "fp16", small, 2),
                ("document_causal", 64, "bf16", small, 2), ("gqa8", 128, "bf16", small, 2),
                ("custom_score", 64, "bf16", small, 2), ("dropout0.1", 64, "bf16", [(128, 128)], 2),
                # hd128: two consumer warpgroups on sm_90a (hd64 takes three); q tiles end-aligned
                ("dropout0.1", 128, "bf16", [(129, 300)], 2),
                ("causal", (128, 64), "bf16", [(129, 129)], 2),
                # hd64 (three consumers): the first warpgroup's rows end a kv tile before the
                # block's (kGroupTail), and the first tile has idle warpgroups
                ("causal", 64, "bf16", [(300, 300)], 2)]
    groups = []
    hd_lens = [(1, 1), (17, 17), (129, 1000), (1000, 129), (1000, 1000), (128, 4097), (1, 4097), (4097, 4097)]
    swept = (32, 64, 72, 80, 96, 128, 160, 192, 256)  # at every length below; the other head dims at the end
    for hd in swept:
        groups.append(("causal", hd, "bf16", hd_lens, 2))
        groups.append(("full", hd, "fp16", [(17, 17), (127, 1000), (1000, 127)], 2))
    every_pair = [(a, b) for a in ALL_LENS for b in ALL_LENS]
    groups.append(("full", 64, "bf16", every_pair, 2))
    groups.append(("causal", 128, "bf16", every_pair, 1))
    mask_lens = [(1, 1), (17, 17), (128, 128), (129, 1000), (1000, 129), (1000, 1000), (4097, 4097)]
    summary_lens = mask_lens + [(1000, 5000), (5000, 5000)]  # past 4096 positions: summaries only
    groups.append(("document_many", 128, "bf16", summary_lens, 2))
    groups.append(("weight_mask", 64, "bf16", summary_lens, 2))
    for name in ("causal_top_left", "window64", "prefix50", "document", "document_causal",
                 "head_document", "key_ranges", "softcap", "softcap30",
                 "alibi", "alibi_slopes", "custom_mask", "custom_score", "log_score"):
        groups.append((name, 128 if name in ("softcap", "softcap30", "document", "log_score", "key_ranges") else 64, "bf16",
                       mask_lens, 2))
    groups.append(("outlined_mask", 64, "bf16", mask_lens, 2))
    groups.append(("outlined_score", 128, "bf16", mask_lens, 2))
    groups.append(("causal_top_left", 128, "fp16", mask_lens, 2))
    groups.append(("window64", 128, "fp16", mask_lens, 2))
    groups.append(("gqa8", 128, "bf16", mask_lens, 2))
    groups.append(("gqa8", 64, "fp16", mask_lens, 2))
    groups.append(("mqa", 128, "bf16", mask_lens, 2))
    groups.append(("mqa", 256, "bf16", [(17, 17), (1000, 1000)], 2))
    for name in ("dropout0.1", "dropout0.3"):
        groups.append((name, 64, "bf16", [(512, 512), (129, 1000)], 2))
    groups.append(("dropout0.1", 128, "fp16", [(1000, 129)], 2))
    # Head dim 256 with dropout: the wgmma kernel at B_c = 32 (dropout's registers leave no more).
    groups.append(("dropout0.1", 256, "bf16", [(300, 300), (129, 1000)], 1))
    # Head dim 32 with dropout: B_c = 112 on sm_90a is not a multiple of 32, so each pair of n8
    # tiles makes its own Philox call (sm80::forEachDropoutDecision) and uses half of its bytes.
    groups.append(("dropout0.3", 32, "bf16", [(129, 1000), (300, 300)], 2))
    # 10 Philox rounds: the float path (hd128) and the packed one (hd256's B_c is not a multiple of 32).
    groups.append(("dropout0.1r10", 128, "bf16", [(129, 1000), (300, 300)], 2))
    groups.append(("dropout0.1r10", 256, "bf16", [(129, 1000)], 1))
    # head_dim_v != head_dim (a (d, d_v) pair): V and O are d_v wide, Q and K d wide.
    dv_lens = [(17, 17), (127, 1000), (1000, 127), (1000, 1000)]
    groups.append(("causal", (128, 64), "bf16", dv_lens, 2))
    groups.append(("causal", (64, 128), "bf16", dv_lens, 2))
    groups.append(("full", (256, 128), "bf16", [(17, 17), (1000, 1000)], 1))
    # Every other head dim the spec allows (a multiple of 8 in [8, 256]): the instruction shapes
    # pad it (wgmma's k16 and the 64-element TMA boxes zero-filled past the row), at lengths that
    # cross a tile edge both ways; head_dim 8 also as (d, d_v) pairs and in fp16.
    for hd in range(8, 257, 8):
        if hd not in swept:
            groups.append(("causal", hd, "bf16", [(17, 17), (129, 1000), (1000, 1000)], 1))
    groups.append(("full", 8, "fp16", [(17, 17), (1000, 127)], 2))
    groups.append(("causal", (8, 64), "bf16", [(17, 17), (1000, 1000)], 1))
    groups.append(("causal", (64, 8), "bf16", [(17, 17), (1000, 1000)], 1))
    return groups


def head_dims(dims):
    """(head_dim, head_dim_v) of a plan's dims: an int (both the same) or a pair."""
    return dims if isinstance(dims, tuple) else (dims, dims)


def spec_text(name, dims, dtype):
    hd, hdv = head_dims(dims)
    spec = V[name].spec(hd, dtype)
    if hdv != hd:  # its own kernel name: (128, 64) must not collide with hd 128 in one process
        spec = spec.replace(f"_hd{hd}_", f"_hd{hd}v{hdv}_") + f"head_dim_v: {hdv}\n"
    return spec


# ---- Reference and checks ----

def reference(q, k, v, scale, var, B, hq, hkv, ql, kl, inputs, ref_dev, keep_drop=None, p=0.0):
    """float64 O [B, Sq, Hq, Dv] (BSHD) and LSE [B, Hq, Sq]; `fully` masks [B, Hq, Sq] rows."""
    qd = q.to(ref_dev, torch.float64).transpose(1, 2)
    kd = k.to(ref_dev, torch.float64).transpose(1, 2).repeat_interleave(hq // hkv, 1)
    vd = v.to(ref_dev, torch.float64).transpose(1, 2).repeat_interleave(hq // hkv, 1)
    ctx = Ctx(B, hq, ql, kl, {n: t.to(ref_dev).to(torch.float64 if t.is_floating_point() else torch.int64)
                              for n, t in inputs.items()}, ref_dev)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if var.ref_score:
        s = var.ref_score(s, ctx)
    if var.ref_mask:
        keep = var.ref_mask(ctx).expand(B, hq, ql, kl)
        s = s.masked_fill(~keep, float("-inf"))
    else:
        keep = torch.ones(B, hq, ql, kl, dtype=torch.bool, device=ref_dev)
    lse = torch.logsumexp(s, -1)
    fully = ~keep.any(-1)
    pr = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    if keep_drop is not None:
        pr = pr * torch.from_numpy(keep_drop).to(ref_dev) * philox_host.scale(p)
    o = (pr @ vd).transpose(1, 2)
    return o, lse, fully, keep


def relerr(x, ref):
    ref = ref.to(x.device) if x.device != ref.device else ref
    x = x.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def sdpa_error(var, q, k, v, scale, hq, hkv, ql, kl, ref):
    mode = var.sdpa
    if mode is None or (mode == "causal_br" and ql != kl):
        return None
    backends = contextlib.nullcontext()
    if v.shape[-1] != q.shape[-1]:
        # Flash (and cuDNN) want V as wide as Q; the efficient and math backends take d_v != d.
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            return None
        backends = sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    try:
        with backends:
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=mode in ("causal_br", "causal_tl"), scale=scale,
                                                 enable_gqa=hq != hkv)
    except Exception as e:  # noqa: BLE001
        print(f"  (sdpa unavailable: {e})")
        return None
    return relerr(out.transpose(1, 2), ref)


class Results:
    def __init__(self):
        self.rows = {}  # variant key -> stats
        self.failures = []
        self.log = []

    def add(self, key, ok, err=0.0, lse_err=0.0, sdpa=None, what=""):
        r = self.rows.setdefault(key, {"cases": 0, "pass": 0, "err": 0.0, "lse": 0.0, "sdpa": None})
        r["cases"] += 1
        r["pass"] += int(ok)
        r["err"] = max(r["err"], err)
        r["lse"] = max(r["lse"], lse_err)
        if sdpa is not None:
            r["sdpa"] = max(r["sdpa"] or 0.0, sdpa)
        if not ok:
            self.failures.append(f"{key}: {what}")


def check_head_dim_v(info, hdv):
    # V and O are sized by hdv: a kernel of another width would read and write past them.
    if info["head_dim_v"] != hdv:
        raise RuntimeError(f"kernel's head_dim_v is {info['head_dim_v']}, the spec asked for {hdv}")


def run_case(lib_kernel, var, hd, dtype, B, ql, kl, ref_dev, res, key, hdv=None, growing=False):
    """growing: keys scaled by 1 -> 8 along the sequence, so that a row's maximum score keeps
    growing from kv tile to kv tile by more than the sm_90a forward's lazy-rescale threshold
    (2^8, common/softmax.h advanceLazy): with plain random inputs a row's maximum settles in its
    first tile and O is never rescaled after it."""
    hdv = hdv or hd  # V and O are head_dim_v wide
    info = lib_kernel.info
    check_head_dim_v(info, hdv)
    hq, hkv = info["heads_q"], info["heads_kv"]
    dt = TORCH_DTYPE[dtype]
    dev = torch.device("cuda")
    q = torch.randn(B, ql, hq, hd, device=dev, dtype=dt)
    k = torch.randn(B, kl, hkv, hd, device=dev, dtype=dt)
    if growing:
        k = (k.float() * torch.linspace(1.0, 8.0, kl, device=dev).view(1, kl, 1, 1)).to(dt)
    v = torch.randn(B, kl, hkv, hdv, device=dev, dtype=dt)
    npos = max(ql, kl)
    inputs = {n: gen(B, hq, npos, dev) for n, (_, _, gen) in var.inputs.items()}
    in_args = [(inputs[n], var.inputs[n][1]) for n in lib_kernel.input_names]
    scale = float(info["scale"])
    ref, ref_lse, fully, _ = reference(q, k, v, scale, var, B, hq, hkv, ql, kl, inputs, ref_dev)
    sdpa = sdpa_error(var, q, k, v, scale, hq, hkv, ql, kl, ref)
    tol = TOL[dtype]
    worst, worst_lse, problems = 0.0, 0.0, []
    outs = {}
    for layout in ("bshd", "bhsd"):
        if layout == "bshd":
            qq, kk, vv = q, k, v
            o = torch.full((B, ql, hq, hdv), float("nan"), device=dev, dtype=dt)
        else:
            qq, kk, vv = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            o = torch.full((B, hq, ql, hdv), float("nan"), device=dev, dtype=dt)
        lse = torch.full((B, hq, ql), float("nan"), device=dev, dtype=torch.float32)
        lib_kernel.forward(qq, kk, vv, o, lse, in_args, layout=layout)
        torch.cuda.synchronize()
        ob = o if layout == "bshd" else o.transpose(1, 2)
        outs[layout] = ob
        err = relerr(ob, ref) if ref.norm() > 0 else ob.double().abs().max().item()
        worst = max(worst, err)
        if torch.isnan(ob).any() or torch.isnan(lse).any():
            problems.append(f"{layout}: NaN in output")
        fm = fully.to(dev)
        if fm.any():
            om = ob.transpose(1, 2)[fm]
            if not bool((om == 0).all()):
                problems.append(f"{layout}: fully masked rows not exactly 0")
            if not bool((lse[fm] == float("-inf")).all()):
                problems.append(f"{layout}: fully masked rows' LSE not -inf")
        live = ~fm
        if live.any():
            le = (lse.double()[live] - ref_lse.to(dev)[live]).abs().max().item()
            le = le if math.isfinite(le) else float("inf")
            worst_lse = max(worst_lse, le)
            if le > LSE_TOL:
                problems.append(f"{layout}: LSE max err {le:.2e}")
        if err > tol:
            problems.append(f"{layout}: relerr {err:.2e} > {tol:g}")
        if sdpa is not None and err > max(SDPA_FACTOR * sdpa, SDPA_FLOOR):
            problems.append(f"{layout}: relerr {err:.2e} > {SDPA_FACTOR:g} x SDPA's {sdpa:.2e}")
    ok = not problems
    what = f"hd{hd}" + (f" dv{hdv}" if hdv != hd else "") + f" {dtype} B{B} Sq{ql} Skv{kl}: " + "; ".join(problems)
    print(f"{'ok  ' if ok else 'FAIL'} {key:28s} B{B} Sq{ql:5d} Skv{kl:5d} err {worst:.2e} lse {worst_lse:.1e}"
          f" sdpa {'-' if sdpa is None else f'{sdpa:.2e}'}" + ("" if ok else "  <- " + "; ".join(problems)),
          flush=True)
    res.add(key, ok, worst, worst_lse, sdpa, what)


def run_dropout_case(kern, var, hd, dtype, B, ql, kl, ref_dev, res, key, hdv=None):
    hdv = hdv or hd
    info = kern.info
    check_head_dim_v(info, hdv)
    hq, hkv = info["heads_q"], info["heads_kv"]
    p = float(info["dropout"])
    dt = TORCH_DTYPE[dtype]
    dev = torch.device("cuda")
    q = torch.randn(B, ql, hq, hd, device=dev, dtype=dt)
    k = torch.randn(B, kl, hkv, hd, device=dev, dtype=dt)
    v = torch.randn(B, kl, hkv, hdv, device=dev, dtype=dt)
    scale = float(info["scale"])

    def launch(seed, offset):
        o = torch.full((B, ql, hq, hdv), float("nan"), device=dev, dtype=dt)
        lse = torch.full((B, hq, ql), float("nan"), device=dev, dtype=torch.float32)
        kern.forward(q, k, v, o, lse, seed=seed, offset=offset)
        torch.cuda.synchronize()
        return o, lse

    seed, offset = 0x1234_5678_9ABC_DEF1 + ql, (7 << 32) + 12345 + kl
    o1, lse1 = launch(seed, offset)
    o2, _ = launch(seed, offset)
    o3, _ = launch(seed + 1, offset)
    o4, _ = launch(seed, offset + 1)
    problems = []
    if not torch.equal(o1, o2):
        problems.append("same seed/offset not bit-identical")
    if torch.equal(o1, o3):
        problems.append("another seed gives the same output")
    if torch.equal(o1, o4):
        problems.append("another offset gives the same output")
    keep = philox_host.keep_mask(seed, offset, p, B, hq, ql, kl, info["dropout_rounds"])
    ref, ref_lse, fully, attn_keep = reference(q, k, v, scale, var, B, hq, hkv, ql, kl, {}, ref_dev, keep, p)
    live = attn_keep.cpu().numpy()
    n = int(live.sum())
    kept = float(keep[live].mean()) if n else 1.0
    pth = philox_host.threshold(p) / 256.0
    sigma = math.sqrt(pth * (1 - pth) / max(n, 1))
    if abs(kept - (1 - pth)) > 3 * sigma:
        problems.append(f"host keep fraction {kept:.5f} vs {1 - pth:.5f} +- 3x{sigma:.1e}")
    err = relerr(o1, ref)
    tol = TOL[dtype]
    if err > tol:
        problems.append(f"relerr vs host-mask reference {err:.2e} > {tol:g}")
    no_drop, _, _, _ = reference(q, k, v, scale, var, B, hq, hkv, ql, kl, {}, ref_dev)
    err_nodrop = relerr(o1, no_drop)
    fm = fully.to(dev)
    le = (lse1.double()[~fm] - ref_lse.to(dev)[~fm]).abs().max().item() if (~fm).any() else 0.0
    if le > LSE_TOL:
        problems.append(f"LSE max err {le:.2e}")
    if torch.isnan(o1).any():
        problems.append("NaN in output")
    ok = not problems
    print(f"{'ok  ' if ok else 'FAIL'} {key:28s} B{B} Sq{ql:5d} Skv{kl:5d} err {err:.2e} (vs no-dropout ref {err_nodrop:.2e})"
          f" keep {kept:.5f} (expect {1 - pth:.5f}, n={n}) lse {le:.1e}"
          + ("" if ok else "  <- " + "; ".join(problems)), flush=True)
    res.add(key, ok, err, le, None, f"hd{hd} {dtype} Sq{ql} Skv{kl}: " + "; ".join(problems))


def validation_checks(lib, kernels, res):
    """Bad calls through the C API return a message naming the argument and launch nothing."""
    dev = torch.device("cuda")
    kern = kernels[("full", 64, "bf16")]
    hq = kern.info["heads_q"]
    B, S, D = 2, 64, 64
    q, k, v = (torch.randn(B, S, hq, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    cases = []

    def poisoned():
        return torch.full((B, S, hq, D), float("nan"), device=dev, dtype=torch.bfloat16)

    o = poisoned()
    a = kern.make_args(q, k, v, o)
    a.q.data = None
    cases.append(("null q", kern, a, o, "q.data"))
    o = poisoned()
    a = kern.make_args(q, k, v, o)
    a.k.data = k.data_ptr() + 2
    cases.append(("misaligned k (+2 bytes)", kern, a, o, "k.data"))
    o = poisoned()
    a = kern.make_args(q, k, v, o)
    a.v.stride_s = hq * D + 3
    cases.append(("v stride not a multiple of 8", kern, a, o, "v.stride_s"))
    o = poisoned()
    a = kern.make_args(q, k, v, o)
    a.batch = 0
    cases.append(("batch 0", kern, a, o, "batch"))
    dk = kernels.get(("document", 128, "bf16"))
    if dk is not None:
        hq2 = dk.info["heads_q"]
        q2, k2, v2 = (torch.randn(B, S, hq2, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))
        o = torch.full((B, S, hq2, 128), float("nan"), device=dev, dtype=torch.bfloat16)
        a = dk.make_args(q2, k2, v2, o, inputs=[])
        cases.append(("document kernel with 0 inputs", dk, a, o, "inputs"))
    for what, kk, a, o, name in cases:
        try:
            kk.launch(a)
            msg = None
        except attnc_ctypes.AttncError as e:
            msg = str(e)
        torch.cuda.synchronize()
        untouched = bool(torch.isnan(o).all())
        ok = msg is not None and name in msg and untouched
        print(f"{'ok  ' if ok else 'FAIL'} validation: {what:32s} -> {msg!r} output untouched {untouched}", flush=True)
        res.add("arg validation", ok, what=f"{what}: message {msg!r}, output untouched {untouched}")


def prepared_checks(lib, kernels, res):
    """Kernel::prepareInputs (attnc_kernel_prepare_inputs) and forwards that use it: bit-identical
    to the plain forward, reusable, and refused, with nothing written, for other lengths, other
    inputs or another kernel."""
    dev = torch.device("cuda")
    doc_kernels = [(kernels[key], V[key[0]]) for key in (("document_causal", 64, "bf16"),
                                                         ("document_many", 128, "bf16"),
                                                         ("custom_mask", 64, "bf16")) if key in kernels]
    plain = kernels.get(("full", 64, "bf16"))
    if not doc_kernels or not hasattr(lib.lib, "attnc_kernel_prepare_inputs"):
        return
    B, S = 2, 1000

    def launch_case(kern, var):
        name = var.name
        hq, hd = kern.info["heads_q"], kern.info["head_dim"]
        q, k, v = (torch.randn(B, S, hq, hd, device=dev, dtype=torch.bfloat16) for _ in range(3))
        inputs = {n: gen(B, hq, S, dev) for n, (_, _, gen) in var.inputs.items()}
        in_args = [(inputs[n], var.inputs[n][1]) for n in kern.input_names]

        def output():
            return torch.full((B, S, hq, kern.info["head_dim_v"]), float("nan"), device=dev,
                              dtype=torch.bfloat16)

        o_plain = output()
        a = kern.make_args(q, k, v, o_plain, None, in_args)
        kern.launch(a)
        prepared = kern.prepare_inputs(a)
        outs = []
        for _ in range(3):
            o = output()
            kern.launch_prepared(kern.make_args(q, k, v, o, None, in_args), prepared)
            outs.append(o)
        torch.cuda.synchronize()
        same = all(torch.equal(o, o_plain) for o in outs) and not torch.isnan(o_plain).any()
        print(f"{'ok  ' if same else 'FAIL'} prepared: {name:28s} 3 forwards bit-identical to the plain one",
              flush=True)
        res.add("prepared inputs", same, what=f"{name}: prepared forwards differ from the plain one")
        refusals = []
        o = output()
        shorter = kern.make_args(q[:, :S - 64], k[:, :S - 64], v[:, :S - 64], o[:, :S - 64], None, in_args)
        refusals.append(("other lengths", shorter, o, "q_len"))
        o = output()
        other = [(t.clone(), dims) for t, dims in in_args]
        refusals.append(("other inputs", kern.make_args(q, k, v, o, None, other), o, "inputs"))
        for what, args, o, word in refusals:
            try:
                kern.launch_prepared(args, prepared)
                msg = None
            except attnc_ctypes.AttncError as e:
                msg = str(e)
            torch.cuda.synchronize()
            ok = msg is not None and "prepared" in msg and word in msg and bool(torch.isnan(o).all())
            print(f"{'ok  ' if ok else 'FAIL'} prepared: {name} {what:20s} -> {msg!r}", flush=True)
            res.add("prepared inputs", ok, what=f"{name} {what}: message {msg!r}")
        return prepared, q, k, v, in_args

    made = {}
    for kern, var in doc_kernels:
        made[var.name] = (kern, launch_case(kern, var))
    if len(made) >= 2:
        (k1, (prep1, *_)), (k2, (_, q, k, v, in_args)) = list(made.values())[:2]
        o = torch.full((B, S, k2.info["heads_q"], k2.info["head_dim_v"]), float("nan"), device=dev,
                       dtype=torch.bfloat16)
        try:
            k2.launch_prepared(k2.make_args(q, k, v, o, None, in_args), prep1)
            msg = None
        except attnc_ctypes.AttncError as e:
            msg = str(e)
        torch.cuda.synchronize()
        ok = msg is not None and "another kernel" in msg and bool(torch.isnan(o).all())
        print(f"{'ok  ' if ok else 'FAIL'} prepared: another kernel's          -> {msg!r}", flush=True)
        res.add("prepared inputs", ok, what=f"another kernel's: message {msg!r}")
    if plain is not None:  # no declared inputs: an empty preparation, the same forward
        hq = plain.info["heads_q"]
        q, k, v = (torch.randn(B, S, hq, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
        o1, o2 = (torch.full((B, S, hq, 64), float("nan"), device=dev, dtype=torch.bfloat16) for _ in range(2))
        a = plain.make_args(q, k, v, o1)
        plain.launch(a)
        plain.launch_prepared(plain.make_args(q, k, v, o2), plain.prepare_inputs(a))
        torch.cuda.synchronize()
        ok = torch.equal(o1, o2) and not torch.isnan(o1).any()
        print(f"{'ok  ' if ok else 'FAIL'} prepared: full (no inputs)", flush=True)
        res.add("prepared inputs", ok, what="full hd64: prepared forward differs")


def compile_all(lib, groups, target):
    wanted = {}
    for name, dims, dtype, _, _ in groups:
        wanted[(name, dims, dtype)] = spec_text(name, dims, dtype)
    wanted.setdefault(("full", 64, "bf16"), V["full"].spec(64, "bf16"))
    kernels, errors = {}, {}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        futs = {pool.submit(lib.compile_text, text, target): key for key, text in wanted.items()}
        for f in concurrent.futures.as_completed(futs):
            key = futs[f]
            try:
                kernels[key] = f.result()
            except Exception as e:  # noqa: BLE001
                errors[key] = str(e)
    print(f"compiled {len(kernels)} kernels in {time.time() - t0:.1f} s ({len(errors)} failed)", flush=True)
    for key, e in errors.items():
        print(f"COMPILE FAIL {key}: {e}")
    return kernels, errors


def device_facts():
    facts = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version())}
    try:
        facts["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                         capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        facts["driver"] = "?"
    return facts


def write_results(path, res, facts, commit, argv, elapsed):
    bounds = ("Bounds: relative Frobenius error of O against a float64 reference <= 5e-3 (bf16) /"
              f" 1e-3 (fp16), and <= {SDPA_FACTOR:g} x torch SDPA's error on the same inputs where"
              f" SDPA has the variant (floor {SDPA_FLOOR:g}); LSE max abs error <= {LSE_TOL:g} on rows"
              " with a key; fully masked rows O == 0 and LSE == -inf exactly; no NaN anywhere"
              " (outputs are poisoned with NaN). Each case runs both layouts (BSHD and BHSD)."
              " Dropout: bit-identical reruns, other seed/offset differ, host Philox keep fraction"
              " within 3 sigma of 1-p, and O against the float64 reference with exactly the host's"
              " dropout mask.")
    columns = ["variant", "cases", "pass", "worst rel err", "worst LSE err", "SDPA's worst rel err"]
    rows = [[key, r["cases"], r["pass"], f"{r['err']:.2e}", f"{r['lse']:.1e}",
             "-" if r["sdpa"] is None else f"{r['sdpa']:.2e}"] for key, r in res.rows.items()]
    notes = (["`hdD dvN`: head_dim D, head_dim_v N (Q and K are D wide, V and O N wide)."]
             if any(" dv" in key for key in res.rows) else [])
    results_page.write(path, "attnc GPU forward tests: results",
                       results_page.command_line(__file__, argv), facts, commit, elapsed, bounds,
                       columns, rows, res.failures, notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subset", default="all", choices=["all", "small"])
    ap.add_argument("--ref-device", default="cuda")
    ap.add_argument("--target", default=None, help="attnc target (default: the device's)")
    ap.add_argument("--results", "--results-md", default=None, metavar="PATH",
                    help="also write the summary page there (results/gpu/forward-sm90.md)")
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    t_start = time.time()
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # a current context before attnc looks for one
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = attnc_ctypes.Library(args.lib)
    facts = device_facts()
    print(f"attnc {lib.version()} ({lib.path}); {facts}; break_mask={BREAK}", flush=True)
    groups = plan(args.subset)
    kernels, compile_errors = compile_all(lib, groups, args.target)
    res = Results()
    for key, e in compile_errors.items():
        res.add(f"{key[0]} (compile)", False, what=e)
    for name, dims, dtype, lens, B in groups:
        kern = kernels.get((name, dims, dtype))
        if kern is None:
            continue
        var = V[name]
        hd, hdv = head_dims(dims)
        key = f"{name} hd{hd}" + (f" dv{hdv}" if hdv != hd else "") + f" {dtype}"
        if var.hq != var.hkv:
            key += f" {kern.info['heads_q']}:{kern.info['heads_kv']}"
        for ql, kl in lens:
            runner = run_dropout_case if var.dropout else run_case
            try:
                runner(kern, var, hd, dtype, B, ql, kl, args.ref_device, res, key, hdv=hdv)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {key} Sq{ql} Skv{kl}: exception {e}", flush=True)
                res.add(key, False, what=f"Sq{ql} Skv{kl}: exception {e}")
        # Once per kernel, the longest case again with scores that grow along the keys (O is
        # rescaled mid-row).
        ql, kl = max(lens, key=lambda qk: qk[1])
        if not var.dropout and kl >= 256:
            try:
                run_case(kern, var, hd, dtype, B, ql, kl, args.ref_device, res, key + " growing",
                         hdv=hdv, growing=True)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {key} growing Sq{ql} Skv{kl}: exception {e}", flush=True)
                res.add(key + " growing", False, what=f"Sq{ql} Skv{kl}: exception {e}")
    validation_checks(lib, kernels, res)
    prepared_checks(lib, kernels, res)
    elapsed = time.time() - t_start
    total = sum(r["cases"] for r in res.rows.values())
    passed = sum(r["pass"] for r in res.rows.values())
    print(f"\n{'variant':36s} {'cases':>5s} {'pass':>5s} {'worst err':>10s} {'worst lse':>9s} {'SDPA err':>9s}")
    for key, r in res.rows.items():
        sd = "-" if r["sdpa"] is None else f"{r['sdpa']:.2e}"
        print(f"{key:36s} {r['cases']:5d} {r['pass']:5d} {r['err']:10.2e} {r['lse']:9.1e} {sd:>9s}")
    if args.results:
        write_results(args.results, res, facts, results_page.commit_of(lib.path), sys.argv[1:],
                      elapsed)
    print(f"\n{passed}/{total} passed, {total - passed} failed, {elapsed:.0f} s"
          + (" (ATTNC_TEST_BREAK_MASK=1)" if BREAK else ""))
    return 0 if passed == total and not compile_errors else 1


if __name__ == "__main__":
    sys.exit(main())
