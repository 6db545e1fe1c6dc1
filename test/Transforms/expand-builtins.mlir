// RUN: attnc-opt %s -split-input-file --attn-expand-builtins | FileCheck %s

// Bottom-right causal: q + (kv_len - q_len) >= k.
// CHECK-LABEL: attn.attention @causal
// CHECK-NOT: mask_builtin
// CHECK: ^bb0(%{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[Q:[^:]+]]: i32, %[[K:[^:]+]]: i32, %[[QL:[^:]+]]: i32, %[[KL:[^:]+]]: i32):
// CHECK: %[[OFF:.+]] = arith.subi %[[KL]], %[[QL]] : i32
// CHECK: %[[QA:.+]] = arith.addi %[[Q]], %[[OFF]] : i32
// CHECK: %[[KEEP:.+]] = arith.cmpi sge, %[[QA]], %[[K]] : i32
// CHECK: attn.yield %[[KEEP]] : i1
attn.attention @causal attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "causal"}} mask {} score {}

// -----

// Top-left causal compares the raw indices.
// CHECK-LABEL: attn.attention @causal_top_left
// CHECK: ^bb0(%{{[^:]+}}: i32, %{{[^:]+}}: i32, %[[Q:[^:]+]]: i32, %[[K:[^:]+]]: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32):
// CHECK-NEXT: %[[KEEP:.+]] = arith.cmpi sge, %[[Q]], %[[K]] : i32
// CHECK-NEXT: attn.yield %[[KEEP]] : i1
attn.attention @causal_top_left attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "causal", top_left = true}} mask {} score {}

// -----

// Sliding window of 256: q' >= k && q' - k < 256.
// CHECK-LABEL: attn.attention @window
// CHECK: %[[QA:.+]] = arith.addi
// CHECK: %[[CAUSAL:.+]] = arith.cmpi sge, %[[QA]], %[[K:.+]] : i32
// CHECK: %[[DIST:.+]] = arith.subi %[[QA]], %[[K]] : i32
// CHECK: %[[W:.+]] = arith.constant 256 : i32
// CHECK: %[[NEAR:.+]] = arith.cmpi slt, %[[DIST]], %[[W]] : i32
// CHECK: %[[KEEP:.+]] = arith.andi %[[CAUSAL]], %[[NEAR]] : i1
// CHECK: attn.yield %[[KEEP]] : i1
attn.attention @window attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "window", size = 256 : i64}} mask {} score {}

// -----

// Prefix-LM with a prefix of 100: k < 100 || q' >= k.
// CHECK-LABEL: attn.attention @prefix
// CHECK: %[[P:.+]] = arith.constant 100 : i32
// CHECK: %[[INPREFIX:.+]] = arith.cmpi slt, %[[K:.+]], %[[P]] : i32
// CHECK: %[[CAUSAL:.+]] = arith.cmpi sge, %{{.+}}, %[[K]] : i32
// CHECK: %[[KEEP:.+]] = arith.ori %[[INPREFIX]], %[[CAUSAL]] : i1
// CHECK: attn.yield %[[KEEP]] : i1
attn.attention @prefix attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "prefix", length = 100 : i64}} mask {} score {}

// -----

// Causal document mask over a [b, pos] input.
// CHECK-LABEL: attn.attention @document
// CHECK: ^bb0(%[[B:[^:]+]]: i32, %{{[^:]+}}: i32, %[[Q:[^:]+]]: i32, %[[K:[^:]+]]: i32, %{{[^:]+}}: i32, %{{[^:]+}}: i32):
// CHECK: %[[QA:.+]] = arith.addi %[[Q]],
// CHECK: %[[DQ:.+]] = attn.load "doc"[%[[B]], %[[QA]]] : i32
// CHECK: %[[DK:.+]] = attn.load "doc"[%[[B]], %[[K]]] : i32
// CHECK: %[[SAME:.+]] = arith.cmpi eq, %[[DQ]], %[[DK]] : i32
// CHECK: %[[CAUSAL:.+]] = arith.cmpi sge
// CHECK: %[[KEEP:.+]] = arith.andi %[[SAME]], %[[CAUSAL]] : i1
// CHECK: attn.yield %[[KEEP]] : i1
attn.attention @document attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, scale = 0.125,
    inputs = {doc = {dims = ["b", "pos"], dtype = i32, slot = 0 : i64}},
    mask_builtin = {kind = "document", input = "doc", causal = true}} mask {} score {}

// -----

// Softcap 30: 30 * tanh(score / 30).
// CHECK-LABEL: attn.attention @softcap
// CHECK-NOT: score_builtin
// CHECK: ^bb0(%[[S:[^:]+]]: f32,
// CHECK: %[[C:.+]] = arith.constant 3.000000e+01 : f32
// CHECK: %[[D:.+]] = arith.divf %[[S]], %[[C]] : f32
// CHECK: %[[T:.+]] = math.tanh %[[D]] : f32
// CHECK: %[[R:.+]] = arith.mulf %[[C]], %[[T]] : f32
// CHECK: attn.yield %[[R]] : f32
attn.attention @softcap attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    score_builtin = {kind = "softcap", cap = 30.0 : f64}} mask {} score {}

// -----

// ALiBi with the standard slopes 2^(-8 (h + 1) / heads_q): score - slope_h * |q' - k|.
// CHECK-LABEL: attn.attention @alibi
// CHECK: ^bb0(%[[S:[^:]+]]: f32, %{{[^:]+}}: i32, %[[H:[^:]+]]: i32, %[[Q:[^:]+]]: i32, %[[K:[^:]+]]: i32,
// CHECK: arith.addi %[[H]]
// CHECK: %[[SLOPE:.+]] = math.exp2
// CHECK-NOT: arith.select
// CHECK: %[[QA:.+]] = arith.addi %[[Q]],
// CHECK: %[[OFF:.+]] = arith.subi %[[QA]], %[[K]] : i32
// CHECK: %[[DIST:.+]] = math.absi %[[OFF]] : i32
// CHECK: %[[DISTF:.+]] = arith.sitofp %[[DIST]] : i32 to f32
// CHECK: %[[BIAS:.+]] = arith.mulf %[[SLOPE]], %[[DISTF]] : f32
// CHECK: %[[R:.+]] = arith.subf %[[S]], %[[BIAS]] : f32
// CHECK: attn.yield %[[R]] : f32
attn.attention @alibi attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    score_builtin = {kind = "alibi"}} mask {} score {}

// -----

// 12 heads: the first 8 slopes of 8 heads, then every other slope of 16 heads.
// CHECK-LABEL: attn.attention @alibi_12_heads
// CHECK: %[[FIRST:.+]] = math.exp2
// CHECK: %[[EXTRA:.+]] = math.exp2
// CHECK: %[[C8:.+]] = arith.constant 8 : i32
// CHECK: %[[LOW:.+]] = arith.cmpi slt, %{{.+}}, %[[C8]] : i32
// CHECK: arith.select %[[LOW]], %[[FIRST]], %[[EXTRA]] : f32
attn.attention @alibi_12_heads attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 12, inputs = {}, scale = 0.125,
    score_builtin = {kind = "alibi"}} mask {} score {}

// -----

// ALiBi with slopes from a declared [h] input.
// CHECK-LABEL: attn.attention @alibi_input
// CHECK: %[[SLOPE:.+]] = attn.load "slopes"[%{{.+}}] : f32
// CHECK: arith.mulf %[[SLOPE]]
attn.attention @alibi_input attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, scale = 0.125,
    inputs = {slopes = {dims = ["h"], dtype = f32, slot = 0 : i64}},
    score_builtin = {kind = "alibi", slopes = "slopes"}} mask {} score {}
