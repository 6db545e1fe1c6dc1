// RUN: attnc-opt %s -split-input-file --attn-derive-backward | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-derive-backward --canonicalize --cse | FileCheck %s --check-prefix=CLEAN
// RUN: attnc-opt %s -split-input-file --attn-derive-backward=smem-per-block=232448 | FileCheck %s --check-prefix=HOPPER

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

// -----

// Backward tiles (166912 B shared, 255 registers): at head dim 128 the kept K/V tile is
// FlashAttention's, 128 rows, with 64 streamed Q/dO rows (dK/dV 128 + fragments 128 registers).
// CHECK-LABEL: attn.tiled_backward @tiles_hd128_bwd
// CHECK-SAME: kv_block_kv = 128 : i64, kv_block_q = 64 : i64, kv_kernel = "sm80", kv_smem_bytes = 131584 : i64, kv_stages = 1 : i64, kv_warps = 8 : i64
attn.tiled_forward @tiles_hd128 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.088,
    kernel = "sm80", block_q = 128, block_kv = 64, warps = 4, stages = 2, smem_bytes = 65536,
    classification = "none", kv_bounds = "all", target = "sm_80", derivation = []} mask {
} score {
}

// -----

// At head dim 256, 64 kept rows and 64 streamed rows would need 128 + 256 registers: the streamed
// tile halves (one S^T slice per warp), the kept tile stays.
// CHECK-LABEL: attn.tiled_backward @tiles_hd256_bwd
// CHECK-SAME: kv_block_kv = 64 : i64, kv_block_q = 32 : i64, kv_kernel = "sm80", kv_smem_bytes = 114944 : i64, kv_stages = 1 : i64
attn.tiled_forward @tiles_hd256 attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625,
    kernel = "sm80", block_q = 128, block_kv = 64, warps = 8, stages = 2, smem_bytes = 131072,
    classification = "none", kv_bounds = "all", target = "sm_80", derivation = []} mask {
} score {
}

// -----

// Dropout's 40 epilogue registers do not fit beside 64 kept rows at head dim 256 either way: the
// kept tile halves, and with its 2 x 4 warps each warp takes 16 of the 64 streamed rows (one slice).
// CHECK-LABEL: attn.tiled_backward @tiles_hd256_dropout_bwd
// CHECK-SAME: kv_block_kv = 32 : i64, kv_block_q = 64 : i64
attn.tiled_forward @tiles_hd256_dropout attributes {dropout = 0.1, element_type = bf16,
    head_dim = 256, head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625,
    kernel = "sm80", block_q = 128, block_kv = 64, warps = 8, stages = 2, smem_bytes = 131072,
    classification = "none", kv_bounds = "all", target = "sm_80", derivation = []} mask {
} score {
}

// -----

// sm_90a, head dim 128: the wgmma dK/dV kernel (2 consumer warpgroups x 64 kv rows, q tiles of 64)
// fits its 240 registers (208 modelled + 32 reserved); 3 Q/dO stages fit the 227 KiB but hd128
// without dropout keeps two (measured faster); the sm80 tiles stay for the delta and
// dQ-conversion kernels.
// HOPPER-LABEL: attn.tiled_backward @hopper_hd128_bwd
// HOPPER-SAME: 2 Q/dO stages, 198760 B <= 232448 B shared (two stages: head dims 128 without dropout ran faster with two than with three)
// The sm_90a dQ kernel serves the deterministic backward: kv tiles of 64 keys (dQ 64 + S, dP 128 +
// dS 16 registers), 4 K/V stages.
// HOPPER-SAME: sm_90a dQ kernel: 2 consumer warpgroups x 64 q rows, kv tiles of 64 keys (registers 144: dQ, S, dP, dS <= 176), 4 K/V stages, 197736 B <= 232448 B shared; the deterministic backward
// HOPPER-SAME: hopper_q_block_kv = 64 : i64, hopper_q_smem_bytes = 197736 : i64, hopper_q_stages = 4 : i64, hopper_separate_dq = 0 : i64
// HOPPER-SAME: hopper_smem_bytes = 198760 : i64, hopper_split = 0 : i64, hopper_stages = 2 : i64
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_hd128 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.088,
    kernel = "sm90", block_q = 128, block_kv = 128, warps = 12, stages = 3, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}

// -----

// sm_90a with dropout at head dim 128: the keep bits are made before S^T and dP^T are live, so
// dropout costs the wgmma dK/dV kernel no register (ptxas: no spill).
// With dropout the dK/dV kernel keeps the three Q/dO stages that fit (the note ends there).
// HOPPER-LABEL: attn.tiled_backward @hopper_dropout_bwd
// HOPPER-SAME: sm_90a dK/dV kernel: 2 consumer warpgroups
// HOPPER-SAME: + 0 epilogue = 240 <= 240 per consumer thread; 3 Q/dO stages, 232072 B <= 232448 B shared"
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_dropout attributes {dropout = 0.1, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.088,
    kernel = "sm90", block_q = 128, block_kv = 128, warps = 12, stages = 3, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}

// -----

// sm_90a at head dim 256: dK and dV alone take 256 registers, so the consumers share 64 kv rows
// and each keeps 128 columns of dK and dV (the head-dim split); 2 stages fit without dQ tiles.
// HOPPER-LABEL: attn.tiled_backward @hopper_hd256_bwd
// HOPPER-SAME: the head-dim split, the consumers sharing 64 kv rows and each keeping 128 of dK's and 128 of dV's columns
// With the split the default backward also takes the sm_90a dQ kernel (no dq_accum): kv tiles of
// 32 keys (hd256's dQ alone is 128 registers), 3 K/V stages.
// HOPPER-SAME: sm_90a dQ kernel: 2 consumer warpgroups x 64 q rows, kv tiles of 32 keys (registers 168: dQ, S, dP, dS <= 176), 3 K/V stages, 230480 B <= 232448 B shared; the default backward too
// HOPPER-SAME: hopper_q_block_kv = 32 : i64, hopper_q_smem_bytes = 230480 : i64, hopper_q_stages = 3 : i64, hopper_separate_dq = 1 : i64
// HOPPER-SAME: hopper_smem_bytes = 231528 : i64, hopper_split = 1 : i64, hopper_stages = 2 : i64
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_hd256 attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625,
    kernel = "sm90", block_q = 128, block_kv = 64, warps = 12, stages = 2, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}

// -----

// sm_90a at head dim 192 (three 64-column chunks) with d_v 128: the split pads dK's head dim to
// four chunks, the second consumer's last 64 columns zeros; V's two chunks split as they are.
// HOPPER-LABEL: attn.tiled_backward @hopper_hd192_bwd
// HOPPER-SAME: each keeping 128 of dK's of 192 padded to 256 and 64 of dV's columns
// HOPPER-SAME: hopper_smem_bytes = 232072 : i64, hopper_split = 1 : i64, hopper_stages = 3 : i64
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_hd192 attributes {dropout = 0.0, element_type = bf16, head_dim = 192,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.072,
    kernel = "sm90", block_q = 128, block_kv = 64, warps = 12, stages = 2, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}

// -----

// sm_90a at head dim 256 with softcap, whose derivative depends on the score: the head-dim split
// serves it since its consumers compute half of S^T and dP^T each (before, it spilled 12 bytes and
// the sm80 kernel served).
// HOPPER-LABEL: attn.tiled_backward @hopper_hd256_softcap_bwd
// HOPPER-SAME: the head-dim split, the consumers sharing 64 kv rows
// HOPPER-SAME: hopper_split = 1 : i64
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_hd256_softcap attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.0625,
    kernel = "sm90", block_q = 128, block_kv = 64, warps = 12, stages = 2, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %c = arith.constant 3.000000e+01 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
}

// -----

// sm_90a with head_dim_v = 64 < head_dim = 128: the same wgmma dK/dV kernel (dK and S^T 128 wide,
// dV and dP^T 64 wide), with fewer registers than hd128 and a fourth stage.
// HOPPER-LABEL: attn.tiled_backward @hopper_dv64_bwd
// HOPPER-SAME: kv_kernel = "sm90"
attn.tiled_forward @hopper_dv64 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.088,
    kernel = "sm90", block_q = 128, block_kv = 128, warps = 12, stages = 3, smem_bytes = 230528,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
}
