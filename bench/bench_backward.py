"""Backward attention benchmark on one GPU, the rows of bench_forward.py: attnc's backward (through
the C API, default dQ mode) against torch SDPA's cuDNN and FlashAttention-2 backward and
FlexAttention's (torch.compile), in one process, bf16, BHSD. Each attnc row's dQ is checked against
a peer's (relerr < 2e-2) before it is timed. TFLOP/s = 2.5 x the forward's FLOPs / time.

  python3 bench/bench_backward.py [--quick] [--json backward.json] [--md FILE] [--no-flex]
  (docs/perf/backward.md is rendered from the JSON by bench/perf_page.py --backward)
"""
import argparse
import contextlib
import datetime
import json
import math
import subprocess
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_forward as fwd  # noqa: E402
import targets  # noqa: E402

PEERS = ["cudnn", "fa2", "flex"]


def row_tensors(row, dev):
    """A row's Q, K, V and dO (BHSD, fresh random, seeded) and its document ids (row.docs documents
    of equal length; None without)."""
    torch.manual_seed(0)
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q = torch.randn(B, H, N, D, device=dev, dtype=fwd.DT)
    k = torch.randn(B, HK, N, D, device=dev, dtype=fwd.DT)
    v = torch.randn(B, HK, N, D, device=dev, dtype=fwd.DT)
    do = torch.randn(B, H, N, D, device=dev, dtype=fwd.DT)
    doc = None
    if row.docs:
        doc = (torch.arange(N, device=dev, dtype=torch.int32) * row.docs // N).contiguous()
    return q, k, v, do, doc


def backward_args(kern, q, k, v, do, inputs, forward_kernel=None):
    """The backward's arguments of a kernel compiled with its backward, on a row's BHSD tensors:
    O and the LSE from a forward (forward_kernel's, else kern's own), dQ, dK and dV, and a workspace
    of the caller's. Returns (args, o, lse, dq, dk, dv, workspace)."""
    B, H, N = q.shape[0], q.shape[1], q.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    (forward_kernel or kern).forward(q, k, v, o, lse, inputs, seed=42, offset=0, layout="bhsd")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    workspace = torch.empty(kern.backward_workspace_bytes(B, N), device=q.device, dtype=torch.uint8)
    args = kern.make_backward_args(q, k, v, o, do, lse, dq, dk, dv, inputs, 42, 0, "bhsd", False,
                                   workspace)
    return args, o, lse, dq, dk, dv, workspace


def run_row(lib, row, flex, create_block_mask, use_flex):
    dev = torch.device("cuda")
    B, H, HK, N, D = row.b, row.hq, row.hkv, row.n, row.hd
    q, k, v, do, doc = row_tensors(row, dev)
    frac = fwd.unmasked_fraction(row, doc, dev)
    flops = 2.5 * 4.0 * B * H * N * N * D * frac
    res = {"row": row.name, "N": N, "tflops": {}, "note": {}}
    scale = 1.0 / math.sqrt(D)
    causal = row.mask == "causal"
    plain = row.plain

    kern = lib.compile_text(fwd.spec_of(row), backward=True)
    inputs = [(doc, "pos")] if doc is not None else []
    args, o, lse, dq, dk, dv, workspace = backward_args(kern, q, k, v, do, inputs)
    stream = torch.cuda.current_stream().cuda_stream

    def attnc_fn():
        kern.launch_backward(args, stream)

    peers = {}

    def autograd_peer(forward):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = forward(*leaves)
        return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)

    if plain:
        for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    peers[impl] = autograd_peer(lambda a, b, c: F.scaled_dot_product_attention(
                        a, b, c, is_causal=causal, scale=scale, dropout_p=row.dropout, enable_gqa=H != HK))
            except Exception as e:  # noqa: BLE001
                res["note"][impl] = f"failed: {str(e).splitlines()[0][:100]}"
    if not row.dropout and use_flex:
        keep = fwd.mask_fn(row, doc)
        block_mask = None
        if keep is not None:
            block_mask = create_block_mask(lambda b, h, qi, ki: keep(qi, ki), None, None, N, N, device=dev)
        score_mod = None
        if row.alibi:
            slopes = torch.tensor(fwd.alibi_slopes(H), device=dev, dtype=torch.float32)
            score_mod = lambda s, b, h, qi, ki: s - slopes[h] * (qi - ki).abs()  # noqa: E731
        elif row.softcap:
            cap = row.softcap
            score_mod = lambda s, b, h, qi, ki: cap * torch.tanh(s / cap)  # noqa: E731
        try:
            peers["flex"] = autograd_peer(lambda a, b, c: flex(a, b, c, score_mod=score_mod, block_mask=block_mask,
                                                               scale=scale, enable_gqa=H != HK))
        except Exception as e:  # noqa: BLE001
            res["note"]["flex"] = f"failed: {str(e).splitlines()[0][:100]}"

    ok = True
    if not row.dropout and peers:
        name, fn = next(iter(peers.items()))
        ref_dq = fn()[0]
        dq.fill_(float("nan"))
        attnc_fn()
        torch.cuda.synchronize()
        err = fwd.relerr(dq, ref_dq)
        res["check"] = f"dQ relerr {err:.1e} vs {name}"
        ok = err < 2e-2
    elif row.dropout:
        res["check"] = "dropout: gradients checked by test/gpu/run-backward.sh"
    else:
        res["check"] = "no peer ran: gradients checked by test/gpu/run-backward.sh"
    timed = ([("attnc", attnc_fn)] if ok else []) + list(peers.items())
    if not ok:
        res["note"]["attnc"] = "WRONG RESULT, not timed"
    # A mask that reads declared inputs: also with them prepared once (Kernel::prepareInputs), as
    # flex's block mask is made once above; its dQ must match the plain call's up to the order of
    # the default mode's fp32 sums.
    if ok and inputs and hasattr(lib.lib, "attnc_kernel_prepare_inputs"):
        prepared = kern.prepare_inputs(kern.make_args(q, k, v, o, lse, inputs, seed=42, offset=0,
                                                      layout="bhsd"), stream)
        entry = fwd.prepared_impl(res, attnc_fn,
                                  lambda: kern.launch_backward_prepared(args, prepared, stream), dq,
                                  lambda new, plain: fwd.relerr(new, plain) < 2e-3)  # (fp32 sums in no fixed order)
        if entry:
            timed.insert(1, entry)
    for name, fn in timed:
        try:
            backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}.get(name)
            with sdpa_kernel(backend) if backend else contextlib.nullcontext():
                with fwd.Sampler() if fwd.POWER else contextlib.nullcontext() as sampler:
                    med = fwd.time_ms(fn)[0]
            if fwd.POWER:
                res.setdefault("power", {})[name] = {"mhz": sampler.mhz, "watts": sampler.watts}
            res["tflops"][name] = flops / (med * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            res["note"][name] = f"failed: {str(e).splitlines()[0][:100]}"
    power = res.get("power", {})
    print(f"{row.name:34s} " + " ".join(f"{n} {res['tflops'].get(n, float('nan')):6.1f}"
                                        f"{fwd.power_text(power.get(n), res['tflops'].get(n, float('nan')))}"
                                        for n in ["attnc"] + PEERS)
          + f"  [{res['check']}]", flush=True)
    fwd.note_prepared(res)
    del q, k, v, o, do, dq, dk, dv, workspace
    torch.cuda.empty_cache()
    return res


def write_md(path, results, argv):
    lines = ["| row | attnc | cuDNN | FA2 | flex | attnc/cuDNN | attnc/FA2 | attnc/flex | check |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        t = r["tflops"]
        cell = lambda n: f"{t[n]:.0f}" if n in t else "-"  # noqa: E731
        ratio = lambda n: f"{t['attnc'] / t[n]:.2f}" if "attnc" in t and n in t else "-"  # noqa: E731
        lines.append(f"| {r['row']} | {cell('attnc')} | {cell('cudnn')} | {cell('fa2')} | {cell('flex')} | "
                     f"{ratio('cudnn')} | {ratio('fa2')} | {ratio('flex')} | {r['check']} |")
    if path:
        facts = f"{torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
        command = fwd.shown_command(argv)
        with open(path, "w") as f:
            f.write("# attnc backward performance on the H200\n\n")
            f.write(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}\n- GPU: {facts}\n")
            f.write(f"- command: `bash bench/run-backward.sh {command}`\n")
            f.write("- bf16, BHSD; the rows of docs/perf/forward.md; TFLOP/s = 2.5 x 4 B Hq N^2 D x unmasked "
                    f"fraction / median time (CUDA events, after {fwd.WARM_MS:.0f} ms of untimed calls); "
                    "attnc in its default dQ mode (fp32 sums: TMA "
                    "bulk reductions in the sm_90a dK/dV kernel, atomics in the sm80 one; at hd136-256 "
                    "on sm_90a the dQ kernel of bwd_q.h instead, without sums), peers through "
                    "torch.autograd.grad on SDPA (cuDNN, FA2) and torch.compile(flex_attention).\n\n")
            f.write("\n".join(lines) + "\n")
            notes = [f"- {r['row']}: {n}: {msg}" for r in results for n, msg in r["note"].items()]
            if notes:
                f.write("\nNotes:\n" + "\n".join(notes) + "\n")
            f.write("\n" + "\n".join(targets.target_lines(results, backward=True)) + "\n")
    return lines


def write_json(path, results, lib):
    """The run as bench_forward.py's --json writes it: {"facts": ..., "results": [...]}."""
    if not path:
        return
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        driver = "?"
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
             "gpu": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
             "attnc": lib.version(), **fwd.run_facts("run-backward.sh", sys.argv[1:], lib.path)}
    with open(path, "w") as f:
        json.dump({"facts": facts, "results": results}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None, help="the run's facts and rows (bench/perf_page.py)")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--warm-ms", type=float, default=fwd.WARM_MS,
                    help="ms of untimed back-to-back calls before each implementation's timed batches")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--only", action="append", default=None,
                    help="rows whose name contains this text (repeatable), e.g. --only 'N=16K'")
    ap.add_argument("--power", action="store_true",
                    help="sample nvidia-smi's SM clock and power while each implementation is timed (the log)")
    args = ap.parse_args()
    fwd.WARM_MS = args.warm_ms
    fwd.POWER = args.power
    lib = fwd.attnc_ctypes.Library(args.lib)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    # The timed backward runs many times on one graph (retain_graph=True); compiled graphs donate
    # their saved buffers to the backward by default, which forbids that.
    import torch._functorch.config as functorch_config
    functorch_config.donated_buffer = False
    flex = torch.compile(flex_attention)
    results = []
    for row in fwd.rows(args.quick):
        if not fwd.selected(row, args.only):
            continue
        # A fresh compile per row: otherwise dynamo's recompile limit (8) is hit across the grid's
        # shapes and FlexAttention silently runs unfused for the remaining rows.
        torch._dynamo.reset()
        results.append(run_row(lib, row, flex, create_block_mask, not args.no_flex))
        write_md(args.md, results, sys.argv[1:])  # partial results survive a timeout
        write_json(args.json, results, lib)
    print("\n".join(write_md(args.md, results, sys.argv[1:])))


if __name__ == "__main__":
    main()
