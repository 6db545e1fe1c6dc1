// A per-block timeline of the sm_90a forward, for measuring where a block's time goes (block start,
// the first copies, the first tile, the loop, the output): compiled only with ATTNC_TIMELINE
// defined, which the JIT does when the environment has ATTNC_TIMELINE=1 (compiler/Jit.cpp; the
// kernel cache keys on it). Such a kernel writes no LSE: the LSE buffer holds 16 32-bit words a
// block instead (block index x + gridDim.x (y + gridDim.y z)), so it must hold at least 16 x blocks
// floats, which every forward launch's LSE does (q_len x heads x batch, blocks of 64 rows or more).
// Times are the low 32 bits of %globaltimer in ns (the H200 ticks it every 32 ns), so only their
// differences mean anything. bench/timeline.py reads them and prints the phases.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm90 {

// The words of a block's record (the marks sit in forward.h).
enum TimelineWord : int {
  kTimelineSm = 0,            // %smid
  kTimelineStart = 1,         // the producer's first instruction
  kTimelineQIssued = 2,       // Q's copy issued
  kTimelineFirstKIssued = 3,  // the first live tile's K and V copies issued
  kTimelineFirstK = 4,        // consumer 0 holds the first K (and, reading inputs, its keep bits)
  kTimelineQ = 5,             // consumer 0 holds Q
  kTimelineFirstTile = 6,     // consumer 0's first S = Q K^T and softmax done
  kTimelineLoopEnd = 7,       // consumer 0's last P V done
  kTimelineEnd = 8,           // consumer 0's output written
  kTimelineFirstK1 = 9,       // the same for consumer 1
  kTimelineFirstTile1 = 10,
  kTimelineLoopEnd1 = 11,
  kTimelineEnd1 = 12,
  kTimelineTiles = 13,        // kv tiles consumer 0 computed
  kTimelineMagic = 15,        // kTimelineMagicValue: the block wrote its record
};
constexpr u32 kTimelineMagicValue = 0xABCDu;

#if defined(ATTNC_TIMELINE)
ATTNC_DEVICE u32 timelineNow() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return u32(t);
}
ATTNC_DEVICE void timelineWrite(const FwdParams& p, int word, u32 value) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  reinterpret_cast<u32*>(p.lse)[16 * block + word] = value;
}
ATTNC_DEVICE void timelineMark(const FwdParams& p, int word) {
  timelineWrite(p, word, timelineNow());
}
// The block's first marks: its SM, its start and the record's magic word.
ATTNC_DEVICE void timelineStart(const FwdParams& p) {
  u32 sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  timelineWrite(p, kTimelineSm, sm);
  timelineMark(p, kTimelineStart);
  timelineWrite(p, kTimelineMagic, kTimelineMagicValue);
}
constexpr bool kTimeline = true;
#else
ATTNC_DEVICE void timelineWrite(const FwdParams&, int, u32) {}
ATTNC_DEVICE void timelineMark(const FwdParams&, int) {}
ATTNC_DEVICE void timelineStart(const FwdParams&) {}
constexpr bool kTimeline = false;
#endif

}  // namespace sm90
}  // namespace attnc
