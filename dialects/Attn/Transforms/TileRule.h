// The tile-size rule attn-select-tiles applies, kept apart from the pass so `attnc explain` and
// the unit tests can run it for any head dim and target.
#pragma once

#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace mlir::attn {

struct TileTarget {
  std::string arch;
  int64_t smemPerBlock;  // bytes one block may use (opt-in maximum)
  int64_t smemPerSM;     // bytes of one SM
  int64_t regsPerThread; // most 32-bit registers per thread
};

struct TileProblem {
  int64_t headDim, headDimV;
  int64_t elementBytes;
  int64_t blockQOverride = 0, blockKVOverride = 0;  // experiments only; 0 = derive
  // Registers the fused epilogue keeps live on top of the accumulators (dropout's Philox state,
  // values loaded from declared inputs); see epilogueRegisters().
  int64_t epilogueRegisters = 0;
  // Operations in the score region that run per element: those depending on the score, q or k
  // (constants and what depends only on the batch, head and lengths are computed once per tile).
  // The sm_90a rule reserves 8 registers per 3 of them: the hook runs on every
  // element of S while S, P and O are all live.
  int64_t scoreOps = 0;
  // Operations in the mask region (without its yield): the sm_90a rule's lighter reserve for three
  // consumers holds only for a causal mask (3) or none.
  int64_t maskOps = 0;
  // The sm_90a backward dK/dV kernel: registers its recomputed epilogue needs beyond the
  // accumulators (see attn-derive-backward), or -1 when it cannot run there at all.
  int64_t hopperBackwardExtra = 0;
  // For the sm_90a dK/dV kernel's ping-pong (bwd_config.h bwdPingPong): dropout, a mask that
  // reads declared inputs, a score hook. Dropout also decides the stage counts at head dims 128
  // (forward and dK/dV kernel: two stages without it; deriveHopperTiles and
  // deriveHopperBackwardTiles).
  bool dropout = false, maskReadsInputs = false, scoreHook = false;
  // The backward spill fallback's registers (attn-derive-backward spill-reserve): the sm_80
  // family's dK/dV rule counts them with the epilogue, the sm_90a dQ kernel's kv tile leaves them
  // free.
  int64_t backwardSpillReserve = 0;
};

struct TileChoice {
  // The kernel template the tiles are for: "sm80" (templates/attnc/sm80/forward.h, mma.sync) or
  // "sm90" (templates/attnc/sm90/forward.h: wgmma, TMA, warp-specialized; sm_90a only).
  std::string kernel = "sm80";
  int64_t blockQ, blockKV, warps, stages, smemBytes;
  std::vector<std::string> derivation;  // one line per step, for the op and `attnc explain`
};

// The epilogue's extra live registers: for Philox dropout 16 in the forward (counter, key, the
// round products, the four output words of one call that decides 16 elements), 40 in the sm80
// backward (a call per element, and the keep bits of its slice kept for dS); 4 per read of a
// declared input in the mask or score.
enum class DropoutPass { Forward, Backward };
int64_t epilogueRegisters(bool dropout, int64_t inputLoads,
                          DropoutPass pass = DropoutPass::Forward);

// The sm_90a target gets the wgmma kernel's rule (deriveHopperTiles); every other target the
// sm_80 family's.
FailureOr<TileChoice> deriveTiles(const TileProblem& problem, const TileTarget& target);
FailureOr<TileChoice> deriveHopperTiles(const TileProblem& problem, const TileTarget& target);

// The backward kernels' tiles (templates/attnc/sm80/bwd_config.h): backwardKV keeps a K/V tile of
// kvBlockKV rows and streams Q/dO tiles of kvBlockQ rows; backwardQ (deterministic dQ) keeps a
// Q/dO tile of qBlockQ rows and streams K/V tiles of qBlockKV rows.
// On sm_90a the dK/dV kernel is the wgmma one (kvKernel "sm90", templates/attnc/sm90/backward.h)
// when its registers fit: 2 consumer warpgroups x 64 kv rows, q tiles of 64, hopperStages Q/dO
// stages in hopperSmemBytes; the kv* tiles then serve the delta and dQ-conversion kernels only.
struct BackwardTileChoice {
  int64_t kvBlockQ, kvBlockKV, kvWarps, kvStages, kvSmemBytes;
  int64_t qBlockQ, qBlockKV, qWarps, qStages, qSmemBytes;
  std::string kvKernel = "sm80";
  int64_t hopperStages = 0, hopperSmemBytes = 0;
  bool hopperSplit = false;  // the head-dim split (templates/attnc/sm90/bwd_config.h): 64 kv rows
  // The sm_90a dQ kernel (templates/attnc/sm90/bwd_dq.h; 0 bytes: the sm80 backwardQ serves):
  // kv tiles of hopperQBlockKV keys, hopperQStages K/V stages; hopperSeparateDq: the default
  // backward also takes it (with the dK/dV kernel's `_kv_nodq` entry) instead of dq_accum. Without
  // hopperSplit it is also the dK/dV kernel's layout (bwd_config.h SeparateDq: no room for dQ).
  int64_t hopperQBlockKV = 0, hopperQStages = 0, hopperQSmemBytes = 0;
  bool hopperSeparateDq = false;
  std::vector<std::string> derivation;
};

FailureOr<BackwardTileChoice> deriveBackwardTiles(const TileProblem& problem,
                                                  const TileTarget& target);

// The decode kernel's tiles (templates/attnc/sm80/decode.h, sm80 family, every target): a block
// takes `rows` packed rows (G query heads of one kv head x q_len positions, row r = (q = r / G,
// h = hKv * G + r % G)) against BlockKV-key tiles, its warps splitting each tile's keys.
struct DecodeProblem {
  int64_t headDim, headDimV;
  int64_t elementBytes;
  int64_t group;     // G = heads_q / heads_kv
  int64_t qLen = 1;  // query positions per sequence the rows are sized for
  // As TileProblem::epilogueRegisters (input reads, the spill fallback's reserve).
  int64_t epilogueRegisters = 0;
};

// Past this many packed rows (G x q_len) a block is mma-bound: the forward kernel serves it.
constexpr int64_t kDecodeMaxPackedRows = 64;

struct DecodeTileChoice {
  int64_t rows, mTiles;  // rows = 16 * mTiles packed rows per block
  int64_t rowTiles;      // blocks per (batch, kv head) at qLen: ceil(G * qLen / rows)
  bool qInRegisters;     // Q's fragments stay in registers (else read from shared memory)
  int64_t blockKV, warps, stages, smemBytes;
  std::vector<std::string> derivation;  // one line per step, as TileChoice's
};

// Fails only where no decode tile fits the registers or shared memory; numSMs sizes the bytes in
// flight (Little's law).
FailureOr<DecodeTileChoice> deriveDecodeTiles(const DecodeProblem& problem,
                                              const TileTarget& target, int64_t numSMs);

}  // namespace mlir::attn
