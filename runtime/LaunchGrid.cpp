// The launch grids whose shape depends on how the kernel was built (LaunchGrid.h).
#include "runtime/LaunchGrid.h"

#include "runtime/LaunchValidation.h"

#include <climits>

namespace attnc {

namespace {

// block_order.h's orderedGrid of `tiles` tiles (the y dimension) for `pairs` (head, batch) pairs
// (groups along z), or why it does not fit. `who` starts each message ("kernel 'k'"), `tilesWhy`
// says what made the tiles, `pairsName` names the pairs' product, and `gridName` the grid.
Status checkedOrderedGrid(const std::string& who, int64_t tiles, const std::string& tilesWhy,
                          int64_t pairs, const std::string& pairsName, const std::string& gridName,
                          OrderedGrid& grid) {
  if (tiles > kMaxGridYZ)
    return Status::error(who + ": " + tilesWhy + "; " + gridName +
                         " takes at most 65535 (its y dimension)");
  if (pairs > INT32_MAX)
    return Status::error(who + ": " + pairsName + " = " + std::to_string(pairs) + "; " + gridName +
                         " takes at most 2147483647 (head, batch) pairs");
  grid = orderedGrid(int(tiles), int(pairs));
  if (grid.z > kMaxGridYZ)
    return Status::error(who + ": " + pairsName + " = " + std::to_string(pairs) + " makes " +
                         std::to_string(grid.z) + " groups; " + gridName +
                         " takes at most 65535 (its z dimension)");
  return Status::success();
}

}  // namespace

Status backwardKvGrid(const std::string& kernel, const BackwardMetadata& b, int64_t heads_kv,
                      int64_t batch, int64_t kv_len, OrderedGrid& grid) {
  const int64_t kvTiles = (kv_len + b.kvBlockKV - 1) / b.kvBlockKV;
  if (!b.kvOrderedGrid) {
    grid = {unsigned(kvTiles), unsigned(heads_kv), unsigned(batch)};
    return Status::success();
  }
  // The ordered dK/dV grid: the kv tiles along y, groups of (kv head, batch) pairs along z.
  return checkedOrderedGrid("kernel '" + kernel + "' (backward)", kvTiles,
                            "kv_len " + std::to_string(kv_len) + " makes " +
                                std::to_string(kvTiles) + " kv tiles",
                            heads_kv * batch, "heads_kv x batch",
                            "this dK/dV kernel's ordered grid", grid);
}

Status forwardGrid(const KernelMetadata& m, int64_t batch, int64_t q_len, OrderedGrid& grid) {
  const int64_t qTiles = (q_len + m.blockQ - 1) / m.blockQ;
  if (!m.orderedGrid) {
    grid = {unsigned(qTiles), unsigned(m.headsQ), unsigned(batch)};
    return Status::success();
  }
  // The ordered grid: the q tiles along y, groups of (head, batch) pairs along z.
  return checkedOrderedGrid("kernel '" + m.name + "'", qTiles,
                            "q_len " + std::to_string(q_len) + " makes " + std::to_string(qTiles) +
                                " q tiles of " + std::to_string(m.blockQ) + " rows",
                            int64_t(m.headsQ) * batch, "heads_q x batch",
                            "this kernel's ordered grid", grid);
}

}  // namespace attnc
