// The kernels' launch parameters (templates/attnc/common/params.h) filled from a launch's
// arguments: the fields the forward and backward share, and the TMA tensor maps the sm_90a
// kernels read Q, K, V and dO through.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/params.h"
#include "runtime/Driver.h"

#include <cstdint>
#include <string>

namespace attnc {

template <class Tensor>
void setStrides(const Tensor& t, i64& b, i64& h, i64& s) {
  b = t.stride_b, h = t.stride_h, s = t.stride_s;
}

// The launch fields FwdParams and BwdParams share (the same names in both, so the mask and
// score hooks read them alike): q, k, v, o and the LSE, sizes, scale, dropout and the declared
// inputs.
template <class Params, class Args>
void setSharedFields(Params& p, const KernelMetadata& m, const Args& args) {
  p.q = args.q.data;
  p.k = args.k.data;
  p.v = args.v.data;
  p.o = args.o.data;
  p.lse = args.lse;
  setStrides(args.q, p.q_stride_b, p.q_stride_h, p.q_stride_s);
  setStrides(args.k, p.k_stride_b, p.k_stride_h, p.k_stride_s);
  setStrides(args.v, p.v_stride_b, p.v_stride_h, p.v_stride_s);
  setStrides(args.o, p.o_stride_b, p.o_stride_h, p.o_stride_s);
  p.batch = int(args.batch);
  p.heads_q = m.headsQ;
  p.heads_kv = m.headsKV;
  p.q_len = int(args.q_len);
  p.kv_len = int(args.kv_len);
  p.scale = m.scale;
  p.dropout_p = m.dropout;
  p.dropout_seed = args.dropout_seed;
  p.dropout_offset = args.dropout_offset;
  dropoutKeySchedule(args.dropout_seed, args.dropout_offset, p.dropout_keys);
  // Strides of dimensions an input does not have are never used for loads (its index there is
  // 0) but would size its summaries (summaryLayout): they are 0 here whatever the caller passed.
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const InputArg& in = args.inputs[i];
    const std::string dims = "," + m.inputs[i].dims + ",";
    auto has = [&](const char* dim) {
      return dims.find(std::string(",") + dim + ",") != std::string::npos;
    };
    p.inputs[i] = {in.data, has("b") ? in.stride_b : 0, has("h") ? in.stride_h : 0,
                   has("pos") ? in.stride_pos : 0, nullptr};
  }
}

// The 4-D tensor map (head dim, sequence, head, batch) of one operand of the sm_90a forward kernel
// (templates/attnc/sm90/forward.h): boxes of 64 head-dim elements (128 bytes, 128-byte swizzle) by
// `rows` positions; elements past the tensor's edges read as zeros. TMA needs a 16-byte aligned
// base and strides that are multiples of 16 bytes; the stride of a dimension of size 1 is never
// used, so a valid stand-in replaces it.
Status encodeTensorMap(const DriverApi& driver, TensorMap& map, const std::string& where,
                       const TensorArg& t, const KernelMetadata& m, int64_t dim, int64_t batch,
                       int64_t heads, int64_t len, unsigned rows);

// The tensor maps of Q (boxes of 64 rows), K and V (boxes of kvRows rows) that the sm_90a kernels
// read through; `what` names the argument struct in errors.
template <class Args>
Status encodeQKVMaps(const DriverApi& driver, const std::string& what, const Args& args,
                     const KernelMetadata& m, unsigned kvRows, TensorMap& q, TensorMap& k,
                     TensorMap& v) {
  Status status = encodeTensorMap(driver, q, what + ".q", args.q, m, m.headDim, args.batch,
                                  m.headsQ, args.q_len, 64);
  if (status)
    status = encodeTensorMap(driver, k, what + ".k", args.k, m, m.headDim, args.batch, m.headsKV,
                             args.kv_len, kvRows);
  if (status)
    status = encodeTensorMap(driver, v, what + ".v", args.v, m, m.headDimV, args.batch, m.headsKV,
                             args.kv_len, kvRows);
  return status;
}

}  // namespace attnc
