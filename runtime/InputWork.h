// The launches that run before the attention kernels for a mask that reads declared inputs: the
// inputs' block summaries, the tile classes and (sm_90a forward) the q tiles' order, made for one
// launch in the Kernel's per-stream buffer, or once in a PreparedInputs' own.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/params.h"
#include "runtime/ModuleLoader.h"

#include <mutex>

namespace attnc {

// The forward's launches before the attention kernel, for masks that read declared inputs: the
// inputs' summaries, the tile classes and (sm_90a) the q tiles' order, on `stream`, with p's
// fields pointed at their output. Into the Kernel's per-stream buffer (*summaryLock held until
// the attention kernel is enqueued), or with `own` into that buffer (PreparedInputs).
Status launchInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                       const Kernel::Impl::Loaded& loaded, const KernelMetadata& m, FwdParams& p,
                       cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                       DeviceBuffer* own);

// The decode kernel's launches before it: the inputs' summaries alone (it classifies its own
// tiles), as launchInputWork into the Kernel's per-stream buffer.
Status launchDecodeInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                             const Kernel::Impl::Loaded& loaded, FwdParams& p, cu::Stream stream,
                             std::unique_lock<std::mutex>* summaryLock);

// The backward's launches before its kernels, for masks that read declared inputs: the
// summaries and the dK/dV kernel's tile classes, rows (b, h, kv tile of kvBlockKV) of q tiles, the
// words a row sized for q tiles of 16 rows, the least any dK/dV kernel uses (its own q block is
// not in the metadata); with `dqKernel` (a launch that runs the sm_90a dQ kernel) also that
// kernel's, rows (b, h, q tile of qBlockQ) of kv tiles of qBlockKV. As launchInputWork, into the
// Kernel's per-stream buffer or `own`.
Status launchBackwardInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                               const Kernel::Impl::Loaded& loaded, BwdParams& p, bool dqKernel,
                               cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                               DeviceBuffer* own);

}  // namespace attnc
