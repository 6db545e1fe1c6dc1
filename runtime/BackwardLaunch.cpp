// Kernel::backward: the backward kernels' launches (attnc::BwdParams, or BwdParamsTma for the
// sm_90a dK/dV and dQ entries) and the workspace they share:
//   <stem>_preprocess, <stem>_convert_dq: grid (ceil(q_len / preprocessRows), heads_q, batch),
//     block preprocessThreads, no dynamic shared memory;
//   <stem>_kv, <stem>_kv_nodq: grid (ceil(kv_len / kvBlockKV), heads_kv, batch), or
//     (heads_kv, ceil(kv_len / kvBlockKV), batch) with kvOrderedGrid (backwardKvGrid,
//     runtime/LaunchGrid.h), block kvThreads, kvSmemBytes;
//   <stem>_q: grid (ceil(q_len / qBlockQ), heads_q, batch), block qThreads, qSmemBytes.
// Default: preprocess (zeroes dq_accum, writes delta), kv (dK, dV, atomics into dq_accum),
// convert_dq. Deterministic: preprocess (dq_accum null), kv_nodq, q.
#include "attnc/attnc.h"

#include "runtime/DeviceBuffer.h"
#include "runtime/InputWork.h"
#include "runtime/LaunchGrid.h"
#include "runtime/LaunchParams.h"
#include "runtime/LaunchValidation.h"
#include "runtime/ModuleLoader.h"
#include "runtime/PerSequenceLaunch.h"
#include "runtime/PreparedInputs.h"

#include <climits>
#include <cstdint>

namespace attnc {

namespace {

// Byte offsets of dq_accum and delta inside a backward workspace, and its size (0 for lengths
// outside the launch bounds or a size past INT64_MAX bytes).
struct WorkspaceLayout {
  size_t dqAccum = 0, delta = 0, total = 0;
};
WorkspaceLayout workspaceLayout(const KernelMetadata& m, int64_t batch, int64_t q_len,
                                bool deterministic) {
  WorkspaceLayout l;
  if (!m.backward || batch < 1 || batch > kMaxGridYZ || q_len < 1 || q_len > kMaxLength ||
      m.headsQ < 1)
    return l;
  // Both arrays are linear in batch x heads_q; their per-head sizes fit easily in 64 bits.
  const int64_t rows = batch * m.headsQ;
  const int64_t accumPerRow = dqAccumElements(1, 1, int(q_len), m.headDim) * int64_t(sizeof(float));
  const int64_t deltaPerRow = deltaElements(1, 1, int(q_len)) * int64_t(sizeof(float));
  int64_t accum = 0, delta = 0, total = 0;
  if (!deterministic && __builtin_mul_overflow(rows, accumPerRow, &accum)) return l;
  if (__builtin_mul_overflow(rows, deltaPerRow, &delta)) return l;
  const size_t accumBytes = accum ? align256(size_t(accum)) : 0;
  if (__builtin_add_overflow(int64_t(align256(size_t(delta))), int64_t(accumBytes), &total) ||
      align256(size_t(delta)) > size_t(INT64_MAX) || accumBytes > size_t(INT64_MAX))
    return l;
  l.dqAccum = 0;
  l.delta = accumBytes;
  l.total = size_t(total);
  return l;
}

// Whether every compiled form's backward runs without dq_accum (BackwardMetadata::separateDq), so
// that the default mode's workspace needs none either (a form the device may load otherwise does).
bool everyFormSeparatesDq(const std::vector<Kernel::Impl::Image>& images) {
  for (const auto& image : images)
    if (!image.metadata.backward || !image.metadata.backward->separateDq) return false;
  return !images.empty();
}

}  // namespace

size_t Kernel::backwardWorkspaceBytes(int64_t batch, int64_t q_len, bool deterministic) const {
  const bool noAccum = deterministic || (impl_ && everyFormSeparatesDq(impl_->images));
  return workspaceLayout(metadata(), batch, q_len, noAccum).total;
}

Status Kernel::backward(const BackwardArgs& args, void* stream) const {
  if (impl_ && args.varlen) {
    if (!metadata().backward) return validateBackward(args);
    return backwardPerSequence(*this, *impl_, metadata(), args, stream);
  }
  if (Status status = validateBackward(args); !status) return status;
  const KernelMetadata& m = metadata();
  std::string error;
  cu::Context context = nullptr;
  const DriverApi* driver = driverInContext(&context, &error);
  if (!driver) return Status::error("Kernel::backward: " + error);
  const Impl::Loaded* loaded = impl_->backwardFunctions(*driver, context, &error);
  if (!loaded) return Status::error(error);
  // Without dq_accum (BackwardMetadata::separateDq): the deterministic mode's kernels.
  const bool separateDq =
      args.deterministic || loaded->image->metadata.backward->separateDq;
  if (separateDq) loaded = impl_->deterministicFunctions(*driver, context, &error);
  if (!loaded) return Status::error(error);
  // The chosen image's geometry (other architectures may tile differently; the workspace size
  // does not depend on it).
  const BackwardMetadata& b = *loaded->image->metadata.backward;
  // The dK/dV grid first, as the forward's: a launch it cannot make starts nothing.
  OrderedGrid kvGrid;
  if (Status status = backwardKvGrid(m.name, b, m.headsKV, args.batch, args.kv_len, kvGrid);
      !status)
    return status;
  // (no dq_accum where no form needs one: backwardWorkspaceBytes)
  WorkspaceLayout layout = workspaceLayout(
      m, args.batch, args.q_len, args.deterministic || everyFormSeparatesDq(impl_->images));

  // The caller's workspace, or this kernel's (held for the launches: they are enqueued in order).
  std::unique_lock<std::mutex> workspaceLock;
  char* workspace = static_cast<char*>(args.workspace);
  if (!workspace) {
    workspaceLock = std::unique_lock<std::mutex>(impl_->workspaceMutex);
    DeviceBuffer& buffer = impl_->workspaces[context];
    if (Status grown = growKernelBuffer(*driver, static_cast<cu::Stream>(stream), buffer,
                                        layout.total, "Kernel::backward", "workspace",
                                        "BackwardArgs::workspace");
        !grown)
      return grown;
    workspace = static_cast<char*>(buffer.data());
  }

  BwdParams p{};
  p.do_ = args.d_o.data;
  p.dq = args.dq.data;
  p.dk = args.dk.data;
  p.dv = args.dv.data;
  p.dq_accum = separateDq ? nullptr : reinterpret_cast<float*>(workspace + layout.dqAccum);
  p.delta = reinterpret_cast<float*>(workspace + layout.delta);
  setStrides(args.d_o, p.do_stride_b, p.do_stride_h, p.do_stride_s);
  setStrides(args.dq, p.dq_stride_b, p.dq_stride_h, p.dq_stride_s);
  setStrides(args.dk, p.dk_stride_b, p.dk_stride_h, p.dk_stride_s);
  setStrides(args.dv, p.dv_stride_b, p.dv_stride_h, p.dv_stride_s);
  std::unique_lock<std::mutex> summaryLock;
  setSharedFields(p, m, args);
  // The summaries and the dK/dV kernel's tile classes (and the sm_90a dQ kernel's, where it runs):
  // prepared, or made now.
  const PreparedInputs::Impl* prepared =
      args.prepared ? args.prepared->impl_.get() : nullptr;  // checked by validateBackward()
  if (Status status = prepared ? usePrepared(*prepared, prepared->backwardParams, context,
                                             "BackwardArgs.prepared: ", p)
                               : launchBackwardInputWork(*impl_, *driver, context, *loaded, p,
                                                         separateDq,
                                                         static_cast<cu::Stream>(stream),
                                                         &summaryLock, nullptr);
      !status)
    return status;

  // The sm_90a dK/dV and dQ kernels read Q, K, V and dO through tensor maps: boxes of 64 q rows
  // and of the kernel's kv rows (the dK/dV block's, or the dQ kernel's kv tile).
  const auto withMaps = [&](BwdParamsTma& maps, int kvRows) {
    maps.base = p;
    Status status = encodeQKVMaps(*driver, "BackwardArgs", args, m, unsigned(kvRows), maps.tma_q,
                                  maps.tma_k, maps.tma_v);
    if (status)
      status = encodeTensorMap(*driver, maps.tma_do, "BackwardArgs.d_o", args.d_o, m, m.headDimV,
                               args.batch, m.headsQ, args.q_len, 64);
    return status;
  };
  BwdParamsTma kvMaps, qMaps;
  void* params[] = {&p};
  void* kvParams[] = {&p};
  void* qParams[] = {&p};
  if (b.kvKernel == KernelFamily::Sm90) {
    if (Status status = withMaps(kvMaps, b.kvBlockKV); !status) return status;
    kvParams[0] = &kvMaps;
  }
  if (separateDq && b.qKernel == KernelFamily::Sm90) {
    if (Status status = withMaps(qMaps, b.qBlockKV); !status) return status;
    qParams[0] = &qMaps;
  }
  auto blocks = [](int64_t n, int per) { return unsigned((n + per - 1) / per); };
  using E = BackwardEntry;
  auto launch = [&](E which, OrderedGrid grid, int threads, long long smem) {
    std::string what = "cuLaunchKernel(" + b.entryStem + backwardEntrySuffix(which) + ")";
    return driver->check(driver->cuLaunchKernel(loaded->backwardEntry(which), grid.x, grid.y,
                                                grid.z, unsigned(threads), 1, 1,
                                                unsigned(smem), static_cast<cu::Stream>(stream),
                                                which == E::Kv || which == E::KvNoDq ? kvParams
                                                : which == E::Q                      ? qParams
                                                                                     : params,
                                                nullptr),
                         what.c_str(), &error);
  };
  const OrderedGrid rowGrid{blocks(args.q_len, b.preprocessRows), unsigned(m.headsQ),
                            unsigned(args.batch)};
  bool ok = launch(E::Preprocess, rowGrid, b.preprocessThreads, 0);
  if (ok && !separateDq)
    ok = launch(E::Kv, kvGrid, b.kvThreads, b.kvSmemBytes) &&
         launch(E::ConvertDq, rowGrid, b.preprocessThreads, 0);
  else if (ok)
    ok = launch(E::KvNoDq, kvGrid, b.kvThreads, b.kvSmemBytes) &&
         launch(E::Q, {blocks(args.q_len, b.qBlockQ), unsigned(m.headsQ), unsigned(args.batch)},
                b.qThreads, b.qSmemBytes);
  if (!ok) return Status::error("kernel '" + m.name + "' (backward): " + error);
  return Status::success();
}

}  // namespace attnc
