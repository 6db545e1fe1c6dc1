// The sm_80-family forward kernel's tile rule (templates/attnc/sm80/forward.h: 16 or 32 query rows
// per warp, mma.sync m16n8k16 fragments, S and O accumulated in registers, K/V tiles
// multi-buffered in shared memory): the FlashAttention rule fitted step by step to that kernel.
// It serves every target but sm_90a, and sm_90a where the wgmma kernel's registers do not fit.
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;
using tile_rule::pow2Floor;

namespace {

// B_r of 64 to 128 rows and B_c of 32 to 128 keys: the tiles FlashAttention-2's mma.sync forward
// kernels take (kBlockM, kBlockN); 64 rows are kMinWarps warps of one m16 fragment each.
constexpr int64_t kMinBlockQ = 64, kMaxBlockQ = 128;
constexpr int64_t kMinBlockKV = 32, kMaxBlockKV = 128;
constexpr int64_t kMinWarps = 4;           // fewer leaves the SM's schedulers idle
constexpr int64_t kStages = 2;             // K and V alternate in a ring of 2 cp.async buffers
constexpr int64_t kQRegisterLimit = 32;    // Q fragments stay resident up to this many registers

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

FailureOr<TileChoice> tile_rule::deriveSm80Tiles(const TileProblem& problem,
                                                 const TileTarget& target) {
  TileChoice choice;
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
  int64_t blockKV = flashAttentionBlockKV(m, dMax);
  int64_t blockQ = std::min(blockKV, d);
  note(llvm::formatv("FlashAttention: B_c = ceil(M / 4d) = ceil({0} / {1}) = {2}; "
                     "B_r = min(B_c, d) = {3}", m, 4 * dMax, blockKV, blockQ));

  // 2. Instruction shapes: power-of-two tiles of whole m16n8k16 fragments.
  blockQ = std::clamp(pow2Floor(blockQ), kMinBlockQ, kMaxBlockQ);
  blockKV = std::clamp(pow2Floor(blockKV), kMinBlockKV, kMaxBlockKV);
  note(llvm::formatv("mma.sync m16n8k16: B_r = {0}, B_c = {1} (powers of two in [{2}, {3}] and "
                     "[{4}, {5}])",
                     blockQ, blockKV, kMinBlockQ, kMaxBlockQ, kMinBlockKV, kMaxBlockKV));

  // Work per block: below 128 rows a block has fewer than 4 warps of 32 rows (or 8 of 16), too
  // little independent mma work to hide its K/V loads.
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
                     "accumulators and resident Q = {3} per thread <= {4} (3/4 of {5}{6}): "
                     "B_c = {7}",
                     rowsPerWarp, warps, warps * 32, liveRegisters(rowsPerWarp, d, dv, blockKV),
                     budget, target.regsPerThread,
                     problem.epilogueRegisters
                         ? llvm::formatv(", less {0} for the epilogue", problem.epilogueRegisters)
                               .str()
                         : std::string(),
                     blockKV));

  // 4. Shared memory: the Q tile and a ring of K/V buffers, rows padded to 128-byte segments.
  int64_t stages = kStages;
  int64_t width = llvm::alignTo(std::max(problem.headDim, problem.headDimV), 64);
  auto fits = [&] { return smemBytes(blockQ, blockKV, stages, width, e) <= target.smemPerBlock; };
  while (blockKV > kMinBlockKV && !fits()) blockKV /= 2;
  while (blockQ > kMinBlockQ && !fits()) {
    blockQ /= 2;
    rowsPerWarp = std::max<int64_t>(16, blockQ / kMinWarps / 16 * 16);
    warps = blockQ / rowsPerWarp;
  }
  int64_t smem = smemBytes(blockQ, blockKV, stages, width, e);
  note(llvm::formatv("shared memory: (Q {0} + {1} K/V buffers x {2}) rows x {3} wide x {4} B = "
                     "{5} B <= {6} B",
                     blockQ, stages, blockKV, width, e, smem, target.smemPerBlock));
  if (smem > target.smemPerBlock) return failure();

  // Explicit overrides replace the derived sizes (experiments; the derivation says so).
  if (problem.blockQOverride || problem.blockKVOverride) {
    if (problem.blockQOverride) blockQ = problem.blockQOverride;
    if (problem.blockKVOverride) blockKV = problem.blockKVOverride;
    if (blockQ % 16 != 0 || blockKV % 16 != 0) return failure();
    rowsPerWarp = blockQ >= 32 * kMinWarps ? 32 : 16;
    warps = blockQ / rowsPerWarp;
    smem = smemBytes(blockQ, blockKV, stages, width, e);
    note(llvm::formatv("override: B_r = {0}, B_c = {1} ({2} B shared memory)", blockQ, blockKV,
                       smem));
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
