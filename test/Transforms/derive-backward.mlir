// RUN: attnc-opt %s -split-input-file --attn-derive-backward | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-derive-backward --canonicalize --cse | FileCheck %s --check-prefix=CLEAN

// Softcap: d/ds [30 tanh(s / 30)] = 30 (1 - tanh^2(s / 30)) / 30.
// CHECK-LABEL: attn.tiled_forward @softcap
// CHECK-LABEL: attn.tiled_backward @softcap_bwd
// CHECK-SAME: classification = "static"
// CHECK: mask {
// CHECK: arith.cmpi sge
// CHECK: } score {
// CHECK: math.tanh
// CHECK: } score_grad {
// CHECK-NEXT: ^bb0(%[[S:[^:]+]]: f32,
// CHECK: %[[T:.+]] = math.tanh
// CHECK: %[[T2:.+]] = arith.mulf %[[T]], %[[T]] : f32
// CHECK: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[SECH2:.+]] = arith.subf %[[ONE]], %[[T2]] : f32
// CHECK: %[[DT:.+]] = arith.mulf %[[SECH2]], %{{.+}} : f32
// CHECK: %[[D:.+]] = arith.mulf %{{.+}}, %[[DT]] : f32
// CHECK: attn.yield %[[D]] : f32
// After canonicalization the clones of values the derivative does not use are gone:
// 30 * (1 - tanh^2(s / 30)) * (1 / 30).
// CLEAN-LABEL: attn.tiled_backward @softcap_bwd
// CLEAN: score_grad {
// CLEAN: %[[T:.+]] = math.tanh
// CLEAN-NEXT: %[[T2:.+]] = arith.mulf %[[T]], %[[T]] : f32
// CLEAN-NEXT: %[[SECH2:.+]] = arith.subf %{{.+}}, %[[T2]] : f32
// CLEAN-NEXT: %[[INNER:.+]] = arith.mulf %[[SECH2]], %{{.+}} : f32
// CLEAN-NEXT: %[[OUTER:.+]] = arith.mulf %[[INNER]], %{{.+}} : f32
// CLEAN-NEXT: attn.yield %[[OUTER]] : f32
attn.tiled_forward @softcap attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    kernel = "sm80", block_q = 64, block_kv = 128, warps = 4, stages = 2, smem_bytes = 40960,
    classification = "static", kv_bounds = "interval-search", target = "sm_90a",
    derivation = []} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = arith.cmpi sge, %q, %k : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %c = arith.constant 30.0 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
}

// -----

// No score modification: the gradient is 1.
// CHECK-LABEL: attn.tiled_backward @plain_bwd
// CHECK: score_grad {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: attn.yield %[[ONE]] : f32
attn.tiled_forward @plain attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    kernel = "sm80", block_q = 64, block_kv = 128, warps = 4, stages = 2, smem_bytes = 40960,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}

// -----

// A slope read from an input does not depend on the score: ALiBi's gradient is 1.
// CHECK-LABEL: attn.tiled_backward @alibi_bwd
// CHECK: score_grad {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: attn.load "slopes"
// CHECK-NOT: arith.mulf %[[ONE]]
// CHECK: attn.yield %[[ONE]] : f32
attn.tiled_forward @alibi attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 4, scale = 0.125,
    inputs = {slopes = {dims = ["h"], dtype = f32, slot = 0 : i64}},
    kernel = "sm80", block_q = 64, block_kv = 128, warps = 4, stages = 2, smem_bytes = 40960,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = attn.load "slopes"[%h] : f32
  %1 = arith.subi %k, %q : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.mulf %0, %2 : f32
  %4 = arith.addf %s, %3 : f32
  attn.yield %4 : f32
}
