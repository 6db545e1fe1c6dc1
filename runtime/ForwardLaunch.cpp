// Kernel::forward: the launch of one forward kernel through the dlopen-ed driver. The launch ABI
// is attnc::FwdParams (templates/attnc/common/params.h), or FwdParamsTma for the sm_90a kernel:
// grid (ceil(q_len / block_q), heads_q, batch), or orderedGrid(q tiles, heads_q x batch) for a
// kernel built for it (forwardGrid, runtime/LaunchGrid.h), block `threads`, dynamic shared memory
// `smemBytes` (opted into above 48 KiB). A mask that reads declared inputs first has its input
// work (InputWork.h) run on the same stream, or takes it from ForwardArgs::prepared.
#include "attnc/attnc.h"

#include "runtime/DecodeLaunch.h"
#include "runtime/PerSequenceLaunch.h"
#include "runtime/InputWork.h"
#include "runtime/LaunchGrid.h"
#include "runtime/LaunchParams.h"
#include "runtime/ModuleLoader.h"
#include "runtime/PreparedInputs.h"

namespace attnc {

Status Kernel::forward(const ForwardArgs& args, void* stream) const {
  if (Status status = validate(args); !status) return status;
  const KernelMetadata& m = metadata();
  if (takesPerSequence(m, args)) return launchPerSequence(*this, *impl_, m, args, stream);
  if (takesDecode(m, args))
    return launchDecode(*impl_, m, args, args.prepared ? args.prepared->impl_.get() : nullptr,
                        stream);
  InContext at;
  if (Status status = loadedInContext(*impl_, "Kernel::forward", &at); !status) return status;
  const auto [driver, context, loaded] = at;
  std::string error;
  // The chosen image's tile sizes: images for other architectures may tile differently.
  const KernelMetadata& tiles = loaded->image->metadata;

  // The grid first: a launch it cannot make starts nothing.
  OrderedGrid grid;
  if (Status status = forwardGrid(tiles, args.batch, args.q_len, grid); !status) return status;

  FwdParams p{};
  std::unique_lock<std::mutex> summaryLock;
  setSharedFields(p, m, args);
  const PreparedInputs::Impl* prepared =
      args.prepared ? args.prepared->impl_.get() : nullptr;  // checked by validate()
  if (Status status = prepared ? usePrepared(*prepared, prepared->forward, context,
                                             "ForwardArgs.prepared: ", p)
                               : launchInputWork(*impl_, *driver, context, *loaded, m, p,
                                                 static_cast<cu::Stream>(stream), &summaryLock,
                                                 nullptr);
      !status)
    return status;

  FwdParamsTma withMaps;
  void* params[] = {&p};
  if (tiles.forwardKernel == KernelFamily::Sm90) {
    withMaps.base = p;
    Status status = encodeQKVMaps(*driver, "ForwardArgs", args, m, unsigned(tiles.blockKV),
                                  withMaps.tma_q, withMaps.tma_k, withMaps.tma_v);
    if (!status) return status;
    params[0] = &withMaps;
  }
  if (!driver->check(driver->cuLaunchKernel(loaded->function, grid.x, grid.y, grid.z,
                                            unsigned(tiles.threads), 1, 1,
                                            unsigned(tiles.smemBytes),
                                            static_cast<cu::Stream>(stream), params, nullptr),
                     "cuLaunchKernel", &error))
    return Status::error("kernel '" + m.name + "': " + error);
  return Status::success();
}

}  // namespace attnc
