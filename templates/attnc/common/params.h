// The launch parameters every attnc kernel receives by value: the ABI between the runtime (host)
// and the kernels (device). Plain data only, so host code and NVRTC see the same layout.
#pragma once

#include "attnc/common/platform.h"

namespace attnc {

// The most declared inputs (`doc`, `slopes`, ...) a spec may have.
constexpr int kMaxInputs = 8;

// One declared input tensor: a base pointer and the element stride of each dimension it may be
// indexed by (0 where the input has no such dimension). Element type is known to the Variant.
struct InputRef {
  const void* ptr;
  i64 stride_b;
  i64 stride_h;
  i64 stride_pos;
};

// Forward launch parameters. Strides are in elements; any layout whose last (head) dimension
// is contiguous works, so BSHD and BHSD are both plain stride choices.
struct FwdParams {
  const void* q;  // [batch, heads_q,  q_len,  head_dim]   (by the strides below)
  const void* k;  // [batch, heads_kv, kv_len, head_dim]
  const void* v;  // [batch, heads_kv, kv_len, head_dim_v]
  void* o;        // [batch, heads_q,  q_len,  head_dim_v]
  float* lse;     // [batch, heads_q, q_len], contiguous; may be null

  i64 q_stride_b, q_stride_h, q_stride_s;
  i64 k_stride_b, k_stride_h, k_stride_s;
  i64 v_stride_b, v_stride_h, v_stride_s;
  i64 o_stride_b, o_stride_h, o_stride_s;

  int batch;
  int heads_q;
  int heads_kv;
  int q_len;
  int kv_len;

  float scale;        // softmax scale applied to q.k before the score hook
  float dropout_p;    // probability of dropping; 0 when the spec has no dropout
  u64 dropout_seed;
  u64 dropout_offset;

  InputRef inputs[kMaxInputs];
};

}  // namespace attnc
