// The launch parameters every attnc kernel receives by value: the ABI between the runtime (host)
// and the kernels (device). Plain data only, so host code and NVRTC see the same layout.
#pragma once

#include "attnc/common/platform.h"
#include "attnc/common/philox.h"

namespace attnc {

// The most declared inputs (`doc`, `slopes`, ...) a spec may have.
constexpr int kMaxInputs = 8;

// One declared input tensor: a base pointer and the element stride of each dimension it may be
// indexed by (0 where the input has no such dimension). Element type is known to the Variant.
// `summary`, when not null, holds the input's block summaries (below), written by the kernel's
// `<name>_summary` entry earlier in the same launch; null means interval loads scan elements.
struct InputRef {
  const void* ptr;
  i64 stride_b;
  i64 stride_h;
  i64 stride_pos;
  const void* summary;
};

// Block summaries of a declared input: for every (batch, head) the input can tell apart and every
// block of kSummaryBlock consecutive positions, the least and the greatest element. For f32 inputs
// the two words are floats, and a block that holds a NaN stores NaN in both (the interval loads
// then answer "anything"). A dimension whose stride is 0 reads one element for every index, so the
// summaries keep one entry along it. Positions run over [0, positions) of the launch's input
// extents (max(q_len, kv_len)); the last block may be shorter.
constexpr int kSummaryBlock = 64;

struct SummaryEntry {
  u32 lo, hi;  // i32 or f32 bits, by the input's element type
};

struct SummaryLayout {
  int batches, heads, blocks;  // entries along each dimension; entry (b, h, blk) is at
                               // (b * heads + h) * blocks + blk
  ATTNC_HD i64 entries() const { return i64(batches) * heads * blocks; }
  ATTNC_HD i64 index(int b, int h, int block) const {
    return (i64(batches > 1 ? b : 0) * heads + (heads > 1 ? h : 0)) * blocks + block;
  }
};
ATTNC_HD SummaryLayout summaryLayout(const InputRef& in, int batch, int heads, int positions) {
  return SummaryLayout{in.stride_b != 0 ? batch : 1, in.stride_h != 0 ? heads : 1,
                       (positions + kSummaryBlock - 1) / kSummaryBlock};
}

// A `<name>_summary` entry runs blocks of kSummaryThreads threads, one warp per summary entry, in
// a grid-stride loop: any grid size is correct; the runtime launches summaryBlocks(...) of them.
constexpr int kSummaryThreads = 256;
ATTNC_HD constexpr unsigned summaryBlocks(i64 mostEntries) {
  constexpr int kWarps = kSummaryThreads / 32;
  const i64 blocks = (mostEntries + kWarps - 1) / kWarps;
  return blocks < 1 ? 1u : blocks > 65535 ? 65535u : unsigned(blocks);
}

// The parameters of a `<name>_summary` entry: the launch's inputs (with their summary pointers)
// and the sizes that define their extents (the same names as in FwdParams and BwdParams).
struct SummaryParams {
  int batch;
  int heads_q;
  int q_len;
  int kv_len;
  InputRef inputs[kMaxInputs];
};

// Forward launch parameters. Strides are in elements; any layout whose last (head) dimension
// is contiguous works, so BSHD and BHSD are both plain stride choices.
struct FwdParams {
  const void* q;  // [batch, heads_q,  q_len,  head_dim]   (by the strides below)
  const void* k;  // [batch, heads_kv, kv_len, head_dim]
  const void* v;  // [batch, heads_kv, kv_len, head_dim_v]
  void* o;        // [batch, heads_q,  q_len,  head_dim_v]
  float* lse;     // [batch, heads_q, q_len], contiguous; may be null

  i64 q_stride_b, q_stride_h, q_stride_s;
  i64 k_stride_b, k_stride_h, k_stride_s;
  i64 v_stride_b, v_stride_h, v_stride_s;
  i64 o_stride_b, o_stride_h, o_stride_s;

  int batch;
  int heads_q;
  int heads_kv;
  int q_len;
  int kv_len;

  float scale;        // softmax scale applied to q.k before the score hook
  float dropout_p;    // probability of dropping; 0 when the spec has no dropout
  u64 dropout_seed;
  u64 dropout_offset;
  u32 dropout_keys[kDropoutRoundKeys];  // dropoutKeySchedule(dropout_seed, dropout_offset)

  // The tile classes of the forward's (q tile, kv tile) pairs, written earlier in the same launch
  // by the kernel's `<name>_tile_classes` entry (tile_classes.h), or null: the kernel then searches
  // and classifies its kv tiles itself (kv_tiles.h). One row per (b, h, q tile), row index
  // (b * H + h) * ceil(q_len / B_r) + q tile, where H is heads_q, or 1 (and h 0) for a mask that
  // ignores the head (kv_tiles.h tileClassHeads): `kv_tile_bounds[2 row]`, `[2 row + 1]` are the
  // first and last tile that is not empty (last < first: none); `kv_tile_classes[row *
  // kv_class_words + t / 16]` holds tile t's expr::Tri in bits 2 (t % 16) and 2 (t % 16) + 1.
  const int* kv_tile_bounds;
  const u32* kv_tile_classes;
  int kv_class_words;
  // For the sm_90a forward (null otherwise): the class of each 64-row group of a q tile (one per
  // consumer warpgroup) against each kv tile, 8 bits a tile (group g in bits 2 g, 2 g + 1):
  // `kv_group_classes[row * kv_group_words + t / 4] >> (8 (t % 4) + 2 g)`.
  const u32* kv_group_classes;
  int kv_group_words;
  // For the sm_90a forward on the ordered grid of a spec with tile classes (docs/templates.md), the
  // q tile each rank runs, per (b, h): `q_tile_order[(b * H + h) * ceil(q_len / B_r) + rank]` (H
  // and h as for the rows above), longest kv range first (tile_classes.h writeTileOrder); null:
  // rank r runs q tile tiles - 1 - r.
  const int* q_tile_order;

  InputRef inputs[kMaxInputs];
};

}  // namespace attnc

namespace attnc {

// Backward launch parameters (all four backward kernels take the same struct). Tensors as in
// FwdParams; do_ is dO, the gradient of the loss with respect to O. Gradients dq, dk, dv are
// written (every element: rows no query attends to get zeros). Hooks see the same field names as
// in FwdParams (batch, heads_q, q_len, kv_len, inputs), so one Variant serves both directions.
struct BwdParams {
  const void* q;    // [batch, heads_q,  q_len,  head_dim]
  const void* k;    // [batch, heads_kv, kv_len, head_dim]
  const void* v;    // [batch, heads_kv, kv_len, head_dim_v]
  const void* o;    // [batch, heads_q,  q_len,  head_dim_v]   the forward's output
  const void* do_;  // [batch, heads_q,  q_len,  head_dim_v]
  const float* lse; // [batch, heads_q, q_len], contiguous: the forward's natural-log LSE
  void* dq;         // [batch, heads_q,  q_len,  head_dim]
  void* dk;         // [batch, heads_kv, kv_len, head_dim]
  void* dv;         // [batch, heads_kv, kv_len, head_dim_v]
  // Workspaces (fp32, 16-byte aligned). dq_accum: dqAccumElements(...) floats holding dS K
  // *without* the softmax scale (the convert kernel applies it), in the dK/dV kernel's layout:
  // [batch][heads_q][q_len][head_dim] for the sm80 one, q tiles of 64 rows in column blocks for the
  // sm_90a one (sm90/bwd_config.h, TiledDqLayout); zeroed by backwardPreprocess. Unused (may be null) in deterministic
  // mode. delta: [batch][heads_q][q_len] contiguous, rowsum(dO * O), written by backwardPreprocess.
  float* dq_accum;
  float* delta;

  i64 q_stride_b, q_stride_h, q_stride_s;
  i64 k_stride_b, k_stride_h, k_stride_s;
  i64 v_stride_b, v_stride_h, v_stride_s;
  i64 o_stride_b, o_stride_h, o_stride_s;
  i64 do_stride_b, do_stride_h, do_stride_s;
  i64 dq_stride_b, dq_stride_h, dq_stride_s;
  i64 dk_stride_b, dk_stride_h, dk_stride_s;
  i64 dv_stride_b, dv_stride_h, dv_stride_s;

  int batch;
  int heads_q;
  int heads_kv;
  int q_len;
  int kv_len;

  float scale;
  float dropout_p;
  u64 dropout_seed;
  u64 dropout_offset;
  u32 dropout_keys[kDropoutRoundKeys];  // dropoutKeySchedule(dropout_seed, dropout_offset)

  // The classes of the dK/dV kernel's (kv tile, q tile) pairs, as FwdParams' for the forward but
  // with rows (b * H + h) * ceil(kv_len / its B_c) + kv tile (H and h as there) and q tiles
  // along them (`<name>_bwd_tile_classes`), or null.
  const int* q_tile_bounds;
  const u32* q_tile_classes;
  int q_class_words;
  // The classes of the sm_90a dQ kernel's (q tile, kv tile) pairs (sm90/bwd_dq.h), as FwdParams'
  // kv_tile_* but for its tiling: rows (b * H + h) * ceil(q_len / 128) + q tile (H and h as
  // there; its q tiles start at multiples of 128), kv tiles of its B_c along them
  // (`<name>_bwd_q_tile_classes`), or null. No other walk reads them.
  const int* kv_tile_bounds;
  const u32* kv_tile_classes;
  int kv_class_words;

  InputRef inputs[kMaxInputs];
};

// Floats of BwdParams::dq_accum: enough for either dK/dV kernel's layout. The sm_90a one keeps
// whole q tiles of 64 rows and pads the head dim to its two consumers' column blocks (16 or 32
// wide up to hd64, else whole 64-column chunks each: an even number of chunks).
ATTNC_HD constexpr i64 dqAccumElements(int batch, int heads_q, int q_len, int head_dim) {
  return i64(batch) * heads_q * ((q_len + 63) / 64 * 64) *
         (head_dim <= 64 ? (head_dim + 31) / 32 * 32 : (head_dim + 127) / 128 * 128);
}
// Floats of BwdParams::delta.
ATTNC_HD constexpr i64 deltaElements(int batch, int heads_q, int q_len) {
  return i64(batch) * heads_q * q_len;
}

}  // namespace attnc

namespace attnc {

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled): the TMA unit's description of
// a tensor in global memory and of the box one copy moves. Opaque to the kernels.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// The sm_90a forward kernel's parameters: FwdParams plus the tensor maps its TMA copies read Q, K
// and V through (4-D: head dim, sequence, head, batch; boxes of 64 head-dim elements by the tile's
// rows, 128-byte swizzled). Passed as a __grid_constant__ so the maps stay in parameter memory.
struct FwdParamsTma {
  FwdParams base;
  TensorMap tma_q, tma_k, tma_v;
};

// The sm_90a backward dK/dV kernel's parameters: BwdParams plus the tensor maps its TMA copies read
// through (4-D as for FwdParamsTma): Q and dO in boxes of 64 rows, K and V in boxes of the block's
// kv rows.
struct BwdParamsTma {
  BwdParams base;
  TensorMap tma_q, tma_k, tma_v, tma_do;
};

}  // namespace attnc

namespace attnc {

// Where each sequence's rows are, for launches over sequences of different lengths (varlen: Q/O
// and K/V packed along one row axis) or over a paged K/V pool; all null and 0: contiguous, the
// launch's FwdParams strides alone. Plain data beside a FwdParams or BwdParams (never inside, so
// their layout and the kernels that take them are unchanged). The kernels trust none of these
// values: lengths, offsets and page ids are clamped where read (seq_params.h), so a wrong array
// gives wrong numbers, never an access outside the tensors.
struct SeqLayout {
  const int* cu_seqlens_q;   // [batch + 1] first packed Q/O row of each sequence, or null
  const int* cu_seqlens_kv;  // [batch + 1] first packed K/V row of each sequence, or null
  const int* seq_lens_kv;    // [batch] kv lengths (paged), or null
  const int* block_table;    // [batch, block_table_stride] page ids, or null
  i64 block_table_stride;    // entries between two sequences' rows of block_table
  int max_pages;             // entries of a row that hold pages (<= block_table_stride)
  int page_shift;            // a page holds 1 << page_shift rows (0..8: 1..256 rows)
  int num_pages;             // pages in the pool: ids are clamped to [0, num_pages)
  // The pool's strides between pages; k/v_stride_s and _h keep their meaning within a page.
  i64 k_stride_page, v_stride_page;
  i64 total_q, total_kv;  // packed rows: offsets and lengths are clamped to them
};

}  // namespace attnc

namespace attnc {

// The decode kernel's parameters (sm80/decode.h): a forward's, where each sequence's rows are, and
// where the kv splits leave their partials. base.q_len and base.kv_len are the launch's longest
// sequence's (the grid and the declared inputs' extents are sized by them).
struct DecodeParams {
  FwdParams base;
  SeqLayout seq;
  // With more than one split: each split's normalized O and its LSE for every (query head, row),
  // [splits][heads_q][partial_rows][head_dim_v] and [splits][heads_q][partial_rows] fp32; a row is
  // b x base.q_len + q, or the packed row with cu_seqlens_q. Null with one split: O and the LSE
  // are written directly.
  float* o_part;
  float* lse_part;
  i64 partial_rows;
  int splits;       // gridDim.x
  int split_tiles;  // kv tiles a split reads (the last may read fewer, or none)
};

// The combine kernel's parameters (sm80/decode.h decodeCombine): the partials of DecodeParams and
// the O and LSE they merge into. Row r of the partials is query r % q_len of sequence r / q_len
// (packed Q: q_len = total_q, one "sequence" whose O and LSE rows are the packed rows).
struct CombineParams {
  void* o;
  float* lse;  // [rows / q_len, heads_q, q_len], or null
  i64 o_stride_b, o_stride_h, o_stride_s;
  const float* o_part;
  const float* lse_part;
  i64 rows;  // DecodeParams::partial_rows
  int q_len;
  int heads_q;
  int splits;
};

}  // namespace attnc
