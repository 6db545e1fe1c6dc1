"""GPU tests of attnc's backward kernels through the C API (ctypes): dQ, dK, dV of each case against
float64 torch autograd on the device, with poisoned gradients and fresh random inputs; masks, score
mods with derived gradients, GQA/MQA, dtypes, layouts, odd lengths, dropout (the forward's Philox
mask rebuilt on the host), the deterministic mode (bit-identical over 3 runs), and never worse than
2x torch SDPA's own backward error where SDPA has the variant. Prints a summary table last.

  python3 test/gpu/test_backward.py [--subset all|small] [--results PATH] [--target T]
                                    [--only VARIANT]... [--head-dim N]...

--target compiles for another target than the device's (sm_80 on the H200: the sm_80 family's
kernels, which the driver compiles from their PTX); --head-dim keeps the groups of those head dims
(of head_dim, or of either member of a (d, d_v) pair)."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnc_ctypes  # noqa: E402
import philox_host  # noqa: E402
import results_page  # noqa: E402
from test_forward import V, TORCH_DTYPE, Ctx, relerr, device_facts  # noqa: E402

TOL = {"bf16": 1e-2, "fp16": 2e-3}
SDPA_FACTOR, SDPA_FLOOR = 2.0, 1e-4


def plan(subset):
    if subset == "small":
        return [("causal", 128, "bf16", [(129, 300), (300, 129)], 2),
                ("full", 64, "fp16", [(17, 17), (200, 200)], 2),
                # the sm_90a dK/dV kernel's head-dim split (bwd_config.h)
                ("causal", 256, "bf16", [(129, 300)], 1),
                # the split over three chunks padded to four (hd192)
                ("causal", 192, "bf16", [(300, 129)], 1),
                # the split with a mask that reads declared inputs: its own dQ (hd256), beside
                # the dQ kernel (hd192)
                ("document_causal", 256, "bf16", [(129, 300)], 1),
                ("document_causal", 192, "bf16", [(300, 129)], 1),
                # the sm_90a dQ kernel (bwd_dq.h) with a score hook and with dropout
                ("softcap", 256, "bf16", [(300, 129)], 1),
                ("dropout0.1", 128, "bf16", [(129, 300)], 1),
                # the dK/dV kernel without dQ (bwd_config.h SeparateDq), its last kv block's
                # second consumer without rows
                ("causal", (192, 64), "bf16", [(300, 129)], 1),
                # the split beside a head dim padded to two chunks
                ("causal", (64, 256), "bf16", [(129, 300)], 1),
                # the dQ kernel whose producer reads the launch's classes of its kv tiles under
                # a document mask (the default backward and, in the same case, the deterministic
                # one), and the dK/dV kernel without dQ beside it at a head dim above 192
                ("document_causal", (192, 64), "bf16", [(300, 129)], 1),
                ("document_causal", (224, 32), "bf16", [(129, 300)], 1)]
    lens = [(1, 1), (17, 17), (127, 1000), (1000, 127), (1000, 1000)]
    groups = []
    swept = (32, 64, 72, 96, 128, 136, 160, 192, 256)  # at every length below; the other head dims at the end
    for hd in swept:
        groups.append(("causal", hd, "bf16", lens, 2))
    groups += [("full", 64, "fp16", lens, 2), ("full", 128, "bf16", lens + [(4097, 4097)], 1),
               ("causal_top_left", 128, "fp16", lens, 2), ("gqa8", 128, "bf16", lens, 2),
               ("mqa", 64, "bf16", lens, 2)]
    for name in ("window64", "prefix50", "document_causal", "head_document", "softcap", "alibi",
                 "alibi_slopes", "custom_mask", "custom_score", "log_score", "outlined_mask",
                 "outlined_score"):
        groups.append((name, 64, "bf16", [(17, 17), (129, 1000), (1000, 129), (1000, 1000)], 2))
    groups.append(("dropout0.1", 64, "bf16", [(512, 512), (129, 1000)], 2))
    groups.append(("dropout0.3", 128, "fp16", [(300, 300)], 2))
    groups.append(("dropout0.1r10", 128, "bf16", [(300, 300)], 2))  # 10 Philox rounds
    # Head dim 32: kv tiles whose B_c is not a multiple of 32 in the forward (philox.h pairs).
    groups.append(("dropout0.3", 32, "bf16", [(129, 1000)], 2))
    # Head dim 256 with an epilogue: the backward KV kernel's 32-row kept tile (2 x 4 warps); on
    # sm_90a the split with its own dQ under a mask that reads declared inputs (past the pairs
    # the dQ kernel takes, bwd_config.h dqKernelTakesInputMask).
    groups.append(("document_causal", 256, "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("dropout0.1", 256, "bf16", [(300, 300)], 1))
    # The head-dim split with the epilogues it takes (TileRuleBackward.cpp): a score whose
    # derivative depends on it, a mask the rule charges 16 registers, per-head input reads,
    # dropout in fp16 over the padded chunks, a window.
    groups.append(("softcap", 256, "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("custom_mask", 192, "bf16", [(1000, 129), (1000, 1000)], 1))
    groups.append(("head_document", 160, "bf16", [(129, 1000)], 1))
    groups.append(("dropout0.3", 192, "fp16", [(300, 300)], 1))
    groups.append(("window64", 256, "bf16", [(1000, 1000)], 1))
    # head_dim_v != head_dim (a (d, d_v) pair): V, O and dO are d_v wide.
    groups.append(("causal", (128, 64), "bf16", [(17, 17), (127, 1000), (1000, 1000)], 2))
    groups.append(("causal", (64, 128), "bf16", [(17, 17), (1000, 127), (1000, 1000)], 2))
    # The padded split with dK over four chunks (three loaded) and dV over two.
    groups.append(("causal", (192, 128), "bf16", [(127, 1000), (1000, 1000)], 2))
    # A head dim of three chunks beside a narrow d_v: the dQ columns need a fourth K chunk
    # (sm90/bwd_config.h keyTileChunks), which with dQ's fp32 tiles leaves no room, so the dK/dV
    # kernel runs without dQ beside the dQ kernel (BwdConfig SeparateDq), here with 3 and 2
    # stages, a window, a prefix, dropout, a score hook, GQA and an odd last kv block (the second
    # consumer without rows: the staged dK/dV stores' barrier).
    groups.append(("causal", (192, 64), "bf16", [(127, 1000), (1000, 1000)], 1))
    groups.append(("causal", (136, 64), "fp16", [(1000, 129)], 1))
    groups.append(("window64", (176, 80), "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("prefix50", (136, 112), "bf16", [(1000, 1000)], 1))
    groups.append(("dropout0.1", (200, 48), "bf16", [(300, 300)], 1))
    groups.append(("softcap", (160, 32), "bf16", [(129, 1000)], 1))
    groups.append(("gqa8", (184, 16), "bf16", [(1000, 1000)], 1))
    groups.append(("causal", (152, 96), "bf16", [(1000, 1000 - 40)], 1))
    # The split beside a head dim of at most 64 columns, padded to two chunks (bwd_config.h
    # splitColumns: the second consumer's share all padding), where the plain kernel's registers
    # do not fit: a narrow d_v (under a document mask too, beside the dQ kernel) and a narrow
    # head dim (beside the dQ kernel, its kv tile halved to fit the shared memory). And the plain
    # kernel's deterministic dQ kernel with its kv tile halved, (16, 224).
    groups.append(("causal", (256, 64), "bf16", [(127, 1000), (1000, 1000)], 1))
    groups.append(("causal", (64, 256), "bf16", [(1000, 127), (1000, 1000)], 1))
    groups.append(("dropout0.1", (232, 24), "bf16", [(300, 300)], 1))
    groups.append(("window64", (40, 224), "bf16", [(129, 1000)], 1))
    groups.append(("document_causal", (256, 48), "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("alibi", (8, 248), "fp16", [(1000, 129)], 1))
    groups.append(("causal", (16, 224), "bf16", [(129, 1000)], 1))
    # The sm_90a dQ kernel under masks that read declared inputs (its producer reads the launch's
    # classes of its kv tiles, `_bwd_q_tile_classes`): the split's default backward at hd192
    # (beside this kernel since it reads classes), the dK/dV kernel without dQ at (192, 64) and,
    # above head dim 192, at (224, 32) and (240, 8); the deterministic mode wherever
    # (document_causal and head_document at hd64 above too), up to the widest pairs the dQ kernel
    # takes (bwd_config.h dqKernelTakesInputMask: (224, 224), (256, 96)).
    groups.append(("document_causal", 192, "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("document_causal", (192, 64), "bf16", [(1000, 1000)], 1))
    groups.append(("document_causal", (224, 32), "bf16", [(129, 1000), (1000, 1000)], 1))
    groups.append(("head_document", (240, 8), "bf16", [(1000, 129)], 1))
    groups.append(("document_causal", 224, "bf16", [(1000, 1000)], 1))
    groups.append(("key_ranges", (256, 96), "bf16", [(129, 1000)], 1))
    groups.append(("head_document", (136, 112), "bf16", [(1000, 129)], 1))
    groups.append(("document_causal", 128, "fp16", [(1000, 1000)], 2))
    groups.append(("key_ranges", 128, "bf16", [(1000, 1000)], 2))
    groups.append(("weight_mask", 96, "bf16", [(129, 1000)], 1))
    groups.append(("document_many", 64, "bf16", [(1000, 1000)], 1))
    # The backward spill fallback (compiler/Pipeline.h): ALiBi at hd192 spilled in the sm_90a dQ
    # kernel of the split's default backward, which now takes kv tiles of 32 keys.
    groups.append(("alibi", 192, "bf16", [(129, 1000), (1000, 1000)], 1))
    # The sm_90a dK/dV kernel's ordered grid with two groups and padding blocks (block_order.h):
    # 12 (kv head, batch) pairs over 33 kv tiles, 8 pairs a group.
    groups.append(("causal", 128, "bf16", [(4097, 4097)], 3))
    # Every other head dim the spec allows (a multiple of 8 in [8, 256]; the forward suite has the
    # same sweep), and head_dim 8 as (d, d_v) pairs.
    for hd in range(8, 257, 8):
        if hd not in swept:
            groups.append(("causal", hd, "bf16", [(17, 17), (129, 1000)], 1))
    groups.append(("causal", (8, 64), "bf16", [(129, 1000)], 1))
    groups.append(("causal", (64, 8), "bf16", [(1000, 129)], 1))
    return groups


def gradient_error(g, ref):
    """Relative error; where the exact gradient is 0 (one key: softmax is constant), the largest
    absolute value instead, for attnc and SDPA alike."""
    return relerr(g, ref) if ref.norm() > 0 else g.double().abs().max().item()


def reference_grads(q, k, v, do, scale, var, B, hq, hkv, ql, kl, inputs, keep_drop, p):
    """float64 autograd dQ, dK, dV (BSHD). Fully masked rows get P = 0 without NaN in the graph."""
    dev = q.device
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    qd = leaves[0].transpose(1, 2)
    kd = leaves[1].transpose(1, 2).repeat_interleave(hq // hkv, 1)
    vd = leaves[2].transpose(1, 2).repeat_interleave(hq // hkv, 1)
    ctx = Ctx(B, hq, ql, kl, {n: t.to(torch.float64 if t.is_floating_point() else torch.int64)
                              for n, t in inputs.items()}, dev)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if var.ref_score:
        s = var.ref_score(s, ctx)
    keep = var.ref_mask(ctx).expand(B, hq, ql, kl) if var.ref_mask else torch.ones(
        B, hq, ql, kl, dtype=torch.bool, device=dev)
    fully = ~keep.any(-1, keepdim=True)
    s = s.masked_fill(~keep, float("-inf")).masked_fill(fully, 0.0)
    pr = torch.softmax(s, -1) * keep
    if keep_drop is not None:
        pr = pr * torch.from_numpy(keep_drop).to(dev) * philox_host.scale(p)
    (pr @ vd).transpose(1, 2).backward(do.double())
    return [t.grad for t in leaves]


def sdpa_grads(var, q, k, v, do, scale, hq, hkv, ql, kl):
    mode = var.sdpa
    if mode is None or (mode == "causal_br" and ql != kl):
        return None
    qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=mode in ("causal_br", "causal_tl"),
                                         scale=scale, enable_gqa=hq != hkv)
    out.backward(do.transpose(1, 2))
    return [t.grad.transpose(1, 2) for t in (qt, kt, vt)]


def run_case(kern, var, hd, hdv, dtype, B, ql, kl, results, failures, key):
    info = kern.info
    hq, hkv, scale, p = info["heads_q"], info["heads_kv"], float(info["scale"]), float(info["dropout"])
    dt, dev = TORCH_DTYPE[dtype], torch.device("cuda")
    q = torch.randn(B, ql, hq, hd, device=dev, dtype=dt)
    do = torch.randn(B, ql, hq, hdv, device=dev, dtype=dt)
    k = torch.randn(B, kl, hkv, hd, device=dev, dtype=dt)
    v = torch.randn(B, kl, hkv, hdv, device=dev, dtype=dt)
    npos = max(ql, kl)
    inputs = {n: gen(B, hq, npos, dev) for n, (_, _, gen) in var.inputs.items()}
    in_args = [(inputs[n], var.inputs[n][1]) for n in kern.input_names]
    seed, offset = 1234, 56
    o = torch.full((B, ql, hq, hdv), float("nan"), device=dev, dtype=dt)
    lse = torch.full((B, hq, ql), float("nan"), device=dev, dtype=torch.float32)
    kern.forward(q, k, v, o, lse, in_args, seed=seed, offset=offset)
    keep = (philox_host.keep_mask(seed, offset, p, B, hq, ql, kl, kern.info["dropout_rounds"])
            if p > 0 else None)
    refs = reference_grads(q, k, v, do, scale, var, B, hq, hkv, ql, kl, inputs, keep, p)
    sdpa = sdpa_grads(var, q, k, v, do, scale, hq, hkv, ql, kl) if p == 0 and hd == hdv else None
    sdpa_err = [gradient_error(g, r) for g, r in zip(sdpa, refs)] if sdpa else None
    problems, worst, runs = [], 0.0, []
    for deterministic in (False, True, True, True):
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        kern.backward(q, k, v, o, do, lse, *grads, inputs=in_args, seed=seed, offset=offset,
                      deterministic=deterministic)
        torch.cuda.synchronize()
        runs.append(grads)
        for name, g, r, s in zip(("dq", "dk", "dv"), grads, refs, sdpa_err or [None] * 3):
            if torch.isnan(g).any():
                problems.append(f"{name}: NaN")
                continue
            err = gradient_error(g, r)
            worst = max(worst, err)
            if err > TOL[dtype]:
                problems.append(f"{name} relerr {err:.2e} > {TOL[dtype]:g}")
            if s is not None and err > max(SDPA_FACTOR * s, SDPA_FLOOR):
                problems.append(f"{name} relerr {err:.2e} > 2 x SDPA's {s:.2e}")
    if not all(torch.equal(a, b) for run in runs[2:] for a, b in zip(runs[1], run)):
        problems.append("deterministic mode not bit-identical over 3 runs")
    # A mask that reads declared inputs, with the inputs prepared once (Kernel::prepareInputs): the
    # forward and the deterministic backward must be bit-identical to the plain calls'.
    if kern.input_names and hasattr(kern.library.lib, "attnc_kernel_prepare_inputs"):
        prepared = kern.prepare_inputs(kern.make_args(q, k, v, o, lse, in_args, seed, offset))
        o2, lse2 = torch.full_like(o, float("nan")), torch.full_like(lse, float("nan"))
        kern.launch_prepared(kern.make_args(q, k, v, o2, lse2, in_args, seed, offset), prepared)
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        kern.launch_backward_prepared(
            kern.make_backward_args(q, k, v, o, do, lse, *grads, in_args, seed, offset, "bshd", True),
            prepared)
        torch.cuda.synchronize()
        if not (torch.equal(o2, o) and torch.equal(lse2, lse)):
            problems.append("prepared inputs: forward differs from the plain one")
        if not all(torch.equal(a, b) for a, b in zip(runs[1], grads)):
            problems.append("prepared inputs: deterministic backward differs from the plain one")
    ok = not problems
    sd = "-" if not sdpa_err else f"{max(sdpa_err):.2e}"
    print(f"{'ok  ' if ok else 'FAIL'} {key:30s} B{B} Sq{ql:5d} Skv{kl:5d} worst {worst:.2e} sdpa {sd}"
          + ("" if ok else "  <- " + "; ".join(sorted(set(problems)))), flush=True)
    if not ok:
        failures.append(f"{key} B{B} Sq{ql} Skv{kl}: " + "; ".join(sorted(set(problems))))
    row = results.setdefault(key, [0, 0, 0.0, None])
    row[0] += 1
    row[1] += ok
    row[2] = max(row[2], worst)
    if sdpa_err:
        row[3] = max(row[3] or 0.0, max(sdpa_err))


def write_results(path, results, failures, commit, argv, elapsed):
    bounds = ("Bounds: relative Frobenius error of each of dQ, dK, dV against float64 autograd"
              " <= 1e-2 (bf16) / 2e-3 (fp16), and <= 2 x SDPA's own backward error where SDPA has"
              " the variant; each case runs the default (dQ summed in fp32 by atomics or bulk"
              " reductions, order not fixed) and the deterministic mode three times, which must"
              " agree bit for bit (and, for masks that read declared inputs, with the inputs"
              " prepared once: forward and deterministic backward bit-identical to the plain"
              " calls); gradients are poisoned with NaN before each run.")
    columns = ["variant", "cases", "pass", "worst rel err (dQ, dK, dV)", "SDPA's worst"]
    rows = [[key, n, ok, f"{worst:.2e}", "-" if sd is None else f"{sd:.2e}"]
            for key, (n, ok, worst, sd) in results.items()]
    results_page.write(path, "attnc GPU backward tests: results",
                       results_page.command_line(__file__, argv), device_facts(), commit, elapsed,
                       bounds, columns, rows, failures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subset", default="all", choices=["all", "small"])
    ap.add_argument("--results", "--results-md", default=None, metavar="PATH",
                    help="also write the summary page there (results/gpu/backward-sm90.md)")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--only", action="append", default=None,
                    help="run only these variants (repeatable), e.g. --only softcap")
    ap.add_argument("--head-dim", action="append", type=int, default=None,
                    help="run only the groups of these head dims (repeatable), e.g. --head-dim 200")
    ap.add_argument("--target", default=None, help="attnc target (default: the device's)")
    args = ap.parse_args()
    torch.manual_seed(0)
    start = time.time()
    lib = attnc_ctypes.Library(args.lib)
    results, failures = {}, []
    def dims_of(group):
        return group[1] if isinstance(group[1], tuple) else (group[1],)
    groups = [g for g in plan(args.subset)
              if (not args.only or g[0] in args.only)
              and (not args.head_dim or any(d in args.head_dim for d in dims_of(g)))]
    if not groups:
        sys.exit(f"no group matches --only {args.only} --head-dim {args.head_dim}")
    for name, dims, dtype, lens, B in groups:
        var = V[name]
        hd, hdv = dims if isinstance(dims, tuple) else (dims, dims)
        spec = var.spec(hd, dtype)
        if hdv != hd:
            spec = spec.replace(f"_hd{hd}_", f"_hd{hd}v{hdv}_") + f"head_dim_v: {hdv}\n"
        kern = lib.compile_text(spec, args.target, backward=True)
        key = (f"{name} hd{hd}" + (f" dv{hdv}" if hdv != hd else "") + f" {dtype}"
               + (f" {var.hq}:{var.hkv}" if var.hq != var.hkv else ""))
        for ql, kl in lens:
            run_case(kern, var, hd, hdv, dtype, B, ql, kl, results, failures, key)
    cases = sum(r[0] for r in results.values())
    passed = sum(r[1] for r in results.values())
    elapsed = time.time() - start
    print(f"\n{'variant':34s} {'cases':>5s} {'pass':>5s} {'worst rel err':>13s} {'SDPA worst':>11s}")
    for key, (n, ok, worst, sd) in results.items():
        print(f"{key:34s} {n:5d} {ok:5d} {worst:13.2e} {'-' if sd is None else f'{sd:.2e}':>11s}")
    print(f"\n{passed}/{cases} passed, {cases - passed} failed, {elapsed:.0f} s")
    if args.results:
        write_results(args.results, results, failures, results_page.commit_of(lib.path),
                      sys.argv[1:], elapsed)
    sys.exit(0 if passed == cases else 1)


if __name__ == "__main__":
    main()
