// Consumer warpgroups of the sm_90a forward that compute nothing (more): with three consumers, one
// none of whose rows is in the sequence (idleConsumer), and under a mask of positions one past its
// own last live kv tile (fwd_mainloop.h kGroupTail). They keep the block's protocol, the turns and
// the stages' releases, so that the other warpgroups run on.
#pragma once

#include "attnc/common/types.h"
#include "attnc/sm90/barrier.h"
#include "attnc/sm90/fwd_smem.h"
#include "attnc/sm90/warpgroup.h"

namespace attnc {
namespace sm90 {

// A consumer warpgroup that computes nothing more keeps the block's protocol from stream position
// `iteration` on, whose K it has waited for (`tile`, -1 at the end of the stream): for each tile
// it takes and passes the turn the tile's GEMMs would take and releases the stage's K and V (V
// once its copy has landed, so that the release counts for this tile's phase).
template <class Config>
ATTNC_DEVICE void idleThrough(const ForwardSmem<Config>& smem, Turns<Config> turns, int iteration,
                              int tile) {
  constexpr int kStages = Config::kStages;
  while (tile >= 0) {
    const int stage = iteration % kStages;
    turns.take();
    turns.pass();
    mbarrierArrive(smem.kEmpty(stage));
    mbarrierWait(smem.vFull(stage), u32(iteration / kStages) & 1u);
    mbarrierArrive(smem.vEmpty(stage));
    ++iteration;
    mbarrierWait(smem.kFull(iteration % kStages), u32(iteration / kStages) & 1u);
    tile = smem.scheduledTile(iteration % kStages);
  }
}

// A consumer warpgroup none of whose 64 rows is in the sequence (in the last q tile of a
// sequence that does not fill it, or an end-aligned first tile: block_order.h) computes nothing,
// but keeps the block's protocol as the main loop does (idleThrough), so the other
// warpgroups' GEMMs run without its share of the tensor cores (at hd64, N = 4096 the last of 22
// tiles of 192 rows has 64 rows in the sequence).
template <class Config>
ATTNC_DEVICE void idleConsumer(const ForwardSmem<Config>& smem, int group) {
  const Turns<Config> turns{group};
  mbarrierWait(smem.kFull(0), 0);
  mbarrierWait(smem.qFull(), 0);  // Q's copy lands before the block can exit
  const int tile = smem.scheduledTile(0);
  if (tile < 0) return;
  if (group == Config::kConsumers - 1) turns.pass();
  idleThrough<Config>(smem, turns, 0, tile);
  turns.take();  // the turn of the last tile's P V
  turns.pass();
  if (group == 0) turns.take();
}

}  // namespace sm90
}  // namespace attnc
