// PreparedInputs::Impl, what Kernel::prepareInputs makes, and how a launch checks and uses one
// in place of its own input work (InputWork.h).
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/params.h"
#include "runtime/Driver.h"

#include <memory>
#include <string>
#include <vector>

namespace attnc {

// What Kernel::prepareInputs made: the buffer and where in it the forward's fields point.
struct PreparedInputs::Impl {
  std::shared_ptr<const Kernel::Impl> kernel;  // the kernel it was made for (and its copies)
  cu::Context context = nullptr;
  std::vector<InputArg> inputs;  // addresses and strides it summarized
  DeviceBuffer buffer;
  // The lengths it was made for and the input-work fields (copyInputWork), pointing into `buffer`.
  FwdParams forward{};
  // The backward's (a kernel with backward kernels): its summaries and the dK/dV kernel's classes.
  bool backward = false;
  DeviceBuffer backwardBuffer;
  BwdParams backwardParams{};  // its input-work fields point into `backwardBuffer`
};

// The fields of a launch's parameters that its input work sets (launchInputWork,
// launchBackwardInputWork), from `from` into `to`.
void copyInputWork(const FwdParams& from, FwdParams& to);
void copyInputWork(const BwdParams& from, BwdParams& to);

// p's input-work fields from a preparation (`made`: its parameters), if it was made in `context`.
template <class Params>
Status usePrepared(const PreparedInputs::Impl& prepared, const Params& made, cu::Context context,
                   const std::string& what, Params& p) {
  if (prepared.context != context)
    return Status::error(what + "made in another CUDA context than the current one");
  copyInputWork(made, p);
  return Status::success();
}

// The inputs' addresses and strides, for messages.
std::string describeInputs(const std::vector<InputArg>& inputs);

// Whether `prepared` was made for this kernel and these lengths and inputs; else why not.
template <class Args>
Status checkPrepared(const PreparedInputs::Impl* prepared, const Kernel::Impl* kernel,
                     const Args& args, const std::string& what) {
  if (!prepared)
    return Status::error(what + "expected one made by Kernel::prepareInputs, got an empty "
                                "PreparedInputs");
  if (prepared->kernel.get() != kernel)
    return Status::error(what + "made by another kernel (use this kernel's prepareInputs, or a "
                                "copy's)");
  auto lengths = [](int64_t b, int64_t q, int64_t kv) {
    return "batch " + std::to_string(b) + ", q_len " + std::to_string(q) + ", kv_len " +
           std::to_string(kv);
  };
  const FwdParams& made = prepared->forward;
  if (made.batch != args.batch || made.q_len != args.q_len || made.kv_len != args.kv_len)
    return Status::error(what + "expected " + lengths(made.batch, made.q_len, made.kv_len) +
                         " (what it was made for), got " +
                         lengths(args.batch, args.q_len, args.kv_len));
  bool same = prepared->inputs.size() == args.inputs.size();
  for (size_t i = 0; same && i < args.inputs.size(); ++i) {
    const InputArg &a = prepared->inputs[i], &b = args.inputs[i];
    same = a.data == b.data && a.stride_b == b.stride_b && a.stride_h == b.stride_h &&
           a.stride_pos == b.stride_pos;
  }
  if (!same)
    return Status::error(what + "expected the inputs it was made for, " +
                         describeInputs(prepared->inputs) + ", got " +
                         describeInputs(args.inputs));
  return Status::success();
}

}  // namespace attnc
