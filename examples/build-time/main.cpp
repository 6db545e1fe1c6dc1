// Runs two kernels compiled at build time (causal_hd64.h, document.h and build_time_quoted.h come
// from attnc_add_kernels): the app links attnc::runtime only, no LLVM and no NVRTC.
#include "build_time_quoted.h"
#include "causal_hd64.h"
#include "document.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main() {
  // What BACKWARD and a quoted `name:` give (compiled and linked; run by the forward below only).
  (void)&causal_hd64_backward;
  (void)&build_time_quoted_forward;
  const int64_t batch = 1, len = 200, d = 64;
  attnc::Status status;
  const attnc::Kernel& causal = causal_hd64_kernel(&status);
  if (!status) return std::fprintf(stderr, "%s\n", status.message.c_str()), 1;
  std::printf("%s: targets", causal.name().c_str());
  for (const std::string& t : causal.targets()) std::printf(" %s", t.c_str());
  std::printf(", %d heads, head dim %d\n", causal.headsQ(), causal.headDim());
  const int64_t hq = causal.headsQ(), hkv = causal.headsKV();

  // Random inputs (BHSD) and an output poisoned with NaN, so unwritten elements cannot pass.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto randomTensor = [&](int64_t heads) {
    std::vector<uint16_t> t(size_t(batch * heads * len * d));
    for (uint16_t& x : t) x = toBf16(uniform(rng));
    return t;
  };
  std::vector<uint16_t> qh = randomTensor(hq), kh = randomTensor(hkv), vh = randomTensor(hkv);
  std::vector<uint16_t> oh(qh.size(), 0x7fc0);
  auto upload = [&](const std::vector<uint16_t>& host) {
    attnc::DeviceBuffer buffer = attnc::DeviceBuffer::allocate(host.size() * 2, &status);
    if (status) status = buffer.upload(host.data(), host.size() * 2);
    return buffer;
  };
  attnc::DeviceBuffer q = upload(qh);
  if (!status) return std::fprintf(stderr, "no GPU: %s\n", status.message.c_str()), 0;
  attnc::DeviceBuffer k = upload(kh), v = upload(vh), o = upload(oh);
  if (!status) return std::fprintf(stderr, "%s\n", status.message.c_str()), 1;

  attnc::ForwardArgs args;
  args.q = attnc::tensorArg(q.data(), attnc::bhsdStrides(hq, len, d));
  args.k = attnc::tensorArg(k.data(), attnc::bhsdStrides(hkv, len, d));
  args.v = attnc::tensorArg(v.data(), attnc::bhsdStrides(hkv, len, d));
  args.o = attnc::outputArg(o.data(), attnc::bhsdStrides(hq, len, d));
  args.batch = batch, args.q_len = len, args.kv_len = len;
  if (!(status = causal_hd64_forward(args, nullptr)) || !(status = attnc::synchronize()) ||
      !(status = o.download(oh.data(), oh.size() * 2)))
    return std::fprintf(stderr, "%s\n", status.message.c_str()), 1;

  // Causal attention in double precision on the host.
  double maxError = 0, scale = 1.0 / std::sqrt(double(d));
  std::vector<double> p(static_cast<size_t>(len));
  for (int64_t h = 0; h < hq; ++h) {
    int64_t hk = h / (hq / hkv);
    for (int64_t i = 0; i < len; ++i) {
      double rowMax = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double(fromBf16(qh[size_t((h * len + i) * d + c)])) * fromBf16(kh[size_t((hk * len + j) * d + c)]);
        p[size_t(j)] = dot * scale;
        rowMax = std::max(rowMax, p[size_t(j)]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - rowMax));
      for (int64_t c = 0; c < d; ++c) {
        double out = 0;
        for (int64_t j = 0; j <= i; ++j) out += p[size_t(j)] * fromBf16(vh[size_t((hk * len + j) * d + c)]);
        double got = fromBf16(oh[size_t((h * len + i) * d + c)]);
        maxError = std::max(maxError, std::isnan(got) ? INFINITY : std::abs(got - out / sum));
      }
    }
  }
  bool pass = maxError <= 2e-2;
  std::printf("causal_hd64_forward: max |O - float64 reference| = %.3g: %s\n", maxError, pass ? "PASS" : "FAIL");

  // The document kernel needs its `doc` input: forgetting it is an error value, not a crash.
  status = document_forward(args, nullptr);
  std::printf("document_forward without inputs: %s\n", status.message.c_str());
  return pass && !status.ok ? 0 : 1;
}
