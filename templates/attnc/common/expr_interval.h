// The interval forms of the hook operations (IntI, FltI, Tri: a whole tile), which classify a
// (q-tile, kv-tile) pair as empty, full or partial.
//
// Interval results are sound: every scalar result for arguments inside the argument intervals lies
// inside the interval result. Float intervals are widened by a few ulps because the scalar path may
// be contracted (FMA) or use a different libm than the interval path.
#pragma once

#include "attnc/common/expr_scalar.h"

namespace attnc {
namespace expr {

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

ATTNC_HD Tri cmp_lt(IntI a, IntI b) {
  return a.hi < b.lo ? Tri::True : (a.lo >= b.hi ? Tri::False : Tri::Unknown);
}
ATTNC_HD Tri cmp_le(IntI a, IntI b) {
  return a.hi <= b.lo ? Tri::True : (a.lo > b.hi ? Tri::False : Tri::Unknown);
}
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
ATTNC_HD FltI exp(FltI a) {
  FltI r = widen(expf(a.lo), expf(a.hi));
  return FltI(fmaxf(r.lo, 0.0f), r.hi);
}
ATTNC_HD FltI exp2(FltI a) {
  FltI r = widen(exp2f(a.lo), exp2f(a.hi));
  return FltI(fmaxf(r.lo, 0.0f), r.hi);
}
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
ATTNC_HD Tri lnot(Tri a) {
  return a == Tri::Unknown ? a : (a == Tri::True ? Tri::False : Tri::True);
}
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
ATTNC_HD IntI select(Tri c, IntI a, IntI b) {
  return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b));
}
ATTNC_HD FltI select(Tri c, FltI a, FltI b) {
  return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b));
}
ATTNC_HD Tri select(Tri c, Tri a, Tri b) {
  return c == Tri::True ? a : (c == Tri::False ? b : hull(a, b));
}
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

}  // namespace expr
}  // namespace attnc
