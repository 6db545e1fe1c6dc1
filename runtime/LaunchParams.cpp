// The TMA tensor maps of the sm_90a kernels' operands (LaunchParams.h).
#include "runtime/LaunchParams.h"

#include <cstdint>

namespace attnc {

Status encodeTensorMap(const DriverApi& driver, TensorMap& map, const std::string& where,
                       const TensorArg& t, const KernelMetadata& m, int64_t dim, int64_t batch,
                       int64_t heads, int64_t len, unsigned rows) {
  const int64_t e = 2;  // bf16 and fp16
  int64_t strides[3] = {t.stride_s, t.stride_h, t.stride_b};
  const int64_t sizes[3] = {len, heads, batch};
  int64_t fallback = dim;
  for (int i = 0; i < 3; ++i) {
    if (sizes[i] == 1) strides[i] = fallback;
    fallback = strides[i] * sizes[i];
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return Status::error(where + ".data: the sm_90a kernel reads through TMA, which needs a "
                         "16-byte aligned address");
  static const char* kStrideNames[3] = {"stride_s", "stride_h", "stride_b"};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 1 && (strides[i] * e) % 16 != 0)
      return Status::error(where + "." + kStrideNames[i] + ": the sm_90a kernel reads through TMA, "
                           "which needs strides that are multiples of 8 elements (16 bytes), got " +
                           std::to_string(strides[i]));
  if (!driver.cuTensorMapEncodeTiled)
    return Status::error("kernel '" + m.name + "': the sm_90a kernel needs cuTensorMapEncodeTiled "
                         "(a CUDA 12 or newer driver)");
  const unsigned long long globalDim[4] = {
      static_cast<unsigned long long>(dim), static_cast<unsigned long long>(len),
      static_cast<unsigned long long>(heads), static_cast<unsigned long long>(batch)};
  const unsigned long long globalStrides[3] = {static_cast<unsigned long long>(strides[0] * e),
                                               static_cast<unsigned long long>(strides[1] * e),
                                               static_cast<unsigned long long>(strides[2] * e)};
  const unsigned box[4] = {64, rows, 1, 1};
  const unsigned elementStrides[4] = {1, 1, 1, 1};
  std::string error;
  if (!driver.check(driver.cuTensorMapEncodeTiled(
                        &map, m.dtype == "bf16" ? cu::kTensorMapBfloat16 : cu::kTensorMapFloat16, 4,
                        const_cast<void*>(t.data), globalDim, globalStrides, box, elementStrides,
                        cu::kTensorMapNoInterleave, cu::kTensorMapSwizzle128,
                        cu::kTensorMapL2Promote256, cu::kTensorMapZeroFill),
                    "cuTensorMapEncodeTiled", &error))
    return Status::error(where + ": " + error);
  return Status::success();
}

}  // namespace attnc
