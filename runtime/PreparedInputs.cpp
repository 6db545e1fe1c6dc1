// PreparedInputs and Kernel::prepareInputs: the forward's (and backward's) input work made once,
// into memory of its own, for launches that pass it in ForwardArgs/BackwardArgs::prepared.
#include "runtime/PreparedInputs.h"

#include "runtime/InputWork.h"
#include "runtime/LaunchParams.h"
#include "runtime/ModuleLoader.h"

#include <cstdio>

namespace attnc {

PreparedInputs::PreparedInputs() = default;
PreparedInputs::~PreparedInputs() = default;
PreparedInputs::PreparedInputs(const PreparedInputs&) = default;
PreparedInputs& PreparedInputs::operator=(const PreparedInputs&) = default;
size_t PreparedInputs::bytes() const {
  return impl_ ? impl_->buffer.size() + impl_->backwardBuffer.size() : 0;
}

void copyInputWork(const FwdParams& from, FwdParams& to) {
  for (int i = 0; i < kMaxInputs; ++i) to.inputs[i].summary = from.inputs[i].summary;
  to.kv_tile_bounds = from.kv_tile_bounds;
  to.kv_tile_classes = from.kv_tile_classes;
  to.kv_class_words = from.kv_class_words;
  to.kv_group_classes = from.kv_group_classes;
  to.kv_group_words = from.kv_group_words;
  to.q_tile_order = from.q_tile_order;
}
void copyInputWork(const BwdParams& from, BwdParams& to) {
  for (int i = 0; i < kMaxInputs; ++i) to.inputs[i].summary = from.inputs[i].summary;
  to.q_tile_bounds = from.q_tile_bounds;
  to.q_tile_classes = from.q_tile_classes;
  to.q_class_words = from.q_class_words;
  to.kv_tile_bounds = from.kv_tile_bounds;
  to.kv_tile_classes = from.kv_tile_classes;
  to.kv_class_words = from.kv_class_words;
}

std::string describeInputs(const std::vector<InputArg>& inputs) {
  std::string text;
  for (const InputArg& in : inputs) {
    char item[128];
    std::snprintf(item, sizeof item, "%s%p (strides %lld, %lld, %lld)", text.empty() ? "" : ", ",
                  in.data, (long long)in.stride_b, (long long)in.stride_h,
                  (long long)in.stride_pos);
    text += item;
  }
  return text.empty() ? "none" : text;
}

Status Kernel::prepareInputs(const ForwardArgs& args, void* stream, PreparedInputs* out) const {
  if (!out) return Status::error("Kernel::prepareInputs: out: expected a PreparedInputs, got null");
  *out = PreparedInputs();
  if (args.prepared)
    return Status::error("ForwardArgs.prepared: expected null for prepareInputs (it makes one), "
                         "got a PreparedInputs");
  if (Status status = validate(args); !status) return status;
  const KernelMetadata& m = metadata();
  InContext at;
  if (Status status = loadedInContext(*impl_, "Kernel::prepareInputs", &at); !status) return status;
  const auto [driver, context, loaded] = at;
  std::string error;
  auto prepared = std::make_shared<PreparedInputs::Impl>();
  prepared->kernel = impl_;
  prepared->context = context;
  prepared->inputs = args.inputs;
  setSharedFields(prepared->forward, m, args);
  if (Status status = launchInputWork(*impl_, *driver, context, *loaded, m, prepared->forward,
                                      static_cast<cu::Stream>(stream), nullptr, &prepared->buffer);
      !status)
    return status;
  if (m.hasBackward()) {
    // The backward's summaries and tile classes, as Kernel::backward makes them.
    const Impl::Loaded* withBackward = impl_->backwardFunctions(*driver, context, &error);
    if (!withBackward) return Status::error(error);
    setSharedFields(prepared->backwardParams, m, args);
    // (the dQ kernel's too: the preparation may serve the deterministic backward)
    if (Status status = launchBackwardInputWork(
            *impl_, *driver, context, *withBackward, prepared->backwardParams, /*dqKernel=*/true,
            static_cast<cu::Stream>(stream), nullptr, &prepared->backwardBuffer);
        !status)
      return status;
    prepared->backward = true;
  }
  out->impl_ = std::move(prepared);
  return Status::success();
}

}  // namespace attnc
