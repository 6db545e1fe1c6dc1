// A per-block timeline of the sm_90a forward and dK/dV kernels, for measuring where a block's time
// goes (block start, the first copies, the first tile, the loop, the output): compiled only with
// ATTNC_TIMELINE defined, which the JIT does when the environment has ATTNC_TIMELINE=1
// (compiler/Jit.cpp; the kernel cache keys on it). Such a kernel's LSE buffer holds 16 32-bit words
// a block (block index x + gridDim.x (y + gridDim.y z)), so it must hold at least 16 x blocks
// floats, which every launch's LSE does (q_len x heads x batch; blocks of 64 rows or more): the
// forward writes no LSE, and the dK/dV kernel writes over the LSE it reads, so its gradients mean
// nothing (its timing does not depend on the values). Times are the low 32 bits of %globaltimer in
// ns (the H200 ticks it every 32 ns), so only their differences mean anything.
// dev/bench/timeline.py reads them and prints the phases.
#pragma once

#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {
namespace sm90 {

// The words of a block's record (the marks sit in fwd_producer.h, fwd_mainloop.h and
// fwd_epilogue.h).
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
  kTimelinePartials = 14,     // of them, those it masked per element: the first tile's flag in
                              // bit 16, the later tiles' count in bits 0-15
  kTimelineMagic = 15,        // kTimelineMagicValue: the block wrote its record
};
constexpr u32 kTimelineMagicValue = 0xABCDu;

// The words of a dK/dV kernel block's record (the marks sit in backward.h); the SM, the start and
// the magic word as in the forward's.
enum BwdTimelineWord : int {
  kBwdTimelineKvIssued = 2,     // K's and V's copies issued (the producer's lane 0)
  kBwdTimelineStageIssued = 3,  // the first q tile's Q and dO copies issued (the producer)
  kBwdTimelineKv = 5,           // consumer 0 holds K, V and its first q tile's stage (word 4:
                                // unused; a mark between the two waits made the document
                                // kernel spill)
  kBwdTimelineFirstTile = 6,    // consumer 0's first q tile done (its dK, dV GEMMs waited for)
  kBwdTimelineLoopEnd = 7,      // consumer 0 left the loop
  kBwdTimelineDq = 8,           // consumer 0's last dQ reduction issued
  kBwdTimelineEnd = 9,          // consumer 0's dK and dV stored
  kBwdTimelineLoopEnd1 = 10,    // the same for consumer 1
  kBwdTimelineEnd1 = 11,
  kBwdTimelineTiles = 12,       // q tiles consumer 0 computed
};

#if defined(ATTNC_TIMELINE)
ATTNC_DEVICE u32 timelineNow() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return u32(t);
}
// P: FwdParams or BwdParams (whose LSE is an input: see the top).
// (The block index from fresh reads of the special registers, so that no register holds the
// record's address through a loop: the dK/dV kernel for a document mask spilled with it.)
template <class P>
ATTNC_DEVICE void timelineWrite(const P& p, int word, u32 value) {
  unsigned x, y, z, nx, ny;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(ny));
  const unsigned block = x + nx * (y + ny * z);
  reinterpret_cast<u32*>(const_cast<float*>(p.lse))[16 * block + word] = value;
}
template <class P>
ATTNC_DEVICE void timelineMark(const P& p, int word) {
  timelineWrite(p, word, timelineNow());
}
// The block's first marks: its SM, its start and the record's magic word.
template <class P>
ATTNC_DEVICE void timelineStart(const P& p) {
  u32 sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  timelineWrite(p, kTimelineSm, sm);
  timelineMark(p, kTimelineStart);
  timelineWrite(p, kTimelineMagic, kTimelineMagicValue);
}
constexpr bool kTimeline = true;
#else
template <class P>
ATTNC_DEVICE void timelineWrite(const P&, int, u32) {}
template <class P>
ATTNC_DEVICE void timelineMark(const P&, int) {}
template <class P>
ATTNC_DEVICE void timelineStart(const P&) {}
constexpr bool kTimeline = false;
#endif

}  // namespace sm90
}  // namespace attnc
