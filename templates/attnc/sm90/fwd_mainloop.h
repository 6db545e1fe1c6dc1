// The consumer warpgroups of the sm_90a forward: each owns 64 query rows and, per kv tile, issues
// S = Q K^T with wgmma from shared memory (issueQK), applies the Variant's score hook and mask
// (fwd_mask.h) to the accumulators and folds them into the online softmax, exp2 with the scale
// folded in, then dropout (softmaxStep), and issues O += P V with P straight from registers and V
// from shared memory (packAndDrop, issuePV). It arrives on a stage's empty barriers as soon as it
// is done with its K and with its V.
//
// The loop is software-pipelined as FlashAttention-3's intra-warpgroup overlap: iteration j issues
// S_j = Q K_j^T and then O += P_{j-1} V_{j-1}, waits for S_j only, runs the score hook, the mask
// and the softmax of tile j, and waits for P_{j-1} V_{j-1} before rescaling O. K_j's stage is
// released as soon as S_j is done, V_{j-1}'s when P_{j-1} V_{j-1} is. A plain second wait would be
// moved up to the first by ptxas, so it is held below the softmax (wgmmaWaitAfter), except with
// dropout (config.h softmaxOverlapsPV has the measurements). No wgmma is issued under a condition:
// ptxas then serializes every one of them. A warpgroup whose rows a tile masks entirely (or that
// has no rows) still multiplies and masks every element of it instead of skipping it.
//
// Ping-pong (FlashAttention-3): the consumer warpgroups take turns issuing their GEMMs (Turns), so
// that one's softmax runs while the other's GEMMs occupy the tensor cores; the last one starts by
// passing the first turn to warpgroup 0.
#pragma once

#include "attnc/common/epilogue.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/mma.h"
#include "attnc/common/params.h"
#include "attnc/common/philox.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/config.h"
#include "attnc/sm90/fwd_epilogue.h"
#include "attnc/sm90/fwd_idle.h"
#include "attnc/sm90/fwd_mask.h"
#include "attnc/sm90/fwd_smem.h"
#include "attnc/sm90/timeline.h"
#include "attnc/sm90/warpgroup.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

// The steps of one kv tile. They refer to the consumer's registers and values, each a local of
// consume() (O, S, P, Q's fragments, the softmax's row state): as members of one object, held by
// value, they stayed in memory longer in the compiler and the kernels' SASS changed.
template <class Config, class Variant>
struct ConsumerSteps {
  using Element = typename Config::Element;
  using Mask = ForwardMask<Config, Variant>;
  using TileMask = typename Mask::TileMask;
  static constexpr int kN = Config::kNTiles;
  static constexpr int kNv = Config::kNvTiles;
  static constexpr bool kMaskAhead = Mask::kMaskAhead;
  // Dropout's keep tests: where B_c is not a multiple of 32 keys (a Philox call's bytes split
  // between two pairs of n8 tiles at a position known only at run time) they are made with the
  // tile's softmax as whole words and applied to P once packed (sm80::dropoutKeptWords /
  // applyDropoutKept), else on the floats, where ptxas interleaves the hashes with the
  // exponentials (docs/design/sm90-forward.md).
  static constexpr bool kDropoutPacked = Variant::kHasDropout && dropoutGroupTiles(kN) == 2;
  static constexpr int kDropoutGroups = sm80::dropoutGroups<kDropoutPacked ? kN : 4>();
  // Q's A fragments in registers (config.h qInRegisters): S = Q K^T then reads only K from shared
  // memory.
  static constexpr bool kQInRegisters =
      qInRegisters(Config::kConsumers, Config::kHeadDim, Config::kHeadDimV, Config::kBlockKV);
  static constexpr int kQFragmentSteps = kQInRegisters ? Config::kQKSteps : 1;
  // From head_dim_v 128 the row maxima are lazy (OnlineSoftmax::advanceLazy, config.h
  // lazyRowMaxima): after the first tiles O is mostly not rescaled.
  static constexpr bool kLazyRescale = Config::kLazyRowMaxima;
  // With three consumers and a mask of positions (config.h warpgroupLastTile), the kv tiles past
  // this warpgroup's own last live one (under a causal mask, the block's last tiles for its first
  // rows) are not computed: the warpgroup leaves the loop there and idles through the rest of the
  // stream.
  static constexpr bool kGroupTail = warpgroupLastTile(
      Config::kConsumers, Variant::kHasMask && !VariantTileClasses<Variant>::value);

  const FwdParams& p;
  const ForwardSmem<Config>& smem;
  const ConsumerRows& rows;
  const int& b;
  const int& h;
  const Mask& masks;
  float (&o)[1][kNv][4];
  sm80::OnlineSoftmax<1>& softmax;
  float (&s)[1][kN][4];
  u32 (&pA)[1][Config::kPVSteps][4];
  u32 (&dropKept)[1][kDropoutGroups][4];
  u32 (&qA)[kQFragmentSteps][4];
  const int& stage;  // the stage of the tile in flight
  const u32& qTile;
  const float& log2Scale;
  const u32& batchHead;
  const u32& dropThreshold;

  // S = Q K^T of the tile in `stage`.
  ATTNC_DEVICE void issueQK() const {
    wgmmaFence();
    if constexpr (kQInRegisters)
      gemmRegsKMajor<Element, Config::kBlockKV, Config::kQKSteps>(flat(s), qA, smem.k(stage),
                                                                   Config::kBlockKV);
    else
      gemmKMajor<Element, Config::kBlockKV, Config::kQKSteps>(flat(s), qTile, 64, smem.k(stage),
                                                               Config::kBlockKV);
  }

  // O += P V of the previous tile, whose V is in stage vStage.
  ATTNC_DEVICE void issuePV(int vStage) const {
    gemmRegsMNMajor<Element, Config::kHeadDimV>(flat(o), pA[0], smem.v(vStage), Config::kBlockKV);
  }

  // The epilogue and softmax of S (tile `tile`), once S is in registers: the score hook, the mask,
  // the online softmax and dropout; returns whether O must be rescaled.
  ATTNC_DEVICE bool softmaxStep(int tile, const TileMask& mask, float (&factors)[1][2]) const {
    fenceRegisters(flat(s));
    mbarrierArrive(smem.kEmpty(stage));
    const int kCol = tile * Config::kBlockKV + 2 * (rows.lane & 3);
    if constexpr (Variant::kHasScore)
      sm80::applyScore<Variant, /*Positions=*/true>(s, p, b, h, rows.qRow, kCol);
    if (mask.masked) {
      if constexpr (kMaskAhead)
        sm80::applyKeepBits(s, mask.keep);
      else
        sm80::applyMask<Variant, /*BranchFree=*/true>(s, p, b, h, rows.qRow, kCol, mask.perElement);
    }
    bool rescales = true;
    if constexpr (kLazyRescale)
      rescales = softmax.advanceLazy(s, log2Scale, factors);
    else
      softmax.advance(s, log2Scale, factors);
    // (The packed form's keep tests are made here, after the exponentials, where they cost least:
    // docs/design/sm90-forward.md.)
    if constexpr (kDropoutPacked)
      sm80::dropoutKeptWords<Variant::kDropoutRounds, 1, kN>(dropKept, p, batchHead, dropThreshold,
                                                             rows.qRow, kCol);
    else if constexpr (Variant::kHasDropout)
      sm80::applyDropout<Variant::kDropoutRounds>(s, p, batchHead, dropThreshold, rows.qRow, kCol);
    return rescales;
  }

  // P of tile `tile` packed as its P V's A operand, then dropout's keep tests made with the
  // tile's softmax (softmaxStep) applied to the packed pairs (sm80::applyDropoutKept).
  ATTNC_DEVICE void packAndDrop(int tile) const {
    sm80::warp::packP<Element>(pA, s);
    if constexpr (kDropoutPacked)
      sm80::applyDropoutKept(pA, dropKept, tile * Config::kBlockKV + 2 * (rows.lane & 3));
  }

  // Waits for S = Q K^T (with PvPending, P V of the previous tile may still run) and returns the
  // tile's mask: for kMaskAhead the one made before the tile's S = Q K^T was waited for (`ahead`),
  // so that its reads of the mask's inputs run during the waits for the stage, the turn and S, else
  // made after the wait (a position mask made ahead costs more than it hides:
  // docs/design/sm90-forward.md).
  template <bool PvPending>
  ATTNC_DEVICE TileMask waitForS(int tile, const TileMask& ahead) const {
    TileMask mask;
    if constexpr (kMaskAhead) mask = ahead;
    wgmmaWait<PvPending ? 1 : 0>();
    if constexpr (!kMaskAhead) mask = masks.ofTile(tile, smem.scheduledClass(stage));
    return mask;
  }
};

// A consumer warpgroup from its first kv tile to its output. (`rows` by value: by reference, the
// ordered-grid kernels' SASS changed.)
template <class Config, class Variant>
ATTNC_DEVICE void consume(const FwdParams& p, const ForwardSmem<Config>& smem,
                          const KvTiles<Variant, Config::kBlockKV>& tiles, const ConsumerRows rows,
                          int b, int h) {
  using Steps = ConsumerSteps<Config, Variant>;
  using Mask = typename Steps::Mask;
  using TileMask = typename Mask::TileMask;
  constexpr int kN = Config::kNTiles;
  constexpr int kStages = Config::kStages;
  constexpr bool kMaskAhead = Mask::kMaskAhead;
  constexpr bool kReadsAhead = Mask::kReadsAhead;
  constexpr bool kGroupTail = Steps::kGroupTail;
  const int group = rows.group, groupThread = rows.groupThread, lane = rows.lane, warp = rows.warp;
  const int groupRow = rows.groupRow, groupLast = rows.groupLast;
  const bool groupHasRows = rows.groupHasRows;
  float o[1][Config::kNvTiles][4];
  sm80::warp::zero(o);
  sm80::OnlineSoftmax<1> softmax;
  // Without a score hook the scale folds into the base-2 exponent: one FFMA per probability.
  const float log2Scale = Variant::kHasScore ? kLog2e : p.scale * kLog2e;
  const u32 batchHead = u32(b * p.heads_q + h);
  const u32 dropThreshold = Variant::kHasDropout ? dropoutThreshold(p.dropout_p) : 0u;
  const u32 qTile = __shfl_sync(0xffffffffu, smem.q(group), 0);  // (warp-uniform to ptxas)
  u32 pA[1][Config::kPVSteps][4];  // P of the previous tile, the A operand of its P V
  float s[1][kN][4];
  u32 dropKept[1][Steps::kDropoutGroups][4];
  int stage = 0;
  u32 phase = 0;
  const Turns<Config> turns{group};
  u32 qA[Steps::kQFragmentSteps][4];
  const Mask masks{p, smem, tiles, rows, b, h};
  const Steps steps{p,        smem, rows, b,        h,  masks, o,         softmax,   s,
                    pA, dropKept, qA,   stage, qTile, log2Scale, batchHead, dropThreshold};
  int groupLastTile = 1 << 30;
  if constexpr (kGroupTail) {
    const KvTiles<Variant, Config::kBlockKV> own(p, b, h, maxOf(groupRow, 0), groupLast);
    groupLastTile = own.last();
  }
  int iteration = 0;
  // With the early start stage 0's slot was published before the block's barrier sync
  // (produceStart), so for kMaskAhead the first tile's mask is made while its K and Q are still in
  // flight. (Other specs wait first, as the loop does.)
  if constexpr (!kMaskAhead) mbarrierWait(smem.kFull(stage), phase);
  int tile = smem.scheduledTile(stage);
  // This consumer's timeline marks (timeline.h): the first two consumers' first threads.
  const bool marks = kTimeline && groupThread == 0 && group < 2;
  if (tile >= 0) {
    // The first tile's mask: where it is split, its loads are issued now, while K and Q are in
    // flight, and joined once S = Q K^T is issued, so that neither the loads nor the join delay
    // the block's first GEMM (docs/design/sm90-forward.md).
    const typename Mask::Reads firstReads = masks.reads(tile, stage);
    TileMask firstMask{};
    if constexpr (!kReadsAhead && kMaskAhead) firstMask = masks.ahead(tile, stage);
    if constexpr (kMaskAhead) mbarrierWait(smem.kFull(stage), phase);
    if (marks) timelineMark(p, group == 0 ? kTimelineFirstK : kTimelineFirstK1);
    if (group == Config::kConsumers - 1) turns.pass();
    mbarrierWait(smem.qFull(), 0);
    if (marks && group == 0) timelineMark(p, kTimelineQ);
    if constexpr (Steps::kQInRegisters) loadKMajorFragments(qA, qTile, 64, warp, lane);
    turns.take();
    steps.issueQK();
    turns.pass();
    if constexpr (kReadsAhead) firstMask = masks.fromReads(tile, firstReads);
    float factors[1][2];
    // The timeline's count of the tiles masked per element (compiled only with ATTNC_TIMELINE).
    u32 partials = 0;
    // O is still zero: nothing to rescale.
    {
      const TileMask mask = steps.template waitForS<false>(tile, firstMask);
      if constexpr (kTimeline) partials = mask.perElement ? 1u << 16 : 0u;
      steps.softmaxStep(tile, mask, factors);
    }
    if (marks) timelineMark(p, group == 0 ? kTimelineFirstTile : kTimelineFirstTile1);
    steps.packAndDrop(tile);
    for (iteration = 1;; ++iteration) {
      const int prevStage = stage;
      const u32 prevPhase = phase;
      const int nextStage = iteration % kStages;
      const u32 nextPhase = u32(iteration / kStages) & 1u;
      mbarrierWait(smem.kFull(nextStage), nextPhase);
      tile = smem.scheduledTile(nextStage);
      if (tile < 0 || (kGroupTail && tile > groupLastTile)) break;
      stage = nextStage;
      phase = nextPhase;
      // The mask's reads and decisions before the turn (joined after the GEMMs instead, as the
      // first tile's are above, the values the loads bring stayed live across the GEMMs and the
      // kernel spilled).
      TileMask mask{};
      if constexpr (kReadsAhead)
        mask = masks.fromReads(tile, masks.reads(tile, stage));
      else if constexpr (kMaskAhead)
        mask = masks.ahead(tile, stage);
      mbarrierWait(smem.vFull(prevStage), prevPhase);
      turns.take();
      steps.issueQK();
      steps.issuePV(prevStage);
      turns.pass();
      // S_j is done; P_{j-1} V_{j-1} may still run
      const TileMask held = steps.template waitForS<true>(tile, mask);
      if constexpr (kTimeline) partials += held.perElement ? 1u : 0u;
      const bool rescales = steps.softmaxStep(tile, held, factors);
      // P_{j-1} V_{j-1} is done; the softmax above ran while it did (config.h softmaxOverlapsPV)
      if constexpr (softmaxOverlapsPV(Variant::kHasDropout))
        wgmmaWaitAfter<0>(softmax.rowSum[0][0], softmax.rowSum[0][1], qTile, p.batch < 0);
      else
        wgmmaWait<0>();
      fenceRegisters(flat(o));
      mbarrierArrive(smem.vEmpty(prevStage));
      if (rescales) sm80::OnlineSoftmax<1>::rescale(o, factors);
      steps.packAndDrop(tile);
    }
    // The last tile's O += P V. Warpgroup 0 then takes the turn the last one passed it at the end,
    // so no named barrier is left half-arrived.
    mbarrierWait(smem.vFull(stage), phase);
    turns.take();
    wgmmaFence();
    steps.issuePV(stage);
    turns.pass();
    if (!kGroupTail && group == 0) turns.take();
    wgmmaWait<0>();
    fenceRegisters(flat(o));
    if (marks) {
      timelineMark(p, group == 0 ? kTimelineLoopEnd : kTimelineLoopEnd1);
      if (group == 0) {
        timelineWrite(p, kTimelineTiles, u32(iteration));
        timelineWrite(p, kTimelinePartials, partials);
      }
    }
    mbarrierArrive(smem.vEmpty(stage));
    if constexpr (kGroupTail) {
      // The rest of the stream: tile is the one the loop stopped at, at position `iteration`.
      idleThrough<Config>(smem, turns, iteration, tile);
      if (group == 0) turns.take();
    }
  } else {
    mbarrierWait(smem.qFull(), 0);  // no live tile: Q's copy (produce) must still land first
  }

  float lse[1][2];
  normalizeOutput<Config, Variant>(p, o, softmax, log2Scale, lse);
  if (!groupHasRows) return;
  writeOutput<Config, Variant>(p, smem, rows, o, lse, qTile);
}

}  // namespace sm90
}  // namespace attnc
