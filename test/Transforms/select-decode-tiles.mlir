// RUN: attnc-opt %s --attn-select-decode-tiles="arch=sm_90a smem-per-block=232448 smem-per-sm=233472 num-sms=132" | FileCheck %s --check-prefix=SM90
// RUN: attnc-opt %s --attn-select-decode-tiles="arch=sm_80 smem-per-block=166912 smem-per-sm=167936 num-sms=108" | FileCheck %s --check-prefix=SM80
// RUN: attnc-opt %s --attn-select-decode-tiles="arch=sm_86 smem-per-block=101376 smem-per-sm=102400 num-sms=84" | FileCheck %s --check-prefix=SM86
// RUN: attnc-opt %s --attn-select-decode-tiles="arch=sm_90a smem-per-block=232448 smem-per-sm=233472 num-sms=132 q-len=4" | FileCheck %s --check-prefix=Q4
// RUN: not attnc-opt %s --attn-select-decode-tiles="regs-per-thread=32" 2>&1 | FileCheck %s --check-prefix=ERR

// hd64, G 1: 32 rows (one kernel serves every q_len), Q resident (2 x 4 x 4 = 32 registers). A
// 64 x 64 x 2 B tile is 8 KB; Little's law asks 4.8 MB / 132 SMs = 36364 B per SM, 18182 per
// block at 2 blocks/SM: 3 tiles loading, 4 stages. On sm_80 (108 SMs) 22223 B per block: still 3.
// SM90-LABEL: attn.attention @hd64_g1
// SM90: decode_tiles = {block_kv = 64 : i64, derivation = ["packed rows: G 1 x q_len 1 = 1; up to 2 m16 fragments a block"
// SM90-SAME: "B_c = 64: 4 warps of 16 keys each against all rows"
// SM90-SAME: "registers: 32 rows; live fp32 O + S + Q = 112 per thread <= 192 (3/4 of 255)"
// SM90-SAME: "Little's law: 4.8 TB/s x 1 us / 132 SMs = 36364 B in flight per SM, 18182 per block at 2 blocks/SM = 3 tile(s) of 8192 B loading while one is read: 4 stages"
// SM90-SAME: q_in_registers = true, rows = 32 : i64, smem_bytes = 36864 : i64, stages = 4 : i64, warps = 4 : i64}
// SM80-LABEL: attn.attention @hd64_g1
// SM80: decode_tiles = {block_kv = 64 : i64
// SM80-SAME: rows = 32 : i64, smem_bytes = 36864 : i64, stages = 4 : i64, warps = 4 : i64}
// ERR: select-decode-tiles.mlir:[[@LINE+1]]:1: error: 'attn.attention' op no decode tile configuration fits sm_80 (167936 bytes of shared memory per SM, 32 registers per thread) for head_dim 64, head_dim_v 64 with 0 input reads
attn.attention @hd64_g1 attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 8, heads_q = 8, inputs = {}, scale = 0.125} mask {} score {}

// hd128, G 4 (32/8): O 128 + S 16 registers, Q (64) from shared memory; 16 KB tiles, 2 loading:
// 3 stages, (32 + 3 x 64) x 128 x 2 B. q_len 4 changes nothing but the row tiles' count.
// SM90-LABEL: attn.attention @hd128_g4
// SM90: decode_tiles = {block_kv = 64 : i64
// SM90-SAME: "packed rows: G 4 x q_len 1 = 4
// SM90-SAME: q_in_registers = false, rows = 32 : i64, smem_bytes = 57344 : i64, stages = 3 : i64, warps = 4 : i64}
// SM80-LABEL: attn.attention @hd128_g4
// SM80: rows = 32 : i64, smem_bytes = 57344 : i64, stages = 3 : i64
// SM86-LABEL: attn.attention @hd128_g4
// SM86: "shared memory: max((Q 32 + 2 K/V buffers x 64) rows x 128 wide x 2 B, merge 2 x 32 rows x (d_v + m, l) x 4 B) = 40960 B <= 50176 B (1/2 of the SM, less its 1024 B reserve)"
// Q4-LABEL: attn.attention @hd128_g4
// Q4: "packed rows: G 4 x q_len 4 = 16; up to 2 m16 fragments a block"
// Q4-SAME: "result: 32 rows (1 row tile(s) per kv head at q_len 4)
// Q4-SAME: rows = 32 : i64, smem_bytes = 57344 : i64
attn.attention @hd128_g4 attributes {dropout = 0.0, element_type = bf16, head_dim = 128,
    head_dim_v = 128, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.0883883} mask {} score {}

// hd256, G 8 (64/8): 32 rows would need O of 2 x 128 fp32 a lane, over the budget: 16 rows. The
// 64-key tiles are 32 KB: 2 stages, (16 + 2 x 64) x 256 x 2 B = 73728 B. sm_86's half SM (50176 B
// with its 1 KB reserve) cannot hold them: one block an SM there.
// SM90-LABEL: attn.attention @hd256_g8
// SM90: decode_tiles = {block_kv = 64 : i64
// SM90-SAME: "registers: 16 rows; live fp32 O + S = 136 per thread <= 192 (3/4 of 255); Q read from shared memory each tile"
// SM90-SAME: rows = 16 : i64, smem_bytes = 73728 : i64, stages = 2 : i64
// SM80-LABEL: attn.attention @hd256_g8
// SM80: smem_bytes = 73728 : i64, stages = 2 : i64
// SM86-LABEL: attn.attention @hd256_g8
// SM86: "shared memory: max((Q 16 + 2 K/V buffers x 64) rows x 256 wide x 2 B, merge 2 x 16 rows x (d_v + m, l) x 4 B) = 73728 B <= 101376 B (1/1 of the SM
// SM86-SAME: smem_bytes = 73728 : i64, stages = 2 : i64
// Q4-LABEL: attn.attention @hd256_g8
// Q4: "result: 16 rows (2 row tile(s) per kv head at q_len 4)
attn.attention @hd256_g8 attributes {dropout = 0.0, element_type = bf16, head_dim = 256,
    head_dim_v = 256, heads_kv = 8, heads_q = 64, inputs = {}, scale = 0.0625} mask {} score {}

// hd128, G 16 (64/4): 32 rows, two row tiles at q_len 4 (64 packed rows).
// SM90-LABEL: attn.attention @hd128_g16
// SM90: "packed rows: G 16 x q_len 1 = 16
// SM90-SAME: "registers: 32 rows; live fp32 O + S = 144 per thread <= 192 (3/4 of 255); Q read from shared memory each tile"
// SM90-SAME: q_in_registers = false, rows = 32 : i64
// Q4-LABEL: attn.attention @hd128_g16
// Q4-NOT: mma-bound
// Q4: "result: 32 rows (2 row tile(s) per kv head at q_len 4)
attn.attention @hd128_g16 attributes {dropout = 0.0, element_type = f16, head_dim = 128,
    head_dim_v = 128, heads_kv = 4, heads_q = 64, inputs = {}, scale = 0.0883883} mask {} score {}

// An epilogue that needs many registers: d 64, d_v 176 at 32 rows is O 176 + S 16 = 192
// registers, which fit 192 with Q in shared memory (its twin without reads), but five input reads
// take 20 of them: 16 rows, Q resident again (88 + 8 + 16).
// Q4-LABEL: attn.attention @bias_reads
// Q4: "registers: 16 rows; live fp32 O + S + Q = 112 per thread <= 172 (3/4 of 255, less 20 for the epilogue)"
// Q4-SAME: rows = 16 : i64
// Q4-LABEL: attn.attention @no_reads
// Q4: "registers: 32 rows; live fp32 O + S = 192 per thread <= 192 (3/4 of 255); Q read from shared memory each tile"
// Q4-SAME: rows = 32 : i64
attn.attention @bias_reads attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 176, heads_kv = 2, heads_q = 16, scale = 0.125,
    inputs = {bias = {dims = ["pos"], dtype = f32, slot = 0 : i64}}} mask {} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %k: i32, %ql: i32, %kl: i32):
  %0 = attn.load "bias"[%q] : f32
  %1 = attn.load "bias"[%k] : f32
  %2 = attn.load "bias"[%b] : f32
  %3 = attn.load "bias"[%h] : f32
  %4 = attn.load "bias"[%ql] : f32
  %5 = arith.addf %s, %0 : f32
  %6 = arith.addf %5, %1 : f32
  %7 = arith.addf %6, %2 : f32
  %8 = arith.addf %7, %3 : f32
  %9 = arith.addf %8, %4 : f32
  attn.yield %9 : f32
}
attn.attention @no_reads attributes {dropout = 0.0, element_type = bf16, head_dim = 64,
    head_dim_v = 176, heads_kv = 2, heads_q = 16, inputs = {}, scale = 0.125} mask {} score {}

// A wide d with a narrow d_v: 64-key rows of 192 elements (d 136 padded to whole 128-byte
// segments) overflow sm_86's half SM even at 2 stages and 16 rows ((16 + 128) x 384 B = 55296 >
// 50176): one block an SM. sm_90a keeps 32 rows and 3 stages.
// SM86-LABEL: attn.attention @wide_d
// SM86: decode_tiles = {block_kv = 64 : i64
// SM86-SAME: rows = 16 : i64, smem_bytes = 55296 : i64, stages = 2 : i64
// SM90-LABEL: attn.attention @wide_d
// SM90: decode_tiles = {block_kv = 64 : i64
// SM90-SAME: rows = 32 : i64
attn.attention @wide_d attributes {dropout = 0.0, element_type = bf16, head_dim = 136,
    head_dim_v = 64, heads_kv = 8, heads_q = 32, inputs = {}, scale = 0.0857} mask {} score {}

// Dropout keeps the forward kernel: no decode tiles.
// SM90-LABEL: attn.attention @dropout
// SM90-NOT: decode_tiles
// SM90-SAME: dropout = 1.000000e-01
attn.attention @dropout attributes {dropout = 0.1, element_type = bf16, head_dim = 64,
    head_dim_v = 64, heads_kv = 1, heads_q = 1, inputs = {}, scale = 0.125} mask {} score {}
