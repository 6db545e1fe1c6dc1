// Where a launch's block summaries live in one device buffer (Summaries.h).
#include "runtime/Summaries.h"

#include "runtime/DeviceBuffer.h"

namespace attnc {

SummaryPlan planSummaries(const KernelMetadata& m, const InputRef* inputs, int batch, int q_len,
                          int kv_len) {
  SummaryPlan plan;
  const int positions = q_len > kv_len ? q_len : kv_len;
  for (size_t i = 0; i < m.inputs.size() && i < size_t(kMaxInputs); ++i) {
    if (!m.inputs[i].summarized) continue;
    const i64 entries = summaryLayout(inputs[i], batch, m.headsQ, positions).entries();
    plan.used[i] = true;
    plan.offset[i] = plan.totalBytes;
    plan.totalBytes =
        saturatingSum(plan.totalBytes,
                      align256(saturatingProduct(size_t(entries), sizeof(SummaryEntry))));
    if (entries > plan.mostEntries) plan.mostEntries = entries;
  }
  return plan;
}

}  // namespace attnc
