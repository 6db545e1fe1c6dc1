// Varlen launches a sequence at a time (PerSequenceLaunch.h): each sequence's rows as a
// contiguous launch of batch 1, its tensors' first rows found through the host copies of
// cu_seqlens, its declared inputs' rows through their batch stride, and a packed LSE through a
// per-stream scratch of [heads_q, q_len] floats.
#include "runtime/PerSequenceLaunch.h"

#include "runtime/DecodeLaunch.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"

#include <algorithm>
#include <mutex>

namespace attnc {

namespace {

constexpr int64_t kElementBytes = 2;  // Q, K, V, O and their gradients: bf16 or fp16
constexpr int64_t kWordBytes = 4;     // the LSE and declared inputs: f32 or i32

// Sequence b's rows: where its queries and keys start and how many there are.
struct SequenceRows {
  int64_t qFirst = 0, qLen = 0, kvFirst = 0, kvLen = 0;
};

SequenceRows sequenceRows(const VarlenArg& v, int64_t b, int64_t qLen, int64_t kvLen) {
  SequenceRows r;
  r.qFirst = v.cu_seqlens_q ? v.host_cu_seqlens_q[b] : 0;
  r.qLen = v.cu_seqlens_q ? v.host_cu_seqlens_q[b + 1] - r.qFirst : qLen;
  r.kvFirst = v.cu_seqlens_kv ? v.host_cu_seqlens_kv[b] : 0;
  r.kvLen = v.cu_seqlens_kv ? v.host_cu_seqlens_kv[b + 1] - r.kvFirst : kvLen;
  return r;
}

// The byte offset of sequence b's first row in a tensor: packed tensors by their rows, the
// others by their batch stride.
template <class Tensor>
int64_t firstRow(const Tensor& t, int64_t b, int64_t row, bool packed) {
  return (packed ? row * t.stride_s : b * t.stride_b) * kElementBytes;
}
// Points `t` at sequence b's rows (`rows` of them from `row` where packed). A packed tensor's
// batch stride (ignored in a packed launch) becomes its rows' span: a launch of batch 1 checks
// it as any other stride.
template <class Tensor>
void moveTo(Tensor& t, int64_t b, int64_t row, int64_t rows, bool packed) {
  using Pointer = decltype(t.data);
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const char,
                                  char>;
  t.data = static_cast<Pointer>(static_cast<Byte*>(t.data) + firstRow(t, b, row, packed));
  if (packed) t.stride_b = std::max<int64_t>(rows, 1) * t.stride_s;
}

// Declared inputs with a batch dimension: sequence b's row.
void moveInputs(std::vector<InputArg>& inputs, const KernelMetadata& m, int64_t b) {
  for (size_t i = 0; i < inputs.size() && i < m.inputs.size(); ++i)
    if (("," + m.inputs[i].dims + ",").find(",b,") != std::string::npos)
      inputs[i].data = static_cast<const char*>(inputs[i].data) +
                       b * inputs[i].stride_b * kWordBytes;
}

// The kernel's LSE scratch on (context, stream), at least `bytes`, held (lock) until the
// launches that use it are enqueued.
Status lseScratch(Kernel::Impl& impl, size_t bytes, void* stream, const char* who,
                  std::unique_lock<std::mutex>* lock, float** out) {
  std::string error;
  cu::Context context = nullptr;
  const DriverApi* driver = driverInContext(&context, &error);
  if (!driver) return Status::error(std::string(who) + ": " + error);
  const cu::Stream cuStream = static_cast<cu::Stream>(stream);
  *lock = std::unique_lock<std::mutex>(impl.workspaceMutex);
  DeviceBuffer& buffer = impl.lseScratch[{context, cuStream}];
  if (Status grown =
          growKernelBuffer(*driver, cuStream, buffer, bytes, who, "scratch for a packed LSE", "");
      !grown)
    return grown;
  *out = static_cast<float*>(buffer.data());
  return Status::success();
}

// Copies `rows` rows of `width` floats between two pitched arrays on `stream`.
Status copyRows(float* dst, int64_t dstPitch, const float* src, int64_t srcPitch, int64_t rows,
                int64_t width, void* stream, const char* who) {
  std::string error;
  cu::Context context = nullptr;
  const DriverApi* driver = driverInContext(&context, &error);
  if (!driver) return Status::error(std::string(who) + ": " + error);
  cu::Memcpy2D copy{};
  copy.srcMemoryType = copy.dstMemoryType = cu::kMemoryTypeDevice;
  copy.srcDevice = cu::DevicePtr(reinterpret_cast<uintptr_t>(src));
  copy.dstDevice = cu::DevicePtr(reinterpret_cast<uintptr_t>(dst));
  copy.srcPitch = size_t(srcPitch * kWordBytes);
  copy.dstPitch = size_t(dstPitch * kWordBytes);
  copy.widthInBytes = size_t(width * kWordBytes);
  copy.height = size_t(rows);
  if (!driver->check(driver->cuMemcpy2DAsync(&copy, static_cast<cu::Stream>(stream)),
                     "cuMemcpy2DAsync(LSE rows)", &error))
    return Status::error(std::string(who) + ": " + error);
  return Status::success();
}

// Sequence b's backward: its rows of every tensor, batch 1, its lengths; the LSE as given
// (the caller points it at the sequence's rows).
BackwardArgs sequenceBackward(const BackwardArgs& args, const KernelMetadata& m, int64_t b,
                              const SequenceRows& r) {
  const VarlenArg& v = *args.varlen;
  const bool packedQ = v.cu_seqlens_q != nullptr, packedKV = v.cu_seqlens_kv != nullptr;
  BackwardArgs one = args;
  one.varlen = nullptr;
  one.batch = 1;
  one.q_len = r.qLen;
  one.kv_len = r.kvLen;
  for (TensorArg* t : {&one.q, &one.o, &one.d_o}) moveTo(*t, b, r.qFirst, r.qLen, packedQ);
  moveTo(one.dq, b, r.qFirst, r.qLen, packedQ);
  for (TensorArg* t : {&one.k, &one.v}) moveTo(*t, b, r.kvFirst, r.kvLen, packedKV);
  moveTo(one.dk, b, r.kvFirst, r.kvLen, packedKV);
  moveTo(one.dv, b, r.kvFirst, r.kvLen, packedKV);
  moveInputs(one.inputs, m, b);
  return one;
}

}  // namespace

bool takesPerSequence(const KernelMetadata& m, const ForwardArgs& args) {
  const VarlenArg* v = args.varlen;
  if (!v || args.paged || args.decode == DecodeChoice::On || args.prepared) return false;
  if (int64_t(m.headsQ / m.headsKV) * args.q_len <= kDecodeAutoRows) return false;
  if ((v->cu_seqlens_q && !v->host_cu_seqlens_q) || (v->cu_seqlens_kv && !v->host_cu_seqlens_kv))
    return false;
  for (int64_t b = 0; b < args.batch; ++b) {
    const SequenceRows r = sequenceRows(*v, b, args.q_len, args.kv_len);
    if (r.qLen > 0 && r.kvLen == 0) return false;
  }
  return true;
}

Status launchPerSequence(const Kernel& kernel, Kernel::Impl& impl, const KernelMetadata& m,
                         const ForwardArgs& args, void* stream) {
  const VarlenArg& v = *args.varlen;
  const bool packedQ = v.cu_seqlens_q != nullptr, packedKV = v.cu_seqlens_kv != nullptr;
  std::unique_lock<std::mutex> scratchLock;
  float* scratch = nullptr;
  if (args.lse && packedQ)
    if (Status status = lseScratch(impl, size_t(m.headsQ * args.q_len * kWordBytes), stream,
                                   "Kernel::forward", &scratchLock, &scratch);
        !status)
      return status;
  for (int64_t b = 0; b < args.batch; ++b) {
    const SequenceRows r = sequenceRows(v, b, args.q_len, args.kv_len);
    if (r.qLen == 0) continue;
    ForwardArgs one = args;
    one.varlen = nullptr;
    one.batch = 1;
    one.q_len = r.qLen;
    one.kv_len = r.kvLen;
    moveTo(one.q, b, r.qFirst, r.qLen, packedQ);
    moveTo(one.o, b, r.qFirst, r.qLen, packedQ);
    moveTo(one.k, b, r.kvFirst, r.kvLen, packedKV);
    moveTo(one.v, b, r.kvFirst, r.kvLen, packedKV);
    moveInputs(one.inputs, m, b);
    // The LSE: [batch, heads_q, q_len] rows of b (its q_len is the launch's), or the scratch.
    if (args.lse) one.lse = packedQ ? scratch : args.lse + b * m.headsQ * args.q_len;
    if (args.lse && !packedQ && r.qLen != args.q_len)
      return Status::error("Kernel::forward: sequence " + std::to_string(b) + " has " +
                           std::to_string(r.qLen) + " queries of an unpacked Q of q_len " +
                           std::to_string(args.q_len));
    // A short sequence may itself take the decode kernel, whose partials the caller's workspace
    // (sized for the whole launch) need not hold: the kernel's own then.
    if (one.workspace && kernel.forwardWorkspaceBytes(one) > one.workspace_bytes)
      one.workspace = nullptr, one.workspace_bytes = 0;
    if (Status status = kernel.forward(one, stream); !status)
      return Status::error("sequence " + std::to_string(b) + ": " + status.message);
    if (args.lse && packedQ)
      if (Status status = copyRows(args.lse + r.qFirst, v.total_q, scratch, r.qLen, m.headsQ,
                                   r.qLen, stream, "Kernel::forward");
          !status)
        return status;
  }
  return Status::success();
}

Status validateBackwardVarlen(const Kernel& kernel, const BackwardArgs& args) {
  const VarlenArg& v = *args.varlen;
  if (v.cu_seqlens_q && !v.host_cu_seqlens_q)
    return Status::error("BackwardArgs.varlen.host_cu_seqlens_q: required with cu_seqlens_q (the "
                         "backward runs a launch per sequence), got null");
  if (v.cu_seqlens_kv && !v.host_cu_seqlens_kv)
    return Status::error("BackwardArgs.varlen.host_cu_seqlens_kv: required with cu_seqlens_kv "
                         "(the backward runs a launch per sequence), got null");
  if (args.prepared)
    return Status::error("BackwardArgs.prepared: expected null with varlen (each sequence makes "
                         "its own), got a PreparedInputs");
  // The forward's checks of the same layout: offsets, totals, footprints of packed tensors.
  ForwardArgs forward;
  forward.q = args.q;
  forward.k = args.k;
  forward.v = args.v;
  forward.o = OutputArg{const_cast<void*>(args.o.data), args.o.stride_b, args.o.stride_h,
                        args.o.stride_s};
  forward.lse = const_cast<float*>(args.lse);
  forward.batch = args.batch;
  forward.q_len = args.q_len;
  forward.kv_len = args.kv_len;
  forward.inputs = args.inputs;
  forward.varlen = args.varlen;
  if (Status status = kernel.validate(forward); !status) {
    std::string message = status.message;
    for (size_t at = message.find("ForwardArgs."); at != std::string::npos;
         at = message.find("ForwardArgs.", at))
      message.replace(at, 12, "BackwardArgs.");
    return Status::error(message);
  }
  if (!args.lse) return Status::error("BackwardArgs.lse: required (the forward's), got null");
  // Each sequence's launch as backward() will check it (dO, the gradients, the workspace), all
  // before any is launched. Its LSE rows are a scratch's at launch, here the packed LSE's start
  // (as long, and apart from what is written as the scratch is).
  const KernelMetadata& m = kernel.metadata();
  for (int64_t b = 0; b < args.batch; ++b) {
    const SequenceRows r = sequenceRows(v, b, args.q_len, args.kv_len);
    if (r.qLen == 0 && r.kvLen == 0) continue;
    if (r.qLen == 0 || r.kvLen == 0)
      return Status::error("BackwardArgs.varlen: sequence " + std::to_string(b) + " has " +
                           std::to_string(r.qLen) + " queries and " + std::to_string(r.kvLen) +
                           " keys; the backward takes sequences with both or neither");
    if (!v.cu_seqlens_q && r.qLen != args.q_len)
      return Status::error("BackwardArgs.varlen: sequence " + std::to_string(b) + " has " +
                           std::to_string(r.qLen) + " queries of an unpacked Q of q_len " +
                           std::to_string(args.q_len));
    BackwardArgs one = sequenceBackward(args, m, b, r);
    one.lse = v.cu_seqlens_q ? args.lse : args.lse + b * m.headsQ * args.q_len;
    one.workspace = nullptr, one.workspace_bytes = 0;  // (checked at launch, or the kernel's)
    if (Status status = kernel.validateBackward(one); !status)
      return Status::error("sequence " + std::to_string(b) + ": " + status.message);
  }
  return Status::success();
}

Status backwardPerSequence(const Kernel& kernel, Kernel::Impl& impl, const KernelMetadata& m,
                           const BackwardArgs& args, void* stream) {
  if (Status status = validateBackwardVarlen(kernel, args); !status) return status;
  const VarlenArg& v = *args.varlen;
  const bool packedQ = v.cu_seqlens_q != nullptr;
  std::unique_lock<std::mutex> scratchLock;
  float* scratch = nullptr;
  if (packedQ)
    if (Status status = lseScratch(impl, size_t(m.headsQ * args.q_len * kWordBytes), stream,
                                   "Kernel::backward", &scratchLock, &scratch);
        !status)
      return status;
  for (int64_t b = 0; b < args.batch; ++b) {
    const SequenceRows r = sequenceRows(v, b, args.q_len, args.kv_len);
    if (r.qLen == 0 && r.kvLen == 0) continue;
    BackwardArgs one = sequenceBackward(args, m, b, r);
    if (packedQ) {
      if (Status status = copyRows(scratch, r.qLen, args.lse + r.qFirst, v.total_q, m.headsQ,
                                   r.qLen, stream, "Kernel::backward");
          !status)
        return status;
      one.lse = scratch;
    } else {
      one.lse = args.lse + b * m.headsQ * args.q_len;
    }
    if (one.workspace &&
        kernel.backwardWorkspaceBytes(1, r.qLen, one.deterministic) > one.workspace_bytes)
      one.workspace = nullptr, one.workspace_bytes = 0;
    if (Status status = kernel.backward(one, stream); !status)
      return Status::error("sequence " + std::to_string(b) + ": " + status.message);
  }
  return Status::success();
}

}  // namespace attnc
