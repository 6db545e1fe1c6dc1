"""Forward attention benchmark on one GPU: attnc (through the C API, ctypes on torch tensors) against
torch SDPA (cuDNN and FlashAttention-2 backends) and FlexAttention (torch.compile), in one process,
bf16, BHSD. Each attnc row is checked against a peer's output (relerr < 1e-2) before it is timed.
Times are CUDA-event medians of >= 20 timed batches after warm-up; FLOPs = 4*B*Hq*Sq*Skv*D times
the exact unmasked fraction.

  python3 bench/bench_forward.py [--quick] [--json forward.json] [--png forward.png] [--md FILE]
  (docs/perf/forward.md is rendered from the JSON by bench/perf_page.py)
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
import attnc_ctypes  # noqa: E402
import targets  # noqa: E402

DT = torch.bfloat16
IMPLS = ["attnc", "cudnn", "fa2", "flex"]
HEADS_FOR_HD = {64: 32, 128: 16, 256: 8}  # heads x head_dim = 2048 in every row of the grid
TOKENS = 16384  # B = TOKENS / N
NO_FLEX = False
POWER = False  # --power: nvidia-smi's SM clock and power while each implementation is timed


class Row:
    def __init__(self, name, hd, hq, hkv, n, mask="none", score="none", window=None, prefix=None,
                 docs=None, alibi=False, softcap=None, dropout=0.0, dropout_rounds=None):
        self.name, self.hd, self.hq, self.hkv, self.n = name, hd, hq, hkv, n
        self.b = max(1, TOKENS // n)
        self.mask, self.score = mask, score
        self.window, self.prefix, self.docs = window, prefix, docs
        self.alibi, self.softcap, self.dropout = alibi, softcap, dropout
        self.dropout_rounds = dropout_rounds  # None: the spec's default (philox.h)

    @property
    def causal(self):
        return self.mask in ("causal", "window", "prefix", "document")

    @property
    def plain(self):
        """Whether torch SDPA (cuDNN, FA2) expresses the row: no mask or causal, no score hook."""
        return self.mask in ("none", "causal") and not self.alibi and not self.softcap


def rows(quick):
    out = []
    ns = [1024, 4096] if quick else [1024, 4096, 16384]
    for hd in (64, 128, 256):
        for kind in ("full", "causal"):
            for n in ns:
                out.append(Row(f"hd{hd} {kind} N={n // 1024}K", hd, HEADS_FOR_HD[hd], HEADS_FOR_HD[hd], n,
                               mask="causal" if kind == "causal" else "none"))
    # Three 64-column chunks (the sm_90a backward's padded head-dim split); no target.
    out.append(Row("hd192 causal N=4K", 192, 12, 12, 4096, mask="causal"))
    # Head dims between the common ones (about 2048 / d heads); no target.
    out.append(Row("hd160 causal N=4K", 160, 12, 12, 4096, mask="causal"))
    out.append(Row("hd224 causal N=4K", 224, 9, 9, 4096, mask="causal"))
    out.append(Row("GQA 32/8 causal hd128 N=4K", 128, 32, 8, 4096, mask="causal"))
    out.append(Row("window 1K hd128 N=8K", 128, 16, 16, 8192, mask="window", window=1024))
    out.append(Row("prefix-LM 1K hd128 N=8K", 128, 16, 16, 8192, mask="prefix", prefix=1024))
    out.append(Row("document x8 causal hd128 N=8K", 128, 16, 16, 8192, mask="document", docs=8))
    out.append(Row("ALiBi causal hd128 N=4K", 128, 16, 16, 4096, mask="causal", alibi=True))
    out.append(Row("softcap 30 causal hd128 N=4K", 128, 16, 16, 4096, mask="causal", softcap=30.0))
    out.append(Row("dropout 0.1 causal hd128 N=4K", 128, 16, 16, 4096, mask="causal", dropout=0.1))
    # The same with Random123's default of 10 Philox rounds instead of attnc's 7 (docs/spec.md).
    out.append(Row("dropout 0.1 (10 Philox rounds) causal hd128 N=4K", 128, 16, 16, 4096,
                   mask="causal", dropout=0.1, dropout_rounds=10))
    # The sm_90a backward's head-dim split with an epilogue (since 2026-12-03); no target.
    out.append(Row("softcap 30 causal hd256 N=4K", 256, 8, 8, 4096, mask="causal", softcap=30.0))
    out.append(Row("dropout 0.1 causal hd256 N=4K", 256, 8, 8, 4096, mask="causal", dropout=0.1))
    return out


def selected(row, only):
    """Whether --only (a list of texts, or None for every row) keeps the row."""
    return not only or any(text in row.name for text in only)


def shown_command(argv):
    """The command line as the reports print it: the device's output folder as $OUT."""
    return " ".join(a.replace(os.environ.get("OUT", "//"), "$OUT") for a in argv)


def run_facts(script, argv, lib_path):
    """What a --json page says of how its run was made (bench/perf_page.py): the command, the
    warm-up and the commit the library was built from (results_page.commit_of: the COMMIT file
    its bundle wrote beside it, else the checkout's HEAD)."""
    from results_page import commit_of
    commit = commit_of(lib_path)[0]
    if commit != "unknown":
        commit = commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
    else:
        commit = None
    shown = (a.replace(os.environ.get("OUT", "//"), "$OUT") for a in argv)
    command = " ".join(f'"{a}"' if " " in a else a for a in shown)
    return {"command": f"bash bench/{script} {command}", "warm_ms": WARM_MS, "commit": commit}


def spec_of(row):
    mask = {"none": "none", "causal": "causal", "window": f"{{window: {row.window}}}",
            "prefix": f"{{prefix: {row.prefix}}}", "document": "{document: doc, causal: true}"}[row.mask]
    score = "alibi" if row.alibi else (f"{{softcap: {row.softcap}}}" if row.softcap else "none")
    lines = [f"name: bench_{''.join(c if c.isalnum() else '_' for c in row.name)}", f"head_dim: {row.hd}", "dtype: bf16",
             f"heads: {{q: {row.hq}, kv: {row.hkv}}}", f"mask: {mask}", f"score: {score}"]
    if row.dropout and row.dropout_rounds:
        lines.append(f"dropout: {{p: {row.dropout}, rounds: {row.dropout_rounds}}}")
    elif row.dropout:
        lines.append(f"dropout: {row.dropout}")
    if row.mask == "document":
        lines += ["inputs:", "  doc: {dtype: i32, dims: [pos]}"]
    return "\n".join(lines) + "\n"


def mask_fn(row, doc):
    """keep(q, k) on index tensors (Sq == Skv, so bottom-right == top-left)."""
    if row.mask == "none":
        return None
    if row.mask == "causal":
        return lambda q, k: k <= q
    if row.mask == "window":
        return lambda q, k: (k <= q) & (k > q - row.window)
    if row.mask == "prefix":
        return lambda q, k: (k < row.prefix) | (k <= q)
    return lambda q, k: (doc[q] == doc[k]) & (k <= q)


def unmasked_fraction(row, doc, dev):
    keep = mask_fn(row, doc)
    if keep is None:
        return 1.0
    n, total = row.n, 0
    k = torch.arange(n, device=dev).view(1, n)
    for q0 in range(0, n, 1024):
        q = torch.arange(q0, min(n, q0 + 1024), device=dev).view(-1, 1)
        total += int(keep(q, k).sum().item())
    return total / (n * n)


def alibi_slopes(n):
    start = 2 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]  # n is a power of two here


# Milliseconds of back-to-back calls before an implementation's timed batches (--warm-ms). Under
# sustained load the H200 sits at its power limit with lower clocks than after an idle moment (a
# compile, a correctness check): measured without this, the implementation timed first in a row (attnc)
# ran 4-10% faster than it does at steady state (dev/bench/interleave.py).
WARM_MS = 500.0


class Sampler:
    """nvidia-smi sampling SM clock and power every 20 ms while a block of work runs. The power is
    power.draw.instant: power.draw is an average over the last second, which after an idle moment
    (a compile) read half of the instant draw through the first implementation's whole timing."""
    def __enter__(self):
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw.instant",
                                      "--format=csv,noheader,nounits", "-lms", "20"],
                                     stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        out, _ = self.proc.communicate()
        vals = [tuple(float(x) for x in line.split(","))
                for line in out.splitlines() if line.count(",") == 1]
        vals = vals[len(vals) // 4:] or vals  # the last three quarters
        self.mhz = statistics.mean(v[0] for v in vals) if vals else float("nan")
        self.watts = statistics.mean(v[1] for v in vals) if vals else float("nan")


def power_text(power, tflops):
    """A row's log text for one implementation's Sampler readings (--power): clock, power and
    TFLOP/s per watt; empty without readings."""
    if not power:
        return ""
    return f" ({power['mhz']:.0f} MHz {power['watts']:.0f} W {tflops / power['watts']:.3f}/W)"


def batch_size(fn, min_batch_ms=3.0):
    """How many back-to-back calls of fn make a batch of at least min_batch_ms (after one warm call)."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return max(1, math.ceil(min_batch_ms / max(s.elapsed_time(e), 1e-3)))


def one_batch(fn, inner):
    """Milliseconds per call of one batch of `inner` back-to-back calls (CUDA events)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(inner):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / inner


def warm_up(fn, inner, warm_ms):
    """Untimed batches until warm_ms of GPU time have passed."""
    spent = 0.0
    while True:
        spent += one_batch(fn, inner) * inner
        if spent >= warm_ms:
            return


def prepared_impl(res, plain, prepared, out, agrees):
    """The ("attnc-prepared", fn) entry to time for a mask whose inputs were prepared once
    (Kernel::prepareInputs), when `prepared` writes what `plain` does into `out` (poisoned in
    between; `agrees(new, plain_out)`); else None, with the row's note saying why."""
    plain()
    torch.cuda.synchronize()
    plain_out = out.clone()
    out.fill_(float("nan"))
    prepared()
    torch.cuda.synchronize()
    if agrees(out, plain_out):
        return ("attnc-prepared", prepared)
    res["note"]["attnc-prepared"] = "WRONG RESULT (differs from the plain call), not timed"
    return None


def note_prepared(res):
    """The row's note on its prepared timing, beside flex's where flex ran."""
    t = res["tflops"]
    if "attnc-prepared" in t:
        flex_ratio = f", {t['attnc-prepared'] / t['flex']:.2f}x flex" if "flex" in t else ""
        res["note"]["attnc-prepared"] = (f"with its inputs prepared once (Kernel::prepareInputs, as flex's"
                                         f" block mask): {t['attnc-prepared']:.0f} TFLOP/s{flex_ratio}")


def time_ms(fn, min_batch_ms=3.0, reps=25, warm_ms=None):
    """Median, min and max ms per call: batches of back-to-back calls (>= min_batch_ms each), timed
    after warm_ms (default WARM_MS) of untimed batches, so that every implementation is measured at
    the clocks it sustains."""
    inner = batch_size(fn, min_batch_ms)
    warm_up(fn, inner, WARM_MS if warm_ms is None else warm_ms)
    times = [one_batch(fn, inner) for _ in range(reps)]
    return statistics.median(times), min(times), max(times)


def relerr(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def check_dropout_small(lib, row, log):
    """The dropout kernel at a small size against the float64 reference with the host's Philox mask."""
    import philox_host  # (numpy) only here: the module's other users, the ctests among them, need none
    dev = torch.device("cuda")
    kern = lib.compile_text(spec_of(row))
    B, N = 1, 256
    q, k, v = (torch.randn(B, row.hq, N, row.hd, device=dev, dtype=DT) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    seed, offset = 1234, 5678
    kern.forward(q, k, v, o, seed=seed, offset=offset, layout="bhsd")
    torch.cuda.synchronize()
    keep = torch.from_numpy(philox_host.keep_mask(seed, offset, row.dropout, B, row.hq, N, N,
                                                  kern.info["dropout_rounds"])).to(dev)
    s = (q.double() @ k.double().transpose(-1, -2)) * kern.info["scale"]
    causal = torch.ones(N, N, dtype=torch.bool, device=dev).tril()
    p = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) * keep * philox_host.scale(row.dropout)
    err = relerr(o, p @ v.double())
    log(f"  dropout kernel at B=1 N=256 vs float64 + host Philox mask: relerr {err:.2e}")
    return err


def row_inputs(row, dev):
    """The row's Q, K, V (seed 0) and, for a document row, its document ids (row.docs documents cut
    at seeded random positions), else None: every bench tool times the same tensors."""
    torch.manual_seed(0)
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q = torch.randn(B, H, N, D, device=dev, dtype=DT)
    k = torch.randn(B, HK, N, D, device=dev, dtype=DT)
    v = torch.randn(B, HK, N, D, device=dev, dtype=DT)
    doc = None
    if row.docs:
        cuts = torch.sort(torch.randperm(N - 1, generator=torch.Generator().manual_seed(1))[:row.docs - 1] + 1).values
        doc = torch.zeros(N, dtype=torch.int32)
        for c in cuts:
            doc[c:] += 1
        doc = doc.to(dev)
    return q, k, v, doc


def run_row(lib, row, flex, create_block_mask, log):
    dev = torch.device("cuda")
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q, k, v, doc = row_inputs(row, dev)
    frac = unmasked_fraction(row, doc, dev)
    flops = 4.0 * B * H * N * N * D * frac
    res = {"row": row.name, "B": B, "Hq": H, "Hkv": HK, "N": N, "D": D, "unmasked": frac,
           "ms": {}, "tflops": {}, "note": {}}
    scale = 1.0 / math.sqrt(D)
    causal = row.mask == "causal"
    plain = row.plain

    # attnc
    kern = lib.compile_text(spec_of(row))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=dev, dtype=torch.float32)
    inputs = [(doc, "pos")] if doc is not None else []
    args = kern.make_args(q, k, v, o, lse, inputs, seed=42, offset=0, layout="bhsd")
    stream = torch.cuda.current_stream().cuda_stream

    def attnc_fn():
        kern.launch(args, stream)

    # peers
    peers = {}
    if plain:
        for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            def fn(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                          dropout_p=row.dropout, enable_gqa=H != HK)
            peers[impl] = fn
        if row.dropout:
            def eff():
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                          dropout_p=row.dropout, enable_gqa=H != HK)
            peers["sdpa-efficient"] = eff
    if not row.dropout and not NO_FLEX:
        keep = mask_fn(row, doc)
        block_mask = None
        if keep is not None:
            def mask_mod(b, h, q_idx, kv_idx):
                return keep(q_idx, kv_idx)
            block_mask = create_block_mask(mask_mod, None, None, N, N, device=dev)
        score_mod = None
        if row.alibi:
            slopes = torch.tensor(alibi_slopes(H), device=dev, dtype=torch.float32)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx).abs()
        elif row.softcap:
            cap = row.softcap

            def score_mod(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score / cap)

        def flex_fn():
            return flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=H != HK)
        peers["flex"] = flex_fn

    # correctness first: a fast wrong kernel gets no number
    ref_name, ref = None, None
    if not row.dropout:
        for name in ("cudnn", "fa2", "flex"):
            if name in peers:
                try:
                    ref = peers[name]()
                    ref_name = name
                    break
                except Exception as e:  # noqa: BLE001
                    res["note"][name] = f"failed: {str(e).splitlines()[0][:120]}"
                    peers.pop(name)
        o.fill_(float("nan"))
        attnc_fn()
        torch.cuda.synchronize()
        if ref is None:  # a variant row under --no-flex: no peer to compare with
            res["check"] = "unchecked (no peer ran; test/gpu/run.sh checks the kernel)"
            ok = not bool(torch.isnan(o).any())
        else:
            err = relerr(o, ref)
            res["check"] = f"relerr {err:.1e} vs {ref_name}"
            ok = err < 1e-2
    else:
        err = check_dropout_small(lib, row, log)
        res["check"] = f"relerr {err:.1e} vs float64 + host Philox mask (B=1, N=256)"
        ok = err < 1e-2
    res["attnc_ok"] = ok
    impls = ([("attnc", attnc_fn)] if ok else []) + list(peers.items())
    # A mask that reads declared inputs: also attnc with its inputs prepared once
    # (Kernel::prepareInputs: summaries, tile classes, order), as flex's block mask is made once
    # above and not timed. Its output must be the plain call's, bit for bit.
    if ok and inputs and hasattr(lib.lib, "attnc_kernel_prepare_inputs"):
        prepared = kern.prepare_inputs(args, stream)
        entry = prepared_impl(res, attnc_fn, lambda: kern.launch_prepared(args, prepared, stream), o,
                              torch.equal)
        if entry:
            impls.insert(1, entry)
    if not ok:
        res["note"]["attnc"] = "WRONG RESULT, not timed: " + res["check"]
    for name, fn in impls:
        try:
            with Sampler() if POWER else contextlib.nullcontext() as sampler:
                med, lo, hi = time_ms(fn)
            if POWER:
                res.setdefault("power", {})[name] = {"mhz": sampler.mhz, "watts": sampler.watts}
            res["ms"][name] = med
            res["tflops"][name] = flops / (med * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            res["note"][name] = f"failed: {str(e).splitlines()[0][:120]}"
    note_prepared(res)
    del q, k, v, o, lse
    torch.cuda.empty_cache()
    return res


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}"


def write_outputs(results, facts, argv, md_path, png_path, json_path):
    peers = ["cudnn", "fa2", "flex", "sdpa-efficient"]
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"facts": facts, "results": results}, f, indent=1)
    lines = ["# attnc forward performance on the H200", "",
             f"- date: {facts['date']}",
             f"- GPU: {facts['gpu']}, driver {facts['driver']}; torch {facts['torch']} (CUDA {facts['cuda']},"
             f" cuDNN {facts['cudnn']}); attnc {facts['attnc']} (target {facts['target']}: "
             + ("the sm90 template: wgmma, TMA, warp specialization)" if facts['target'] == "sm_90a"
                else "the sm_80-family template: mma.sync, ldmatrix, cp.async)"),
             f"- command: `bash bench/run.sh {shown_command(argv)}`",
             "- bf16, BHSD, forward only (attnc also writes the LSE). Grid rows: B = 16K / N; 32 heads at hd64,"
             " 16 at hd128, 8 at hd256 (heads x hd = 2048, the same work per token). Sq == Skv, so torch's"
             " top-left `is_causal` equals attnc's bottom-right causal.",
             "- TFLOP/s = 4·B·Hq·N²·D × the exact unmasked fraction / median time. Time: CUDA events around"
             " batches of back-to-back calls (>= 3 ms each), median of 25 batches after"
             f" {WARM_MS:.0f} ms of untimed ones (each implementation at the clocks it sustains); Q+K+V are"
             " >= 96 MiB per row, above the 60 MB L2, so inputs are not rotated.",
             "- Each attnc row is checked against a peer's output (relerr < 1e-2) before it is timed.",
             "- Peers: cuDNN = SDPA with SDPBackend.CUDNN_ATTENTION; FA2 = SDPBackend.FLASH_ATTENTION;"
             " flex = torch.compile(flex_attention) with a block mask / score_mod. '-' = the peer has no such"
             " variant (or failed: see notes).", "",
             "| row | B×Hq(/Hkv) | unmasked | attnc | cuDNN | FA2 | flex | attnc/cuDNN | attnc/FA2 | attnc/flex | check |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    slower = []
    for r in results:
        t = r["tflops"]
        a = t.get("attnc")
        heads = f"{r['B']}×{r['Hq']}" + (f"/{r['Hkv']}" if r["Hkv"] != r["Hq"] else "")
        extra = ""
        if "sdpa-efficient" in t:
            extra = f" (SDPA efficient: {t['sdpa-efficient']:.0f}, attnc/eff {ratio(a, t['sdpa-efficient'])})"
        lines.append(f"| {r['row']}{extra} | {heads} | {r['unmasked']:.3f} | {fmt(a)} | {fmt(t.get('cudnn'))} |"
                     f" {fmt(t.get('fa2'))} | {fmt(t.get('flex'))} | {ratio(a, t.get('cudnn'))} |"
                     f" {ratio(a, t.get('fa2'))} | {ratio(a, t.get('flex'))} | {r.get('check', '')} |")
        for p in peers:
            if a is not None and t.get(p) is not None and a < t[p]:
                slower.append(f"{r['row']}: {a / t[p]:.2f}x of {p}")
    lines += ["", "TFLOP/s; ratios > 1 mean attnc is faster.", ""]
    lines += targets.target_lines(results)
    lines += ["", "## Where attnc is slower", ""]
    lines += [f"- {s}" for s in slower] or ["- nowhere in this table"]
    notes = [f"- {r['row']}: {k}: {v}" for r in results for k, v in r["note"].items()]
    if notes:
        lines += ["", "## Notes", ""] + notes
    lines += ["", f"Plot: [{os.path.basename(png_path)}]({os.path.basename(png_path)})" if png_path else "", ""]
    if md_path:
        with open(md_path, "w") as f:
            f.write("\n".join(lines) + "\n")
    if png_path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = ["attnc", "cudnn", "fa2", "flex"]
        fig, ax = plt.subplots(figsize=(max(12, len(results) * 0.75), 5.5))
        w = 0.2
        for i, nm in enumerate(names):
            ys = [r["tflops"].get(nm, 0.0) for r in results]
            ax.bar([x + (i - 1.5) * w for x in range(len(results))], ys, w, label=nm)
        ax.set_xticks(range(len(results)))
        ax.set_xticklabels([r["row"] for r in results], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("TFLOP/s (bf16, forward)")
        ax.set_title(f"attnc vs torch SDPA (cuDNN, FA2) and FlexAttention, {facts['gpu']}, {facts['date']}")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(png_path, dpi=110)
        plt.close(fig)
    return lines


def main():
    global NO_FLEX, POWER, WARM_MS
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="N in {1K, 4K} only")
    ap.add_argument("--md", default=None)
    ap.add_argument("--png", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compiles take minutes)")
    ap.add_argument("--warm-ms", type=float, default=WARM_MS,
                    help="ms of untimed back-to-back calls before each implementation's timed batches")
    ap.add_argument("--only", action="append", default=None,
                    help="rows whose name contains this text (repeatable), e.g. --only hd64")
    ap.add_argument("--power", action="store_true",
                    help="sample nvidia-smi's SM clock and power while each implementation is timed "
                         "(the log's lines and the JSON; TFLOP/s per watt compares work per energy)")
    args = ap.parse_args()
    NO_FLEX = args.no_flex
    POWER = args.power
    WARM_MS = args.warm_ms
    torch.zeros(1, device="cuda")
    import torch._dynamo as dynamo  # each row's shapes recompile flex: lift the recompile limits
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 256)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 4096)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    lib = attnc_ctypes.Library(args.lib)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        driver = "?"
    target = lib.compile_text("name: probe\nhead_dim: 64\nheads: 1\n").info["target"]
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
             "gpu": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
             "attnc": lib.version(), "target": target, **run_facts("run.sh", sys.argv[1:], lib.path)}
    print(facts, flush=True)
    results = []
    t0 = time.time()
    for row in rows(args.quick):
        if not selected(row, args.only):
            continue
        t1 = time.time()
        try:
            r = run_row(lib, row, flex, create_block_mask, print)
        except Exception as e:  # noqa: BLE001
            print(f"{row.name}: FAILED {e}", flush=True)
            continue
        results.append(r)
        write_outputs(results, facts, sys.argv[1:], args.md, args.png, args.json)  # partial results survive a timeout
        t = r["tflops"]
        power = r.get("power", {})
        print(f"{row.name:34s} " + " ".join(f"{k} {v:6.1f}{power_text(power.get(k), v)}" for k, v in t.items())
              + f"  [{r['check']}] {time.time() - t1:.1f}s" + (f" notes {r['note']}" if r["note"] else ""),
              flush=True)
    lines = write_outputs(results, facts, sys.argv[1:], args.md, args.png, args.json)
    print(f"\nbench: {len(results)} rows in {time.time() - t0:.0f} s\n")
    print("\n".join(line for line in lines if line.startswith("|")))
    return 0 if all(r.get("attnc_ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
