// RUN: attnc-opt %s -split-input-file --attn-expand-builtins --attn-classify-blocks="q-len=1024" | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-expand-builtins --attn-classify-blocks="q-len=1000 kv-len=1500" | FileCheck %s --check-prefix=RECT

// Causal, 8 q tiles x 16 kv tiles of 128 x 64: q tile i has 2i full tiles, 2 partial ones on
// the diagonal and 14 - 2i empty ones.
// CHECK-LABEL: attn.attention @causal
// CHECK-SAME: block_classification = "static"
// CHECK-SAME: block_summary = {empty = 56 : i64, full = 56 : i64, partial = 16 : i64}
// Bottom-right alignment with q_len 1000, kv_len 1500 (offset 500), 8 x 24 tiles; the counts
// were checked by evaluating the mask on every element.
// RECT-LABEL: attn.attention @causal
// RECT-SAME: block_summary = {empty = 56 : i64, full = 112 : i64, partial = 24 : i64}
attn.attention @causal attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "causal"},
    tiles = {block_q = 128 : i64, block_kv = 64 : i64}} mask {} score {}

// -----

// No mask: nothing to classify.
// CHECK-LABEL: attn.attention @full
// CHECK-SAME: block_classification = "none"
// CHECK-SAME: block_summary = {empty = 0 : i64, full = 128 : i64, partial = 0 : i64}
attn.attention @full attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    tiles = {block_q = 128 : i64, block_kv = 64 : i64}} mask {} score {}

// -----

// A mask that reads an input is classified at launch time from the input's values.
// CHECK-LABEL: attn.attention @document
// CHECK-SAME: block_classification = "runtime"
// CHECK-NOT: block_summary
attn.attention @document attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, scale = 0.125,
    inputs = {doc = {dims = ["pos"], dtype = i32, slot = 0 : i64}},
    mask_builtin = {kind = "document", input = "doc"},
    tiles = {block_q = 128 : i64, block_kv = 64 : i64}} mask {} score {}

// -----

// A sliding window of 256 with q_len = kv_len = 1024: per q tile i the window [128i - 255,
// 128i + 127] touches kv tiles 2i - 4 .. 2i + 1 (clipped at 0): full tiles need 64j + 63 <= 128i
// and 64j >= 128i + 127 - 255, i.e. j = 2i - 2, 2i - 1 (when >= 0).
// CHECK-LABEL: attn.attention @window
// CHECK-SAME: block_summary = {empty = 86 : i64, full = 14 : i64, partial = 28 : i64}
attn.attention @window attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    mask_builtin = {kind = "window", size = 256 : i64},
    tiles = {block_q = 128 : i64, block_kv = 64 : i64}} mask {} score {}
