// The backward kernels' tile rule: the sm_80-family dK/dV and dQ kernels
// (templates/attnc/sm80/backward.h, bwd_config.h) for every target, and on sm_90a the wgmma dK/dV
// kernel (templates/attnc/sm90/bwd_dkdv.h) and dQ kernel (sm90/bwd_dq.h) where their registers and
// shared memory fit.
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include "attnc/sm90/bwd_config.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;
using tile_rule::hd128KeepsTwoStages;
using tile_rule::pow2Floor;

namespace {

int64_t width64(int64_t x) { return llvm::alignTo(x, 64); }

// BwdConfig::kSmemBytes and kSmemBytesQ (templates/attnc/sm80/bwd_config.h).
int64_t backwardKVSmem(int64_t blockQ, int64_t blockKV, int64_t stages, int64_t d, int64_t dv) {
  int64_t kv = 2 * blockKV * (width64(d) + width64(dv));
  int64_t pTiles = 2 * 2 * blockKV * width64(blockQ);
  int64_t stage = 2 * blockQ * (width64(d) + width64(dv)) + 8 * blockQ;
  return kv + pTiles + stages * stage;
}
int64_t backwardQSmem(int64_t blockQ, int64_t blockKV, int64_t stages, int64_t d, int64_t dv) {
  return 2 * blockQ * (width64(d) + width64(dv)) +
         stages * 2 * blockKV * (width64(d) + width64(dv));
}

// backwardKV's warp layout (BwdConfig): 8 warps own 16-row blocks of the kept kv rows, and
// kWarpsN of them share a block's rows side by side over the q columns of S^T and the head-dim
// columns of dK and dV.
constexpr int64_t kKVWarps = 8;
int64_t kvWarpsN(int64_t blockKV) { return kKVWarps / std::min(kKVWarps, blockKV / 16); }

// Whether BwdConfig accepts the layout: a warp's q columns are whole k16 steps. (Its dK and dV
// columns are whole pairs of n8 tiles per warp column, the head dim padded to them: kvPairWidth.)
bool kvLayoutFits(int64_t blockQ, int64_t blockKV) {
  return blockQ % (16 * kvWarpsN(blockKV)) == 0;
}

// A head dim (padded to 16) as backwardKV's dK or dV accumulators span it: whole pairs of n8
// tiles per warp column (BwdConfig::kDKTiles, kDVTiles), e.g. 208 -> 224 over two warp columns.
int64_t kvPairWidth(int64_t blockKV, int64_t dPadded) {
  return llvm::alignTo(dPadded, 16 * kvWarpsN(blockKV));
}

// S^T slices (16 q columns each) in one warp's share of a q step.
int64_t kvSlices(int64_t blockQ, int64_t blockKV) { return blockQ / kvWarpsN(blockKV) / 16; }

// Registers per thread backwardKV keeps, as modelled: the fp32 dK and dV accumulators
// (B_c x (d + d_v) over the block's threads) and the Q and dO fragments of the S^T / dP^T slices
// in flight (a slice's 16 q columns of Q and of dO over 32 lanes, both counted at the wider head
// dim: with d_v < d ptxas did not spend the difference elsewhere). The slices of a q step are
// unrolled and ptxas overlaps two consecutive ones, so a warp with more than one holds two.
int64_t backwardKVAccumulators(int64_t blockKV, int64_t d, int64_t dv) {
  return blockKV * (kvPairWidth(blockKV, d) + kvPairWidth(blockKV, dv)) / (kKVWarps * 32);
}
int64_t backwardKVRegisters(int64_t blockQ, int64_t blockKV, int64_t d, int64_t dv,
                            int64_t elementBytes) {
  int64_t fragments = std::min<int64_t>(kvSlices(blockQ, blockKV), 2) * 16 * 2 *
                      std::max(d, dv) * elementBytes / (4 * 32);
  return backwardKVAccumulators(blockKV, d, dv) + fragments;
}

// The sm_90a dK/dV kernel (templates/attnc/sm90/bwd_config.h, whose resource functions this rule
// calls): two consumer warpgroups of 64 kv rows stream q tiles of 64 rows; the other backward
// kernels stay the sm80 ones. Chosen when its registers fit, else the sm80 dK/dV kernel serves.
constexpr int64_t kHopperBwdConsumers = attnc::sm90::kBwdConsumers;
constexpr int64_t kHopperBwdMaxStages = 4;  // the TMA loads run up to 3 Q/dO tiles ahead
// Registers beyond bwdConsumerRegisters(): addresses, loop state, the LSE and delta reads. The
// least that keeps hd128's wgmma pipelined (208 modelled + 32 = 240); with less ptxas serializes.
constexpr int64_t kHopperBwdReserveRegisters = 32;

// The sm_90a dQ kernel (bwd_q.h) as the dK/dV kernel's rule first needs it: whether it can serve,
// and its kv tile. For a mask that reads declared inputs its producer warp reads the launch's
// precomputed classes of its kv tiles (`_bwd_q_tile_classes`) within its 24 registers, and its
// consumers' model keeps 8 free for their reads of the inputs (bwd_config.h
// kDqKernelInputsReserve).
struct HopperDqKernel {
  int64_t headDim, headDimV;
  int64_t inputsReserve;
  // Its kv tile: by its registers, then halved (to 32 at least) while two stages of K and V beside
  // Q and dO do not fit (a narrow head dim beside a wide d_v: (8, 248) takes 64 keys for 128).
  int64_t registerBlockKV, blockKV;
  bool takesMask;  // the mask reads no declared inputs, or their reads fit (dqKernelTakesInputMask)
  bool fits;       // it takes the mask and two stages fit the shared memory

  int64_t smemBytes(int64_t stages) const {
    return int64_t(attnc::sm90::dqKernelSmemBytes(int(headDim), int(headDimV), int(blockKV),
                                                  int(stages)));
  }
};

HopperDqKernel hopperDqKernel(const TileProblem& problem, const TileTarget& target) {
  HopperDqKernel dq;
  dq.headDim = problem.headDim, dq.headDimV = problem.headDimV;
  dq.inputsReserve = problem.maskReadsInputs ? attnc::sm90::kDqKernelInputsReserve : 0;
  dq.registerBlockKV = attnc::sm90::dqKernelBlockKV(
      int(problem.headDim), int(problem.backwardSpillReserve + dq.inputsReserve));
  dq.blockKV = dq.registerBlockKV;
  while (dq.blockKV > 32 && dq.smemBytes(2) > target.smemPerBlock) dq.blockKV /= 2;
  dq.takesMask = !problem.maskReadsInputs ||
                 attnc::sm90::dqKernelTakesInputMask(int(problem.headDim), int(problem.headDimV));
  dq.fits = dq.takesMask && dq.smemBytes(2) <= target.smemPerBlock;
  return dq;
}

// Whether the sm_90a dK/dV kernel's consumers take turns at the tensor cores, and why not.
std::string hopperPingPongNote(const TileProblem& problem, bool split) {
  const char* noTurns =
      split ? "the head-dim split's consumers wait for each other's half of P^T and dS^T"
      : problem.dropout
          ? "dropout: Philox outweighs the GEMMs, turns would only delay it"
      : problem.maskReadsInputs
          ? "the mask reads declared inputs: its loads outweigh the GEMMs, turns would only "
            "delay them"
          : "a score hook: it and its derivative outweigh the GEMMs, turns would only delay them";
  return attnc::sm90::bwdPingPong(split, problem.dropout, problem.maskReadsInputs,
                                  problem.scoreHook)
             ? std::string("sm_90a dK/dV kernel: the consumers take turns issuing their GEMMs "
                           "(ping-pong), so that one's elementwise steps run under the other's "
                           "GEMMs")
             : llvm::formatv("sm_90a dK/dV kernel: no ping-pong ({0})", noTurns).str();
}

// The sm_90a dQ kernel's stages, beside the wgmma dK/dV kernel (for its `_kv_nodq` partner); the
// sm80 dQ kernel serves where it does not fit.
void deriveHopperDqTiles(const TileProblem& problem, const TileTarget& target,
                         const HopperDqKernel& dq, bool split, bool separateDq,
                         BackwardTileChoice& choice) {
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = problem.headDim, dv = problem.headDimV;
  const int64_t consumers = kHopperBwdConsumers;
  if (!dq.takesMask) {
    note(llvm::formatv("sm_90a dQ kernel: the mask reads declared inputs, whose reads its "
                       "consumers hold beside dQ's accumulators: 4 x {0} + {1} = {2} > 1120 "
                       "spilled (bwd_config.h dqKernelTakesInputMask): the sm80 dQ kernel serves "
                       "the deterministic backward, and the default one keeps the dK/dV kernel's "
                       "dQ",
                       d, dv, 4 * d + dv));
    return;
  }
  if (dq.smemBytes(2) > target.smemPerBlock) {
    note(llvm::formatv("sm_90a dQ kernel: shared memory with 2 stages {0} B > {1} B: the sm80 dQ "
                       "kernel serves the deterministic backward",
                       dq.smemBytes(2), target.smemPerBlock));
    return;
  }
  int64_t dqStages = 2;
  while (dqStages < kHopperBwdMaxStages && dq.smemBytes(dqStages + 1) <= target.smemPerBlock)
    ++dqStages;
  choice.hopperQBlockKV = dq.blockKV;
  choice.hopperQStages = dqStages;
  choice.hopperQSmemBytes = dq.smemBytes(dqStages);
  choice.hopperSeparateDq =
      separateDq || attnc::sm90::separateDqKernel(split);
  note(llvm::formatv("sm_90a dQ kernel: 2 consumer warpgroups x 64 q rows, kv tiles of {0} keys "
                     "(registers {1}: dQ, S, dP, dS <= {2}{7}{8}), {3} K/V stages, {4} B <= {5} B "
                     "shared; {6}",
                     dq.blockKV, attnc::sm90::dqKernelRegisters(int(d), int(dq.blockKV)),
                     attnc::sm90::kDqKernelLive - dq.inputsReserve, dqStages,
                     choice.hopperQSmemBytes,
                     target.smemPerBlock,
                     separateDq ? "the default backward too: dK/dV without dQ (above), then "
                                  "this kernel"
                     : choice.hopperSeparateDq && !attnc::sm90::splitDqFits(int(d), int(consumers))
                         ? "the default backward too: dK/dV without dQ, then this kernel (the "
                           "split's own dQ needs a head dim above 64 columns)"
                     : choice.hopperSeparateDq
                         ? "the default backward too: dK/dV without dQ, then this kernel (the "
                           "split's dQ reductions into dq_accum are what held it back)"
                         : "the deterministic backward; the default one keeps the dK/dV kernel's "
                           "dQ reductions",
                     dq.blockKV < dq.registerBlockKV
                         ? llvm::formatv("; {0} keys fit the registers, not the shared memory",
                                         dq.registerBlockKV)
                               .str()
                         : std::string(),
                     problem.maskReadsInputs
                         ? llvm::formatv(", {0} kept for the reads of the declared inputs the "
                                         "mask makes; its producer reads the launch's classes of "
                                         "its kv tiles",
                                         attnc::sm90::kDqKernelInputsReserve)
                               .str()
                         : std::string()));
}

}  // namespace

void tile_rule::deriveHopperBackwardTiles(const TileProblem& problem, const TileTarget& target,
                                          BackwardTileChoice& choice) {
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = problem.headDim, dv = problem.headDimV;
  const int64_t consumers = kHopperBwdConsumers;
  const int64_t available = attnc::sm90::consumerRegisters(int(consumers));
  if (problem.hopperBackwardExtra < 0) {
    note(llvm::formatv("sm_90a dK/dV kernel: the mask reads declared inputs, which its producer "
                       "warp cannot classify within {0} registers: the sm80 dK/dV kernel below "
                       "serves",
                       attnc::sm90::producerRegisters()));
    return;
  }
  const int64_t reserve = kHopperBwdReserveRegisters + problem.hopperBackwardExtra;
  const HopperDqKernel dq = hopperDqKernel(problem, target);
  const int64_t plainModel = attnc::sm90::bwdConsumerRegisters(int(d), int(dv));
  const int64_t plainNeeded = plainModel + reserve;
  // The head-dim split (bwd_config.h: the consumers share 64 kv rows, each keeping its share of
  // dK's and dV's columns) where the plain kernel does not fit: only where dK and dV are what does
  // not fit (the plain kernel without the epilogue), in whole 64-column chunks per consumer (three
  // chunks padded to four, one to two, bwd_config.h splitChunks; a head dim of at most 64 columns
  // has no dQ share a consumer could take whole, so there the dQ kernel must serve:
  // splitDqFits). Its model holds without spills under every epilogue of the examples, up to
  // custom_mask's charge of 16 (192 + 32 + 16 = 240); a larger charge takes the sm80 kernel.
  const bool tryingSplit = plainNeeded > available;
  const bool splitAllowed =
      tryingSplit && (attnc::sm90::splitDqFits(int(d), int(consumers)) || dq.fits) &&
      plainModel + kHopperBwdReserveRegisters > available;
  const int64_t splitModel = attnc::sm90::bwdConsumerRegisters(int(d), int(dv), true);
  const bool split = splitAllowed && splitModel + reserve <= available;
  // Where the plain kernel does not fit: the registers it would need, then what serves instead.
  const std::string overBudget =
      llvm::formatv("sm_90a dK/dV kernel: registers {0} (dK, dV, S^T, dP^T, dS^T) + {1} reserve + "
                    "{2} epilogue = {3} > {4} per consumer thread",
                    plainModel, kHopperBwdReserveRegisters, problem.hopperBackwardExtra,
                    plainNeeded, available)
          .str();
  if (tryingSplit && !split) {
    note(overBudget + ", " +
         (splitAllowed
              ? llvm::formatv("and {0} with the head-dim split", splitModel + reserve).str()
              : std::string("and no head-dim split (it serves where dK and dV alone are what does "
                            "not fit, in whole 64-column chunks per consumer)")) +
         ": the sm80 dK/dV kernel below serves");
    return;
  }
  if (split) {
    // Three 64-column chunks are padded to four (bwd_config.h splitChunks): say so, since the
    // second consumer's columns then run past the head dim.
    auto padded = [&](int64_t dim) {
      const int chunks = attnc::sm90::splitChunks(int(dim), int(consumers), true);
      return chunks * 64 > llvm::alignTo(dim, 64)
                 ? llvm::formatv(" of {0} padded to {1}", dim, chunks * 64).str()
                 : std::string();
    };
    note(overBudget +
         llvm::formatv(": the head-dim split, the consumers sharing 64 kv rows and each keeping "
                       "{0} of dK's{2} and {1} of dV's{3} columns (S^T and dP^T halved between "
                       "them along the q tile)",
                       attnc::sm90::splitColumns(int(d), int(consumers)),
                       attnc::sm90::splitColumns(int(dv), int(consumers)), padded(d), padded(dv))
             .str());
  }
  const int64_t model = split ? splitModel : plainModel;
  const int64_t needed = model + reserve;
  // The layout's shared memory with `stages` Q/dO stages, with or without the kernel's own dQ.
  auto layoutBytes = [&](int64_t stages, bool withoutDq) {
    return int64_t(attnc::sm90::bwdSmemBytes(int(d), int(dv), int(consumers), int(stages), split,
                                             withoutDq));
  };
  // separateDq: the plain kernel without dQ (bwd_config.h SeparateDq), beside the dQ kernel, where
  // the plain kernel's dQ tiles and dQ columns are what does not fit (head dims 129-192 beside a
  // narrow d_v: a fourth K chunk for dQ's columns and 64 KiB of fp32 dQ tiles).
  const int64_t withDq = layoutBytes(2, false), withoutDq = layoutBytes(2, true);
  const bool separateDq = withDq > target.smemPerBlock && !split && dq.fits &&
                          withoutDq <= target.smemPerBlock;
  auto smem = [&](int64_t stages) { return layoutBytes(stages, separateDq); };
  if (smem(2) > target.smemPerBlock) {
    // Why the form without dQ does not serve either.
    std::string why;
    if (!split && dq.fits)
      why = llvm::formatv(", and {0} B without its dQ", withoutDq).str();
    else if (!split)
      why = ", and the dQ kernel that would make dQ without it does not fit";
    note(llvm::formatv("sm_90a dK/dV kernel: shared memory with 2 stages {0} B > {1} B{2}: the "
                       "sm80 dK/dV kernel below serves",
                       withDq, target.smemPerBlock, why));
    return;
  }
  if (separateDq)
    note(llvm::formatv("sm_90a dK/dV kernel: shared memory with 2 stages {0} B > {1} B with its "
                       "dQ (fp32 dQ tiles, K chunks for dQ's columns), {2} B without: dK and dV "
                       "alone, dQ from the sm_90a dQ kernel",
                       withDq, target.smemPerBlock, withoutDq));
  // hd128 without dropout or the split keeps two Q/dO stages where three fit (hd128KeepsTwoStages).
  const bool twoStages = !split && hd128KeepsTwoStages(problem);
  int64_t stages = 2;
  while (!twoStages && stages < kHopperBwdMaxStages && smem(stages + 1) <= target.smemPerBlock)
    ++stages;
  choice.kvKernel = "sm90";
  choice.hopperSplit = split;
  // (the split's separate dQ is set with the dQ kernel below)
  choice.hopperSeparateDq = separateDq;
  choice.hopperStages = stages;
  choice.hopperSmemBytes = smem(stages);
  note(llvm::formatv("sm_90a dK/dV kernel: {0} consumer warpgroups x 64 kv rows{11} = {1} kept "
                     "K/V rows, q tiles of {2} rows (wgmma M); registers {3} (dK, dV, S^T, dP^T, "
                     "dS^T) + {4} reserve + {5} epilogue = {6} <= {7} per consumer thread; {8} "
                     "Q/dO stages, {9} B <= {10} B shared{12}",
                     consumers, attnc::sm90::bwdKvRows(int(consumers), split),
                     attnc::sm90::kBwdBlockQ, model, kHopperBwdReserveRegisters,
                     problem.hopperBackwardExtra, needed, available, stages, choice.hopperSmemBytes,
                     target.smemPerBlock, split ? " (shared)" : "",
                     twoStages && smem(3) <= target.smemPerBlock
                         ? " (two stages: head dims 128 without dropout ran faster with two than "
                           "with three)"
                         : ""));
  note(hopperPingPongNote(problem, split));
  deriveHopperDqTiles(problem, target, dq, split, separateDq, choice);
}

FailureOr<BackwardTileChoice> mlir::attn::deriveBackwardTiles(const TileProblem& problem,
                                                              const TileTarget& target) {
  BackwardTileChoice choice;
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = problem.headDim, dv = problem.headDimV;
  const int64_t dPad = llvm::alignTo(d, 16), dvPad = llvm::alignTo(dv, 16);
  const int64_t dMax = std::max(dPad, dvPad);
  const int64_t e = problem.elementBytes;
  const int64_t m = target.smemPerBlock / e;

  // backwardKV: the kept K/V tile starts from FlashAttention's B_c = ceil(M / 4d). Each q step
  // streams B_r Q/dO rows past it. The register model (backwardKVRegisters) plus the epilogue's
  // registers must fit the register file of one block of 256 threads per SM; within that, the
  // largest B_c (K/V reuse, fewer dQ reductions), then the largest B_r (work per barrier).
  // Calibrated against ptxas: no configuration inside the budget spills
  // (docs/design/tile-rules.md); the example compiles check it.
  const int64_t fa = tile_rule::flashAttentionBlockKV(m, dMax);
  // (the backward spill fallback's reserve counts with the epilogue here)
  const int64_t epilogue = problem.epilogueRegisters + problem.backwardSpillReserve;
  const int64_t budget = target.regsPerThread + 1 - epilogue;
  struct KVTiles {
    int64_t blockQ = 0, blockKV = 0, stages = 0, smem = 0, registers = 0;
  };
  KVTiles kv, fewest;
  std::string rejected;
  const int64_t maxBlockKV = std::clamp(pow2Floor(fa), int64_t(32), int64_t(128));
  // Every layout is costed; those above B_c's bound only serve when nothing within it fits
  // (BwdConfig's pairs of n8 tiles rule out the narrow ones when d or d_v has few columns).
  for (int64_t blockKV = 128; blockKV >= 32 && !kv.blockKV; blockKV /= 2) {
    for (int64_t blockQ : {64, 32}) {
      if (!kvLayoutFits(blockQ, blockKV)) continue;
      // A second Q/dO buffer overlaps the next load with compute; above head dim 64 it costs the
      // registers that keep the kernel from spilling on sm_80, so one buffer there.
      int64_t stages = dMax <= 64 ? 2 : 1;
      if (backwardKVSmem(blockQ, blockKV, stages, d, dv) > target.smemPerBlock) stages = 1;
      KVTiles candidate{blockQ, blockKV, stages, backwardKVSmem(blockQ, blockKV, stages, d, dv),
                        backwardKVRegisters(blockQ, blockKV, dPad, dvPad, e)};
      if (candidate.smem > target.smemPerBlock) continue;
      if (!fewest.blockKV || candidate.registers < fewest.registers) fewest = candidate;
      if (blockKV > maxBlockKV) continue;
      if (candidate.registers <= budget) {
        kv = candidate;
        break;
      }
      rejected += llvm::formatv("{0}B_c {1}, B_r {2}: {3}", rejected.empty() ? "" : "; ", blockKV,
                                blockQ, candidate.registers + epilogue);
    }
  }
  if (!fewest.blockKV) return failure();
  const bool overBudget = !kv.blockKV;
  if (overBudget) kv = fewest;
  const int64_t accumulators = backwardKVAccumulators(kv.blockKV, dPad, dvPad);
  note(llvm::formatv(
      "backward KV kernel: B_c = ceil(M / 4d) = {0} -> {1} kept K/V rows, {2} streamed Q/dO rows; "
      "registers: dK, dV accumulators {1} x ({3} + {4}) fp32 / 256 threads = {5}, Q and dO "
      "fragments of {6} in flight = {7}{8}: {9} {10} {11}{12}{13}",
      fa, kv.blockKV, kv.blockQ, kvPairWidth(kv.blockKV, dPad), kvPairWidth(kv.blockKV, dvPad),
      accumulators,
      kvSlices(kv.blockQ, kv.blockKV) > 1 ? "2 S^T slices" : "1 S^T slice",
      kv.registers - accumulators,
      epilogue ? llvm::formatv(" + {0} for the epilogue", epilogue).str()
          : std::string(),
      kv.registers + epilogue, overBudget ? ">" : "<=", target.regsPerThread + 1,
      rejected.empty() ? "" : " (over it: " + rejected + ")",
      overBudget ? "; nothing fits, so the fewest registers (ptxas may spill)" : ""));
  note(llvm::formatv("backward KV kernel shared memory: {0} Q/dO buffer(s), {1} B <= {2} B",
                     kv.stages, kv.smem, target.smemPerBlock));

  // backwardQ: dQ for its rows in registers; head dims above 128 take half the rows, 4 warps and
  // a short K/V step so the dQ accumulators and the S tile fit (no spills, checked by ptxas).
  bool wide = dMax > 128;
  int64_t qBlockQ = wide ? 64 : 128, qBlockKV = wide ? 16 : 64, qWarps = wide ? 4 : 8;
  int64_t qStages = 2;
  int64_t qSmem = backwardQSmem(qBlockQ, qBlockKV, qStages, d, dv);
  note(llvm::formatv("backward Q kernel (deterministic dQ): {0} kept Q/dO rows, {1} streamed K/V "
                     "rows, {2} warps, {3} B shared", qBlockQ, qBlockKV, qWarps, qSmem));
  if (qSmem > target.smemPerBlock) return failure();
  if (target.arch == "sm_90a" && e == 2)
    tile_rule::deriveHopperBackwardTiles(problem, target, choice);
  choice.kvBlockQ = kv.blockQ, choice.kvBlockKV = kv.blockKV, choice.kvWarps = kKVWarps;
  choice.kvStages = kv.stages, choice.kvSmemBytes = kv.smem;
  choice.qBlockQ = qBlockQ, choice.qBlockKV = qBlockKV, choice.qWarps = qWarps;
  choice.qStages = qStages;
  choice.qSmemBytes = qSmem;
  return choice;
}
