// The passes that take an attention variant from its spec form to its tiled, fused kernel form.
#ifndef ATTN_PASSES_TD
#define ATTN_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttnExpandBuiltins : Pass<"attn-expand-builtins", "::mlir::ModuleOp"> {
  let summary = "Turns builtin masks and score modifications into plain mask and score regions.";
  let description = [{
    `causal`, `window`, `prefix`, `document`, `softcap` and `alibi` named by the `mask_builtin`
    and `score_builtin` attributes become ordinary `arith`/`math`/`attn.load` ops in the mask and
    score regions, so nothing downstream special-cases a builtin. Causal alignment is bottom-right
    (`q + kv_len - q_len >= k`) unless `top_left = true`. A window of `W` keeps
    `k in (q' - W, q']`, a prefix of `P` keeps `k < P || k <= q'`, a document mask keeps
    `doc[q'] == doc[k]` (and `k <= q'` when `causal`), softcap gives `c * tanh(score / c)` and ALiBi
    `score - slope_h * abs(q' - k)` with `slope_h = slopes[h]` or, without an input, the standard
    `2^(-8 (h + 1) / heads_q)`.

    Before:
    ```mlir
    attn.attention @causal attributes {mask_builtin = {kind = "causal", top_left = false}, ...}
        mask {} score {}
    ```
    After:
    ```mlir
    attn.attention @causal attributes {...} mask {
    ^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %q_len: i32, %kv_len: i32):
      %0 = arith.subi %kv_len, %q_len : i32
      %1 = arith.addi %q, %0 : i32
      %2 = arith.cmpi sge, %1, %k : i32
      attn.yield %2 : i1
    } score {}
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

def AttnSimplifyScore : Pass<"attn-simplify-score", "::mlir::ModuleOp"> {
  let summary = "Simplifies the score region under what the mask guarantees.";
  let description = [{
    The kernels only use the score of a kept element (a masked one becomes -inf right after the
    score hook, or P = 0 in the backward; a full tile keeps every element). So the score may
    assume every conjunct `X >= Y` of the mask (sge, sgt, sle, slt between integers): this pass
    rewrites `abs(X - Y)` and `abs(Y - X)` in the score to `X - Y` where the result only feeds
    sums, differences and products (so that no masked element's derivative, which the backward
    multiplies by P = 0, becomes NaN), which removes ALiBi's `abs`
    under causal, window and document masks. Expressions are matched structurally across the
    two regions (same operations and attributes over corresponding region arguments).

    Before (ALiBi under a causal mask):
    ```mlir
    mask { ... %1 = arith.addi %q, %0 ; %2 = arith.cmpi sge, %1, %k ; attn.yield %2 }
    score { ... %6 = arith.addi %q, %5 ; %7 = arith.subi %6, %k ; %8 = math.absi %7 ;
            %9 = arith.sitofp %8 ... }
    ```
    After: `%9 = arith.sitofp %7`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

def AttnSelectTiles : Pass<"attn-select-tiles", "::mlir::ModuleOp"> {
  let summary = "Derives tile sizes from the target's shared memory, FlashAttention-style.";
  let description = [{
    Starts from the FlashAttention rule with M the target's shared memory per block in elements
    of the input dtype and d the (padded) head dim: `B_c = ceil(M / 4d)`, `B_r = min(B_c, d)`.
    Then fits the tiles to the sm_80-family kernel: B_r and B_c to powers of two of whole
    mma.sync m16n8k16 fragments; 32 rows per warp (each K/V fragment read from shared memory
    feeds two mmas) when that leaves at least 4 warps and the live fp32 S and O accumulators
    (plus the epilogue's own registers: dropout, input reads) fit three quarters of the register
    file with B_c >= 64, else 16 rows; B_c halved until they fit; and the Q tile plus a ring of
    K/V buffers checked against the shared memory. Every step is kept in `tiles.derivation`.

    Before:
    ```mlir
    attn.attention @causal attributes {head_dim = 128, ...} mask {...} score {}
    ```
    After (sm_90, 232448 bytes per block):
    ```mlir
    attn.attention @causal attributes {head_dim = 128, tiles = {block_kv = 64, block_q = 128,
        derivation = ["M = 232448 B / 2 B = 116224 elements", "B_c = ceil(M / 4d) = 227", ...],
        smem_bytes = 65536, stages = 2, warps = 4}, ...} mask {...} score {}
    ```
  }];
  let options = [
    Option<"arch", "arch", "std::string", "\"sm_80\"", "Target architecture (for the record).">,
    Option<"smemPerBlock", "smem-per-block", "int64_t", "166912",
           "Shared memory one block may use, in bytes (opt-in maximum).">,
    Option<"smemPerSM", "smem-per-sm", "int64_t", "167936",
           "Shared memory of one SM, in bytes.">,
    Option<"regsPerThread", "regs-per-thread", "int64_t", "255",
           "Most 32-bit registers one thread may use.">,
    Option<"blockQ", "block-q", "int64_t", "0", "Override B_r (experiments only; 0 = derive).">,
    Option<"blockKV", "block-kv", "int64_t", "0", "Override B_c (experiments only; 0 = derive).">,
    Option<"spillReserve", "spill-reserve", "int64_t", "0",
           "Registers per thread reserved beyond the rule's: attnc's spill fallback derives a "
           "tile whose kernel spilled to local memory again with 8, 16, ... up to 96 more.">
  ];
}

def AttnSelectDecodeTiles : Pass<"attn-select-decode-tiles", "::mlir::ModuleOp"> {
  let summary = "Derives the decode kernel's tiles: GQA-packed rows and a bandwidth-sized ring.";
  let description = [{
    The decode kernel packs the G = heads_q / heads_kv query heads of one kv head (times q_len
    positions) into one block's rows, so K and V are read once for all of them. Its rule: 16 rows
    (one m16 fragment), or 32 where G x q_len needs them and every warp's fp32 O of all rows, its
    S slice and the epilogue's registers fit three quarters of the register file (Q's fragments
    leave registers first: `q_in_registers`); B_c = 64 keys (32 where d_v > 128), split among 4
    warps; K/V stages so that two blocks per SM keep the bytes Little's law asks for in flight
    (4.8 TB/s x 1 us / SMs), within half the SM's shared memory (stages, then B_c, then rows
    shrink to fit).
    Every step is kept in `decode_tiles.derivation`. Specs with dropout keep the forward kernel
    and get no `decode_tiles`.

    Before:
    ```mlir
    attn.attention @gqa attributes {head_dim = 128, heads_kv = 8, heads_q = 32, ...} mask {}
        score {}
    ```
    After (sm_90a, 132 SMs):
    ```mlir
    attn.attention @gqa attributes {decode_tiles = {block_kv = 64, derivation = [
        "packed rows: G 4 x q_len 1 = 4; ...", ...], q_in_registers = true, rows = 16,
        smem_bytes = 53248, stages = 3, warps = 4}, head_dim = 128, ...} mask {} score {}
    ```
  }];
  let options = [
    Option<"arch", "arch", "std::string", "\"sm_80\"", "Target architecture (for the record).">,
    Option<"smemPerBlock", "smem-per-block", "int64_t", "166912",
           "Shared memory one block may use, in bytes (opt-in maximum).">,
    Option<"smemPerSM", "smem-per-sm", "int64_t", "167936",
           "Shared memory of one SM, in bytes.">,
    Option<"regsPerThread", "regs-per-thread", "int64_t", "255",
           "Most 32-bit registers one thread may use.">,
    Option<"numSMs", "num-sms", "int64_t", "108",
           "SMs of the target: the bytes in flight per SM are the GPU's over them.">,
    Option<"group", "group", "int64_t", "0",
           "Query heads per kv head the rows pack (0: heads_q / heads_kv of the op).">,
    Option<"qLen", "q-len", "int64_t", "1",
           "Query positions per sequence the rows are sized for (speculative decoding: more).">,
    Option<"spillReserve", "spill-reserve", "int64_t", "0",
           "Registers per thread reserved beyond the rule's (attnc's spill fallback).">
  ];
}

def AttnClassifyBlocks : Pass<"attn-classify-blocks", "::mlir::ModuleOp"> {
  let summary = "Classifies (q-tile, kv-tile) pairs as empty, full or partial by interval analysis.";
  let description = [{
    Checks that the mask region can be evaluated over index intervals (every op has a sound
    interval form) and records how tiles are classified: `"none"` (no mask: every tile full),
    `"static"` (the class depends only on b, h, the tile ranges and the lengths) or `"runtime"`
    (the mask reads declared inputs, so their values at launch decide). The kernel evaluates the
    same region over a tile's index intervals: false everywhere = empty (skipped; the kv loop
    bounds of each q tile shrink to the non-empty range), true everywhere = full (no mask
    evaluated), otherwise partial. With `q-len`/`kv-len` given, the pass also counts the classes
    for those lengths (`block_summary`), which `attnc explain` prints.

    Before:
    ```mlir
    attn.attention @causal attributes {tiles = {block_q = 128, block_kv = 64, ...}, ...} mask {...}
    ```
    After (`q-len=1024 kv-len=1024`):
    ```mlir
    attn.attention @causal attributes {block_classification = "static",
        block_summary = {empty = 56, full = 56, partial = 16}, ...} mask {...}
    ```
  }];
  let options = [
    Option<"qLen", "q-len", "int64_t", "0", "Query length to summarise the classes for (0: none).">,
    Option<"kvLen", "kv-len", "int64_t", "0", "Key length to summarise the classes for (0: q-len).">
  ];
}

def AttnTile : Pass<"attn-tile", "::mlir::ModuleOp"> {
  let summary = "Rewrites attn.attention into its tiled, fused kernel form attn.tiled_forward.";
  let description = [{
    Needs `tiles` (attn-select-tiles) and `block_classification` (attn-classify-blocks). The
    result carries the grid, the tile loop, the kv-bound strategy and the fused epilogue order
    described on `attn.tiled_forward`; CodeGen emits exactly that.

    Before:
    ```mlir
    attn.attention @causal attributes {block_classification = "static", tiles = {...}, ...}
        mask {...} score {}
    ```
    After:
    ```mlir
    attn.tiled_forward @causal attributes {block_q = 128, block_kv = 64, warps = 8, stages = 2,
        smem_bytes = 98304, classification = "static", kv_bounds = "interval-search", ...}
        mask {...} score {}
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", "\"sm_80\"", "Target the kernel is built for.">
  ];
}

def AttnDeriveBackward : Pass<"attn-derive-backward", "::mlir::ModuleOp"> {
  let summary = "Derives the backward kernels' tiled form, with the score gradient formed symbolically.";
  let description = [{
    For every `attn.tiled_forward`, adds an `attn.tiled_backward` with the same shapes, mask and
    score, and a `score_grad` region: the derivative of the score region with respect to its
    score argument, formed op by op (sums, products, quotients, tanh, exp, exp2, log, sqrt, abs,
    min/max and select take their textbook rules; values that do not depend on the score have
    derivative 0). An op whose derivative cannot be formed (a remainder by a score-dependent
    divisor) is an error naming it.

    Before:
    ```mlir
    attn.tiled_forward @softcap ... mask {...} score {
    ^bb0(%s: f32, ...):
      %c = arith.constant 3.000000e+01 : f32
      %0 = arith.divf %s, %c : f32
      %1 = math.tanh %0 : f32
      %2 = arith.mulf %c, %1 : f32
      attn.yield %2 : f32
    }
    ```
    After (added beside it):
    ```mlir
    attn.tiled_backward @softcap ... tiles = {kv_block_kv = 128, kv_block_q = 64, ...} score_grad {
    ^bb0(%s: f32, ...):
      %one = arith.constant 1.000000e+00 : f32
      %c = arith.constant 3.000000e+01 : f32
      %0 = arith.divf %s, %c : f32
      %d0 = arith.divf %t, %sq : f32      // (1 * c - s * 0) / c^2
      %1 = math.tanh %0 : f32
      %d1 = arith.mulf %(1 - tanh^2), %d0 : f32
      %2 = arith.mulf %c, %1 : f32
      %d2 = arith.mulf %c, %d1 : f32
      attn.yield %d2 : f32
    }
    ```

    The backward kernels' tiles are derived too (`tiles`): the kept K/V tile of the main kernel
    starts from FlashAttention's B_c = ceil(M / 4d); B_c and the streamed Q/dO tile then take the
    largest sizes whose modelled registers (the dK/dV accumulators, the Q and dO fragments of the
    S^T slices in flight, the epilogue's) fit the register file, with one or two buffers of
    streamed Q/dO tiles as the shared memory allows.
  }];
  let options = [
    Option<"smemPerBlock", "smem-per-block", "int64_t", "166912",
           "Shared memory one block may use, in bytes (opt-in maximum).">,
    Option<"regsPerThread", "regs-per-thread", "int64_t", "255",
           "Most 32-bit registers one thread may use.">,
    Option<"spillReserve", "spill-reserve", "int64_t", "0",
           "Registers per thread the sm_80 family's dK/dV tile rule reserves beyond its own, "
           "and the sm_90a dQ kernel's kv tile leaves free (the backward spill fallback, "
           "compiler/Pipeline.h).">
  ];
}

#endif // ATTN_PASSES_TD
