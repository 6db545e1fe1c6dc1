// Ops of the attn dialect: the variant (attn.attention), its tiled fused form
// (attn.tiled_forward), reads of declared inputs (attn.load) and the region terminator.
#ifndef ATTN_OPS_TD
#define ATTN_OPS_TD

include "dialects/Attn/IR/AttnDialect.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// The attributes both forms share: what the variant computes, independent of how.
defvar AttnShapeArgs = (ins
  SymbolNameAttr:$sym_name,
  I64Attr:$head_dim,
  I64Attr:$head_dim_v,
  TypeAttr:$element_type,
  I64Attr:$heads_q,
  I64Attr:$heads_kv,
  F64Attr:$scale,
  F64Attr:$dropout,
  // Philox4x32's rounds for the dropout decisions, 7 to 10 (templates/attnc/common/philox.h).
  DefaultValuedAttr<I64Attr, "7">:$dropout_rounds,
  DictionaryAttr:$inputs
);

def Attn_AttentionOp : Attn_Op<"attention", [IsolatedFromAbove, Symbol]> {
  let summary = "One attention variant: O = softmax(mask(score(scale * Q K^T))) V.";
  let description = [{
    Describes an attention variant, not how it is computed. For every batch `b`, query head `h`,
    query position `q` and key position `k` the element's score is `s = scale * dot(Q[q], K[k])`
    (K and V of kv head `h / (heads_q / heads_kv)`), modified by the `score` region, and kept
    when the `mask` region yields true; each row is then softmax-normalised and multiplied by V.

    The `mask` region takes `(b, h, q, k, q_len, kv_len : i32)` and yields `i1`; the `score`
    region takes `(score : f32, b, h, q, k, q_len, kv_len : i32)` and yields `f32`. An empty
    region means "keep everything" / "score unchanged". Builtin masks and score modifications
    (causal, sliding window, prefix-LM, document, softcap, ALiBi) may instead be named by
    `mask_builtin` / `score_builtin` with their region empty; `attn-expand-builtins` turns them
    into plain regions. `inputs` declares the tensors the regions may read with `attn.load`:
    `{doc = {dtype = i32, dims = ["pos"], slot = 0 : i64}}`.

    Passes add `tiles` (attn-select-tiles), `decode_tiles` (attn-select-decode-tiles) and
    `block_classification` (attn-classify-blocks).

    ```mlir
    attn.attention @causal attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
        head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.0883883} mask {
    ^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %q_len: i32, %kv_len: i32):
      %off = arith.subi %kv_len, %q_len : i32
      %qa = arith.addi %q, %off : i32
      %keep = arith.cmpi sge, %qa, %k : i32
      attn.yield %keep : i1
    } score {
    }
    ```
  }];
  let arguments = !con(AttnShapeArgs, (ins
    OptionalAttr<DictionaryAttr>:$mask_builtin,
    OptionalAttr<DictionaryAttr>:$score_builtin,
    OptionalAttr<DictionaryAttr>:$tiles,
    OptionalAttr<DictionaryAttr>:$decode_tiles,
    OptionalAttr<StrAttr>:$block_classification
  ));
  let regions = (region AnyRegion:$mask, AnyRegion:$score);
  let assemblyFormat = "$sym_name attr-dict-with-keyword `mask` $mask `score` $score";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Attn_TiledForwardOp : Attn_Op<"tiled_forward", [IsolatedFromAbove, Symbol]> {
  let summary = "The tiled, fused FlashAttention forward kernel of one variant.";
  let description = [{
    Says exactly what the forward kernel does. The grid is
    `(ceildiv(q_len, block_q), heads_q, batch)`; each thread block of `warps` warps owns one Q
    tile of `block_q` rows, keeps it in shared memory (`smem_bytes` in all, with `stages`
    buffers of K and V tiles of `block_kv` rows) and holds the S tile, the running row max `m`,
    the running sum `l` and the O accumulator in registers (online softmax). Per Q tile:

    1. `kv_bounds`: `"all"` streams every KV tile; `"interval-search"` first finds the first and
       last KV tile whose `mask` is not false everywhere, by evaluating the `mask` region over
       index intervals (a binary search over prefix and suffix ranges).
    2. Per KV tile: S = Q K^T; the fused epilogue on S computes `x = score(scale * S)`; when
       `classification` is not `"none"` the tile is classified by the `mask` region over
       intervals: empty (skipped, no loads), full (no per-element mask) or partial (the `mask`
       region per element, masked `x = -inf`). `"runtime"` says the mask reads declared inputs,
       so the classification depends on their values at launch time.
    3. Online softmax: `m' = max(m, rowmax x)`, `P = exp(x - m')`, `l = l exp(m - m') + rowsum P`,
       `O = O exp(m - m')`; with `dropout > 0` elements of P are dropped by a Philox4x32 draw
       (`dropout_rounds` rounds) keyed by (seed, offset, b, h, q, k) after `l` is updated;
       `O += P V`.
    4. `O /= l` (times `256 / (256 - round(256 dropout))`: dropout resolves to 1/256), written in
       `element_type`; `LSE = m + log l`.

    `kernel` names the template: `"sm80"` (mma.sync; `warps` warps share the Q tile) or `"sm90"`
    (sm_90a: wgmma and TMA; `warps / 4` warpgroups, one producing loads and the others computing
    64 rows each, so `block_q = 64 * (warps / 4 - 1)`).

    `derivation` keeps the steps that chose the tile sizes (printed by `attnc explain`).
  }];
  let arguments = !con(AttnShapeArgs, (ins
    StrAttr:$kernel,
    I64Attr:$block_q,
    I64Attr:$block_kv,
    I64Attr:$warps,
    I64Attr:$stages,
    I64Attr:$smem_bytes,
    StrAttr:$classification,
    StrAttr:$kv_bounds,
    StrAttr:$target,
    StrArrayAttr:$derivation
  ));
  let regions = (region AnyRegion:$mask, AnyRegion:$score);
  let assemblyFormat = "$sym_name attr-dict-with-keyword `mask` $mask `score` $score";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Attn_TiledBackwardOp : Attn_Op<"tiled_backward", [IsolatedFromAbove, Symbol]> {
  let summary = "The tiled FlashAttention backward kernels of one variant.";
  let description = [{
    Recomputes instead of storing: nothing N x N reaches memory. Per row, a preprocessing kernel
    computes `D = rowsum(dO * O)`. Per KV tile (and each query head of its GQA group), the main
    kernel streams the Q tiles whose `mask` over the tile pair is not false everywhere (the same
    interval classification as the forward, loop bounds by binary search), recomputes
    `S = Q K^T`, `x = score(scale * S)` and `P = exp(x - LSE)` (masked elements 0), regenerates
    the dropout keep mask from the same Philox stream as the forward, and accumulates
    `dV += P_d^T dO`, `dP = dO V^T`, `dS = P * (dP_d - D) * score_grad`, `dK += dS^T Q * scale`
    and `dQ += dS K * scale` (fp32 atomics, or a separate per-Q-tile kernel in deterministic
    mode). `score_grad` is the derivative of the `score` region with respect to its score
    argument, derived symbolically by `attn-derive-backward`; it takes the score region's
    arguments and yields f32.
  }];
  let arguments = !con(AttnShapeArgs, (ins
    StrAttr:$classification,
    StrAttr:$target,
    OptionalAttr<DictionaryAttr>:$tiles
  ));
  let regions = (region AnyRegion:$mask, AnyRegion:$score, AnyRegion:$score_grad);
  let assemblyFormat = [{
    $sym_name attr-dict-with-keyword `mask` $mask `score` $score `score_grad` $score_grad
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Attn_LoadOp : Attn_Op<"load", [Pure]> {
  let summary = "Reads one element of a declared input tensor.";
  let description = [{
    `attn.load "doc"[%q] : i32` reads element `doc[q]`. There is one index per dimension the
    input declares (`b`, `h` or `pos`), in declaration order, and the result type is the
    input's dtype. Inputs are read-only for the whole launch, so the op is pure.
  }];
  let arguments = (ins StrAttr:$input, Variadic<I32>:$indices);
  let results = (outs AnyTypeOf<[I32, F32]>:$result);
  let assemblyFormat = "$input `[` $indices `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator, ReturnLike,
                                     ParentOneOf<["AttentionOp", "TiledForwardOp", "TiledBackwardOp"]>]> {
  let summary = "Ends a mask or score region with its value.";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // ATTN_OPS_TD
