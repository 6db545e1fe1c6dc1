// One sequence's view of a launch over sequences of different lengths (varlen or paged, params.h
// SeqLayout): the Variant's hooks get the view as `p`, so that p.q_len and p.kv_len are the
// sequence's own (bottom-right causal aligns per sequence) while declared inputs keep the launch's
// extents (their summaries were made for those). Included by the decode and varlen kernels only.
#pragma once

#include "attnc/common/expr.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/params.h"
#include "attnc/common/types.h"

namespace attnc {

// What a Variant's hooks and a kernel's walks read, for sequence `b` of a launch with parameters
// P (FwdParams or BwdParams). The hooks read q_len, kv_len, inputs and input_extents(p) (made
// from batch, heads_q and positions, below); `b` stays the sequence, and q, k are positions in
// the sequence. Made once a block by seqView().
template <class P>
struct SeqView {
  const P& base;  // the launch's parameters: strides, dropout, the launch's longest lengths
  int batch;      // sequences
  int heads_q;
  int q_len, kv_len;  // this sequence's, within [0, base.q_len] and [0, base.kv_len]
  int positions;      // the launch's input extent, max(base.q_len, base.kv_len)
  int q_start;        // this sequence's first packed Q/O row (varlen), else 0
  int kv_start;       // this sequence's first packed K/V row (varlen), else 0
  float scale;
  const InputRef* inputs;
};

// x clamped into [lo, hi] (lo <= hi), as an int: packed row offsets are int32 arrays.
ATTNC_HD int clampRow(i64 x, i64 lo, i64 hi) { return int(x < lo ? lo : x > hi ? hi : x); }

// Sequence b's view of launch `p`. Lengths come from cu_seqlens_q (Q), seq_lens_kv, else
// cu_seqlens_kv (K/V), else the launch's; none of them is trusted: offsets are clamped into the
// packed rows, a decreasing pair gives length 0, a paged length is at most the table row's pages,
// and every length is at most the launch's (the grid and the summaries were sized by those).
template <class P>
ATTNC_HD SeqView<P> seqView(const P& p, const SeqLayout& seq, int b) {
  int qStart = 0, qLen = p.q_len;
  if (seq.cu_seqlens_q) {
    qStart = clampRow(seq.cu_seqlens_q[b], 0, seq.total_q);
    qLen = clampRow(seq.cu_seqlens_q[b + 1], qStart, seq.total_q) - qStart;
  }
  int kvStart = 0;
  i64 kvLen = p.kv_len;
  if (seq.cu_seqlens_kv) {
    kvStart = clampRow(seq.cu_seqlens_kv[b], 0, seq.total_kv);
    kvLen = clampRow(seq.cu_seqlens_kv[b + 1], kvStart, seq.total_kv) - kvStart;
  }
  if (seq.seq_lens_kv) {
    kvLen = seq.seq_lens_kv[b];
    if (seq.cu_seqlens_kv) kvLen = clampRow(kvLen, 0, seq.total_kv - kvStart);
  }
  if (seq.block_table) kvLen = clampRow(kvLen, 0, i64(seq.max_pages) << seq.page_shift);
  return SeqView<P>{p,
                    p.batch,
                    p.heads_q,
                    clampRow(qLen, 0, p.q_len),
                    clampRow(kvLen, 0, p.kv_len),
                    maxOf(p.q_len, p.kv_len),
                    qStart,
                    kvStart,
                    p.scale,
                    p.inputs};
}

// A launch's rows of precomputed tile classes are made for its contiguous tiles (FwdParams'
// kv_tile_*), not for a sequence's: walks over a view search and classify their tiles themselves.
template <class P, bool AlongKeys>
struct ParamsTileClasses<SeqView<P>, AlongKeys> {
  static constexpr bool value = false;
};
// A view of the forward's parameters walks as the forward does (along the keys).
template <class P>
struct IsForwardParams<SeqView<P>> {
  static constexpr bool value = IsForwardParams<P>::value;
};

namespace expr {

// The launch's extents, not the sequence's: a sequence's positions index the declared inputs'
// padded [batch, max_pos] rows (docs/spec.md), and the interval loads size the summaries by these
// extents (summaryLayout), as the `<name>_summary` entry made them for the launch.
template <class P>
ATTNC_HD InputExtents input_extents(const SeqView<P>& v) {
  return InputExtents{v.batch, v.heads_q, v.positions};
}

// The forward's tanh in score hooks (expr_scalar.h): a decode or varlen forward calls the hooks
// with a view of FwdParams and must softcap as the contiguous forward does.
template <>
ATTNC_HD float score_tanh<SeqView<FwdParams>>(float a) {
  return fast_tanh(a);
}

}  // namespace expr
}  // namespace attnc
