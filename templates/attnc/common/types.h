// Element storage types (bf16, half) and the float helpers the kernels compute with, written
// without any CUDA or standard header so NVRTC compiles attnc kernels hermetically. Conversions and
// transcendental functions are single PTX instructions (valid on sm_80 and later).
#pragma once

#include "attnc/common/platform.h"

namespace attnc {

using u16 = unsigned short;

// 16-bit storage types. All arithmetic happens in float (or inside the tensor cores); these only
// carry bits between memory and registers, so they have no operators on purpose.
struct bf16 {
  u16 bits;
};
struct half {
  u16 bits;
};

// Four 32-bit words: one 16-byte vector access, or one Philox output.
struct u32x4 {
  u32 x, y, z, w;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// __builtin_huge_valf is missing under NVRTC; a bit cast is constexpr under NVRTC, nvcc and g++.
constexpr float kInfinity = __builtin_bit_cast(float, 0x7f800000u);

ATTNC_HD constexpr int ceilDiv(int a, int b) { return (a + b - 1) / b; }
ATTNC_HD constexpr int roundUp(int a, int b) { return (a + b - 1) / b * b; }
ATTNC_HD constexpr int maxOf(int a, int b) { return a > b ? a : b; }
ATTNC_HD constexpr int minOf(int a, int b) { return a < b ? a : b; }
ATTNC_HD constexpr int log2Floor(int a) { return a > 1 ? 1 + log2Floor(a / 2) : 0; }

// A compile-time flag passed to a generic lambda (NVRTC has no <type_traits>).
template <bool Value>
struct Flag {
  static constexpr bool value = Value;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Per-element-type conversions. `pack2` rounds two floats to nearest-even and packs them the way
// mma operands and 32-bit stores want them: `lo` in bits 0..15 (the lower column), `hi` above.
template <class Element>
struct Convert;

template <>
struct Convert<bf16> {
  ATTNC_DEVICE static u32 pack2(float lo, float hi) {
    u32 r;
    // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half and b in the lower half.
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  ATTNC_DEVICE static bf16 fromFloat(float x) {
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
    return r;
  }
  ATTNC_DEVICE static float toFloat(bf16 x) {
    float r;
    asm("mov.b32 %0, %1;" : "=f"(r) : "r"(u32(x.bits) << 16));
    return r;
  }
};

template <>
struct Convert<half> {
  ATTNC_DEVICE static u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  ATTNC_DEVICE static half fromFloat(float x) {
    half r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
    return r;
  }
  ATTNC_DEVICE static float toFloat(half x) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x.bits));
    return r;
  }
};

// 2^x with ~2 ulp relative error; exp2(-inf) == +0, which is what masked scores rely on.
ATTNC_DEVICE float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) with ~2^-22 absolute error; only used once per row for the log-sum-exp.
ATTNC_DEVICE float log2Approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

ATTNC_DEVICE float fmax2(float a, float b) {
  float r;
  asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Butterfly exchange within the warp (all lanes participate).
ATTNC_DEVICE float shuffleXor(float v, int laneMask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=f"(r)
               : "f"(v), "r"(laneMask));
  return r;
}

#endif  // device compilers

}  // namespace attnc
