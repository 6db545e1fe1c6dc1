// The forward kernel's launch grid: (q tiles, heads_q, batch), or templates/attnc/common/
// block_order.h's orderedGrid for a kernel built for it (KernelMetadata::orderedGrid). Kept apart
// from Kernel.cpp so that it can be tested without a GPU.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/block_order.h"

#include <cstdint>

namespace attnc {

// `m` is the metadata of the image that runs (its blockQ and orderedGrid). Fails, saying why, when
// the grid would not fit the hardware's limits (65535 along y and z).
Status forwardGrid(const KernelMetadata& m, int64_t batch, int64_t q_len, OrderedGrid& grid);

}  // namespace attnc
