// The sm_90a rule (wgmma kernel): B_r = 64 rows x 2 consumer warpgroups; B_c from the registers a
// consumer keeps after setmaxnreg (240), in whole 64-key steps.
// RUN: attnc-opt %s --attn-select-tiles="arch=sm_90a smem-per-block=232448 smem-per-sm=233472" | FileCheck %s

// hd128: O + S + P = 64 + 80 + 40 = 184 <= 240 - 56 at B_c = 160, rounded to 128; 3 stages fit,
// but without dropout or a score hook hd128 keeps 2 (measured faster).
// CHECK-LABEL: attn.attention @hd128
// CHECK: tiles = {block_kv = 128 : i64, block_q = 128 : i64
// CHECK-SAME: "wgmma m64nNk16: B_r = 64 x 2 consumer warpgroups = 128
// CHECK-SAME: (two stages: head dims 128 without dropout or a score hook ran faster with two than with three)
// CHECK-SAME: kernel = "sm90"
// CHECK-SAME: smem_bytes = 164952 : i64, stages = 2 : i64, warps = 12 : i64
attn.attention @hd128 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}

// hd128 with dropout (an epilogue): the three stages that fit.
// CHECK-LABEL: attn.attention @hd128_dropout
// CHECK: tiles = {block_kv = 128 : i64, block_q = 128 : i64
// CHECK-NOT: two stages
// CHECK-SAME: smem_bytes = 230528 : i64, stages = 3 : i64, warps = 12 : i64
attn.attention @hd128_dropout attributes {dropout = 0.1, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}

// hd128 with a mask that reads a declared input (a document mask): two stages, as without a mask.
// CHECK-LABEL: attn.attention @hd128_document
// CHECK: tiles = {block_kv = 128 : i64, block_q = 128 : i64
// CHECK-SAME: (two stages: head dims 128 without dropout or a score hook
// CHECK-SAME: stages = 2 : i64
attn.attention @hd128_document attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, scale = 0.125,
    inputs = {doc = {dims = ["pos"], dtype = i32, slot = 0 : i64}}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = attn.load "doc"[%q] : i32
  %1 = attn.load "doc"[%k] : i32
  %2 = arith.cmpi eq, %0, %1 : i32
  attn.yield %2 : i1
} score {}

// hd128 with a per-element score hook (softcap): the three stages that fit (with two its kernel
// spilled).
// CHECK-LABEL: attn.attention @hd128_softcap
// CHECK: tiles = {block_kv = 128 : i64, block_q = 128 : i64
// CHECK-NOT: two stages
// CHECK-SAME: stages = 3 : i64
attn.attention @hd128_softcap attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %c = arith.constant 30.0 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
}

// hd96 (not measured with two stages): the three that fit.
// CHECK-LABEL: attn.attention @hd96
// CHECK: tiles = {block_kv = 128 : i64, block_q = 128 : i64
// CHECK-SAME: stages = 3 : i64
attn.attention @hd96 attributes {dropout = 0.0, element_type = bf16, head_dim = 96,
    head_dim_v = 96, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {}

// hd256: O alone is 128 registers; without an epilogue a reserve of 52 leaves B_c = 80 (not
// rounded to whole 64-key steps: measured faster).
// CHECK-LABEL: attn.attention @hd256
// CHECK: tiles = {block_kv = 80 : i64, block_q = 128 : i64
// CHECK-SAME: kernel = "sm90"
attn.attention @hd256 attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625} mask {} score {}

// hd256 with dropout: its 16 epilogue registers (one Philox call's state) leave the wgmma kernel
// B_c = 48.
// CHECK-LABEL: attn.attention @hd256_dropout
// CHECK: tiles = {block_kv = 48 : i64, block_q = 128 : i64
// CHECK-SAME: 240 - 56 reserved - 16 for the epilogue: B_c = 48
// CHECK-SAME: kernel = "sm90"
attn.attention @hd256_dropout attributes {dropout = 0.1, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625} mask {} score {}
