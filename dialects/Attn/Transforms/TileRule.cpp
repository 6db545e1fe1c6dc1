// The FlashAttention tile rule, fitted step by step to the sm_80-family forward kernel
// (templates/attnc/sm80/forward.h): 16 query rows per warp, mma.sync m16n8k16 fragments,
// S and O accumulated in registers, K/V tiles multi-buffered in shared memory.
#include "dialects/Attn/Transforms/TileRule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

constexpr int64_t kRowsPerWarp = 16;       // one m16 fragment row block per warp
constexpr int64_t kMinBlockQ = 64, kMaxBlockQ = 128;
constexpr int64_t kMinBlockKV = 32, kMaxBlockKV = 128;
constexpr int64_t kStages = 2;             // K and V alternate in a ring of 2 cp.async buffers
constexpr int64_t kQRegisterLimit = 32;    // Q fragments stay resident up to this many registers
constexpr int64_t kRegisterMargin = 32;    // addresses, loop state, row max and sum
constexpr int64_t kFixedRegisters = 40;

int64_t pow2Floor(int64_t x) { return x <= 1 ? 1 : int64_t(llvm::bit_floor(uint64_t(x))); }

// Registers per thread the kernel's live state needs: O and S accumulators (floats), P packed
// as the A operand of the PV mma, Q fragments when they stay resident.
int64_t estimateRegisters(int64_t d, int64_t dv, int64_t blockKV, bool qInRegisters) {
  int64_t lanes = 32;
  int64_t oAccum = kRowsPerWarp * dv / lanes;
  int64_t sAccum = kRowsPerWarp * blockKV / lanes;
  int64_t pPacked = sAccum / 2;
  int64_t qFragments = qInRegisters ? kRowsPerWarp * d / lanes / 2 : 0;  // bf16 pairs
  return oAccum + sAccum + pPacked + qFragments + kFixedRegisters;
}

// The kernel's shared memory: rows are whole 128-byte swizzle segments (64 elements), the Q tile
// (which also stages O on the way out) and `stages` K/V buffers of one ring, as wide as the wider
// head dim (templates/attnc/sm80/config.h, FwdConfig::kSmemBytes).
int64_t smemBytes(int64_t blockQ, int64_t blockKV, int64_t stages, int64_t rowWidth,
                  int64_t elementBytes) {
  return (blockQ + stages * blockKV) * rowWidth * elementBytes;
}

}  // namespace

FailureOr<TileChoice> mlir::attn::deriveTiles(const TileProblem& problem, const TileTarget& target) {
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
  int64_t blockKV = llvm::divideCeil(m, 4 * dMax);
  int64_t blockQ = std::min(blockKV, d);
  note(llvm::formatv("FlashAttention: B_c = ceil(M / 4d) = ceil({0} / {1}) = {2}; "
                     "B_r = min(B_c, d) = {3}", m, 4 * dMax, blockKV, blockQ));

  // 2. Instruction shapes: whole 16-row fragments per warp, power-of-two tiles.
  blockQ = std::clamp(pow2Floor(blockQ), kMinBlockQ, kMaxBlockQ);
  int64_t warps = blockQ / kRowsPerWarp;
  note(llvm::formatv("mma.sync m16n8k16, {0} rows per warp: B_r = {1} ({2} warps, {3} threads)",
                     kRowsPerWarp, blockQ, warps, warps * 32));
  blockKV = std::clamp(pow2Floor(blockKV), kMinBlockKV, kMaxBlockKV);
  note(llvm::formatv("B_c to a power of two in [{0}, {1}]: B_c = {2}", kMinBlockKV, kMaxBlockKV,
                     blockKV));

  // 3. Registers: the accumulators live in registers; shrink B_c until they fit.
  int64_t budget = target.regsPerThread - kRegisterMargin;
  bool qInRegisters = kRowsPerWarp * d / 64 <= kQRegisterLimit;
  while (blockKV > kMinBlockKV && estimateRegisters(d, dv, blockKV, qInRegisters) > budget)
    blockKV /= 2;
  int64_t regs = estimateRegisters(d, dv, blockKV, qInRegisters);
  note(llvm::formatv("registers: O {0} + S {1} + P {2} + Q {3} + {4} fixed = {5} per thread "
                     "<= {6} (of {7}): B_c = {8}",
                     kRowsPerWarp * dv / 32, kRowsPerWarp * blockKV / 32, kRowsPerWarp * blockKV / 64,
                     qInRegisters ? kRowsPerWarp * d / 64 : 0, kFixedRegisters, regs, budget,
                     target.regsPerThread, blockKV));
  if (regs > budget) return failure();

  // 4. Shared memory: the Q tile and a ring of K/V buffers, rows padded to 128-byte segments.
  int64_t stages = kStages;
  int64_t width = llvm::alignTo(std::max(problem.headDim, problem.headDimV), 64);
  while (blockKV > kMinBlockKV && smemBytes(blockQ, blockKV, stages, width, e) > target.smemPerBlock)
    blockKV /= 2;
  while (blockQ > kMinBlockQ && smemBytes(blockQ, blockKV, stages, width, e) > target.smemPerBlock) {
    blockQ /= 2;
    warps = blockQ / kRowsPerWarp;
  }
  int64_t smem = smemBytes(blockQ, blockKV, stages, width, e);
  note(llvm::formatv("shared memory: (Q {0} + {1} K/V buffers x {2}) rows x {3} wide x {4} B = "
                     "{5} B <= {6} B", blockQ, stages, blockKV, width, e, smem, target.smemPerBlock));
  if (smem > target.smemPerBlock) return failure();

  // Explicit overrides replace the derived sizes (experiments; the derivation says so).
  if (problem.blockQOverride || problem.blockKVOverride) {
    if (problem.blockQOverride) blockQ = problem.blockQOverride;
    if (problem.blockKVOverride) blockKV = problem.blockKVOverride;
    if (blockQ % kRowsPerWarp != 0 || blockKV % 16 != 0) return failure();
    warps = blockQ / kRowsPerWarp;
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
