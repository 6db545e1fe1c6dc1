// The few definitions every template needs, valid under NVRTC, nvcc and a plain host compiler
// (the compiler includes expr.h on the host to classify blocks with the very same code).
#pragma once

// The _OUTLINED forms are for the generated mask and score hooks of long expressions: a function of
// its own, called per element, rather than one inlined copy per element a thread holds.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_HD __host__ __device__ __forceinline__
#define ATTNC_DEVICE __device__ __forceinline__
#define ATTNC_HD_OUTLINED __host__ __device__ __noinline__
#define ATTNC_DEVICE_OUTLINED __device__ __noinline__
#else
#define ATTNC_HD inline
#define ATTNC_DEVICE inline
#define ATTNC_HD_OUTLINED inline
#define ATTNC_DEVICE_OUTLINED inline
#endif

// Name<V>::value is V::Member where the Variant V declares that flag, else false: a Variant's
// optional flags (kOrderedGrid, kTileClasses, ...), which host tests' Variants may leave out.
// (NVRTC has no <type_traits>: detection by partial specialization.)
#define ATTNC_VARIANT_FLAG(Name, Member)                        \
  template <class V, class = void>                              \
  struct Name {                                                 \
    static constexpr bool value = false;                        \
  };                                                            \
  template <class V>                                            \
  struct Name<V, decltype(void(V::Member))> {                   \
    static constexpr bool value = V::Member;                    \
  }

namespace attnc {
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;
}  // namespace attnc
