// RUN: attnc-opt %s --attn-select-tiles="arch=sm_90 smem-per-block=232448 smem-per-sm=233472" | FileCheck %s --check-prefix=SM90
// RUN: attnc-opt %s --attn-select-tiles="arch=sm_86 smem-per-block=101376 smem-per-sm=102400" | FileCheck %s --check-prefix=SM86

// hd64 on sm_90: M = 116224, B_c = ceil(116224 / 256) = 454 -> 128; B_r = min(454, 64) = 64,
// raised to 128 for work per block; 32 rows per warp then leave B_c = 64 for the registers:
// 32 x (64 + 64) / 32 + 32 resident Q = 160 <= 192 (B_c = 128 would need 224).
// SM90-LABEL: attn.attention @hd64
// SM90: tiles = {block_kv = 64 : i64, block_q = 128 : i64
// SM90-SAME: "FlashAttention: B_c = ceil(M / 4d) = ceil(116224 / 256) = 454; B_r = min(B_c, d) = 64"
// SM90-SAME: "work per block: B_r = 128
// SM90-SAME: "registers: 32 rows per warp (4 warps, 128 threads); live fp32 O + S accumulators and resident Q = 160 per thread <= 192 (3/4 of 255): B_c = 64"
// SM90-SAME: smem_bytes = 32768 : i64, stages = 2 : i64, warps = 4 : i64
// hd64 on sm_86: M = 50688, B_c = 198 -> 128; the same fit.
// SM86-LABEL: attn.attention @hd64
// SM86: tiles = {block_kv = 64 : i64, block_q = 128 : i64
attn.attention @hd64 attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}

// hd128 on sm_90: B_c = 227 -> 128; B_r = 128, 32 rows per warp, so the register budget halves
// B_c to 64: 32 x (128 + 64) / 32 = 192 live registers.
// SM90-LABEL: attn.attention @hd128
// SM90: tiles = {block_kv = 64 : i64, block_q = 128 : i64
// SM90-SAME: "registers: 32 rows per warp (4 warps, 128 threads); live fp32 O + S accumulators and resident Q = 192 per thread <= 192 (3/4 of 255): B_c = 64"
// SM90-SAME: smem_bytes = 65536 : i64
// SM90-SAME: warps = 4 : i64
// hd128 on sm_86: B_c = ceil(50688 / 512) = 99 -> 64; B_r = min(99, 128) = 99 -> 64 -> 128.
// SM86-LABEL: attn.attention @hd128
// SM86: tiles = {block_kv = 64 : i64, block_q = 128 : i64
attn.attention @hd128 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}

// hd256: 32 rows per warp cannot fit (32 x (256 + 32) / 32 = 288 > 192): 8 warps of 16 rows,
// B_c = 114 -> 64 on sm_90: (128 + 2 x 64) rows x 256 x 2 B = 131072 B.
// SM90-LABEL: attn.attention @hd256
// SM90: tiles = {block_kv = 64 : i64, block_q = 128 : i64
// SM90-SAME: "registers: 16 rows per warp (8 warps, 256 threads)
// SM90-SAME: smem_bytes = 131072 : i64
// On sm_86, M = 50688 gives B_c = ceil(50688 / 1024) = 50 -> 32: (128 + 2 x 32) x 256 x 2 B.
// SM86-LABEL: attn.attention @hd256
// SM86: tiles = {block_kv = 32 : i64, block_q = 128 : i64
// SM86-SAME: smem_bytes = 98304 : i64
attn.attention @hd256 attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, scale = 0.0625, inputs = {}} mask {} score {}

// A head dim that is not a multiple of 16 is padded for the k16 mma step.
// SM90-LABEL: attn.attention @hd72
// SM90: "d = head_dim 72 (v: 72) padded to the k16 mma step = 80 (v: 80)"
// SM90-SAME: "shared memory: (Q 128 + 2 K/V buffers x 64) rows x 128 wide x 2 B = 65536 B <= 232448 B"
attn.attention @hd72 attributes {dropout = 0.0, element_type = f16, head_dim = 72,
    head_dim_v = 72, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}
