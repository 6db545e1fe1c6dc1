// The operations generated mask and score hooks are written in, for two kinds of values:
// scalars (int, float, bool: one element) and intervals (IntI, FltI, Tri: a whole tile).
// CodeGen emits each hook once as a template over the index type; instantiated with `int` it is
// the per-element mask, instantiated with `IntI` it classifies a (q-tile, kv-tile) pair as empty,
// full or partial. The compiler includes this same header on the host to classify blocks, so the
// analysis it tests is the code the GPU runs.
//
// One header per kind: expr_scalar.h, expr_positions.h (the forms a kernel hands a score hook),
// expr_interval.h, expr_inputs.h (declared inputs, per element and over intervals).
#pragma once

#include "attnc/common/expr_inputs.h"
#include "attnc/common/expr_interval.h"
#include "attnc/common/expr_positions.h"
#include "attnc/common/expr_scalar.h"
