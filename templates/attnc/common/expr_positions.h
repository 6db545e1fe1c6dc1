// The forms in which a kernel hands positions and the raw score to a score hook, so that work the
// elements of a lane's tile share is done once a tile: Pos (a position as a base and a constant
// offset), FPos (to_f32 of a Pos) and Scaled (the raw score and the scale unmultiplied).
#pragma once

#include "attnc/common/expr_scalar.h"

namespace attnc {
namespace expr {

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
// epilogue.h applyScore, and the backward's with their derivatives, bwd_steps.h
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

}  // namespace expr
}  // namespace attnc
