// Where a launch's block summaries (templates/attnc/common/params.h) live in one device buffer:
// one 256-byte aligned region per summarized input, sized by the same SummaryLayout the kernels
// index with. A function of the metadata and strides alone, so the sizes can be tested
// without a GPU.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/params.h"

#include <cstddef>

namespace attnc {

struct SummaryPlan {
  size_t offset[kMaxInputs] = {};  // byte offset of each summarized input's entries
  bool used[kMaxInputs] = {};      // whether the input is summarized
  size_t totalBytes = 0;           // 0: nothing to summarize
  i64 mostEntries = 0;             // of any one input: what the grid must cover
};

// `inputs` as the kernels will see them (strides of undeclared dimensions 0); `m` says which are
// summarized. Positions are max(q_len, kv_len), as in expr::input_extents.
SummaryPlan planSummaries(const KernelMetadata& m, const InputRef* inputs, int batch, int q_len,
                          int kv_len);

}  // namespace attnc
