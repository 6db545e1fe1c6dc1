"""A quick GPU check of the decode path (maintainers; the suite is test/gpu/test_decode.py):
contiguous, split, paged and varlen launches of a few specs against a float64 reference, then one
bandwidth row. Prints one line per case and a summary table last.
  ATTNC_LIB=... PYTHONPATH=test/gpu python3 dev/decode_smoke.py
"""
import math
import sys
import time

import torch

import attnc_ctypes as ac

SPECS = {
    "gqa_causal": "name: smoke_gqa\nhead_dim: 128\ndtype: bf16\nheads: {q: 32, kv: 8}\nmask: causal\n",
    "mha_softcap": "name: smoke_softcap\nhead_dim: 64\ndtype: fp16\nheads: 8\nmask: causal\n"
                   "score: {softcap: 30}\n",
    "g16_window": "name: smoke_window\nhead_dim: 128\ndtype: bf16\nheads: {q: 16, kv: 1}\n"
                  "mask: {window: 100}\n",
    "g8_none_hd256": "name: smoke_hd256\nhead_dim: 256\ndtype: bf16\nheads: {q: 64, kv: 8}\n",
}


def reference(q, k, v, scale, causal=False, window=None, softcap=None):
    """q [Sq, Hq, D], k/v [Skv, Hkv, D] float64 -> o [Sq, Hq, Dv], lse [Hq, Sq] (bottom-right)."""
    sq, hq, _ = q.shape
    skv, hkv, _ = k.shape
    g = hq // hkv
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(sq, dtype=torch.int64).view(-1, 1) + (skv - sq)
    ki = torch.arange(skv, dtype=torch.int64).view(1, -1)
    keep = torch.ones(sq, skv, dtype=torch.bool)
    if causal:
        keep &= ki <= qi
    if window is not None:
        keep &= (ki <= qi) & (ki > qi - window)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    o = torch.einsum("hqk,khd->qhd", p, vv)
    return o, lse


MASKS = {"gqa_causal": dict(causal=True), "mha_softcap": dict(causal=True, softcap=30.0),
         "g16_window": dict(window=100), "g8_none_hd256": dict()}


def check(name, o, lse, ref_o, ref_lse):
    err = (o.double() - ref_o).abs().max().item() if o.numel() else 0.0
    scale = max(ref_o.abs().max().item(), 1e-3) if ref_o.numel() else 1.0
    finite = torch.isfinite(ref_lse)
    lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    lse_inf_ok = bool(torch.all(torch.isneginf(lse[~finite]))) if (~finite).any() else True
    ok = err / scale < 2e-2 and lse_err < 1e-2 and lse_inf_ok and not torch.isnan(o).any()
    return ok, err / scale, lse_err


def main():
    lib = ac.Library()
    dev = "cuda"
    results = []
    torch.manual_seed(0)
    for spec_name, yaml in SPECS.items():
        kernel = lib.compile_text(yaml)
        info = kernel.info
        hq, hkv, d = info["heads_q"], info["heads_kv"], info["head_dim"]
        dt = torch.bfloat16 if info["dtype"] == "bf16" else torch.float16
        scale = info["scale"]
        mk = MASKS[spec_name]
        # Contiguous BSHD, several splits and q_lens.
        for batch, q_len, kv_len in ((2, 1, 1000), (3, 4, 4100), (1, 16, 300), (2, 1, 17)):
            for splits in (1, 3, 0):
                q = torch.randn(batch, q_len, hq, d, device=dev, dtype=dt)
                k = torch.randn(batch, kv_len, hkv, d, device=dev, dtype=dt)
                v = torch.randn(batch, kv_len, hkv, d, device=dev, dtype=dt)
                o = torch.full((batch, q_len, hq, d), float("nan"), device=dev, dtype=dt)
                lse = torch.full((batch, hq, q_len), float("nan"), device=dev)
                try:
                    ex = kernel.forward_ex(q, k, v, o, lse=lse, num_splits=splits, decode="on")
                    plan = kernel.decode_plan(ex)
                    torch.cuda.synchronize()
                    ok = True
                    worst = 0.0
                    for b in range(batch):
                        ro, rl = reference(q[b].double().cpu(), k[b].double().cpu(),
                                           v[b].double().cpu(), scale, **mk)
                        good, e, le = check(spec_name, o[b].cpu(), lse[b].cpu(), ro, rl)
                        ok &= good
                        worst = max(worst, e)
                    results.append((spec_name, f"contig B{batch} q{q_len} kv{kv_len} s{splits}"
                                    f"->{plan['splits']}", ok, worst))
                except Exception as e:  # noqa: BLE001
                    results.append((spec_name, f"contig B{batch} q{q_len} kv{kv_len} s{splits}",
                                    False, str(e)[:200]))
                print(results[-1], flush=True)
        # Paged: lengths 0, 1, 17, 300, 4097 in one batch, shuffled pages, NaN in unused slots.
        for page in (1, 16, 256):
            lens = [0, 1, 17, 300, 4097] if page > 1 else [0, 1, 17, 300]
            batch, q_len = len(lens), 2
            pages_per = [max(1, math.ceil(n / page)) for n in lens]
            num_pages = sum(pages_per) + 3
            perm = torch.randperm(num_pages)
            table = torch.zeros(batch, max(pages_per), dtype=torch.int32)
            at = 0
            for b, n in enumerate(pages_per):
                table[b, :n] = perm[at:at + n].to(torch.int32)
                at += n
            kpool = torch.full((num_pages, page, hkv, d), float("nan"), device=dev, dtype=dt)
            vpool = torch.full((num_pages, page, hkv, d), float("nan"), device=dev, dtype=dt)
            ks, vs = [], []
            for b, n in enumerate(lens):
                kb = torch.randn(n, hkv, d, dtype=dt)
                vb = torch.randn(n, hkv, d, dtype=dt)
                ks.append(kb)
                vs.append(vb)
                for j in range(n):
                    kpool[table[b, j // page], j % page] = kb[j].to(dev)
                    vpool[table[b, j // page], j % page] = vb[j].to(dev)
            q = torch.randn(batch, q_len, hq, d, device=dev, dtype=dt)
            o = torch.full((batch, q_len, hq, d), float("nan"), device=dev, dtype=dt)
            lse = torch.full((batch, hq, q_len), float("nan"), device=dev)
            seq = torch.tensor(lens, dtype=torch.int32)
            try:
                kernel.forward_ex(q, kpool, vpool, o, lse=lse, batch=batch, q_len=q_len,
                                  kv_len=max(lens), block_table=table.to(dev),
                                  seq_lens_kv=seq.to(dev), page_size=page, num_pages=num_pages,
                                  host_block_table=table, host_seq_lens_kv=seq)
                torch.cuda.synchronize()
                ok, worst = True, 0.0
                for b, n in enumerate(lens):
                    ro, rl = reference(q[b].double().cpu(), ks[b].double(), vs[b].double(),
                                       scale, **mk)
                    good, e, le = check(spec_name, o[b].cpu(), lse[b].cpu(), ro, rl)
                    ok &= good
                    worst = max(worst, e)
                results.append((spec_name, f"paged p{page} lens {lens}", ok, worst))
            except Exception as e:  # noqa: BLE001
                results.append((spec_name, f"paged p{page}", False, str(e)[:300]))
            print(results[-1], flush=True)
        # Varlen: packed Q (q_len 1..5) and packed K/V.
        qlens, kvlens = [1, 5, 3, 0], [40, 700, 3, 0]
        cq = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
        ck = torch.tensor([0] + list(torch.tensor(kvlens).cumsum(0)), dtype=torch.int32)
        tq, tk = int(cq[-1]), int(ck[-1])
        q = torch.randn(tq, hq, d, device=dev, dtype=dt)
        k = torch.randn(tk, hkv, d, device=dev, dtype=dt)
        v = torch.randn(tk, hkv, d, device=dev, dtype=dt)
        o = torch.full((tq, hq, d), float("nan"), device=dev, dtype=dt)
        lse = torch.full((hq, tq), float("nan"), device=dev)
        try:
            kernel.forward_ex(q, k, v, o, lse=lse, batch=len(qlens), q_len=max(qlens),
                              kv_len=max(kvlens), cu_seqlens_q=cq.to(dev), cu_seqlens_kv=ck.to(dev),
                              total_q=tq, total_kv=tk, host_cu_seqlens_q=cq, host_cu_seqlens_kv=ck)
            torch.cuda.synchronize()
            ok, worst = True, 0.0
            for b in range(len(qlens)):
                a, z, ka, kz = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
                if z == a:
                    continue
                ro, rl = reference(q[a:z].double().cpu(), k[ka:kz].double().cpu(),
                                   v[ka:kz].double().cpu(), scale, **mk)
                good, e, le = check(spec_name, o[a:z].cpu(), lse[:, a:z].cpu(), ro, rl)
                ok &= good
                worst = max(worst, e)
            results.append((spec_name, "varlen", ok, worst))
        except Exception as e:  # noqa: BLE001
            results.append((spec_name, "varlen", False, str(e)[:300]))
        print(results[-1], flush=True)

    # Varlen prefill (no LSE, host offsets: a contiguous launch per sequence), causal GQA.
    kernel = lib.compile_text(SPECS["gqa_causal"])
    lens = [100, 37, 300, 1]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    total = int(cu[-1])
    q = torch.randn(total, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(total, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(total, 8, 128, device=dev, dtype=torch.bfloat16)
    o = torch.full((total, 32, 128), float("nan"), device=dev, dtype=torch.bfloat16)
    try:
        ex = kernel.forward_ex(q, k, v, o, batch=len(lens), q_len=max(lens), kv_len=max(lens),
                               cu_seqlens_q=cu.to(dev), cu_seqlens_kv=cu.to(dev), total_q=total,
                               total_kv=total, host_cu_seqlens_q=cu, host_cu_seqlens_kv=cu)
        torch.cuda.synchronize()
        ok, worst = True, 0.0
        for b in range(len(lens)):
            a_, z = int(cu[b]), int(cu[b + 1])
            ro, rl = reference(q[a_:z].double().cpu(), k[a_:z].double().cpu(),
                               v[a_:z].double().cpu(), kernel.info["scale"], causal=True)
            good, e, _ = check("prefill", o[a_:z].cpu(), rl.float(), ro, rl)
            ok &= good
            worst = max(worst, e)
        results.append(("gqa_causal", f"varlen prefill per sequence {lens} plan "
                        f"{kernel.decode_plan(ex)['decode']}", ok, worst))
    except Exception as e:  # noqa: BLE001
        results.append(("gqa_causal", "varlen prefill", False, str(e)[:300]))
    print(results[-1], flush=True)

    # One bandwidth row: B8 kv32K q_len 1, GQA 32/8 hd128, against a device copy.
    kernel = lib.compile_text(SPECS["gqa_causal"])
    batch, kv_len = 8, 32768
    q = torch.randn(batch, 1, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, kv_len, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    o = torch.empty(batch, 1, 32, 128, device=dev, dtype=torch.bfloat16)
    src = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    rows = []
    for mode in ("on", "off"):
        args = kernel.make_args(q, k, v, o)
        ex = ac.make_args_ex(args, decode=mode)
        for _ in range(3):
            kernel.launch_ex(ex)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 20
        for _ in range(n):
            kernel.launch_ex(ex)
        torch.cuda.synchronize()
        dt_s = (time.perf_counter() - t0) / n
        rows.append((mode, dt_s, (k.numel() + v.numel()) * 2 / dt_s / 1e9))
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize()
    copy_bw = 2 * src.numel() * 5 / (time.perf_counter() - t0) / 1e9
    print("\n| case | ok | worst rel err |\n|---|---|---|")
    for spec_name, case, ok, worst in results:
        print(f"| {spec_name} {case} | {'PASS' if ok else 'FAIL'} | {worst} |")
    print(f"\ncopy bandwidth {copy_bw:.0f} GB/s")
    for mode, t, gbs in rows:
        print(f"decode={mode}: {t * 1e6:.1f} us, {gbs:.0f} GB/s ({100 * gbs / copy_bw:.0f}% of copy)")
    print(f"passed {sum(r[2] for r in results)}/{len(results)}")
    return 0 if all(r[2] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
