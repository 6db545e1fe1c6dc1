// Compile-time shape of an sm_90a forward kernel (forward.h): one producer warpgroup that issues
// TMA copies and `Consumers` warpgroups of 64 query rows each that run the wgmma GEMMs and the
// softmax. Everything else follows from the template arguments here; attn-select-tiles derives the
// same numbers (TileRule.cpp) and the generated code static_asserts that they agree.
#pragma once

#include "attnc/common/types.h"

namespace attnc {
namespace sm90 {

// The kernel's resources as plain functions, shared with the compiler's tile rule
// (dialects/Attn/Transforms/TileRule.cpp includes this header on the host).
//
// setmaxnreg: the producer keeps producerRegisters() a thread and the consumers share the rest of
// the block's registers (at most 240 each, setmaxnreg's limit). The block's pool is what it was
// launched with: ptxas gives each of its 128 (consumers + 1) threads 65536 / threads registers,
// rounded down to 8 (168 at 384 threads, 128 at 512), and a setmaxnreg.inc that asks for more
// than the pool holds waits forever (docs/design/sm90-forward.md). 24 producer registers: every
// example's producer fits, and two consumers get 240 each, three 160. The backward's producer
// keeps the same (bwd_config.h).
ATTNC_HD constexpr int producerRegisters() { return 24; }
ATTNC_HD constexpr int consumerRegisters(int consumers, int producerRegisters) {
  return minOf(240, ((65536 / (128 * (consumers + 1))) / 8 * 8 * (consumers + 1) - producerRegisters) /
                        consumers / 8 * 8);
}
// Whether the forward keeps lazy row maxima (OnlineSoftmax::advanceLazy: O rescaled only when a
// row's maximum grows by more than 2^8): from head_dim_v 128, below which O's rescale is cheaper
// than the warp vote on the path to the exponentials (docs/design/sm90-forward.md). `attnc
// explain` prints the choice.
ATTNC_HD constexpr bool lazyRowMaxima(int headDimV) { return headDimV >= 128; }
// Whether each consumer keeps its 64 rows of Q as register A fragments (fwd_mainloop.h,
// loadKMajorFragments) and issues S = Q K^T as a register-A wgmma, so that the GEMM reads only K
// from shared memory (at hd128 a warpgroup's operand reads per kv tile go from 80 to 64 KB). With
// two consumers (240 registers each) and head dims up to 128, when O, S, P and Q's fragments take
// at most kQInRegistersLive registers. `attnc explain` prints the choice.
constexpr int kQInRegistersLive = 192;  // the most at which every example compiles without spills
ATTNC_HD constexpr bool qInRegisters(int consumers, int headDim, int headDimV, int blockKV) {
  return consumers == 2 && headDim <= 128 &&
         roundUp(headDimV, 8) / 2 + blockKV / 2 + blockKV / 4 + roundUp(headDim, 16) / 4 <=
             kQInRegistersLive;
}
// Whether the forward's wait for P_{j-1} V_{j-1} is held below the softmax of tile j
// (wgmma.h wgmmaWaitAfter), so that the exponentials run while the GEMM does; ptxas otherwise
// hoists the wait next to the one for S_j. Not with dropout, whose hash per element makes the
// softmax long enough that the tensor pipe idles longer than it gains
// (docs/design/sm90-forward.md). `attnc explain` prints the choice.
ATTNC_HD constexpr bool softmaxOverlapsPV(bool dropout) { return !dropout; }
// Whether a consumer warpgroup none of whose rows is in the sequence idles (fwd_idle.h
// idleConsumer), and, under a mask of positions only (no declared inputs), whether each warpgroup
// stops after its own last live kv tile (fwd_mainloop.h kGroupTail): with three consumers, where
// up to two thirds of a tile can be outside; with two, the check costs more in the loop's
// schedule than it saves (docs/design/sm90-forward.md). `attnc explain` prints both.
ATTNC_HD constexpr bool idleWarpgroups(int consumers) { return consumers >= 3; }
ATTNC_HD constexpr bool warpgroupLastTile(int consumers, bool positionMask) {
  return idleWarpgroups(consumers) && positionMask;
}

ATTNC_HD constexpr int consumerRegisters(int consumers) {
  return consumerRegisters(consumers, producerRegisters());
}
static_assert(consumerRegisters(2) == 240 && consumerRegisters(2, 40) == 232 &&
                  consumerRegisters(2, 48) == 224 && consumerRegisters(3) == 160,
              "consumers share the launch's registers (168 x 3, 128 x 4 a thread row) with the producer");
// Shared memory: 1024 bytes of alignment slack, Q (64 rows per consumer), the K/V stages
// (128-byte-swizzled boxes 64 elements wide) and, per stage, four mbarriers and a schedule slot,
// plus Q's mbarrier.
ATTNC_HD constexpr int smemBytes(int headDim, int headDimV, int consumers, int blockKV, int stages) {
  return 1024 + consumers * 64 * ceilDiv(headDim, 64) * 128 +
         stages * blockKV * (ceilDiv(headDim, 64) + ceilDiv(headDimV, 64)) * 128 + 8 * (1 + 5 * stages);
}

// Element: attnc::bf16 or attnc::half. HeadDim, HeadDimV: multiples of 8 in [8, 256].
// BlockKV: keys per kv tile, a multiple of 16 up to 256. Stages: K/V tile pairs in flight (>= 2).
template <class Element_, int HeadDim, int HeadDimV, int Consumers, int BlockKV, int Stages>
struct FwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kHeadDimV = HeadDimV;
  static constexpr int kConsumers = Consumers;
  static constexpr int kBlockQ = 64 * Consumers;  // wgmma's M is 64 rows per warpgroup
  static constexpr int kBlockKV = BlockKV;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 128 * (Consumers + 1);

  static constexpr int kQKSteps = roundUp(HeadDim, 16) / 16;  // k16 steps of S = Q K^T
  static constexpr int kPVSteps = BlockKV / 16;               // k16 steps of O += P V
  static constexpr int kNTiles = BlockKV / 8;                 // n8 column groups of S
  static constexpr int kNvTiles = HeadDimV / 8;               // n8 column groups of O

  // Shared memory: 128-byte-swizzled TMA boxes, 64 elements wide; a head dim that is not a
  // multiple of 64 is zero-filled by TMA up to the next one. Every region starts on a 1024-byte
  // swizzle atom.
  static constexpr int kKChunks = ceilDiv(HeadDim, 64);
  static constexpr int kVChunks = ceilDiv(HeadDimV, 64);
  static constexpr int kQGroupBytes = 64 * kKChunks * 128;  // one consumer's 64 rows of Q
  static constexpr int kQBytes = Consumers * kQGroupBytes;
  static constexpr int kKBytes = BlockKV * kKChunks * 128;
  static constexpr int kVBytes = BlockKV * kVChunks * 128;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  // mbarriers (Q full; per stage K full, V full, K empty, V empty) and the stages' schedule slots.
  static constexpr int kBarrierBytes = 8 * (1 + 5 * Stages);
  static constexpr int kAlignSlack = 1024;  // the dynamic shared base is rounded up to 1024
  static constexpr int kSmemBytes = kAlignSlack + kQBytes + Stages * kStageBytes + kBarrierBytes;
  static_assert(kSmemBytes == smemBytes(HeadDim, HeadDimV, Consumers, BlockKV, Stages),
                "the layout above and smemBytes() disagree");

  // O leaves through the warpgroup's Q tile when its rows fit there (head_dim_v <= the Q tile's
  // padded width); the warpgroup syncs on named barrier kOutputBarrier + its index (barriers 1..3
  // are the consumers' ping-pong turns).
  static constexpr bool kOutputThroughSmem = HeadDimV <= 64 * kKChunks;
  static constexpr int kOutputBarrier = 4;

  static constexpr int kProducerRegisters = producerRegisters();
  static constexpr int kConsumerRegisters = consumerRegisters(Consumers);
  static constexpr bool kLazyRowMaxima = lazyRowMaxima(HeadDimV);

  static_assert(HeadDim % 8 == 0 && HeadDim >= 8 && HeadDim <= 256, "head_dim: multiple of 8 in 8..256");
  static_assert(HeadDimV % 8 == 0 && HeadDimV >= 8 && HeadDimV <= 256,
                "head_dim_v: multiple of 8 in 8..256");
  static_assert(BlockKV % 16 == 0 && BlockKV >= 16 && BlockKV <= 256, "B_c: multiple of 16 up to 256");
  static_assert(Consumers >= 1 && Consumers <= 3, "1 to 3 consumer warpgroups");
  static_assert(Stages >= 2, "one K/V stage loading while another is read");
};

}  // namespace sm90
}  // namespace attnc
