// RUN: attnc-opt %s --attn-derive-backward -verify-diagnostics
// Too little shared memory for any backward tiles: the error names the budget.
// RUN: not attnc-opt %s --attn-derive-backward="smem-per-block=16384" 2>&1 | FileCheck %s --check-prefix=SMEM
// SMEM: error: 'attn.tiled_forward' op no backward tile configuration for head_dim 64 (v: 64) fits 16384 bytes of shared memory per block

// An op with no derivative rule (the spec's expressions never produce one): the pass says which.
// expected-error @+1 {{the score's derivative cannot be formed: math.cos: has no derivative rule}}
attn.tiled_forward @bad attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125,
    kernel = "sm80", block_q = 64, block_kv = 128, warps = 4, stages = 2, smem_bytes = 40960,
    classification = "none", kv_bounds = "all", target = "sm_90a", derivation = []} mask {
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = math.cos %s : f32
  attn.yield %0 : f32
}
