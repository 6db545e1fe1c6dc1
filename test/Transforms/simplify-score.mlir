// RUN: attnc-opt %s -split-input-file --attn-expand-builtins --attn-simplify-score | FileCheck %s
// The score may assume the mask's conjuncts: ALiBi's abs(q' - k) is q' - k wherever the mask
// keeps only k <= q'.

// Causal: the abs goes.
// CHECK-LABEL: attn.attention @alibi_causal
// CHECK: score {
// CHECK: math.exp2
// CHECK: %[[OFF:.+]] = arith.subi %{{.+}}, %arg4 : i32
// CHECK-NOT: math.absi
// CHECK: arith.sitofp %[[OFF]] : i32 to f32
// CHECK: attn.yield
attn.attention @alibi_causal attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "causal"}, score_builtin = {kind = "alibi"}}
    mask {} score {}

// -----

// A sliding window is causal and more: the abs goes.
// CHECK-LABEL: attn.attention @alibi_window
// CHECK: score {
// CHECK-NOT: math.absi
// CHECK: attn.yield
attn.attention @alibi_window attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "window", size = 256 : i64},
    score_builtin = {kind = "alibi"}} mask {} score {}

// -----

// Without a mask, or with a top-left causal mask while the score measures from the bottom-right
// (different expressions), or with prefix-LM's disjunction, nothing is known: the abs stays.
// CHECK-LABEL: attn.attention @alibi_full
// CHECK: math.absi
attn.attention @alibi_full attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    score_builtin = {kind = "alibi"}} mask {} score {}

// -----

// CHECK-LABEL: attn.attention @alibi_top_left
// CHECK: score {
// CHECK: math.absi
attn.attention @alibi_top_left attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "causal", top_left = true}, score_builtin = {kind = "alibi"}}
    mask {} score {}

// -----

// CHECK-LABEL: attn.attention @alibi_prefix
// CHECK: score {
// CHECK: math.absi
attn.attention @alibi_prefix attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 16, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "prefix", length = 64 : i64},
    score_builtin = {kind = "alibi"}} mask {} score {}
