// The sm_90a forward kernel's tile rule (templates/attnc/sm90/forward.h: wgmma, TMA stages, a
// producer warpgroup and consumer warpgroups of 64 rows each, warp-specialized): the
// FlashAttention rule fitted to wgmma's shapes, setmaxnreg's register split and the TMA stages.
// Where its registers do not fit, deriveTiles takes the sm_80-family rule instead.
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include "attnc/sm90/config.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;
using tile_rule::hd128KeepsTwoStages;

namespace {

// The sm_90a kernel (templates/attnc/sm90/config.h, whose resource functions this rule calls): a
// producer warpgroup and consumer warpgroups of 64 rows; two, or three for head dims up to 64
// (their O is small, so a third warpgroup's softmax can overlap the others' GEMMs) when B_c stays
// at least kHopperMinBlockKV3 with them.
constexpr int64_t kHopperConsumers = 2;  // one's softmax overlaps the other's GEMMs
constexpr int64_t kHopperMaxStages = 4;  // the TMA loads run up to 3 K/V tiles ahead
// Registers a consumer thread needs beyond its accumulators: the softmax state, shared and global
// addresses, loop counters and the tile classification. Every example compiles without spills
// with this reserve (ctest checks it). With three consumers (160 registers each) a reserve of 40
// gives hd64 B_c = 112.
constexpr int64_t kHopperReserveRegisters = 56;
constexpr int64_t kHopperReserveRegisters3 = 40;
// With no epilogue and a mask of at most kHopperLightMaskOps operations (causal or none), three
// consumers reserve 24, but only to lift B_c up to kHopperLightMaxBlockKV3: hd64 then takes 128
// without spills, and runs faster than at 112. Larger masks and score hooks spill at 128, and the
// 160 the lighter reserve alone would give spills at hd32.
constexpr int64_t kHopperReserveRegisters3Light = 24;
constexpr int64_t kHopperLightMaskOps = 4;
constexpr int64_t kHopperLightMaxBlockKV3 = 128;
// Three consumers trade B_c for B_r: only while B_c stays at least this, else two serve.
constexpr int64_t kHopperMinBlockKV3 = 96;
// Registers per 3 per-element score operations: fewer let custom_score spill at B_c = 128.
constexpr int64_t kHopperRegistersPer3ScoreOps = 8;
// Head dims 256 without an epilogue reserve 52, not 56, to reach B_c = 80
// (wideHeadKeepsRegisterFit): their O takes 128 registers and the rest of the kernel fewer than
// the reserve assumes.
constexpr int64_t kHopperReserveRegistersHd256 = 52;

int64_t hopperConsumerRegisters(int64_t consumers) {
  return attnc::sm90::consumerRegisters(int(consumers));
}

int64_t hopperSmemBytes(int64_t consumers, int64_t blockKV, int64_t stages, int64_t d, int64_t dv) {
  return attnc::sm90::smemBytes(int(d), int(dv), int(consumers), int(blockKV), int(stages));
}

// Head dims above 128 (d = d_v) with two consumers and no epilogue keep the B_c their registers
// and two stages hold instead of whole 64-key steps: 112 at 136-192 rather than 64 with three
// stages, 80 at 200-256 rather than 64 (shared memory then sets it); both ran faster. Without
// spills or serialized wgmma at 136-256 under causal, window, prefix and no mask
// (test/kernel-specs/head-dim-160-window.yaml and -224-prefix.yaml keep two of them in make check).
bool wideHeadKeepsRegisterFit(const TileProblem& problem, bool three, int64_t epilogue) {
  return !three && epilogue == 0 && problem.headDim > 128 && problem.headDimV == problem.headDim;
}

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
  int64_t blockKV = tile_rule::flashAttentionBlockKV(m, dMax);
  note(llvm::formatv("M = {0} B shared memory per block on {1} / {2} B per element = {3} elements; "
                     "FlashAttention: B_c = ceil(M / 4d) = ceil({3} / {4}) = {5}",
                     target.smemPerBlock, target.arch, problem.elementBytes, m, 4 * dMax, blockKV));

  // 2. Instruction shapes and warp roles: wgmma's M is 64 rows per warpgroup, so B_r = 64 per
  // consumer warpgroup; two consumers let one's softmax overlap the other's GEMMs, three (head
  // dims up to 64, step 3) two softmaxes with one's GEMMs. B_c is a multiple of 16 (the k16 steps
  // of P V) up to wgmma's largest N, 256.
  int64_t epilogue = problem.epilogueRegisters +
                     llvm::divideCeil(kHopperRegistersPer3ScoreOps * problem.scoreOps, 3);
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
  // wideHeadKeepsRegisterFit): hd128 ran slower at B_c = 144 than at 128.
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
                     : hd256
                         ? llvm::formatv("{0} (head dims 256 without an epilogue)", reserve).str()
                                  : std::to_string(reserve),
                     epilogue ? llvm::formatv(" - {0} for the epilogue", epilogue).str()
                              : std::string(),
                     blockKV != registerFit
                         ? llvm::formatv(", {0} in whole 64-key steps", blockKV).str()
                         : std::string()));

  // 4. Shared memory: Q, then as many K/V stages as fit (2 to 4), shrinking B_c if even 2 do not.
  // Two consumers keep whole 64-key steps here too: 16-key steps spilled (hd136 with a window and
  // dropout).
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
  note(llvm::formatv("shared memory: Q {0} rows + {1} stages of K and V ({2} rows each), "
                     "64-element swizzled column chunks of head dims {3} / {4}, + barriers and "
                     "alignment = {5} B <= {6} B{7}",
                     blockQ, stages, blockKV, d, dv, smem, target.smemPerBlock,
                     twoStages &&
                             hopperSmemBytes(consumers, blockKV, 3, d, dv) <= target.smemPerBlock
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
    note(llvm::formatv("override: B_r = {0}, B_c = {1} ({2} B shared memory)", blockQ, blockKV,
                       smem));
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
