// Compile-time shape of the sm_90a backward dK/dV kernel (bwd_dkdv.h): one producer warpgroup that
// issues the TMA copies and `Consumers` warpgroups of 64 kv rows each that run the five wgmma
// GEMMs, and of the dQ kernel (bwd_dq.h, DqConfig below). The delta and dQ-conversion kernels are
// the sm80 ones.
// attn-derive-backward derives the same numbers (TileRule.cpp calls bwdSmemBytes()) and the
// generated code static_asserts that they agree.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"
#include "attnc/sm90/config.h"

namespace attnc {
namespace sm90 {

// Consumer warpgroups of 64 kv rows each: the block keeps 64 x kBwdConsumers keys and runs
// 128 x (kBwdConsumers + 1) threads.
constexpr int kBwdConsumers = 2;

// Queries per streamed tile: wgmma's M for dQ = dS K, and the N of S^T = K Q^T and dP^T = V dO^T.
constexpr int kBwdBlockQ = 64;

// dQ's head-dim columns per consumer (wgmma N, a multiple of 16; columns past head_dim read the
// K tile's zero fill and are not stored). An MN-major operand must not cross a 64-column chunk of
// the K tile except at its start (the hardware steps to the next chunk only from a chunk start:
// measured, hd72 and hd96 were wrong with 48 columns each), so above 64 columns each consumer takes
// whole chunks.
ATTNC_HD constexpr int dqColumns(int headDim, int consumers) {
  return roundUp(headDim, 16) <= 64 ? roundUp(headDim, 16 * consumers) / consumers
                                    : roundUp(roundUp(headDim, 16 * consumers) / consumers, 64);
}

// The head-dim split (Split): where a consumer cannot hold dK and dV of its 64 kv rows over the
// whole head dims (hd256: 256 registers a thread for them alone; hd160-192: 160-192), the
// consumers share the same 64 kv rows and each keeps the dK and dV columns of its splitColumns()
// share (above 64 columns its dqColumns() share, as for dQ). Each computes S^T, dP^T and dS^T for
// half of the q tile's columns (wgmma N = 32), and both halves of P^T and dS^T meet in shared
// memory, where both consumers' dV, dK and dQ GEMMs read them (each consumer waits for the
// other's half every q tile: faster than both computing them whole, docs/design/sm90-backward.md).
// A share is whole 64-column chunks of the tiles: a head dim of an odd number of chunks (129-192)
// is padded with one more chunk in shared memory, which TMA never writes and the kernel zeroes
// once (bwd_smem.h zeroPaddingChunks), so the last consumer's dK, dV and dQ GEMMs also run over
// zero columns, whose results are never stored (splitChunks).
ATTNC_HD constexpr int bwdKvRows(int consumers, bool split) { return split ? 64 : 64 * consumers; }
// The 64-column chunks of a K, V, Q or dO tile in shared memory: with the split, padded to a
// multiple of the consumers.
ATTNC_HD constexpr int splitChunks(int headDim, int consumers, bool split) {
  return split ? roundUp(ceilDiv(headDim, 64), consumers) : ceilDiv(headDim, 64);
}
// A consumer's share of a head dim's columns with the split: whole chunks of the padded tile, the
// dqColumns() share above 64 columns. A head dim of at most 64 columns is padded to two chunks, so
// the second consumer's share is all padding: its dV (or dK) GEMM runs over zero columns of dO (or
// Q) and nothing of it is stored. That is what the split is for at head dims 200-256 beside a d_v
// of at most 64 and at 8-64 beside a d_v of 200-256, where the plain kernel's registers do not fit.
ATTNC_HD constexpr int splitColumns(int headDim, int consumers) {
  return 64 * splitChunks(headDim, consumers, true) / consumers;
}
ATTNC_HD constexpr int bwdColumns(int headDim, int consumers, bool split) {
  return split ? splitColumns(headDim, consumers) : roundUp(headDim, 16);
}
// The 64-column chunks of the K and Q tiles: the head dim's (splitChunks with the split); without
// the split, also room for both consumers' dQ columns, which are whole chunks above 64 columns
// (dqColumns): head dims 129-192 give each consumer 128 dQ columns over a K tile of three chunks,
// so the tile gets a fourth, which TMA never writes and the kernel zeroes once (bwd_smem.h
// zeroPaddingChunks), as the split's. Not with a separate dQ (SeparateDq below: the kernel
// computes no dQ).
ATTNC_HD constexpr int keyTileChunks(int headDim, int consumers, bool split,
                                     bool separateDq = false) {
  return split        ? splitChunks(headDim, consumers, true)
         : separateDq ? ceilDiv(headDim, 64)
                      : maxOf(ceilDiv(headDim, 64),
                              ceilDiv(dqColumns(headDim, consumers) * consumers, 64));
}
// Whether the split's own dQ (its `_kv` entry: each consumer's dqColumns() share in 64-column
// parts, from registers into dq_accum) is whole chunks: a head dim above 64 columns. Below it the
// split serves only beside the sm_90a dQ kernel (separateDqKernel), its `_kv_nodq` entry alone.
ATTNC_HD constexpr bool splitDqFits(int headDim, int consumers) {
  return dqColumns(headDim, consumers) == splitColumns(headDim, consumers);
}

// Shared memory: 1024 bytes of alignment slack; the block's K and V (kept for the whole loop); per
// stage a Q and a dO tile (128-byte-swizzled boxes 64 elements wide) and their LSE and delta rows;
// two buffers of dS^T, one 64 x 64 tile per consumer each (with the split, whose consumers share
// their rows: the block's dS^T and P^T); one fp32 dQ tile (64 x dqColumns) per
// consumer, except with the split (its dQ goes to dq_accum by vector reductions from registers:
// hd256's tiles leave no room for it) and with a separate dQ (no dQ at all); per stage two
// mbarriers and a schedule slot, K/V's mbarrier and two per dS^T buffer.
ATTNC_HD constexpr int bwdSmemBytes(int headDim, int headDimV, int consumers, int stages,
                                    bool split = false, bool separateDq = false) {
  const int chunks = keyTileChunks(headDim, consumers, split, separateDq) +
                     splitChunks(headDimV, consumers, split);
  return 1024 + bwdKvRows(consumers, split) * chunks * 128 + stages * kBwdBlockQ * chunks * 128 +
         2 * consumers * 64 * kBwdBlockQ * 2 +
         (split || separateDq ? 0 : consumers * 64 * dqColumns(headDim, consumers) * 4) +
         stages * kBwdBlockQ * 8 + 8 * (1 + 2 * stages + 4) + 16 * stages;
}

// Registers a consumer thread keeps, as modelled: the dK and dV accumulators (64 rows x its head-dim
// columns over 128 threads), then the larger of the dS step (S^T and dP^T accumulators, 64 x 64
// each, and the packed dS^T) and the dQ step (its 64 x dqColumns / 128 accumulators and the packed
// dS^T that dK's GEMM still reads).
// With the split, S^T and dP^T are 64 x 32 (half the q tile), P^T and dS^T leave through shared
// memory, and the dQ step holds both parts of the consumer's columns (bwd_dkdv_steps.h kLateDq).
ATTNC_HD constexpr int bwdConsumerRegisters(int headDim, int headDimV, bool split = false) {
  return (bwdColumns(headDim, kBwdConsumers, split) + bwdColumns(headDimV, kBwdConsumers, split)) / 2 +
         (split ? maxOf(kBwdBlockQ / 2 + kBwdBlockQ / 4, dqColumns(headDim, kBwdConsumers) / 2)
                : maxOf(kBwdBlockQ + kBwdBlockQ / 4,
                        dqColumns(headDim, kBwdConsumers) / 2 + kBwdBlockQ / 4));
}

// Whether the dK/dV kernel's two consumers take turns issuing their GEMMs (ping-pong, bwd_dkdv.h),
// so that one's elementwise steps run under the other's GEMMs: not where the elementwise steps
// (the mask's input reads, Philox, the score hook and its derivative) outweigh the GEMMs, which
// the turns only delay, nor with the head-dim split, whose consumers already wait for each other
// every q tile (docs/design/sm90-backward.md). `attnc explain --backward` prints the choice.
ATTNC_HD constexpr bool bwdPingPong(bool split, bool dropout, bool maskReadsInputs, bool scoreHook) {
  return !split && !dropout && !maskReadsInputs && !scoreHook;
}

// The head-dim split's dQ reduction (bwd_dkdv_dq.h): in an n8 tile of the m16n8 accumulator layout,
// lanes l and l ^ 1 hold columns c, c + 1 and c + 2, c + 3 of rows R and R + 8 (elements 0, 1 of
// row R, 2, 3 of row R + 8). Each sends the other its elements sent(l), sent(l) + 1 and adds four
// consecutive floats of one row: the even lane row R's (its own 0, 1, then the pair received), the
// odd lane row R + 8's (the pair received, then its own 2, 3). row() is inside the warp's 16 rows,
// column() inside the 8 n8 columns' tile n.
struct DqPairReduction {
  ATTNC_HD static constexpr bool odd(int lane) { return (lane & 1) != 0; }
  ATTNC_HD static constexpr int sent(int lane) { return odd(lane) ? 0 : 2; }
  ATTNC_HD static constexpr int row(int lane) { return (lane >> 2) + (odd(lane) ? 8 : 0); }
  ATTNC_HD static constexpr int column(int lane, int n) {
    return 8 * n + 2 * (lane & 3) - (odd(lane) ? 2 : 0);
  }
};

// Element: attnc::bf16 or attnc::half. HeadDim, HeadDimV: multiples of 8 in [8, 256] whose
// accumulators fit (the tile rule checks bwdConsumerRegisters). Stages: Q/dO tiles in flight.
// Split: the consumers share their kv rows and split dK's and dV's columns (bwdKvRows).
// SeparateDq (not with Split, whose layout has no dQ tile anyway): the kernel is only ever the
// `_kv_nodq` entry, dQ coming from the dQ kernel (bwd_dq.h), so the layout has neither the fp32 dQ
// tiles nor K and Q chunks for dQ's columns: head dims 129-192 beside a narrow d_v fit with it and
// not without (attn-derive-backward; dK and dV then go out through the stages' Q tiles, as the
// split's do).
template <class Element_, int HeadDim, int HeadDimV, int Consumers, int Stages, bool Split = false,
          bool SeparateDq = false>
struct BwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kConsumers = Consumers;
  static constexpr int kBlockQ = kBwdBlockQ;
  static constexpr bool kSplit = Split;
  static constexpr bool kSeparateDq = SeparateDq;
  static constexpr int kBlockKV = bwdKvRows(Consumers, Split);  // wgmma's M: 64 rows a warpgroup
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 128 * (Consumers + 1);

  static constexpr int kQKSteps = roundUp(HeadDim, 16) / 16;   // k16 steps of S^T = K Q^T
  static constexpr int kVSteps = roundUp(HeadDimV, 16) / 16;   // k16 steps of dP^T = V dO^T
  static constexpr int kPSteps = kBlockQ / 16;                 // k16 steps of dV, dK
  static constexpr int kDqSteps = kBlockKV / 16;               // k16 steps of dQ = dS K
  static constexpr int kDqN = dqColumns(HeadDim, Consumers);  // dQ columns per consumer
  static constexpr int kDqTiles = kDqN / 8;
  static constexpr int kNTiles = kBlockQ / 8;                  // n8 column groups of S^T
  // n8 column groups of a consumer's dK and dV (all of them, or its share with Split)
  static constexpr int kDkTiles = bwdColumns(HeadDim, Consumers, Split) / 8;
  static constexpr int kDvTiles = bwdColumns(HeadDimV, Consumers, Split) / 8;

  // 64-column chunks of the K / Q and V / dO tiles (padded with the split, and for dQ's columns:
  // keyTileChunks, splitChunks)
  static constexpr int kKChunks = keyTileChunks(HeadDim, Consumers, Split, SeparateDq);
  static constexpr int kVChunks = splitChunks(HeadDimV, Consumers, Split);
  // the chunks TMA loads (the rest of a padded tile is zeroed once, bwd_smem.h)
  static constexpr int kKLoadChunks = ceilDiv(HeadDim, 64);
  static constexpr int kVLoadChunks = ceilDiv(HeadDimV, 64);
  static constexpr int kKBytes = kBlockKV * kKChunks * 128;
  static constexpr int kVBytes = kBlockKV * kVChunks * 128;
  static constexpr int kQBytes = kBlockQ * kKChunks * 128;
  static constexpr int kDoBytes = kBlockQ * kVChunks * 128;
  static constexpr int kStageBytes = kQBytes + kDoBytes;
  static constexpr int kKLoadBytes = kBlockKV * kKLoadChunks * 128;  // bytes TMA writes: K
  static constexpr int kVLoadBytes = kBlockKV * kVLoadChunks * 128;  // V
  static constexpr int kStageLoadBytes = kBlockQ * (kKLoadChunks + kVLoadChunks) * 128;  // Q + dO
  static constexpr int kDsBytes = 64 * kBlockQ * 2;          // one consumer's dS^T, 64 x 64
  // one consumer's dQ columns, fp32 (none with the split: vector reductions from registers; none
  // with a separate dQ)
  static constexpr int kDqTileBytes = Split || SeparateDq ? 0 : 64 * kDqN * 4;
  static constexpr int kStatsBytes = kBlockQ * 8;            // log2 LSE and delta of a q tile
  static constexpr int kBarrierBytes = 8 * (1 + 2 * Stages + 4) + 16 * Stages;
  static constexpr int kAlignSlack = 1024;
  static constexpr int kSmemBytes = kAlignSlack + kKBytes + kVBytes + Stages * kStageBytes +
                                    2 * Consumers * kDsBytes + Consumers * kDqTileBytes +
                                    Stages * kStatsBytes + kBarrierBytes;
  static_assert(kSmemBytes == bwdSmemBytes(HeadDim, HeadDimV, Consumers, Stages, Split, SeparateDq),
                "the layout above and bwdSmemBytes() disagree");

  // The producer keeps 24 registers (setmaxnreg's least), so the consumers get 240: with 232 ptxas
  // serializes the wgmma of hd128 (CUDA 13.0, "insufficient register resources").
  static constexpr int kProducerRegisters = producerRegisters();
  static constexpr int kConsumerRegisters = consumerRegisters(Consumers);

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256, "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(SeparateDq || kDqN * Consumers <= 64 * kKChunks,
                "dQ's columns stay inside the K tile");
  static_assert(!(Split && SeparateDq),
                "the split's layout has no dQ tile: SeparateDq is the plain kernel's");
  static_assert(Consumers == kBwdConsumers, "two consumer warpgroups: dQ's columns are split between them");
  static_assert(Stages >= 2, "one Q/dO tile loading while another is read");
  static_assert(!Split || bwdColumns(HeadDim, Consumers, Split) % 64 == 0 &&
                               bwdColumns(HeadDimV, Consumers, Split) % 64 == 0,
                "a consumer's share of the head dims is whole 64-column chunks");
};

// The sm_90a dQ kernel (bwd_dq.h): two consumer warpgroups of 64 query rows each stream K/V tiles
// of dqKernelBlockKV() keys and keep dQ in registers. A consumer thread's registers, as modelled:
// dQ (64 x head_dim fp32 over 128 threads), S and dP (64 x B_c each) and the packed dS (B_c / 4);
// the kv tile is the largest of 128, 64 and 32 keys whose model stays within kDqKernelLive, which
// leaves the 240 a consumer gets room for addresses, the LSE and delta rows and the elementwise
// step: head dims up to 32 take 128 keys, 40-192 take 64 (hd64 with 128 would model 192), 200-256
// take 32 (hd256: 168).
constexpr int kDqKernelLive = 176;
ATTNC_HD constexpr int dqKernelRegisters(int headDim, int blockKV) {
  return roundUp(headDim, 8) / 2 + blockKV + blockKV / 4;
}
ATTNC_HD constexpr int dqKernelBlockKV(int headDim, int reserve = 0) {
  // (reserve: registers left free beyond the model, the backward spill fallback's)
  return dqKernelRegisters(headDim, 128) + reserve <= kDqKernelLive  ? 128
         : dqKernelRegisters(headDim, 64) + reserve <= kDqKernelLive ? 64
                                                                      : 32;
}
// Shared memory: 1024 bytes of alignment slack, Q and dO of the block's 128 rows (kept for the
// whole loop), per stage a K and a V tile (128-byte-swizzled boxes 64 elements wide), and per
// stage two mbarriers and a schedule slot, plus Q/dO's mbarrier.
ATTNC_HD constexpr int dqKernelSmemBytes(int headDim, int headDimV, int blockKV, int stages) {
  return 1024 + 2 * 64 * (ceilDiv(headDim, 64) + ceilDiv(headDimV, 64)) * 128 +
         stages * blockKV * (ceilDiv(headDim, 64) + ceilDiv(headDimV, 64)) * 128 +
         8 * (1 + 2 * stages) + 8 * stages;
}
// Whether the default backward takes the dK/dV kernel without dQ and the dQ kernel (bwd_dq.h)
// instead of the dK/dV kernel's own dQ: with the head-dim split, whose dQ reductions (64 x
// head_dim floats into dq_accum per 64 kv rows and q tile) hold the kernel back, also under masks
// that read declared inputs where the dQ kernel takes them (the rule checks
// dqKernelTakesInputMask first). Measurements: docs/design/sm90-backward.md.
ATTNC_HD constexpr bool separateDqKernel(bool split) { return split; }

// Whether the dQ kernel serves a mask that reads declared inputs. Its producer reads the launch's
// classes of its kv tiles (`_bwd_q_tile_classes`) within its usual registers, but its consumers
// also hold the mask's reads of the inputs per element, which beside dQ's accumulators spill at
// the widest pairs: 4 head_dim + head_dim_v <= 1120 is where none of the masks tried spilled
// (docs/design/sm90-backward.md); heavier masks may still spill there (slower, not wrong).
ATTNC_HD constexpr bool dqKernelTakesInputMask(int headDim, int headDimV) {
  return 4 * headDim + headDimV <= 1120;
}
// Registers the rule keeps free in the dQ kernel's model (dqKernelBlockKV's reserve) under such a
// mask, for those reads: without them (192, 256) spilled 8 bytes at B_c = 64, its model at the
// limit; with them head dims 184-192 take 32 keys, 24-32 take 64.
constexpr int kDqKernelInputsReserve = 8;

// Element: attnc::bf16 or attnc::half. HeadDim, HeadDimV: multiples of 8 in [8, 256]. BlockKV:
// keys per kv tile (dqKernelBlockKV). Stages: K/V tile pairs in flight (>= 2).
template <class Element_, int HeadDim, int HeadDimV, int BlockKV, int Stages>
struct DqConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockQ = 64 * kConsumers;
  static constexpr int kBlockKV = BlockKV;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  static constexpr int kQKSteps = roundUp(HeadDim, 16) / 16;   // k16 steps of S = Q K^T
  static constexpr int kVSteps = roundUp(HeadDimV, 16) / 16;   // k16 steps of dP = dO V^T
  static constexpr int kDsSteps = BlockKV / 16;                // k16 steps of dQ += dS K
  static constexpr int kNTiles = BlockKV / 8;                  // n8 column groups of S and dP
  static constexpr int kDqTiles = HeadDim / 8;                 // n8 column groups of dQ

  static constexpr int kKChunks = ceilDiv(HeadDim, 64);
  static constexpr int kVChunks = ceilDiv(HeadDimV, 64);
  static constexpr int kQGroupBytes = 64 * kKChunks * 128;    // one consumer's 64 rows of Q
  static constexpr int kDoGroupBytes = 64 * kVChunks * 128;   // and of dO
  static constexpr int kQBytes = kConsumers * kQGroupBytes;
  static constexpr int kDoBytes = kConsumers * kDoGroupBytes;
  static constexpr int kKBytes = BlockKV * kKChunks * 128;
  static constexpr int kVBytes = BlockKV * kVChunks * 128;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kBarrierBytes = 8 * (1 + 2 * Stages) + 8 * Stages;
  static constexpr int kSmemBytes = 1024 + kQBytes + kDoBytes + Stages * kStageBytes + kBarrierBytes;
  static_assert(kSmemBytes == dqKernelSmemBytes(HeadDim, HeadDimV, BlockKV, Stages),
                "the layout above and dqKernelSmemBytes() disagree");

  static constexpr int kProducerRegisters = producerRegisters();
  static constexpr int kConsumerRegisters = consumerRegisters(kConsumers, kProducerRegisters);

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256, "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(BlockKV == 32 || BlockKV == 64 || BlockKV == 128, "B_c: 32, 64 or 128 keys");
  static_assert(Stages >= 2, "one K/V tile loading while another is read");
};

// The layout in which bwd_epilogue.h storeRowsStaged puts 64 rows of a consumer's dK or dV (Chunks
// 16-byte chunks a row: its n8 tiles) into shared memory before copying them out as whole rows:
// row after row, chunk c of row r at c ^ (r & swizzle), the swizzle the largest of 7, 3 and 1
// whose group of 8, 4 or 2 chunks divides Chunks (so a chunk stays inside its row). A store
// instruction writes one chunk of 8 consecutive rows, which then fall into distinct 16-byte bank
// groups where Chunks is a multiple of 8 (hd64, hd128).
template <int Chunks>
struct StagedRows {
  static constexpr int kRowBytes = 16 * Chunks;
  static constexpr int kSwizzle = Chunks % 8 == 0 ? 7 : Chunks % 4 == 0 ? 3 : Chunks % 2 == 0 ? 1 : 0;
  ATTNC_HD static constexpr int offset(int row, int chunk) {
    return row * kRowBytes + (chunk ^ (row & kSwizzle)) * 16;
  }
};

// Whether a consumer's dK and dV (64 rows of bf16 or fp16) fit its shared fp32 dQ tile, through
// which storeRowsStaged writes them (not with the head-dim split, which has no such tile).
template <class Config>
struct StagedRowsFit {
  static constexpr bool value = !Config::kSplit &&
                                64 * 8 * Config::kDkTiles * 2 <= Config::kDqTileBytes &&
                                64 * 8 * Config::kDvTiles * 2 <= Config::kDqTileBytes;
};

// With the head-dim split or a separate dQ, which have no dQ tile, whether a consumer's dK and dV
// columns fit the Q tile of the stage with its index, where storeRowsStaged puts them once no
// stage is read.
template <class Config>
struct QStagedRowsFit {
  static constexpr bool value =
      (Config::kSplit || Config::kSeparateDq) && Config::kStages >= Config::kConsumers &&
      64 * 16 * maxOf(Config::kDkTiles, Config::kDvTiles) <= Config::kQBytes;
};

// dq_accum as the sm_90a dK/dV kernel writes it (sm80/backward.h, RowMajorDqLayout, has the
// interface): per (batch, head) the q tiles of 64 rows one after another; a tile is one block of
// 64 rows x kDqN floats per consumer (its dQ columns), each written by one TMA bulk reduction from
// the consumer's shared tile. Inside a row the 8-float groups are XOR-swizzled by the row (group
// n at n ^ (row % groups)) so the consumers' shared-memory writes do not conflict on banks.
template <class Config>
struct TiledDqLayout {
  static constexpr int kBlockRows = 64;  // block() is one q tile
  static constexpr int kTileFloats = Config::kConsumers * 64 * Config::kDqN;
  static constexpr int kGroups = Config::kDqN / 8;  // 2, 4 or 8
  static_assert((kGroups & (kGroups - 1)) == 0, "the swizzle needs a power of two of 8-float groups");

  ATTNC_HD static i64 tileOffset(int qLen, int headsQ, int b, int h, int q0) {
    return ((i64(b) * headsQ + h) * ceilDiv(qLen, 64) + q0 / 64) * kTileFloats;
  }
  // Float index of (row, column c of the consumer's kDqN) inside the consumer's 64 x kDqN block.
  ATTNC_HD static int swizzled(int row, int c) {
    return row * Config::kDqN + (((c / 8) ^ (row % kGroups)) * 8) + c % 8;
  }
  ATTNC_DEVICE static float* block(const BwdParams& p, int b, int h, int q0) {
    return p.dq_accum + tileOffset(p.q_len, p.heads_q, b, h, q0);
  }
  ATTNC_DEVICE static int blockFloats(int) { return kTileFloats; }
  ATTNC_DEVICE static const float* chunk(const float* block, int row, int c) {
    const int col = 8 * c;
    return block + (col / Config::kDqN) * 64 * Config::kDqN + swizzled(row, col % Config::kDqN);
  }
};

}  // namespace sm90
}  // namespace attnc
