// RUN: attnc-opt %s -split-input-file | attnc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: attn.attention @plain
// CHECK-SAME: element_type = bf16
// CHECK: mask {
// CHECK-NEXT: } score {
attn.attention @plain attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.088388} mask {
} score {
}

// -----

// The smallest head dims the verifier takes.
// CHECK-LABEL: attn.attention @head_dim_8
// CHECK-SAME: head_dim = 8 : i64, head_dim_v = 8 : i64
attn.attention @head_dim_8 attributes {dropout = 0.0, element_type = bf16, head_dim = 8,
    head_dim_v = 8, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.35} mask {
} score {
}

// -----

// CHECK-LABEL: attn.attention @document
// CHECK: ^bb0(%[[B:[^:]+]]: i32, %[[H:[^:]+]]: i32, %[[Q:[^:]+]]: i32, %[[K:[^:]+]]: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32):
// CHECK: %[[DQ:.+]] = attn.load "doc"[%[[B]], %[[Q]]] : i32
// CHECK: %[[DK:.+]] = attn.load "doc"[%[[B]], %[[K]]] : i32
// CHECK: %[[EQ:.+]] = arith.cmpi eq, %[[DQ]], %[[DK]] : i32
// CHECK: attn.yield %[[EQ]] : i1
// CHECK: score {
// CHECK: math.tanh
attn.attention @document attributes {dropout = 0.1, element_type = f16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, scale = 0.125,
    inputs = {doc = {dims = ["b", "pos"], dtype = i32, slot = 0 : i64}}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = attn.load "doc"[%b, %q] : i32
  %1 = attn.load "doc"[%b, %k] : i32
  %2 = arith.cmpi eq, %0, %1 : i32
  attn.yield %2 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %c = arith.constant 30.0 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
}

// -----

// CHECK-LABEL: attn.tiled_forward @tiled
// CHECK-SAME: block_kv = 64
// CHECK-SAME: block_q = 128
// CHECK-SAME: kv_bounds = "interval-search"
attn.tiled_forward @tiled attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.088388,
    kernel = "sm80", block_q = 128, block_kv = 64, warps = 8, stages = 2, smem_bytes = 98304,
    classification = "static", kv_bounds = "interval-search", target = "sm_90a",
    derivation = ["B_c = 64"]} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = arith.cmpi sge, %q, %k : i32
  attn.yield %0 : i1
} score {
}
