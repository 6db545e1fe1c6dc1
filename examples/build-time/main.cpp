// Runs two kernels compiled at build time (causal_hd64.h and document.h come from
// attnc_add_kernels): the app links attnc::runtime only, no LLVM and no NVRTC.
#include "causal_hd64.h"
#include "document.h"

#include <cstdio>
#include <vector>

int main() {
  const int64_t batch = 1, len = 512;
  attnc::Status status;
  const attnc::Kernel& causal = causal_hd64_kernel(&status);
  if (!status) return std::fprintf(stderr, "%s\n", status.message.c_str()), 1;
  std::printf("%s: targets", causal.name().c_str());
  for (const std::string& t : causal.targets()) std::printf(" %s", t.c_str());
  std::printf(", %d heads, head dim %d\n", causal.headsQ(), causal.headDim());

  auto bytes = [&](int heads, int dim) { return size_t(batch * heads * len * dim) * 2; };
  attnc::DeviceBuffer q = attnc::DeviceBuffer::allocate(bytes(causal.headsQ(), 64), &status);
  if (!status) return std::fprintf(stderr, "no GPU: %s\n", status.message.c_str()), 0;
  attnc::DeviceBuffer k = attnc::DeviceBuffer::allocate(bytes(causal.headsKV(), 64), &status);
  attnc::DeviceBuffer v = attnc::DeviceBuffer::allocate(bytes(causal.headsKV(), 64), &status);
  attnc::DeviceBuffer o = attnc::DeviceBuffer::allocate(bytes(causal.headsQ(), 64), &status);
  std::vector<uint16_t> zeros(bytes(causal.headsQ(), 64) / 2, 0);
  q.upload(zeros.data(), q.size());
  k.upload(zeros.data(), k.size());
  v.upload(zeros.data(), v.size());

  attnc::ForwardArgs args;
  args.q = attnc::tensorArg(q.data(), attnc::bhsdStrides(causal.headsQ(), len, 64));
  args.k = attnc::tensorArg(k.data(), attnc::bhsdStrides(causal.headsKV(), len, 64));
  args.v = attnc::tensorArg(v.data(), attnc::bhsdStrides(causal.headsKV(), len, 64));
  args.o = attnc::outputArg(o.data(), attnc::bhsdStrides(causal.headsQ(), len, 64));
  args.batch = batch, args.q_len = len, args.kv_len = len;
  if (!(status = causal_hd64_forward(args, nullptr)) || !(status = attnc::synchronize()))
    return std::fprintf(stderr, "%s\n", status.message.c_str()), 1;
  std::printf("causal_hd64_forward: ok\n");

  // The document kernel needs its `doc` input: forgetting it is an error value, not a crash.
  status = document_forward(args, nullptr);
  std::printf("document_forward without inputs: %s\n", status.message.c_str());
  return status.ok ? 1 : 0;
}
