// How many splits of the keys a decode launch takes (split-KV): blocks an SM holds, and the split
// count that fills the machine's block slots without cutting the keys finer than it pays for.
// One definition for the runtime (at launch), `attnc explain` and the unit tests
// (docs/design/decode.md gives the rule's reasons).
#pragma once

#include "attnc/common/types.h"

namespace attnc {

// What bounds the blocks an SM holds at once (attnc::Target's fields, plus the block limit).
struct SmLimits {
  int regsPerSM;        // 32-bit registers of one SM
  i64 smemPerSM;        // bytes of shared memory of one SM
  int maxThreadsPerSM;  // resident threads
  int maxBlocksPerSM;   // resident blocks (32 on sm_80 and sm_90, 16 on sm_86, 24 on sm_89)
};

// Registers are allocated a warp at a time in units of 256 (8 a thread).
constexpr int kRegAllocUnit = 256;
// The driver reserves 1 KB of shared memory for each resident block (sm_80 and later).
constexpr i64 kSmemReservedPerBlock = 1024;

// Blocks of `threads` threads, `regs` registers a thread and `smemBytes` of shared memory that one
// SM holds at once: the occupancy calculator's arithmetic, for callers without a loaded function
// (explain, tests). The runtime asks the driver instead
// (cuOccupancyMaxActiveBlocksPerMultiprocessor).
ATTNC_HD int blocksPerSM(int threads, int regs, i64 smemBytes, const SmLimits& limits) {
  if (threads <= 0 || threads > limits.maxThreadsPerSM)
    return 0;
  const int warps = ceilDiv(threads, 32);
  const int regsPerWarp = roundUp(maxOf(regs, 1) * 32, kRegAllocUnit);
  const int byRegs = limits.regsPerSM / regsPerWarp / warps;
  const int byThreads = limits.maxThreadsPerSM / (warps * 32);
  const i64 bySmem = limits.smemPerSM / (smemBytes + kSmemReservedPerBlock);
  return minOf(minOf(byRegs, byThreads), minOf(limits.maxBlocksPerSM, int(bySmem)));
}

// Most splits a launch takes: each costs a partial (O, LSE) and a share of the combine, and past
// 128 the grid's z dimension holds more splits than any target's slots need (132 SMs x 2 blocks
// is filled by 8 units at 33 splits).
constexpr int kMaxSplits = 128;
// A split count is good enough once it fills this share of the best count's slot efficiency: the
// smallest such count keeps the partials and the combine small (8 units on 264 slots: 29 splits
// fill 88% of them, 33 fill all, at 14% more partials).
constexpr float kSplitEfficiency = 0.85f;
// A split must read at least this many times its partials' bytes in K/V: the partials are written
// once and read once by the combine, so at 16x the two add at most 1/8 to the launch's traffic.
constexpr int kKvBytesPerPartialByte = 16;
// A split takes at least two kv tiles: one tile leaves no copy to overlap with the math.
constexpr int kMinSplitTiles = 2;

// The shape of one decode launch, as the split rule sees it.
struct SplitProblem {
  int units;        // blocks without splitting: batch x heads_kv x row tiles
  int kvTiles;      // kv tiles of the longest sequence (ceil(kv_len / BlockKV))
  int slots;        // blocks the machine holds at once: numSMs x blocksPerSM
  i64 kvTileBytes;  // K/V bytes one kv tile reads: BlockKV x (d + dv) x element bytes
  i64 partialBytes; // bytes of one split's partials a unit writes: rows x dv x 4 (O, fp32)
};

struct SplitPlan {
  int splits;      // blocks along the keys of one unit: ceilDiv(kvTiles, splitTiles)
  int splitTiles;  // kv tiles each split reads (the last may read fewer)
};

// The plan for `s` splits requested: the tiles a split reads, and the splits that then have any.
ATTNC_HD SplitPlan splitPlanFor(int s, int kvTiles) {
  const int tiles = maxOf(kvTiles, 1);
  const int splitTiles = ceilDiv(tiles, maxOf(s, 1));
  return {ceilDiv(tiles, splitTiles), splitTiles};
}

// The share of the slots the launch's waves keep busy with `splits` splits a unit.
ATTNC_HD float slotEfficiency(int units, int splits, int slots) {
  const i64 blocks = i64(units) * splits;
  const i64 waves = (blocks + slots - 1) / slots;
  return float(double(blocks) / double(waves * slots));
}

// Whether `plan` is allowed: one split always is; more need kMinSplitTiles tiles a split and K/V
// reads of kKvBytesPerPartialByte times the split's partials.
ATTNC_HD bool splitAllowed(const SplitPlan& plan, const SplitProblem& problem) {
  if (plan.splits == 1)
    return true;
  return plan.splitTiles >= kMinSplitTiles &&
         i64(plan.splitTiles) * problem.kvTileBytes >=
             kKvBytesPerPartialByte * problem.partialBytes;
}

// The choice over a measure of plans: a grid that fills the slots already (units >= slots) takes
// one split. Otherwise, over the allowed plans of 1 .. min(kMaxSplits, kvTiles) splits, the
// fewest splits whose efficiency(plan) reaches kSplitEfficiency of the best allowed plan's.
template <class Efficiency>
ATTNC_HD SplitPlan chooseSplits(const SplitProblem& problem, const Efficiency& efficiency) {
  const SplitPlan one = {1, maxOf(problem.kvTiles, 1)};
  if (problem.units <= 0 || problem.slots <= 0 || problem.units >= problem.slots)
    return one;
  const int most = minOf(kMaxSplits, maxOf(problem.kvTiles, 1));
  // Each count's efficiency, measured once (the mixed measure walks the batch); -1 where the plan
  // is not allowed.
  float measured[kMaxSplits];
  float best = 0.0f;
  for (int s = 1; s <= most; ++s) {
    const SplitPlan plan = splitPlanFor(s, problem.kvTiles);
    measured[s - 1] = splitAllowed(plan, problem) ? efficiency(plan) : -1.0f;
    if (measured[s - 1] > best)
      best = measured[s - 1];
  }
  for (int s = 1; s <= most; ++s)
    if (measured[s - 1] >= 0.0f && measured[s - 1] >= kSplitEfficiency * best)
      return splitPlanFor(s, problem.kvTiles);
  return one;
}

// The rule: chooseSplits over the slot efficiency (every sequence of the longest's length).
ATTNC_HD SplitPlan splitCount(const SplitProblem& problem) {
  return chooseSplits(problem, [&](const SplitPlan& plan) {
    return slotEfficiency(problem.units, plan.splits, problem.slots);
  });
}

// A batch of sequences of different lengths whose lengths the host knows (ForwardArgs' host
// copies): a split of `splitTiles` tiles is a block with work only where its sequence reaches it,
// so one long sequence sizes the grid while the short ones leave most of its blocks empty. Here a
// split size is judged by the share of the slots' time its live blocks spend on tiles:
//   live = unitsPerSeq x sum_b ceil(tiles_b / t),  waves = ceil(live / slots),
//   efficiency = unitsPerSeq x sum_b tiles_b / (t x waves x slots),
// and the rule is chooseSplits over it: the fewest splits within kSplitEfficiency of the best.
ATTNC_HD float mixedEfficiency(int unitsPerSeq, const int* seqTiles, int count, int splitTiles,
                               int slots) {
  i64 live = 0, work = 0;
  for (int b = 0; b < count; ++b) {
    live += (seqTiles[b] + splitTiles - 1) / splitTiles;
    work += seqTiles[b];
  }
  live *= unitsPerSeq;
  if (live == 0)
    return 0.0f;
  const i64 waves = (live + slots - 1) / slots;
  return float(double(work * unitsPerSeq) / (double(splitTiles) * double(waves * slots)));
}

// splitCount for `count` sequences of seqTiles[b] kv tiles (problem.kvTiles: the longest;
// problem.units: count x the units of one sequence). Sequences all of one length take
// splitCount's plan, so a uniform batch plans the same with or without the host's lengths.
ATTNC_HD SplitPlan splitCountMixed(const SplitProblem& problem, const int* seqTiles, int count) {
  bool uniform = true;
  for (int b = 0; b < count && uniform; ++b)
    uniform = seqTiles[b] == problem.kvTiles;
  if (uniform || count <= 0 || problem.units % count != 0)
    return splitCount(problem);
  const int unitsPerSeq = problem.units / count;
  return chooseSplits(problem, [&](const SplitPlan& plan) {
    return mixedEfficiency(unitsPerSeq, seqTiles, count, plan.splitTiles, problem.slots);
  });
}

}  // namespace attnc
