// The decode kernel's tile rule (templates/attnc/sm80/decode.h: GQA-packed query rows, warps
// splitting each K/V tile's keys, K/V streamed through a cp.async ring). Decode reads every K/V
// byte once for a few rows, so the rule sizes the ring for memory bandwidth, not for mma work.
#include "dialects/Attn/Transforms/TileRuleShared.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

constexpr int64_t kFragmentRows = 16;    // mma.sync m16n8k16: a warp's rows are m16 fragments
constexpr int64_t kMaxMTiles = 2;        // 32 rows: O of 2 x dv/2 fp32 a lane fills the budget
constexpr int64_t kWarps = 4;            // one warp per SM sub-partition, each its own keys
constexpr int64_t kWarpKeys = 16;        // a warp's keys: S and P V in whole k16 steps
constexpr int64_t kBlockKV = kWarps * kWarpKeys;
constexpr int64_t kMinStages = 2;        // K and V alternate: one loads while the other is read
constexpr int64_t kBlocksPerSM = 2;      // one block's merge and stores overlap the other's loads
constexpr int64_t kQRegisterLimit = 32;  // Q fragments stay resident up to this many registers
// Little's law: bytes in flight = bandwidth x latency, 4.8 TB/s (H200's HBM3e, the fastest part
// the family runs on: enough for slower ones) x ~1 us under load = 4.8 MB over the whole GPU.
constexpr int64_t kBytesInFlightPerGpu = 4'800'000;

// Q's fragments in registers: a thread's share of the rows x d tile, when at most 32.
int64_t qRegisters(int64_t mTiles, int64_t d) {
  int64_t q = mTiles * (d / 16) * 4;
  return q <= kQRegisterLimit ? q : 0;
}

// Live registers a thread keeps across the kv loop: the fp32 O of all the block's rows (every
// warp holds them), the S slice of its kBlockKV / kWarps keys, and Q when resident.
int64_t liveRegisters(int64_t mTiles, int64_t d, int64_t dv, int64_t blockKV, bool qResident) {
  int64_t rows = kFragmentRows * mTiles;
  int64_t o = rows * dv / 32, s = rows * (blockKV / kWarps) / 32;
  return o + s + (qResident ? qRegisters(mTiles, d) : 0);
}

// The Q tile (it also stages O on the way out) and the K/V ring, rows whole 128-byte swizzle
// segments as in the forward; at the end the warps merge their (O, m, l) pairwise, half of them
// writing fp32 partials per round, into the same memory.
int64_t ringBytes(int64_t rows, int64_t blockKV, int64_t stages, int64_t width, int64_t e) {
  return (rows + stages * blockKV) * width * e;
}
// Each lane's O fragments plus its rows' (max, sum) pairs: rows x (d_v + 8) fp32 a slot.
int64_t mergeBytes(int64_t rows, int64_t dv) { return kWarps / 2 * rows * (dv + 8) * 4; }

}  // namespace

FailureOr<DecodeTileChoice> mlir::attn::deriveDecodeTiles(const DecodeProblem& problem,
                                                          const TileTarget& target,
                                                          int64_t numSMs) {
  DecodeTileChoice choice;
  auto note = [&](std::string line) { choice.derivation.push_back(std::move(line)); };
  if (problem.group < 1 || problem.qLen < 1 || numSMs < 1) return failure();
  const int64_t d = llvm::alignTo(problem.headDim, 16);
  const int64_t dv = llvm::alignTo(problem.headDimV, 16);
  const int64_t e = problem.elementBytes;
  const int64_t width = llvm::alignTo(std::max(problem.headDim, problem.headDimV), 64);

  // 1. Packed rows: the G query heads of one kv head share its K/V, so they are one block's rows.
  // One kernel serves every q_len (1 to 16 new tokens is the common range): the rows a block
  // takes do not depend on it, only how many row tiles a launch has.
  const int64_t packed = problem.group * problem.qLen;
  int64_t mTiles = kMaxMTiles;
  note(llvm::formatv("packed rows: G {0} x q_len {1} = {2}; up to {3} m16 fragments a block",
                     problem.group, problem.qLen, packed, mTiles));
  if (packed > kDecodeMaxPackedRows)
    note(llvm::formatv("above {0} packed rows a launch is mma-bound: the forward kernel serves it",
                       kDecodeMaxPackedRows));

  // 2. Keys per tile and warps: each of the 4 warps takes 16 keys against all rows.
  const int64_t blockKV = kBlockKV;
  note(llvm::formatv("B_c = {0}: {1} warps of {2} keys each against all rows", blockKV, kWarps,
                     kWarpKeys));

  // 3. Registers: every warp holds O of all rows, so two fragments only where that fits.
  // Q stays in shared memory (read again each tile) before a fragment of rows goes.
  const int64_t budget = (target.regsPerThread + 1) * 3 / 4 - problem.epilogueRegisters;
  bool qResident = true;
  auto fitsRegisters = [&] {
    return liveRegisters(mTiles, d, dv, blockKV, qResident) <= budget;
  };
  while (!fitsRegisters()) {
    if (qResident && qRegisters(mTiles, d) > 0) {
      qResident = false;
      continue;
    }
    if (mTiles == 1) return failure();
    --mTiles, qResident = true;
  }
  qResident = qResident && qRegisters(mTiles, d) > 0;
  note(llvm::formatv("registers: {0} rows; live fp32 O + S{1} = {2} per thread <= {3} "
                     "(3/4 of {4}{5}){6}",
                     kFragmentRows * mTiles, qResident ? " + Q" : "",
                     liveRegisters(mTiles, d, dv, blockKV, qResident), budget,
                     target.regsPerThread,
                     problem.epilogueRegisters
                         ? llvm::formatv(", less {0} for the epilogue", problem.epilogueRegisters)
                               .str()
                         : std::string(),
                     qResident ? "" : "; Q read from shared memory each tile"));

  // 4. Stages: keep the bytes Little's law asks for in flight with 2 blocks per SM.
  const int64_t tileBytes = blockKV * width * e;
  const int64_t perSM = llvm::divideCeil(kBytesInFlightPerGpu, numSMs);
  const int64_t perBlock = llvm::divideCeil(perSM, kBlocksPerSM);
  int64_t stages = std::max<int64_t>(kMinStages, llvm::divideCeil(perBlock, tileBytes) + 1);
  note(llvm::formatv("Little's law: 4.8 TB/s x 1 us / {0} SMs = {1} B in flight per SM, {2} per "
                     "block at {3} blocks/SM = {4} tile(s) of {5} B loading while one is read: "
                     "{6} stages",
                     numSMs, perSM, perBlock, kBlocksPerSM, stages - 1, tileBytes, stages));

  // 5. Shared memory: within 1/kBlocksPerSM of the SM, less the driver's reserve per block;
  // stages go first, then rows.
  int64_t blocksPerSM = kBlocksPerSM;
  int64_t limit = target.smemPerSM / kBlocksPerSM - (target.smemPerSM - target.smemPerBlock);
  auto smem = [&] {
    int64_t rows = kFragmentRows * mTiles;
    return std::max(ringBytes(rows, blockKV, stages, width, e), mergeBytes(rows, problem.headDimV));
  };
  while (smem() > limit && stages > kMinStages) --stages;
  while (smem() > limit && mTiles > 1) --mTiles;
  if (smem() > limit) {
    // A wide head on a small SM (sm_86's 100 KB at d 256): one block an SM, all its shared memory.
    blocksPerSM = 1;
    limit = target.smemPerBlock;
  }
  const int64_t rows = kFragmentRows * mTiles;
  note(llvm::formatv("shared memory: max((Q {0} + {1} K/V buffers x {2}) rows x {3} wide x {4} B, "
                     "merge {5} x {0} rows x (d_v + m, l) x 4 B) = {6} B <= {7} B (1/{8} of the "
                     "SM, less its {9} B reserve)",
                     rows, stages, blockKV, width, e, kWarps / 2, smem(), limit, blocksPerSM,
                     target.smemPerSM - target.smemPerBlock));
  if (smem() > limit) return failure();

  choice.rows = rows;
  choice.mTiles = mTiles;
  choice.rowTiles = llvm::divideCeil(packed, rows);
  choice.qInRegisters = qResident;
  choice.blockKV = blockKV;
  choice.warps = kWarps;
  choice.stages = stages;
  choice.smemBytes = smem();
  note(llvm::formatv("result: {0} rows ({1} row tile(s) per kv head at q_len {2}), B_c = {3}, {4} "
                     "warps, {5} stages, {6} B shared",
                     rows, choice.rowTiles, problem.qLen, blockKV, kWarps, stages,
                     choice.smemBytes));
  return choice;
}
