// The operations generated mask and score hooks are written in, for two kinds of values:
// scalars (int, float, bool: one element) and intervals (IntI, FltI, Tri: a whole tile).
// CodeGen emits each hook once as a template over the index type; instantiated with `int` it is
// the per-element mask, instantiated with `IntI` it classifies a (q-tile, kv-tile) pair as empty,
// full or partial. The compiler includes this same header on the host to classify blocks, so the
// analysis it tests is the code the GPU runs.
//
// Interval results are sound: every scalar result for arguments inside the argument intervals lies
// inside the interval result. Float intervals are widened by a few ulps because the scalar path may
// be contracted (FMA) or use a different libm than the interval path.
#pragma once

#include "attnc/common/params.h"

#if !defined(__CUDACC_RTC__)
#include <math.h>
#endif

namespace attnc {
namespace expr {

// ---- scalars ---------------------------------------------------------------------------------
// Integer arithmetic wraps like two's complement; division and remainder by zero give 0, so the
// mask is total (a user expression can never trap or be undefined).
ATTNC_HD int add(int a, int b) { return int(u32(a) + u32(b)); }
ATTNC_HD int sub(int a, int b) { return int(u32(a) - u32(b)); }
ATTNC_HD int mul(int a, int b) { return int(u32(a) * u32(b)); }
ATTNC_HD int div(int a, int b) { return (b == 0 || (b == -1 && a == (-2147483647 - 1))) ? 0 : a / b; }
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
// element (softcap ran at 175 TFLOP/s on the H200 with them). The host divides exactly.
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
// tanh on the device as 1 - 2 / (2^(2 a log2 e) + 1) with ex2.approx and rcp.approx: branch-free,
// five instructions and two registers, absolute error at most 2.4e-7 (measured on the H200 over
// every float in [-16, 16], test/gpu/tanh_error.py; a score's error is absolute:
// softcap multiplies it by the cap). tanhf's two range branches made the sm_90a backward spill
// at hd128. The host calls tanhf.
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
// forward's (FwdParams) is fast_tanh. With tanh the softmax of a softcapped score spent three MUFU
// instructions an element (16 lanes a clock an SM), more time than its two GEMMs: fast_tanh ran
// softcap 30 causal hd128 N = 4K 1.34x and hd256 1.16x faster on the H200 (docs/perf/H200.md,
// 2026-12-04), and its error, times the cap, is 2.4e-4 in a score at C = 30, against bf16's 2^-9
// relative rounding of P. The backward's hooks (and their derivatives) keep tanh: with fast_tanh
// the hd128 dK/dV kernel, which has no register to spare, spilled 16 bytes (ptxas, CUDA 13.0).
// The backward recomputes P from the forward's LSE, so its scores differ from the forward's by
// at most the two errors times the cap (2.5e-4 relative in P at C = 30). Three Newton steps for
// tanh's reciprocal instead of rcp (one MUFU instruction, 12 in all) ran the forward slower
// (issue slots became the bound).
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
// multiply. logf's inlined range reduction and special cases, once per score element, doubled
// the cold compile of a score with a log at B_c = 128 (examples/custom_score.yaml: 0.95 -> 2.2 s on
// the GPU machine). The host calls logf.
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

// ---- positions --------------------------------------------------------------------------------
// A query or key position handed to a forward score hook: a base shared by a lane's whole tile
// plus the element's offset inside the lane's accumulator fragment, which is a constant once the
// epilogue's loops are unrolled. Sums and differences stay in this form, so `to_f32(q - k)` (ALiBi)
// costs one conversion per tile and one add of a constant per element instead of an integer add
// and a conversion per element. Every other use converts to the int value (same wrapping). The
// float equals to_f32 of the int value whenever |base| and |value| are below 2^24 (each step is
// exact); past that it may differ by an ulp of the base.
struct Pos {
  int base, off;
  ATTNC_HD operator int() const { return add(base, off); }
};
ATTNC_HD Pos add(Pos a, Pos b) { return {add(a.base, b.base), add(a.off, b.off)}; }
ATTNC_HD Pos add(Pos a, int b) { return {add(a.base, b), a.off}; }
ATTNC_HD Pos add(int a, Pos b) { return {add(a, b.base), b.off}; }
ATTNC_HD Pos sub(Pos a, Pos b) { return {sub(a.base, b.base), sub(a.off, b.off)}; }
ATTNC_HD Pos sub(Pos a, int b) { return {sub(a.base, b), a.off}; }
ATTNC_HD Pos sub(int a, Pos b) { return {sub(a, b.base), neg(b.off)}; }
ATTNC_HD Pos neg(Pos a) { return {neg(a.base), neg(a.off)}; }
// to_f32 of a position keeps base and offset apart too (FPos): a product with a factor, ALiBi's
// slope * to_f32(q - k), is then one FFMA an element, slope * off + (slope * base) with the
// constant offset and a product made once a tile, where the sum would take an add and a multiply.
// Every other use converts to base + off. (Rounding: slope * base and the FFMA round once each,
// against once for slope * (base + off); at the scores that carry weight, near the row's maximum,
// base is small.)
struct FPos {
  float base, off;
  ATTNC_HD operator float() const { return base + off; }
};
ATTNC_HD FPos to_f32(Pos a) { return {float(a.base), float(a.off)}; }
ATTNC_HD float mul(float s, FPos d) { return fmaf(s, d.off, s * d.base); }
ATTNC_HD float mul(FPos d, float s) { return fmaf(d.off, s, d.base * s); }
// (Overloads that only convert both operands, here and below, give overload resolution one best
// candidate where two mixed ones would tie.)
ATTNC_HD float mul(FPos a, FPos b) { return float(a) * float(b); }

// The raw score x and the softmax scale of a score hook, unmultiplied (the sm_90a forward's,
// sm80/epilogue.h applyScore, and the backward's with their derivatives, sm80/backward.h
// hookWithGrad): a hook that first adds to the score, or multiplies or divides it by a
// factor, folds the scale into that step (ALiBi's score - slope * d is one FFMA, fma(x, scale,
// -(slope * d)); softcap's score / 30 becomes x * (scale / 30)), where the product would cost a
// multiply more an element. Every other use converts to x * scale.
struct Scaled {
  float x, scale;
  ATTNC_HD operator float() const { return x * scale; }
};
ATTNC_HD float add(Scaled a, float b) { return fmaf(a.x, a.scale, b); }
ATTNC_HD float add(float a, Scaled b) { return fmaf(b.x, b.scale, a); }
ATTNC_HD float add(Scaled a, Scaled b) { return float(a) + float(b); }
ATTNC_HD float sub(Scaled a, float b) { return fmaf(a.x, a.scale, -b); }
ATTNC_HD float sub(float a, Scaled b) { return fmaf(-b.x, b.scale, a); }
ATTNC_HD float sub(Scaled a, Scaled b) { return float(a) - float(b); }
ATTNC_HD Scaled mul(Scaled a, float c) { return {a.x, a.scale * c}; }
ATTNC_HD Scaled mul(float c, Scaled a) { return {a.x, c * a.scale}; }
ATTNC_HD float mul(Scaled a, Scaled b) { return float(a) * float(b); }
ATTNC_HD float mul(Scaled a, FPos b) { return float(a) * float(b); }
ATTNC_HD float mul(FPos a, Scaled b) { return float(a) * float(b); }
ATTNC_HD Scaled fast_div(Scaled a, float c) { return {a.x, fast_div(a.scale, c)}; }

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

// Declared inputs: element (b, h, pos) of a tensor whose absent dimensions have stride 0.
// Indices are clamped into the input's extent (batch, query heads, max(q_len, kv_len) positions),
// so no mask or score expression can read out of bounds: with q_len > kv_len, for instance, the
// aligned query position q + kv_len - q_len of the first rows is negative.
struct InputExtents {
  int batch, heads, positions;
};
// Any launch parameters with batch, heads_q, q_len, kv_len (FwdParams, BwdParams).
template <class Params>
ATTNC_HD InputExtents input_extents(const Params& p) {
  return InputExtents{p.batch, p.heads_q, p.q_len > p.kv_len ? p.q_len : p.kv_len};
}
// As max(0, min(i, extent - 1)) (extents are at least 1), so that the compiler folds the index 0
// of a dimension an input lacks to 0 whatever the extent: its loads then keep no row state.
ATTNC_HD int clamp_index(int i, int extent) { return max(0, min(i, extent - 1)); }
ATTNC_HD i64 input_offset(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return clamp_index(b, e.batch) * in.stride_b + clamp_index(h, e.heads) * in.stride_h +
         clamp_index(pos, e.positions) * in.stride_pos;
}
// Declared inputs are read-only while a launch runs, so the device reads them through the
// non-coherent (read-only data) path.
template <class T>
ATTNC_HD T load_input(const void* base, i64 offset) {
  const T* at = static_cast<const T*>(base) + offset;
#if defined(__CUDA_ARCH__)
  return __ldg(at);
#else
  return *at;
#endif
}
ATTNC_HD int load_i32(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return load_input<int>(in.ptr, input_offset(in, b, h, pos, e));
}
ATTNC_HD float load_f32(const InputRef& in, int b, int h, int pos, InputExtents e) {
  return load_input<float>(in.ptr, input_offset(in, b, h, pos, e));
}

// ---- intervals -------------------------------------------------------------------------------
// A three-valued boolean: what a predicate is over every element of a tile.
enum class Tri : int { False = 0, True = 1, Unknown = 2 };

constexpr int kIntMin = -2147483647 - 1;
constexpr int kIntMax = 2147483647;

// Inclusive integer interval [lo, hi].
struct IntI {
  int lo, hi;
  ATTNC_HD IntI(int v) : lo(v), hi(v) {}
  ATTNC_HD IntI(int l, int h) : lo(l), hi(h) {}
};

// Inclusive float interval; NaN anywhere makes it "anything".
struct FltI {
  float lo, hi;
  ATTNC_HD FltI(float v) : lo(v), hi(v) {}
  ATTNC_HD FltI(float l, float h) : lo(l), hi(h) {}
};

ATTNC_HD IntI fromWide(i64 lo, i64 hi) {
  if (lo < kIntMin || hi > kIntMax) return IntI(kIntMin, kIntMax);  // the scalar path wraps
  return IntI(int(lo), int(hi));
}
ATTNC_HD i64 min4(i64 a, i64 b, i64 c, i64 d) {
  i64 m = a < b ? a : b;
  m = m < c ? m : c;
  return m < d ? m : d;
}
ATTNC_HD i64 max4(i64 a, i64 b, i64 c, i64 d) {
  i64 m = a > b ? a : b;
  m = m > c ? m : c;
  return m > d ? m : d;
}

ATTNC_HD IntI add(IntI a, IntI b) { return fromWide(i64(a.lo) + b.lo, i64(a.hi) + b.hi); }
ATTNC_HD IntI sub(IntI a, IntI b) { return fromWide(i64(a.lo) - b.hi, i64(a.hi) - b.lo); }
ATTNC_HD IntI neg(IntI a) { return sub(IntI(0), a); }
ATTNC_HD IntI mul(IntI a, IntI b) {
  i64 p0 = i64(a.lo) * b.lo, p1 = i64(a.lo) * b.hi, p2 = i64(a.hi) * b.lo, p3 = i64(a.hi) * b.hi;
  return fromWide(min4(p0, p1, p2, p3), max4(p0, p1, p2, p3));
}
ATTNC_HD IntI div(IntI a, IntI b) {
  // Truncating division is monotone in a for fixed b and in b on each side of zero; a divisor
  // interval that straddles zero (where x/0 == 0) is split into its negative and positive parts.
  if (a.lo == kIntMin || b.lo == kIntMin) return IntI(kIntMin, kIntMax);
  i64 lo = kIntMax, hi = kIntMin;
  bool any = false;
  if (b.lo <= 0 && b.hi >= 0) { lo = 0; hi = 0; any = true; }
  int parts[2][2] = {{b.lo, b.hi < -1 ? b.hi : -1}, {b.lo > 1 ? b.lo : 1, b.hi}};
  for (int i = 0; i < 2; ++i) {
    int dlo = parts[i][0], dhi = parts[i][1];
    if (dlo > dhi || (i == 0 && dlo > -1) || (i == 1 && dhi < 1)) continue;
    i64 q0 = i64(a.lo) / dlo, q1 = i64(a.lo) / dhi, q2 = i64(a.hi) / dlo, q3 = i64(a.hi) / dhi;
    i64 qlo = min4(q0, q1, q2, q3), qhi = max4(q0, q1, q2, q3);
    if (!any || qlo < lo) lo = qlo;
    if (!any || qhi > hi) hi = qhi;
    any = true;
  }
  return fromWide(lo, hi);
}
ATTNC_HD IntI rem(IntI a, IntI b) {
  if (a.lo == a.hi && b.lo == b.hi) return IntI(rem(a.lo, b.lo));
  if (b.lo > 0 && a.lo >= 0 && a.hi < b.lo) return a;  // every a % b == a
  // Otherwise |a % b| <= min(|a|, max|b| - 1), the sign follows a, and 0 is always possible.
  i64 bmax = i64(b.hi) > -i64(b.lo) ? i64(b.hi) : -i64(b.lo);
  i64 mag = bmax > 0 ? bmax - 1 : 0;
  i64 lo = a.lo >= 0 ? 0 : (i64(a.lo) > -mag ? i64(a.lo) : -mag);
  i64 hi = a.hi <= 0 ? 0 : (i64(a.hi) < mag ? i64(a.hi) : mag);
  return fromWide(lo, hi);
}
ATTNC_HD IntI min(IntI a, IntI b) { return IntI(min(a.lo, b.lo), min(a.hi, b.hi)); }
ATTNC_HD IntI max(IntI a, IntI b) { return IntI(max(a.lo, b.lo), max(a.hi, b.hi)); }
ATTNC_HD IntI abs(IntI a) {
  if (a.lo == kIntMin) return IntI(kIntMin, kIntMax);  // abs(INT_MIN) wraps to INT_MIN
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return IntI(-a.hi, -a.lo);
  return IntI(0, max(-a.lo, a.hi));
}

ATTNC_HD Tri cmp_lt(IntI a, IntI b) { return a.hi < b.lo ? Tri::True : (a.lo >= b.hi ? Tri::False : Tri::Unknown); }
ATTNC_HD Tri cmp_le(IntI a, IntI b) { return a.hi <= b.lo ? Tri::True : (a.lo > b.hi ? Tri::False : Tri::Unknown); }
ATTNC_HD Tri cmp_gt(IntI a, IntI b) { return cmp_lt(b, a); }
ATTNC_HD Tri cmp_ge(IntI a, IntI b) { return cmp_le(b, a); }
ATTNC_HD Tri cmp_eq(IntI a, IntI b) {
  if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return Tri::True;
  return (a.hi < b.lo || b.hi < a.lo) ? Tri::False : Tri::Unknown;
}
ATTNC_HD Tri cmp_ne(IntI a, IntI b) {
  Tri eq = cmp_eq(a, b);
  return eq == Tri::Unknown ? eq : (eq == Tri::True ? Tri::False : Tri::True);
}

// Float intervals. A NaN bound or an unordered comparison makes the result unknown.
constexpr float kInf = __builtin_bit_cast(float, 0x7f800000u);
ATTNC_HD bool isNan(float x) { return x != x; }
ATTNC_HD FltI anyFloat() { return FltI(-kInf, kInf); }
// Widen by a few ulps (relative) plus a tiny absolute slack, so contraction or libm differences
// between the scalar and interval paths can never put a scalar result outside.
ATTNC_HD FltI widen(float lo, float hi) {
  if (isNan(lo) || isNan(hi)) return anyFloat();
  return FltI(lo - fabsf(lo) * 4e-6f - 1e-30f, hi + fabsf(hi) * 4e-6f + 1e-30f);
}
ATTNC_HD float fmin4(float a, float b, float c, float d) { return fminf(fminf(a, b), fminf(c, d)); }
ATTNC_HD float fmax4(float a, float b, float c, float d) { return fmaxf(fmaxf(a, b), fmaxf(c, d)); }

ATTNC_HD FltI add(FltI a, FltI b) { return widen(a.lo + b.lo, a.hi + b.hi); }
ATTNC_HD FltI sub(FltI a, FltI b) { return widen(a.lo - b.hi, a.hi - b.lo); }
ATTNC_HD FltI neg(FltI a) { return FltI(-a.hi, -a.lo); }
ATTNC_HD FltI mul(FltI a, FltI b) {
  float p0 = a.lo * b.lo, p1 = a.lo * b.hi, p2 = a.hi * b.lo, p3 = a.hi * b.hi;
  if (isNan(p0) || isNan(p1) || isNan(p2) || isNan(p3)) return anyFloat();  // 0 * inf
  return widen(fmin4(p0, p1, p2, p3), fmax4(p0, p1, p2, p3));
}
ATTNC_HD FltI div(FltI a, FltI b) {
  if (b.lo <= 0.0f && b.hi >= 0.0f) return anyFloat();
  float q0 = a.lo / b.lo, q1 = a.lo / b.hi, q2 = a.hi / b.lo, q3 = a.hi / b.hi;
  if (isNan(q0) || isNan(q1) || isNan(q2) || isNan(q3)) return anyFloat();
  return widen(fmin4(q0, q1, q2, q3), fmax4(q0, q1, q2, q3));
}
ATTNC_HD FltI rem(FltI a, FltI b) {
  float m = fmaxf(fabsf(b.lo), fabsf(b.hi));
  return FltI(a.lo >= 0.0f ? 0.0f : -m, a.hi <= 0.0f ? 0.0f : m);
}
ATTNC_HD FltI min(FltI a, FltI b) { return FltI(fminf(a.lo, b.lo), fminf(a.hi, b.hi)); }
ATTNC_HD FltI max(FltI a, FltI b) { return FltI(fmaxf(a.lo, b.lo), fmaxf(a.hi, b.hi)); }
ATTNC_HD FltI abs(FltI a) {
  if (a.lo >= 0.0f) return a;
  if (a.hi <= 0.0f) return FltI(-a.hi, -a.lo);
  return FltI(0.0f, fmaxf(-a.lo, a.hi));
}
// Monotone non-decreasing functions map bounds to bounds.
ATTNC_HD FltI tanh(FltI a) { return widen(tanhf(a.lo), tanhf(a.hi)); }
ATTNC_HD FltI exp(FltI a) { FltI r = widen(expf(a.lo), expf(a.hi)); return FltI(fmaxf(r.lo, 0.0f), r.hi); }
ATTNC_HD FltI exp2(FltI a) { FltI r = widen(exp2f(a.lo), exp2f(a.hi)); return FltI(fmaxf(r.lo, 0.0f), r.hi); }
ATTNC_HD FltI log(FltI a) { return a.lo < 0.0f ? anyFloat() : widen(logf(a.lo), logf(a.hi)); }
ATTNC_HD FltI sqrt(FltI a) { return a.lo < 0.0f ? anyFloat() : widen(sqrtf(a.lo), sqrtf(a.hi)); }
ATTNC_HD FltI to_f32(IntI a) { return widen(float(a.lo), float(a.hi)); }

ATTNC_HD Tri cmp_lt(FltI a, FltI b) {
  if (isNan(a.lo) || isNan(a.hi) || isNan(b.lo) || isNan(b.hi)) return Tri::Unknown;
  return a.hi < b.lo ? Tri::True : (a.lo >= b.hi ? Tri::False : Tri::Unknown);
}
ATTNC_HD Tri cmp_le(FltI a, FltI b) {
  if (isNan(a.lo) || isNan(a.hi) || isNan(b.lo) || isNan(b.hi)) return Tri::Unknown;
  return a.hi <= b.lo ? Tri::True : (a.lo > b.hi ? Tri::False : Tri::Unknown);
}
ATTNC_HD Tri cmp_gt(FltI a, FltI b) { return cmp_lt(b, a); }
ATTNC_HD Tri cmp_ge(FltI a, FltI b) { return cmp_le(b, a); }
ATTNC_HD Tri cmp_eq(FltI a, FltI b) {
  if (isNan(a.lo) || isNan(a.hi) || isNan(b.lo) || isNan(b.hi)) return Tri::Unknown;
  if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return Tri::True;
  return (a.hi < b.lo || b.hi < a.lo) ? Tri::False : Tri::Unknown;
}
ATTNC_HD Tri cmp_ne(FltI a, FltI b) {
  Tri eq = cmp_eq(a, b);
  return eq == Tri::Unknown ? eq : (eq == Tri::True ? Tri::False : Tri::True);
}

// Intervals do not track NaN apart from their bounds: whether a value is NaN is unknown.
ATTNC_HD Tri cmp_uno(FltI, FltI) { return Tri::Unknown; }

ATTNC_HD Tri tri(bool a) { return a ? Tri::True : Tri::False; }
ATTNC_HD Tri land(Tri a, Tri b) {
  if (a == Tri::False || b == Tri::False) return Tri::False;
  return (a == Tri::True && b == Tri::True) ? Tri::True : Tri::Unknown;
}
ATTNC_HD Tri lor(Tri a, Tri b) {
  if (a == Tri::True || b == Tri::True) return Tri::True;
  return (a == Tri::False && b == Tri::False) ? Tri::False : Tri::Unknown;
}
ATTNC_HD Tri lnot(Tri a) { return a == Tri::Unknown ? a : (a == Tri::True ? Tri::False : Tri::True); }
ATTNC_HD Tri lxor(Tri a, Tri b) {
  if (a == Tri::Unknown || b == Tri::Unknown) return Tri::Unknown;
  return a != b ? Tri::True : Tri::False;
}
// Mixed forms: literals and values that do not depend on the tile stay plain bools.
ATTNC_HD Tri land(Tri a, bool b) { return land(a, tri(b)); }
ATTNC_HD Tri land(bool a, Tri b) { return land(tri(a), b); }
ATTNC_HD Tri lor(Tri a, bool b) { return lor(a, tri(b)); }
ATTNC_HD Tri lor(bool a, Tri b) { return lor(tri(a), b); }
ATTNC_HD Tri lxor(Tri a, bool b) { return lxor(a, tri(b)); }
ATTNC_HD Tri lxor(bool a, Tri b) { return lxor(tri(a), b); }

ATTNC_HD IntI hull(IntI a, IntI b) { return IntI(min(a.lo, b.lo), max(a.hi, b.hi)); }
ATTNC_HD FltI hull(FltI a, FltI b) {
  if (isNan(a.lo) || isNan(a.hi) || isNan(b.lo) || isNan(b.hi)) return anyFloat();
  return FltI(fminf(a.lo, b.lo), fmaxf(a.hi, b.hi));
}
ATTNC_HD Tri hull(Tri a, Tri b) { return a == b ? a : Tri::Unknown; }
ATTNC_HD IntI select(Tri c, IntI a, IntI b) { return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b)); }
ATTNC_HD FltI select(Tri c, FltI a, FltI b) { return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b)); }
ATTNC_HD Tri select(Tri c, Tri a, Tri b) { return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b)); }
ATTNC_HD Tri select(Tri c, bool a, Tri b) { return select(c, tri(a), b); }
ATTNC_HD Tri select(Tri c, Tri a, bool b) { return select(c, a, tri(b)); }
ATTNC_HD Tri select(Tri c, bool a, bool b) { return select(c, tri(a), tri(b)); }
ATTNC_HD IntI select(bool c, IntI a, IntI b) { return c ? a : b; }
ATTNC_HD FltI select(bool c, FltI a, FltI b) { return c ? a : b; }
ATTNC_HD Tri select(bool c, Tri a, Tri b) { return c ? a : b; }
// Branches that do not depend on the tile stay plain values. Without these, int and float
// branches under a Tri condition would convert to bool and select booleans.
ATTNC_HD IntI select(Tri c, int a, int b) { return select(c, IntI(a), IntI(b)); }
ATTNC_HD FltI select(Tri c, float a, float b) { return select(c, FltI(a), FltI(b)); }
ATTNC_HD Tri select(bool c, bool a, Tri b) { return c ? tri(a) : b; }
ATTNC_HD Tri select(bool c, Tri a, bool b) { return c ? a : tri(b); }

// The value a generated mask returns: bool per element, Tri over a tile (a mask that does not
// depend on the tile at all still yields a plain bool, which becomes a definite Tri).
ATTNC_HD bool mask_result(bool keep, int) { return keep; }
ATTNC_HD Tri mask_result(Tri keep, IntI) { return keep; }
ATTNC_HD Tri mask_result(bool keep, IntI) { return tri(keep); }

// Loads over index intervals: the hull of the elements in range. Where the input has block
// summaries (params.h), a range's whole blocks are read from them and only the partial blocks at
// its two ends element by element; without them every element is read. Either way the work is a
// list of items (an element or a summary entry), and a range of more items than this is
// "anything" (sound, merely imprecise): with summaries that is a range of about 250 000 positions.
constexpr i64 kMaxScanItems = 4096;
// Clamping is monotone, so the clamped interval holds every clamped scalar index.
ATTNC_HD IntI clamp_index(IntI i, int extent) {
  return IntI(clamp_index(i.lo, extent), clamp_index(i.hi, extent));
}
// A (b, h, pos) box of clamped indices.
struct IndexBox {
  IntI b, h, pos;
};

// Who scans a box: one thread alone, or a whole warp that asks for the same box, each lane taking
// every 32nd element and the lanes' hulls combined with warp reductions. The kernel classifies
// tiles warp-uniformly, so a tile's scan costs a warp count/32 loads per lane instead of count.
struct ScanShare {
  int first = 0, step = 1;
  bool warp = false;
};
#if defined(__CUDA_ARCH__)
ATTNC_DEVICE int warp_min(int x) {
  int r;
  asm volatile("redux.sync.min.s32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(x));
  return r;
}
ATTNC_DEVICE int warp_max(int x) {
  int r;
  asm volatile("redux.sync.max.s32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(x));
  return r;
}
ATTNC_DEVICE float warp_min(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
ATTNC_DEVICE float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
ATTNC_DEVICE bool warp_same(int x) { return warp_min(x) == warp_max(x); }
ATTNC_DEVICE ScanShare scan_share(const IndexBox& box) {
  unsigned active;
  asm volatile("activemask.b32 %0;" : "=r"(active));
  ScanShare share;
  if (active != 0xffffffffu) return share;  // a partial warp scans alone (sound, just slower)
  share.warp = warp_same(box.b.lo) && warp_same(box.b.hi) && warp_same(box.h.lo) &&
               warp_same(box.h.hi) && warp_same(box.pos.lo) && warp_same(box.pos.hi);
  if (share.warp) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    share.first = int(lane);
    share.step = 32;
  }
  return share;
}
#else
inline ScanShare scan_share(const IndexBox&) { return ScanShare(); }
#endif

// How one row of a box ((b, h) fixed, pos.lo .. pos.hi) is scanned: `blocks` summary entries from
// block `firstBlock`, and the elements around them one by one: `head` from pos.lo, then the rest
// from `tailStart` to pos.hi. Without summaries (or no whole block in range) every element.
struct RowPlan {
  int head, elements, tailStart, firstBlock, blocks;
  SummaryLayout layout;

  ATTNC_HD RowPlan(const InputRef& in, IntI pos, InputExtents e) {
    elements = head = pos.hi - pos.lo + 1;
    tailStart = pos.hi + 1;
    firstBlock = blocks = 0;
    layout = SummaryLayout{1, 1, 0};
    if (in.summary) {
      layout = summaryLayout(in, e.batch, e.heads, e.positions);
      // Whole blocks start at or after pos.lo and end at or before pos.hi; the last block of the
      // extent is shorter than kSummaryBlock and whole when pos.hi is the extent's last position.
      const int first = (pos.lo + kSummaryBlock - 1) / kSummaryBlock;
      const int end = pos.hi + 1 == e.positions ? layout.blocks : (pos.hi + 1) / kSummaryBlock;
      if (first < end) {
        head = first * kSummaryBlock - pos.lo;
        tailStart = min(end * kSummaryBlock, pos.hi + 1);
        elements = head + (pos.hi + 1 - tailStart);
        firstBlock = first;
        blocks = end - first;
      }
    }
  }
  ATTNC_HD int items() const { return elements + blocks; }
};

// The element type's bounds of an empty hull, and its NaN test (ints have none).
ATTNC_HD int empty_lo(int) { return kIntMax; }
ATTNC_HD int empty_hi(int) { return kIntMin; }
ATTNC_HD float empty_lo(float) { return kInf; }
ATTNC_HD float empty_hi(float) { return -kInf; }
ATTNC_HD bool is_nan_value(int) { return false; }
ATTNC_HD bool is_nan_value(float x) { return isNan(x); }
ATTNC_HD int bits_as(u32 bits, int) { return int(bits); }
// Widens the hull [lo, hi] (and the NaN flag) by the values [vlo, vhi] (one element: vlo == vhi;
// a summarized block with a NaN holds NaN in both).
template <class T>
ATTNC_HD void widen_hull(T& lo, T& hi, bool& nan, T vlo, T vhi) {
  nan = nan || is_nan_value(vlo);
  lo = min(lo, vlo);
  hi = max(hi, vhi);
}
ATTNC_HD float bits_as(u32 bits, float) { return __builtin_bit_cast(float, bits); }

// The hull [lo, hi] of an input over a box, with `nan` set where an element (or a summarized
// block) holds a NaN. False when the box has more than kMaxScanItems items.
template <class T>
ATTNC_HD bool scan_hull(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e, T& lo, T& hi,
                        bool& nan) {
  const IndexBox box{clamp_index(b, e.batch), clamp_index(h, e.heads), clamp_index(pos, e.positions)};
  const RowPlan row(in, box.pos, e);
  if (i64(box.b.hi - box.b.lo + 1) * (box.h.hi - box.h.lo + 1) * row.items() > kMaxScanItems)
    return false;
  const ScanShare share = scan_share(box);
  const int heads = box.h.hi - box.h.lo + 1, rows = (box.b.hi - box.b.lo + 1) * heads;
  // A row's items, numbered: its elements [pos.lo, pos.lo + head), then [tailStart, pos.hi] (plain
  // strided runs), then its summary entries. Each thread takes every share.step-th item, and
  // kScanBatch of them at once: their loads are independent and in flight together, so a tile
  // walk's scans cost about one memory latency per batch instead of one per item. Rolled
  // otherwise: this runs once per tile, and more unrolling only costs compile time and code size.
  // Boxes of more than one row are rare (tile walks fix b and h); each row is shared by the warp.
  constexpr int kScanBatch = 4;
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
    const int bi = box.b.lo + r / heads, hi_ = box.h.lo + r % heads;
    const T* rowData = static_cast<const T*>(in.ptr) + (bi * in.stride_b + hi_ * in.stride_h);
    const SummaryEntry* rowSummaries =
        static_cast<const SummaryEntry*>(in.summary) + row.layout.index(bi, hi_, row.firstBlock);
    const int items = row.items();
#pragma unroll 1
    for (int j0 = share.first; j0 < items; j0 += kScanBatch * share.step) {
      T itemLo[kScanBatch], itemHi[kScanBatch];
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) {
        const int j = j0 + u * share.step;
        itemLo[u] = empty_lo(T()), itemHi[u] = empty_hi(T());
        if (j < row.elements) {
          const int pi = j < row.head ? box.pos.lo + j : row.tailStart + (j - row.head);
          itemLo[u] = itemHi[u] = rowData[pi * in.stride_pos];
        } else if (j < items) {
          const SummaryEntry s = rowSummaries[j - row.elements];
          itemLo[u] = bits_as(s.lo, T()), itemHi[u] = bits_as(s.hi, T());
        }
      }
#pragma unroll
      for (int u = 0; u < kScanBatch; ++u) widen_hull(lo, hi, nan, itemLo[u], itemHi[u]);
    }
  }
#if defined(__CUDA_ARCH__)
  if (share.warp) {
    lo = warp_min(lo), hi = warp_max(hi);
    nan = warp_max(nan ? 1 : 0) != 0;
  }
#endif
  return true;
}

ATTNC_HD IntI load_i32(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e) {
  int lo = empty_lo(0), hi = empty_hi(0);
  bool nan = false;
  if (!scan_hull(in, b, h, pos, e, lo, hi, nan)) return IntI(kIntMin, kIntMax);
  return IntI(lo, hi);
}
ATTNC_HD FltI load_f32(const InputRef& in, IntI b, IntI h, IntI pos, InputExtents e) {
  float lo = empty_lo(0.0f), hi = empty_hi(0.0f);
  bool nan = false;
  if (!scan_hull(in, b, h, pos, e, lo, hi, nan) || nan) return anyFloat();
  return FltI(lo, hi);
}

}  // namespace expr
}  // namespace attnc
