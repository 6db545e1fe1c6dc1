// The scalar operations generated mask and score hooks are written in (int, float, bool: one
// element; double on the host, for the compiler's tests): integer arithmetic that wraps and never
// traps, comparisons, logic and select, and the device's fast forms of division, tanh and log.
#pragma once

#include "attnc/common/params.h"

#if !defined(__CUDACC_RTC__)
#include <math.h>
#endif

namespace attnc {
namespace expr {

// Integer arithmetic wraps like two's complement; division and remainder by zero give 0, so the
// mask is total (a user expression can never trap or be undefined).
ATTNC_HD int add(int a, int b) { return int(u32(a) + u32(b)); }
ATTNC_HD int sub(int a, int b) { return int(u32(a) - u32(b)); }
ATTNC_HD int mul(int a, int b) { return int(u32(a) * u32(b)); }
ATTNC_HD int div(int a, int b) {
  return (b == 0 || (b == -1 && a == (-2147483647 - 1))) ? 0 : a / b;
}
ATTNC_HD int rem(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
ATTNC_HD int neg(int a) { return sub(0, a); }
ATTNC_HD int min(int a, int b) { return a < b ? a : b; }
ATTNC_HD int max(int a, int b) { return a > b ? a : b; }
ATTNC_HD int abs(int a) { return a < 0 ? neg(a) : a; }

ATTNC_HD float add(float a, float b) { return a + b; }
ATTNC_HD float sub(float a, float b) { return a - b; }
ATTNC_HD float mul(float a, float b) { return a * b; }
ATTNC_HD float div(float a, float b) { return a / b; }
// Division in score hooks: within 2 ulp (PTX div.full.f32, a reciprocal and a multiply) instead of
// correctly rounded division, whose range fixups cost the softmax loop about ten instructions per
// element. The host divides exactly.
ATTNC_HD float fast_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;
#endif
}
ATTNC_HD float rem(float a, float b) { return fmodf(a, b); }
ATTNC_HD float neg(float a) { return -a; }
ATTNC_HD float min(float a, float b) { return fminf(a, b); }
ATTNC_HD float max(float a, float b) { return fmaxf(a, b); }
ATTNC_HD float abs(float a) { return fabsf(a); }
// tanh on the device as 1 - 2 / (2^(2 a log2 e) + 1) with ex2.approx and rcp.approx: five
// instructions and two registers, absolute error at most 2.4e-7 on the H200 over every float in
// [-16, 16] (test/gpu/tanh_error.py; a score's error is absolute: softcap multiplies it by the
// cap). Branch-free: tanhf's two range branches spill the sm_90a backward at hd128. The host
// calls tanhf.
ATTNC_HD float tanh(float a) {
#if defined(__CUDA_ARCH__)
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a * 2.8853900817779268f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
  return 1.0f - 2.0f * r;
#else
  return tanhf(a);
#endif
}
// The hardware's tanh.approx.f32: one MUFU instruction where tanh above takes two (ex2 and rcp).
// Its absolute error is at most 8.0e-6 on the H200 (every float in [-16, 16],
// test/gpu/tanh_error.py). The host calls tanhf.
ATTNC_HD float fast_tanh(float a) {
#if defined(__CUDA_ARCH__)
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(a));
  return t;
#else
  return tanhf(a);
#endif
}
// tanh in score hooks (EmitCUDA.cpp; masks take tanh above), by the launch's parameters: the
// forward's (FwdParams) is fast_tanh, because with tanh the softmax of a softcapped score spends
// three MUFU instructions an element (16 lanes a clock an SM), more time than its two GEMMs; its
// error, times the cap, is 2.4e-4 in a score at C = 30, against bf16's 2^-9 relative rounding of
// P. The backward's hooks (and their derivatives) keep tanh: with fast_tanh the hd128 dK/dV
// kernel, which has no register to spare, spills. The backward recomputes P from the forward's
// LSE, so its scores differ from the forward's by at most the two errors times the cap (2.5e-4
// relative in P at C = 30). Measurements: docs/design/sm80-and-common.md.
template <class P>
ATTNC_HD float score_tanh(float a) {
  return tanh(a);
}
template <>
ATTNC_HD float score_tanh<FwdParams>(float a) {
  return fast_tanh(a);
}
ATTNC_HD float exp(float a) { return expf(a); }
ATTNC_HD float exp2(float a) { return exp2f(a); }
// log on the device as ln 2 * lg2.approx (PTX ISA: absolute error of order 2^-22 in log2 a,
// subnormal inputs kept; log 0 = -inf, log of a negative is NaN): one MUFU instruction and a
// multiply: logf's inlined range reduction and special cases, once per score element, double the
// cold compile of a score with a log. The host calls logf.
ATTNC_HD float log(float a) {
#if defined(__CUDA_ARCH__)
  float l;
  asm("lg2.approx.f32 %0, %1;" : "=f"(l) : "f"(a));
  return l * 0.6931471805599453f;
#else
  return logf(a);
#endif
}
ATTNC_HD float sqrt(float a) { return sqrtf(a); }
ATTNC_HD float to_f32(int a) { return float(a); }

#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
// Double precision, on the host only: the compiler's tests evaluate score regions and their
// derived gradients in float64 (finite differences need the headroom).
inline double add(double a, double b) { return a + b; }
inline double sub(double a, double b) { return a - b; }
inline double mul(double a, double b) { return a * b; }
inline double div(double a, double b) { return a / b; }
inline double rem(double a, double b) { return ::fmod(a, b); }
inline double neg(double a) { return -a; }
inline double min(double a, double b) { return ::fmin(a, b); }
inline double max(double a, double b) { return ::fmax(a, b); }
inline double abs(double a) { return ::fabs(a); }
inline double tanh(double a) { return ::tanh(a); }
inline double exp(double a) { return ::exp(a); }
inline double exp2(double a) { return ::exp2(a); }
inline double log(double a) { return ::log(a); }
inline double sqrt(double a) { return ::sqrt(a); }
inline bool cmp_lt(double a, double b) { return a < b; }
inline bool cmp_le(double a, double b) { return a <= b; }
inline bool cmp_gt(double a, double b) { return a > b; }
inline bool cmp_ge(double a, double b) { return a >= b; }
inline bool cmp_eq(double a, double b) { return a == b; }
inline bool cmp_ne(double a, double b) { return a != b; }
inline bool cmp_uno(double a, double b) { return a != a || b != b; }
inline double select(bool c, double a, double b) { return c ? a : b; }
#endif

ATTNC_HD bool cmp_lt(int a, int b) { return a < b; }
ATTNC_HD bool cmp_le(int a, int b) { return a <= b; }
ATTNC_HD bool cmp_gt(int a, int b) { return a > b; }
ATTNC_HD bool cmp_ge(int a, int b) { return a >= b; }
ATTNC_HD bool cmp_eq(int a, int b) { return a == b; }
ATTNC_HD bool cmp_ne(int a, int b) { return a != b; }
ATTNC_HD bool cmp_lt(float a, float b) { return a < b; }
ATTNC_HD bool cmp_le(float a, float b) { return a <= b; }
ATTNC_HD bool cmp_gt(float a, float b) { return a > b; }
ATTNC_HD bool cmp_ge(float a, float b) { return a >= b; }
ATTNC_HD bool cmp_eq(float a, float b) { return a == b; }
ATTNC_HD bool cmp_ne(float a, float b) { return a != b; }
ATTNC_HD bool cmp_uno(float a, float b) { return a != a || b != b; }  // either is NaN

ATTNC_HD bool land(bool a, bool b) { return a && b; }
ATTNC_HD bool lor(bool a, bool b) { return a || b; }
ATTNC_HD bool lxor(bool a, bool b) { return a != b; }
ATTNC_HD bool lnot(bool a) { return !a; }
ATTNC_HD int select(bool c, int a, int b) { return c ? a : b; }
ATTNC_HD float select(bool c, float a, float b) { return c ? a : b; }
ATTNC_HD bool select(bool c, bool a, bool b) { return c ? a : b; }

}  // namespace expr
}  // namespace attnc
