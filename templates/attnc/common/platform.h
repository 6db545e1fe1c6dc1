// The few definitions every template needs, valid under NVRTC, nvcc and a plain host compiler
// (the compiler includes expr.h on the host to classify blocks with the very same code).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_HD __host__ __device__ __forceinline__
#define ATTNC_DEVICE __device__ __forceinline__
#else
#define ATTNC_HD inline
#define ATTNC_DEVICE inline
#endif

namespace attnc {
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;
}  // namespace attnc
