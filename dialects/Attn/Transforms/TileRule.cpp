// The FlashAttention tile rule, fitted step by step to the forward kernel it is for: the sm_80-family
// one (templates/attnc/sm80/forward.h: 16 or 32 query rows per warp, mma.sync m16n8k16 fragments,
// S and O accumulated in registers, K/V tiles multi-buffered in shared memory) or, for sm_90a, the
// wgmma one (templates/attnc/sm90/forward.h: 64 rows per consumer warpgroup, TMA stages); and the
// backward kernels' tiles.
#include "dialects/Attn/Transforms/TileRule.h"

#include "attnc/sm90/bwd_config.h"
#include "attnc/sm90/config.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

constexpr int64_t kMinBlockQ = 64, kMaxBlockQ = 128;
constexpr int64_t kMinBlockKV = 32, kMaxBlockKV = 128;
constexpr int64_t kMinWarps = 4;           // fewer leaves the SM's schedulers idle
constexpr int64_t kStages = 2;             // K and V alternate in a ring of 2 cp.async buffers
constexpr int64_t kQRegisterLimit = 32;    // Q fragments stay resident up to this many registers

int64_t pow2Floor(int64_t x) { return x <= 1 ? 1 : int64_t(llvm::bit_floor(uint64_t(x))); }

// Registers per thread that stay live across the kv loop: the fp32 O and S accumulators of the
// warp's rows, plus the Q fragments when the template keeps them resident (FwdConfig::kQInRegs).
int64_t liveRegisters(int64_t rowsPerWarp, int64_t d, int64_t dv, int64_t blockKV) {
  int64_t accumulators = rowsPerWarp * (dv + blockKV) / 32;
  int64_t qFragments = (rowsPerWarp / 16) * (d / 16) * 4;
  return accumulators + (qFragments <= kQRegisterLimit ? qFragments : 0);
}

// Three quarters of the register file of a thread: the rest holds P, addresses, m and l.
int64_t liveRegisterBudget(int64_t regsPerThread) { return (regsPerThread + 1) * 3 / 4; }

// The kernel's shared memory: rows are whole 128-byte swizzle segments (64 elements), the Q tile
// (which also stages O on the way out) and `stages` K/V buffers of one ring, as wide as the wider
// head dim (templates/attnc/sm80/config.h, FwdConfig::kSmemBytes).
int64_t smemBytes(int64_t blockQ, int64_t blockKV, int64_t stages, int64_t rowWidth,
                  int64_t elementBytes) {
  return (blockQ + stages * blockKV) * rowWidth * elementBytes;
}

}  // namespace

int64_t mlir::attn::epilogueRegisters(bool dropout, int64_t inputLoads, DropoutPass pass) {
  const int64_t philox = pass == DropoutPass::Forward ? 16 : 40;
  return (dropout ? philox : 0) + 4 * inputLoads;
}

FailureOr<TileChoice> mlir::attn::deriveTiles(const TileProblem& problem, const TileTarget& target) {
  TileChoice choice;
  if (target.arch == "sm_90a") {
    FailureOr<TileChoice> hopper = deriveHopperTiles(problem, target);
    if (succeeded(hopper)) return hopper;
    // The wgmma kernel keeps S, P and O of 64 rows per warpgroup in registers; an epilogue as
    // large as dropout's at head dim 256 leaves it none. The sm_80-family kernel splits rows finer.
    choice.derivation.push_back(
        "sm90 kernel: O + S + P do not fit a consumer warpgroup's registers; the sm_80-family "
        "kernel instead");
  }
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = llvm::alignTo(problem.headDim, 16);
  const int64_t dv = llvm::alignTo(problem.headDimV, 16);
  const int64_t dMax = std::max(d, dv);
  const int64_t e = problem.elementBytes;

  // 1. The FlashAttention rule.
  int64_t m = target.smemPerBlock / e;
  note(llvm::formatv("M = {0} B shared memory per block on {1} / {2} B per element = {3} elements",
                     target.smemPerBlock, target.arch, e, m));
  if (d != problem.headDim || dv != problem.headDimV)
    note(llvm::formatv("d = head_dim {0} (v: {1}) padded to the k16 mma step = {2} (v: {3})",
                       problem.headDim, problem.headDimV, d, dv));
  int64_t blockKV = llvm::divideCeil(m, 4 * dMax);
  int64_t blockQ = std::min(blockKV, d);
  note(llvm::formatv("FlashAttention: B_c = ceil(M / 4d) = ceil({0} / {1}) = {2}; "
                     "B_r = min(B_c, d) = {3}", m, 4 * dMax, blockKV, blockQ));

  // 2. Instruction shapes: power-of-two tiles of whole m16n8k16 fragments.
  blockQ = std::clamp(pow2Floor(blockQ), kMinBlockQ, kMaxBlockQ);
  blockKV = std::clamp(pow2Floor(blockKV), kMinBlockKV, kMaxBlockKV);
  note(llvm::formatv("mma.sync m16n8k16: B_r = {0}, B_c = {1} (powers of two in [{2}, {3}] and "
                     "[{4}, {5}])", blockQ, blockKV, kMinBlockQ, kMaxBlockQ, kMinBlockKV, kMaxBlockKV));

  // Work per block: below 128 rows a block has fewer than 4 warps of 32 rows (or 8 of 16), too
  // little independent mma work to hide its K/V loads. Measured on the H200 (docs/perf/H200.md):
  // hd64 causal 223 -> 247 TFLOP/s, hd256 full 251 -> 281 at N = 4K, hd64 full unchanged.
  if (blockQ < kMaxBlockQ && problem.blockQOverride == 0) {
    blockQ = kMaxBlockQ;
    note(llvm::formatv("work per block: B_r = {0} (4 warps of 32 rows or 8 of 16; shared memory is "
                       "checked below)", blockQ));
  }

  // 3. Warps and registers. A warp owning 32 rows (two m16 fragments) feeds every K and V fragment
  // it reads from shared memory to two mmas, halving shared-memory traffic per FLOP; it needs
  // twice the accumulators. Take 32 rows when that leaves >= 4 warps and B_c >= 64 fits the
  // register budget, else 16 rows; halve B_c until the live registers fit.
  int64_t budget = liveRegisterBudget(target.regsPerThread) - problem.epilogueRegisters;
  int64_t rowsPerWarp = 0, warps = 0;
  for (int64_t rows : {32, 16}) {
    if (blockQ / rows < kMinWarps) continue;
    int64_t kv = blockKV;
    while (kv > kMinBlockKV && liveRegisters(rows, d, dv, kv) > budget) kv /= 2;
    if (liveRegisters(rows, d, dv, kv) > budget || (rows == 32 && kv < 64)) continue;
    rowsPerWarp = rows, warps = blockQ / rows, blockKV = kv;
    break;
  }
  if (!rowsPerWarp) return failure();
  note(llvm::formatv("registers: {0} rows per warp ({1} warps, {2} threads); live fp32 O + S "
                     "accumulators and resident Q = {3} per thread <= {4} (3/4 of {5}{6}): B_c = {7}",
                     rowsPerWarp, warps, warps * 32, liveRegisters(rowsPerWarp, d, dv, blockKV),
                     budget, target.regsPerThread,
                     problem.epilogueRegisters
                         ? llvm::formatv(", less {0} for the epilogue", problem.epilogueRegisters).str()
                         : std::string(),
                     blockKV));

  // 4. Shared memory: the Q tile and a ring of K/V buffers, rows padded to 128-byte segments.
  int64_t stages = kStages;
  int64_t width = llvm::alignTo(std::max(problem.headDim, problem.headDimV), 64);
  while (blockKV > kMinBlockKV && smemBytes(blockQ, blockKV, stages, width, e) > target.smemPerBlock)
    blockKV /= 2;
  while (blockQ > kMinBlockQ && smemBytes(blockQ, blockKV, stages, width, e) > target.smemPerBlock) {
    blockQ /= 2;
    rowsPerWarp = std::max<int64_t>(16, blockQ / kMinWarps / 16 * 16);
    warps = blockQ / rowsPerWarp;
  }
  int64_t smem = smemBytes(blockQ, blockKV, stages, width, e);
  note(llvm::formatv("shared memory: (Q {0} + {1} K/V buffers x {2}) rows x {3} wide x {4} B = "
                     "{5} B <= {6} B", blockQ, stages, blockKV, width, e, smem, target.smemPerBlock));
  if (smem > target.smemPerBlock) return failure();

  // Explicit overrides replace the derived sizes (experiments; the derivation says so).
  if (problem.blockQOverride || problem.blockKVOverride) {
    if (problem.blockQOverride) blockQ = problem.blockQOverride;
    if (problem.blockKVOverride) blockKV = problem.blockKVOverride;
    if (blockQ % 16 != 0 || blockKV % 16 != 0) return failure();
    rowsPerWarp = blockQ >= 32 * kMinWarps ? 32 : 16;
    warps = blockQ / rowsPerWarp;
    smem = smemBytes(blockQ, blockKV, stages, width, e);
    note(llvm::formatv("override: B_r = {0}, B_c = {1} ({2} B shared memory)", blockQ, blockKV, smem));
    if (smem > target.smemPerBlock) return failure();
  }

  int64_t blocksPerSM = target.smemPerSM / std::max<int64_t>(smem, 1);
  note(llvm::formatv("result: B_r = {0}, B_c = {1}, {2} warps, {3} stages, {4} B shared; "
                     "up to {5} blocks per SM by shared memory",
                     blockQ, blockKV, warps, stages, smem, blocksPerSM));
  choice.blockQ = blockQ;
  choice.blockKV = blockKV;
  choice.warps = warps;
  choice.stages = stages;
  choice.smemBytes = smem;
  return choice;
}

namespace {

// The sm_90a kernel (templates/attnc/sm90/config.h, whose resource functions this rule calls): a
// producer warpgroup and consumer warpgroups of 64 rows; two, or three for head dims up to 64
// (their O is small, so a third warpgroup's softmax can overlap the others' GEMMs) when B_c stays
// at least kHopperMinBlockKV3 with them.
constexpr int64_t kHopperConsumers = 2;
constexpr int64_t kHopperMaxStages = 4;
// Registers a consumer thread needs beyond its accumulators: the softmax state, shared and global
// addresses, loop counters and the tile classification. Every example compiles without spills
// with this reserve (ctest checks it). With three consumers (160 registers each) a reserve of 40
// gives hd64 B_c = 112.
constexpr int64_t kHopperReserveRegisters = 56;
constexpr int64_t kHopperReserveRegisters3 = 40;
// With no epilogue and a mask of at most kHopperLightMaskOps operations (causal or none), three
// consumers reserve 24, but only to lift B_c up to kHopperLightMaxBlockKV3: hd64 then takes 128
// without spills (CUDA 13.0), and ran 1-9% faster than at 112 on the H200 (docs/perf/H200.md,
// 2026-12-01). A sliding window (6 operations), custom_mask and softcap at hd64 spilled 80-128
// bytes at 128, and hd32 spilled 48 bytes at the 160 that the lighter reserve alone would give.
constexpr int64_t kHopperReserveRegisters3Light = 24;
constexpr int64_t kHopperLightMaskOps = 4;
constexpr int64_t kHopperLightMaxBlockKV3 = 128;
constexpr int64_t kHopperMinBlockKV3 = 96;
// Registers per 3 per-element score operations, 8 (ptxas, CUDA 13.0): custom_score's 7 spill at
// B_c = 128 (they need more than 16) and not at 112; ALiBi's 6 (its slope is per head) fit 128.
constexpr int64_t kHopperRegistersPer3ScoreOps = 8;

int64_t hopperConsumerRegisters(int64_t consumers) {
  return attnc::sm90::consumerRegisters(int(consumers));
}

int64_t hopperSmemBytes(int64_t consumers, int64_t blockKV, int64_t stages, int64_t d, int64_t dv) {
  return attnc::sm90::smemBytes(int(d), int(dv), int(consumers), int(blockKV), int(stages));
}

// Head dims 128 / 128 without dropout keep two stages where a third fits: the forward's K/V stages
// (with two consumers and no per-element score hook, deriveHopperTiles) and the dK/dV kernel's
// Q/dO stages (without the head-dim split, deriveHopperBackwardTiles). Measured on the H200
// (bench/ab_mix.py, 2026-12-02; docs/perf/H200.md and H200-backward.md), two stages against three:
// forward hd128 full N = 4K 1.037, causal 1.026, GQA 1.028, window 1.018, document 1.029 and 1.051
// (two A/Bs), dropout 0.967, ALiBi 1.003 (and softcap's kernel spills with two; B_c = 176 or 192
// with two stages no faster than 128); dK/dV kernel hd128 full N = 4K 1.013, causal 1.020, window
// 1.020, prefix-LM 1.008, document 1.006, ALiBi 1.004, dropout 0.972.
bool hd128KeepsTwoStages(const TileProblem& problem) {
  return problem.headDim == 128 && problem.headDimV == 128 && !problem.dropout;
}

// Head dims above 128 (d = d_v) with two consumers and no epilogue keep the B_c their registers
// and two stages hold instead of whole 64-key steps: 112 at 136-192 rather than 64 with three
// stages, 80 at 200-256 rather than 64 (shared memory then sets it). Measured on the H200
// (bench/ab_mix.py, docs/perf/H200.md), causal N = 4K against 64: hd192 1.084 (2026-12-02),
// hd160 1.111 and hd224 1.084 (2026-12-04); hd256 full 1.066 and causal 1.092 (2026-12-02).
// Without spills or serialized wgmma at 136-256 under causal, window, prefix and no mask (CUDA
// 13.0; test/kernel-specs/head-dim-160-window.yaml and -224-prefix.yaml keep two of them in make
// check).
bool wideHeadKeepsRegisterFit(const TileProblem& problem, bool three, int64_t epilogue) {
  return !three && epilogue == 0 && problem.headDim > 128 && problem.headDimV == problem.headDim;
}
// Of those, head dims 256 reserve 52, not 56, to reach B_c = 80: their O takes 128 registers and
// the rest of the kernel fewer than the reserve assumes (full_hd256 and causal_hd256 compile
// without spills at 80).
constexpr int64_t kHopperReserveRegistersHd256 = 52;

}  // namespace

FailureOr<TileChoice> mlir::attn::deriveHopperTiles(const TileProblem& problem,
                                                    const TileTarget& target) {
  TileChoice choice;
  choice.kernel = "sm90";
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = problem.headDim, dv = problem.headDimV;
  const int64_t dMax = std::max(llvm::alignTo(d, 16), llvm::alignTo(dv, 16));
  if (problem.elementBytes != 2) return failure();

  // 1. The FlashAttention rule.
  int64_t m = target.smemPerBlock / problem.elementBytes;
  int64_t blockKV = llvm::divideCeil(m, 4 * dMax);
  note(llvm::formatv("M = {0} B shared memory per block on {1} / {2} B per element = {3} elements; "
                     "FlashAttention: B_c = ceil(M / 4d) = ceil({3} / {4}) = {5}",
                     target.smemPerBlock, target.arch, problem.elementBytes, m, 4 * dMax, blockKV));

  // 2. Instruction shapes and warp roles: wgmma's M is 64 rows per warpgroup, so B_r = 64 per
  // consumer warpgroup; two consumers let one's softmax overlap the other's GEMMs, three (head
  // dims up to 64, step 3) two softmaxes with one's GEMMs. B_c is a multiple of 16 (the k16 steps
  // of P V) up to wgmma's largest N, 256.
  int64_t epilogue =
      problem.epilogueRegisters + llvm::divideCeil(kHopperRegistersPer3ScoreOps * problem.scoreOps, 3);
  // (signed: an epilogue larger than the budget makes the budget negative, and no B_c fits it)
  auto live = [&](int64_t kv) { return int64_t(llvm::alignTo(dv, 8)) / 2 + kv / 2 + kv / 4; };
  auto registerFitFor = [&](int64_t consumers, int64_t reserve, int64_t kv) {
    const int64_t budget = hopperConsumerRegisters(consumers) - reserve - epilogue;
    while (kv > 16 && live(kv) > budget) kv -= 16;
    return live(kv) <= budget ? kv : int64_t(0);
  };
  blockKV = std::clamp<int64_t>(blockKV / 16 * 16, 16, 256);
  const bool light = epilogue == 0 && problem.maskOps <= kHopperLightMaskOps;
  // B_c with three consumers: the lighter reserve lifts it to at most kHopperLightMaxBlockKV3.
  auto fitFor3 = [&](int64_t kv) {
    const int64_t fit = registerFitFor(3, kHopperReserveRegisters3, kv);
    if (!light || fit >= kHopperLightMaxBlockKV3) return fit;
    return std::min(registerFitFor(3, kHopperReserveRegisters3Light, kv),
                    std::min(kv, kHopperLightMaxBlockKV3));
  };
  const bool three = llvm::alignTo(d, 16) <= 64 && llvm::alignTo(dv, 16) <= 64 &&
                     fitFor3(blockKV) >= kHopperMinBlockKV3;
  int64_t consumers = three ? 3 : kHopperConsumers;
  int64_t blockQ = 64 * consumers;
  note(llvm::formatv("wgmma m64nNk16: B_r = 64 x {0} consumer warpgroups = {1}; B_c = {2} (a "
                     "multiple of 16, at most 256); + 1 producer warpgroup = {3} threads",
                     consumers, blockQ, blockKV, 128 * (consumers + 1)));

  // 3. Registers: a consumer thread holds O (d_v / 2 fp32), S (B_c / 2 fp32) and P (B_c / 4
  // packed pairs) of its warpgroup's 64 rows; B_c shrinks by 16 until they fit.
  const int64_t fit3 = three ? fitFor3(blockKV) : 0;
  const bool lightReserve = three && fit3 > registerFitFor(3, kHopperReserveRegisters3, blockKV);
  const bool keepsFit = wideHeadKeepsRegisterFit(problem, three, epilogue);
  const bool hd256 = keepsFit && problem.headDim == 256;
  const int64_t reserve = hd256          ? kHopperReserveRegistersHd256
                          : !three       ? kHopperReserveRegisters
                          : lightReserve ? kHopperReserveRegisters3Light
                                         : kHopperReserveRegisters3;
  blockKV = three ? fit3 : registerFitFor(consumers, reserve, blockKV);
  if (blockKV == 0) return failure();
  // Whole 64-key steps where the registers allow them (two consumers; not the wide head dims of
  // wideHeadKeepsRegisterFit). Measured on the H200 (docs/perf/H200.md): hd128 at B_c = 144 ran
  // 583 TFLOP/s against 638 at 128 (full, N = 4K); hd256 at 64 ran 601 against 572 at 48.
  const int64_t registerFit = blockKV;
  if (!three && !keepsFit && blockKV > 64) blockKV = blockKV / 64 * 64;
  note(llvm::formatv("registers: setmaxnreg gives a consumer {0}; O + S + P = {1} / 2 + {2} / 2 + "
                     "{2} / 4 = {3} <= {0} - {4} reserved{5}: B_c = {2}{6}",
                     hopperConsumerRegisters(consumers), dv, registerFit, live(registerFit),
                     lightReserve ? llvm::formatv("{0} (no epilogue, a mask of at most {1} "
                                                  "operations: up to B_c = {2})",
                                                  reserve, kHopperLightMaskOps,
                                                  kHopperLightMaxBlockKV3)
                                        .str()
                     : hd256      ? llvm::formatv("{0} (head dims 256 without an epilogue)", reserve).str()
                                  : std::to_string(reserve),
                     epilogue ? llvm::formatv(" - {0} for the epilogue", epilogue).str()
                              : std::string(),
                     blockKV != registerFit
                         ? llvm::formatv(", {0} in whole 64-key steps", blockKV).str()
                         : std::string()));

  // 4. Shared memory: Q, then as many K/V stages as fit (2 to 4), shrinking B_c if even 2 do not.
  // Two consumers keep whole 64-key steps here too (hd136 with a window and dropout spilled 12
  // bytes at the 112 that 16-key steps gave from 128).
  while (blockKV > 16 && hopperSmemBytes(consumers, blockKV, 2, d, dv) > target.smemPerBlock)
    blockKV -= !three && !keepsFit && blockKV > 64 ? 64 : 16;
  // Except hd128 without dropout (hd128KeepsTwoStages), with two consumers and no per-element
  // score hook: two stages where a third fits.
  const bool twoStages = !three && problem.scoreOps == 0 && hd128KeepsTwoStages(problem);
  int64_t stages = 2;
  while (!twoStages && stages < kHopperMaxStages &&
         hopperSmemBytes(consumers, blockKV, stages + 1, d, dv) <= target.smemPerBlock)
    ++stages;
  int64_t smem = hopperSmemBytes(consumers, blockKV, stages, d, dv);
  if (smem > target.smemPerBlock) return failure();
  note(llvm::formatv("shared memory: Q {0} rows + {1} stages of K and V ({2} rows each), 64-element "
                     "swizzled column chunks of head dims {3} / {4}, + barriers and alignment = {5} "
                     "B <= {6} B{7}",
                     blockQ, stages, blockKV, d, dv, smem, target.smemPerBlock,
                     twoStages && hopperSmemBytes(consumers, blockKV, 3, d, dv) <= target.smemPerBlock
                         ? " (two stages: head dims 128 without dropout or a score hook ran faster "
                           "with two than with three)"
                         : ""));

  if (problem.blockQOverride || problem.blockKVOverride) {
    if (problem.blockQOverride) {
      if (problem.blockQOverride % 64 != 0 || problem.blockQOverride > 192) return failure();
      consumers = problem.blockQOverride / 64;
      blockQ = problem.blockQOverride;
    }
    if (problem.blockKVOverride) {
      if (problem.blockKVOverride % 16 != 0 || problem.blockKVOverride > 256) return failure();
      blockKV = problem.blockKVOverride;
    }
    stages = 2;
    smem = hopperSmemBytes(consumers, blockKV, stages, d, dv);
    note(llvm::formatv("override: B_r = {0}, B_c = {1} ({2} B shared memory)", blockQ, blockKV, smem));
    if (smem > target.smemPerBlock) return failure();
  }

  note(llvm::formatv("result: B_r = {0}, B_c = {1}, {2} warps ({3} consumer warpgroups), {4} "
                     "stages, {5} B shared",
                     blockQ, blockKV, 4 * (consumers + 1), consumers, stages, smem));
  choice.blockQ = blockQ;
  choice.blockKV = blockKV;
  choice.warps = 4 * (consumers + 1);
  choice.stages = stages;
  choice.smemBytes = smem;
  return choice;
}

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
  return 2 * blockQ * (width64(d) + width64(dv)) + stages * 2 * blockKV * (width64(d) + width64(dv));
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
constexpr int64_t kHopperBwdMaxStages = 4;
// Registers beyond bwdConsumerRegisters(): addresses, loop state, the LSE and delta reads. hd128
// (208 modelled) compiles with 240 and neither spills nor serializes its wgmma; with 232 ptxas
// serializes them (CUDA 13.0).
constexpr int64_t kHopperBwdReserveRegisters = 32;

void deriveHopperBackwardTiles(const TileProblem& problem, const TileTarget& target,
                               BackwardTileChoice& choice) {
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  const int64_t d = problem.headDim, dv = problem.headDimV;
  const int64_t consumers = kHopperBwdConsumers;
  const int64_t available = attnc::sm90::consumerRegisters(int(consumers));
  if (problem.hopperBackwardExtra < 0) {
    note(llvm::formatv("sm_90a dK/dV kernel: the mask reads declared inputs, which its producer warp "
                       "cannot classify within {0} registers: the sm80 dK/dV kernel below serves",
                       attnc::sm90::producerRegisters()));
    return;
  }
  const int64_t reserve = kHopperBwdReserveRegisters + problem.hopperBackwardExtra;
  // The sm_90a dQ kernel (bwd_q.h), derived below: whether it can serve, and its kv tile. For a
  // mask that reads declared inputs its producer warp reads the launch's precomputed classes of
  // its kv tiles (`_bwd_q_tile_classes`) within its 24 registers, and its consumers' model keeps 8
  // free for their reads of the inputs (bwd_config.h kDqKernelInputsReserve).
  const int64_t inputsReserve =
      problem.maskReadsInputs ? attnc::sm90::kDqKernelInputsReserve : 0;
  // Its kv tile: by its registers, then halved (to 32 at least) while two stages of K and V beside
  // Q and dO do not fit (a narrow head dim beside a wide d_v: (8, 248) takes 64 keys for 128).
  const int64_t registerBlockKV =
      attnc::sm90::dqKernelBlockKV(int(d), int(problem.backwardSpillReserve + inputsReserve));
  int64_t dqBlockKV = registerBlockKV;
  auto dqSmem = [&](int64_t stages) {
    return int64_t(attnc::sm90::dqKernelSmemBytes(int(d), int(dv), int(dqBlockKV), int(stages)));
  };
  while (dqBlockKV > 32 && dqSmem(2) > target.smemPerBlock) dqBlockKV /= 2;
  const bool dqKernelTakesMask =
      !problem.maskReadsInputs || attnc::sm90::dqKernelTakesInputMask(int(d), int(dv));
  const bool dqKernelFits = dqKernelTakesMask && dqSmem(2) <= target.smemPerBlock;
  const int64_t plainModel = attnc::sm90::bwdConsumerRegisters(int(d), int(dv));
  const int64_t plainNeeded = plainModel + reserve;
  // The head-dim split (bwd_config.h: the consumers share 64 kv rows, each keeping its share of
  // dK's and dV's columns) where the plain kernel does not fit: only where dK and dV are what does
  // not fit (the plain kernel without the epilogue), in whole 64-column chunks per consumer (three
  // chunks padded to four, one to two, bwd_config.h splitChunks; a head dim of at most 64 columns
  // has no dQ share a consumer could take whole, so there the dQ kernel must serve:
  // splitDqFits). Calibrated with ptxas (CUDA 13.0) at
  // hd136-256 and (192, 128), bf16 and fp16: causal, window, prefix, ALiBi, additive and tanh
  // scores, dropout and document masks compile without spills (until 2026-12-03, when each
  // consumer computed the whole S^T and dP^T, dropout, softcap and document spilled and took the
  // sm80 kernel), and so does custom_mask, whose epilogue the model charges 16 (192 + 32 + 16 =
  // 240); a larger charge takes the sm80 kernel.
  const bool tryingSplit = plainNeeded > available;
  const bool splitAllowed =
      tryingSplit && (attnc::sm90::splitDqFits(int(d), int(consumers)) || dqKernelFits) &&
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
         llvm::formatv(": the head-dim split, the consumers sharing 64 kv rows and each keeping {0} "
                       "of dK's{2} and {1} of dV's{3} columns (S^T and dP^T halved between them along the q tile)",
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
  const bool separateDq = withDq > target.smemPerBlock && !split && dqKernelFits &&
                          withoutDq <= target.smemPerBlock;
  auto smem = [&](int64_t stages) { return layoutBytes(stages, separateDq); };
  if (smem(2) > target.smemPerBlock) {
    // Why the form without dQ does not serve either.
    std::string why;
    if (!split && dqKernelFits)
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
  note(llvm::formatv("sm_90a dK/dV kernel: {0} consumer warpgroups x 64 kv rows{11} = {1} kept K/V rows, "
                     "q tiles of {2} rows (wgmma M); registers {3} (dK, dV, S^T, dP^T, dS^T) + {4} "
                     "reserve + {5} epilogue = {6} <= {7} per consumer thread; {8} Q/dO stages, {9} B "
                     "<= {10} B shared{12}",
                     consumers, attnc::sm90::bwdKvRows(int(consumers), split),
                     attnc::sm90::kBwdBlockQ, model, kHopperBwdReserveRegisters,
                     problem.hopperBackwardExtra, needed, available, stages, choice.hopperSmemBytes,
                     target.smemPerBlock, split ? " (shared)" : "",
                     twoStages && smem(3) <= target.smemPerBlock
                         ? " (two stages: head dims 128 without dropout ran faster with two than "
                           "with three)"
                         : ""));
  const char* noTurns =
      split             ? "the head-dim split's consumers wait for each other's half of P^T and dS^T"
      : problem.dropout ? "dropout: Philox outweighs the GEMMs, turns would only delay it"
      : problem.maskReadsInputs
          ? "the mask reads declared inputs: its loads outweigh the GEMMs, turns would only delay them"
          : "a score hook: it and its derivative outweigh the GEMMs, turns would only delay them";
  note(attnc::sm90::bwdPingPong(split, problem.dropout, problem.maskReadsInputs, problem.scoreHook)
           ? std::string("sm_90a dK/dV kernel: the consumers take turns issuing their GEMMs "
                         "(ping-pong), so that one's elementwise steps run under the other's GEMMs")
           : llvm::formatv("sm_90a dK/dV kernel: no ping-pong ({0})", noTurns).str());

  // The sm_90a dQ kernel (bwd_q.h): with the wgmma dK/dV kernel, for its `_kv_nodq` partner.
  if (!dqKernelTakesMask) {
    note(llvm::formatv("sm_90a dQ kernel: the mask reads declared inputs, whose reads its consumers "
                       "hold beside dQ's accumulators: 4 x {0} + {1} = {2} > 1120 spilled "
                       "(bwd_config.h dqKernelTakesInputMask): the sm80 dQ kernel serves the "
                       "deterministic backward, and the default one keeps the dK/dV kernel's dQ",
                       d, dv, 4 * d + dv));
    return;
  }
  if (dqSmem(2) > target.smemPerBlock) {
    note(llvm::formatv("sm_90a dQ kernel: shared memory with 2 stages {0} B > {1} B: the sm80 dQ "
                       "kernel serves the deterministic backward",
                       dqSmem(2), target.smemPerBlock));
    return;
  }
  int64_t dqStages = 2;
  while (dqStages < kHopperBwdMaxStages && dqSmem(dqStages + 1) <= target.smemPerBlock) ++dqStages;
  choice.hopperQBlockKV = dqBlockKV;
  choice.hopperQStages = dqStages;
  choice.hopperQSmemBytes = dqSmem(dqStages);
  choice.hopperSeparateDq =
      separateDq || attnc::sm90::separateDqKernel(split);
  note(llvm::formatv("sm_90a dQ kernel: 2 consumer warpgroups x 64 q rows, kv tiles of {0} keys "
                     "(registers {1}: dQ, S, dP, dS <= {2}{7}{8}), {3} K/V stages, {4} B <= {5} B "
                     "shared; {6}",
                     dqBlockKV, attnc::sm90::dqKernelRegisters(int(d), int(dqBlockKV)),
                     attnc::sm90::kDqKernelLive - inputsReserve, dqStages,
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
                     dqBlockKV < registerBlockKV
                         ? llvm::formatv("; {0} keys fit the registers, not the shared memory",
                                         registerBlockKV)
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
  // Calibrated against ptxas (CUDA 13.0) over head dims 64..256, five epilogues and both targets:
  // no configuration inside the budget spilled (docs/pipeline.md); the example compiles check it.
  const int64_t fa = llvm::divideCeil(m, 4 * dMax);
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
  if (target.arch == "sm_90a" && e == 2) deriveHopperBackwardTiles(problem, target, choice);
  choice.kvBlockQ = kv.blockQ, choice.kvBlockKV = kv.blockKV, choice.kvWarps = kKVWarps;
  choice.kvStages = kv.stages, choice.kvSmemBytes = kv.smem;
  choice.qBlockQ = qBlockQ, choice.qBlockKV = qBlockKV, choice.qWarps = qWarps, choice.qStages = qStages;
  choice.qSmemBytes = qSmem;
  return choice;
}
