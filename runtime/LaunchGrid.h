// The launch grids whose shape depends on how the kernel was built: the forward's (q tiles,
// heads_q, batch), or templates/attnc/common/block_order.h's orderedGrid for a kernel built for it
// (KernelMetadata::orderedGrid); the backward dK/dV kernel's (kv tiles, heads_kv, batch), or the
// orderedGrid over its kv tiles (BackwardMetadata::kvOrderedGrid). Functions of the metadata
// alone, so that they can be tested without a GPU.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/block_order.h"

#include <cstdint>
#include <string>

namespace attnc {

// `m` is the metadata of the image that runs (its blockQ and orderedGrid). Fails, saying why, when
// the grid would not fit the hardware's limits (65535 along y and z).
Status forwardGrid(const KernelMetadata& m, int64_t batch, int64_t q_len, OrderedGrid& grid);

// The grid of `kernel`'s _kv and _kv_nodq entries (`b`: its backward metadata). Fails, saying
// why, where the ordered grid would not fit (65535 kv tiles along y, 65535 groups along z).
Status backwardKvGrid(const std::string& kernel, const BackwardMetadata& b, int64_t heads_kv,
                      int64_t batch, int64_t kv_len, OrderedGrid& grid);

}  // namespace attnc
