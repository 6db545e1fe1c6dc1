// The sm_80-family FlashAttention-2 backward (recomputation, exact): four kernel bodies that
// generated code wraps in extern "C" __global__ entry points.
//   backwardPreprocess  delta = rowsum(dO * O) (fp32); zeroes dq_accum when it is not null
//   backwardKV          one block per (kv tile, kv head, batch): dK, dV for its keys, summed in
//                       registers over every q tile of every query head of its GQA group; with
//                       WriteDQ, also dQ += dS K into dq_accum with fp32 reductions
//   backwardConvertDQ   dq = Element(scale * dq_accum)
//   backwardQ           deterministic dQ: one block per (q tile, q head, batch), no atomics
// backwardPreprocess and backwardConvertDQ are in bwd_preprocess.h, backwardKV in bwd_dkdv.h,
// backwardQ in bwd_dq.h; this header includes them all.
// Launch geometry and the dQ choice: docs/templates.md ("Backward").
//
// backwardKV works in the transposed frame: its warps own kv rows, so S^T = K Q^T, P^T and dP^T =
// V dO^T sit in accumulators with kv as the row; P^T (after dropout) and dS^T go through shared
// memory once, and then serve as plain A operands of dV += P^T dO and dK += dS^T Q, and as the
// transposed A operand (ldmatrix.trans) of dQ = dS K. The probabilities are recomputed exactly as
// the forward scores them: x = s * scale (or score(s * scale) with a hook),
// P = 2^(x c - LSE log2 e) with c = log2 e (hook) or scale * log2 e (no hook), P = 0 where masked
// or where LSE = -inf.
//
// The sm_90a backward reuses the preprocess and convert kernels, and this dQ kernel where its own
// does not fit; the steps both families share are common/bwd_steps.h.
#pragma once

#include "attnc/sm80/bwd_dkdv.h"
#include "attnc/sm80/bwd_dq.h"
#include "attnc/sm80/bwd_preprocess.h"
