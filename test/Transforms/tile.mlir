// RUN: attnc-opt %s -split-input-file --attn-expand-builtins --attn-select-tiles="arch=sm_90 smem-per-block=232448" --attn-classify-blocks --attn-tile="target=sm_90a" | FileCheck %s

// CHECK-LABEL: attn.tiled_forward @causal
// CHECK-SAME: block_kv = 64
// CHECK-SAME: block_q = 128
// CHECK-SAME: classification = "static"
// CHECK-SAME: kv_bounds = "interval-search"
// CHECK-SAME: smem_bytes = 65536
// CHECK-SAME: stages = 2
// CHECK-SAME: target = "sm_90a"
// CHECK-SAME: warps = 4
// CHECK: mask {
// CHECK: arith.cmpi sge
// CHECK: attn.yield %{{.+}} : i1
// CHECK: } score {
// CHECK-NOT: attn.attention
attn.attention @causal attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.088388,
    mask_builtin = {kind = "causal"}} mask {} score {}

// -----

// Without a mask every kv tile is streamed; the score region is carried over unchanged.
// CHECK-LABEL: attn.tiled_forward @softcap
// CHECK-SAME: classification = "none"
// CHECK-SAME: kv_bounds = "all"
// CHECK: score {
// CHECK: math.tanh
attn.attention @softcap attributes {dropout = 0.1, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 4, inputs = {}, scale = 0.125,
    score_builtin = {kind = "softcap", cap = 20.0 : f64}} mask {} score {}

// -----

// attn-tile needs the tile sizes and the classification.
// RUN: not attnc-opt %s -split-input-file --attn-tile 2>&1 | FileCheck %s --check-prefix=ORDER
// ORDER: error: 'attn.attention' op run attn-select-tiles and attn-classify-blocks before attn-tile
attn.attention @unprepared attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}
