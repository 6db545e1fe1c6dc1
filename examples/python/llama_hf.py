"""A Hugging Face transformers Llama model running on attnc: attnc.attention registered as an
attention implementation (AttentionInterface.register), compared with attn_implementation="sdpa"
on the same weights (logits and every parameter's gradient, each against a float32 copy of the
model as the reference), then ~20 AdamW steps of each from the same initial weights on the same
token batches, their loss curves side by side. The model comes from a small random LlamaConfig:
nothing is downloaded. Exits non-zero if attnc's errors exceed the bounds below or the curves part.

  PYTHONPATH=python python3 examples/python/llama_hf.py [--quick] [--steps 20]

transformers hands an attention function q [B, Hq, S, D], k and v [B, Hkv, S, D] (Hkv < Hq for
GQA: no repeat_kv needed, attnc takes the heads as they are), `scaling`, `dropout` (0 unless
training with config.attention_dropout), and `attention_mask`; it returns (out [B, S, Hq, D],
weights or None). For an implementation registered under its own name, transformers builds no mask
(masking_utils: names outside ALL_MASK_ATTENTION_FUNCTIONS get None), so the function applies
the causal mask itself; that holds only for unpadded batches, which is what this example feeds.
"""
import argparse
import copy
import os
import sys
import time

import torch
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python"))  # the checkout's package when none is installed
import attnc  # noqa: E402

# attnc's error against the float32 model may exceed SDPA's by this factor plus the floor: both
# models round in bf16 everywhere, so their errors are alike; 2x is the GPU suites' bound beside
# SDPA, and a scale 2% off already doubles the logits' error.
ERROR_FACTOR, ERROR_FLOOR = 2.0, 1e-3
# The largest gap allowed between the two loss curves at a step: LOSS_GAP or LOSS_GAP_REL of SDPA's
# loss, whichever is larger. Both runs start from the same weights and batches; bf16 rounding
# differences grow through AdamW's normalised updates, to about 1e-2 over 20 steps of this model.
LOSS_GAP, LOSS_GAP_REL = 0.05, 0.02
# Weights' init std: Llama's default 0.02 leaves this small model's scores near 0 and attention near
# uniform, where a wrong scale or mask barely shows in the logits; 0.05 gives scores of std ~1.
INIT_STD = 0.05
BATCHES = 4  # token batches, cycled through the training steps
# How much the mean loss over the batches must fall from the first pass to the last; far below
# what 10 steps bring (the model memorises its few batches), far above bf16 noise.
TRAIN_DROP = 0.1


def attnc_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                    is_causal=None, **kwargs):
    """transformers' attention-function signature over attnc.attention (BHSD in, BSHD out)."""
    if attention_mask is not None:
        raise ValueError("attnc_attention: attention_mask must be None (an unpadded batch under "
                         f"the causal mask), got a tensor of shape {tuple(attention_mask.shape)}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = attnc.attention(query, key, value, mask="causal" if causal else None,
                          dropout_p=dropout, scale=scaling, layout="bhsd")
    return out.transpose(1, 2), None


def relerr(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def forward_backward(model, ids):
    """Logits and {parameter name: gradient} of the mean LM loss on ids."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    torch.cuda.synchronize()
    return out.logits.detach(), {n: p.grad.detach() for n, p in model.named_parameters()
                                 if p.grad is not None}


def compare(models, ids):
    """Each bf16 model's logits and gradients against the float32 one's: (rows, ok)."""
    ref_logits, ref_grads = forward_backward(models["float32 sdpa"], ids)
    got = {name: forward_backward(m, ids) for name, m in models.items() if name != "float32 sdpa"}
    rows, ok = [], True
    a_logits, a_grads = got["bf16 attnc"]
    s_logits, s_grads = got["bf16 sdpa"]
    items = [("logits", a_logits, s_logits, ref_logits)]
    items += [(n, a_grads[n], s_grads[n], ref_grads[n]) for n in ref_grads]
    for name, a, s, r in items:
        ea, es = relerr(a, r), relerr(s, r)
        direct = (a.float() - s.float()).abs().max().item()
        direct_rel = relerr(a, s)
        good = ea <= ERROR_FACTOR * es + ERROR_FLOOR and a.shape == s.shape
        ok &= good
        rows.append((name, ea, es, direct, direct_rel, good))
    return rows, ok


def train(model, batches, steps, lr):
    """AdamW steps over the batches in turn; the loss of each step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        ids = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, 256 tokens, 10 steps")
    ap.add_argument("--steps", type=int, default=None, help="AdamW steps (default 20; 10 quick)")
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    steps = args.steps or (10 if args.quick else 20)
    if steps < 2 * BATCHES:
        ap.error(f"--steps: expected at least {2 * BATCHES} (two passes over the batches), "
                 f"got {steps}")
    layers, seq, batch = (2, 256, 2) if args.quick else (4, 512, 4)

    AttentionInterface.register("attnc", attnc_attention)
    config = LlamaConfig(vocab_size=2048, hidden_size=512, intermediate_size=1024,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=2 * seq, attention_dropout=0.0,
                         initializer_range=INIT_STD)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    sdpa = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
    init = copy.deepcopy(sdpa.state_dict())
    reference = copy.deepcopy(sdpa).float()
    model = copy.deepcopy(sdpa)
    model.set_attn_implementation("attnc")
    for m in (sdpa, reference, model):
        m.train()
    print(f"attnc {attnc.__version__}; {torch.cuda.get_device_name()}; Llama {layers} layers, "
          f"hidden 512, heads 8/2 (head_dim 64), batch {batch} x {seq} tokens, bf16", flush=True)

    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, config.vocab_size, (batch, seq), device="cuda", generator=gen)
               for _ in range(BATCHES)]
    t0 = time.time()
    rows, match_ok = compare({"float32 sdpa": reference, "bf16 attnc": model, "bf16 sdpa": sdpa},
                             batches[0])
    print(f"\nlogits and gradients, relative error against the float32 model "
          f"(pass: attnc <= {ERROR_FACTOR:g} x sdpa + {ERROR_FLOOR:g}); {time.time() - t0:.1f} s")
    print(f"{'tensor':48s} {'attnc':>9s} {'sdpa':>9s} {'|attnc-sdpa| max':>17s} "
          f"{'rel':>9s}")
    worst = max(rows, key=lambda r: r[1] - ERROR_FACTOR * r[2])
    shown = [r for r in rows if r[0] == "logits" or not r[5] or "layers.0." in r[0]]
    for name, ea, es, direct, direct_rel, good in shown + ([worst] if worst not in shown else []):
        print(f"{name:48s} {ea:9.2e} {es:9.2e} {direct:17.2e} {direct_rel:9.2e}"
              + ("" if good else "  <- FAIL"))
    print(f"({len(rows)} tensors compared, {sum(not r[5] for r in rows)} out of bounds)")

    del reference
    sdpa.load_state_dict(init)
    model.load_state_dict(init)
    curves = {}
    for name, m in (("sdpa", sdpa), ("attnc", model)):
        torch.manual_seed(2)
        t1 = time.time()
        curves[name] = train(m, batches, steps, args.lr)
        print(f"{name}: {steps} AdamW steps in {time.time() - t1:.1f} s", flush=True)
    gaps = [abs(a - s) for a, s in zip(curves["attnc"], curves["sdpa"])]
    # The last pass over the batches against the first (the same batches): the model learns.
    n = len(batches)
    trains = all(sum(c[-n:]) / n < sum(c[:n]) / n - TRAIN_DROP for c in curves.values())
    bounds = [max(LOSS_GAP, LOSS_GAP_REL * s) for s in curves["sdpa"]]
    track_ok = all(g <= b for g, b in zip(gaps, bounds)) and trains

    print(f"\n{'step':>4s} {'loss sdpa':>10s} {'loss attnc':>10s} {'gap':>8s}")
    for i, (s, a) in enumerate(zip(curves["sdpa"], curves["attnc"])):
        print(f"{i:4d} {s:10.4f} {a:10.4f} {abs(a - s):8.4f}")
    print(f"\nlogits and gradients vs sdpa: {'ok' if match_ok else 'FAIL'}; loss curves: max gap "
          f"{max(gaps):.4f} (bound max({LOSS_GAP:g}, {LOSS_GAP_REL:g} x loss)), mean loss of both "
          f"falling by > {TRAIN_DROP:g} from the first pass over the batches to the last: "
          f"{trains} -> {'ok' if track_ok else 'FAIL'}")
    return 0 if match_ok and track_ok else 1


if __name__ == "__main__":
    sys.exit(main())
