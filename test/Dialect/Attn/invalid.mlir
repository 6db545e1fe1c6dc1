// RUN: attnc-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{head_dim must be a multiple of 8 in [8, 256], got 100}}
attn.attention @bad_head_dim attributes {dropout = 0.0, element_type = bf16, head_dim = 100,
    head_dim_v = 128, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {}

// -----

// expected-error @+1 {{element_type must be bf16 or f16, got 'f32'}}
attn.attention @bad_dtype attributes {dropout = 0.0, element_type = f32, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {}

// -----

// expected-error @+1 {{heads_kv (3) must divide heads_q (8)}}
attn.attention @bad_heads attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 3, heads_q = 8, inputs = {}, scale = 0.1} mask {} score {}

// -----

// expected-error @+1 {{dropout must be in [0, 1), got 1}}
attn.attention @bad_dropout attributes {dropout = 1.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {}

// -----

// expected-error @+1 {{dropout_rounds must be in [7, 10], got 5}}
attn.attention @bad_dropout_rounds attributes {dropout = 0.1, dropout_rounds = 5, element_type = bf16,
    head_dim = 64, head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {}

// -----

// expected-error @+1 {{scale must be positive, got -1}}
attn.attention @bad_scale attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = -1.0} mask {} score {}

// -----

// expected-error @+1 {{'mask' region must end in attn.yield of one 'i1'}}
attn.attention @mask_yields_f32 attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = arith.constant 1.0 : f32
  attn.yield %0 : f32
} score {}

// -----

// expected-error @+1 {{'score' region must take 7 arguments (score: f32, b, h, q, k, q_len, kv_len: i32)}}
attn.attention @score_args attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {} score {
^bb0(%s: f32):
  attn.yield %s : f32
}

// -----

attn.attention @undeclared attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  // expected-error @+1 {{reads undeclared input 'doc'}}
  %0 = attn.load "doc"[%q] : i32
  %1 = arith.cmpi eq, %0, %k : i32
  attn.yield %1 : i1
} score {}

// -----

attn.attention @index_count attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, scale = 0.1,
    inputs = {doc = {dims = ["b", "pos"], dtype = i32, slot = 0 : i64}}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  // expected-error @+1 {{input 'doc' has 2 dims but is indexed with 1}}
  %0 = attn.load "doc"[%q] : i32
  %1 = arith.cmpi eq, %0, %k : i32
  attn.yield %1 : i1
} score {}

// -----

attn.attention @load_type attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, scale = 0.1,
    inputs = {slopes = {dims = ["h"], dtype = f32, slot = 0 : i64}}} mask {} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  // expected-error @+1 {{input 'slopes' has dtype 'f32' but the load yields 'i32'}}
  %0 = attn.load "slopes"[%h] : i32
  attn.yield %s : f32
}

// -----

// expected-error @+1 {{input 'doc' dims must be distinct names among "b", "h", "pos"}}
attn.attention @bad_dims attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, scale = 0.1,
    inputs = {doc = {dims = ["pos", "pos"], dtype = i32, slot = 0 : i64}}} mask {} score {}

// -----

// expected-error @+1 {{has both mask_builtin and a mask region}}
attn.attention @both attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.1,
    mask_builtin = {kind = "causal"}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = arith.cmpi sge, %q, %k : i32
  attn.yield %0 : i1
} score {}

// -----

// expected-error @+1 {{block_q (96) must be a multiple of 16 x warps (4)}}
attn.tiled_forward @bad_tiles attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.088388,
    kernel = "sm80", block_q = 96, block_kv = 64, warps = 4, stages = 2, smem_bytes = 98304,
    classification = "static", kv_bounds = "interval-search", target = "sm_90a",
    derivation = []} mask {} score {}
