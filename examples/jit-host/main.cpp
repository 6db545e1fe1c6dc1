// jit-host: JIT-compiles the spec given on the command line for the current GPU, runs it on random
// data and, for the variants it has a CPU reference for (no mask / causal / window / prefix, softcap,
// ALiBi; no dropout), checks O against a float64 reference. Prints the max error and the time.
// With --prepared it also times the forward with its declared inputs prepared once
// (Kernel::prepareInputs) and checks that its output is the plain forward's, bit for bit.
//   jit-host SPEC.yaml [--batch B] [--seqlen N] [--kv-seqlen M] [--prepared]
#include "attnc/attnc.h"
#include "compiler/Spec/Spec.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t toFp16(float f) {  // normal range only (inputs here are in [-1, 1] and outputs small)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int exponent = int((u >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = u & 0x7fffff;
  if (exponent <= 0) return uint16_t(sign);
  uint32_t h = sign | (uint32_t(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return uint16_t(h);
}
float fromFp16(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0) return sign ? -std::ldexp(float(mantissa), -24) : std::ldexp(float(mantissa), -24);
  uint32_t u = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "jit-host: %s\n", message.c_str());
  return 1;
}

}  // namespace

// What --help prints (stdout, exit 0); the first line also ends the message of a bad call.
const char* kUsage =
    "usage: jit-host SPEC.yaml [--batch B] [--seqlen N] [--kv-seqlen M] [--prepared]\n"
    "\n"
    "JIT-compiles SPEC.yaml for the current GPU, runs its forward on random inputs and, for the\n"
    "variants it has a CPU reference for, checks O against float64. Prints the error and the "
    "time.\n"
    "\n"
    "  --batch B        batch size (default 2)\n"
    "  --seqlen N       query length (default 257)\n"
    "  --kv-seqlen M    key length (default: --seqlen)\n"
    "  --prepared       also time the forward with its declared inputs prepared once\n"
    "  -h, --help       print this and exit\n";

int main(int argc, char** argv) {
  const std::string usage = std::string(kUsage).substr(0, std::string(kUsage).find('\n'));
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  if (argc < 2) return fail(usage);
  std::string specPath = argv[1];
  int64_t batch = 2, qLen = 257, kvLen = 0;
  bool timePrepared = false;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--prepared") {
      timePrepared = true;
      continue;
    }
    if (i + 1 >= argc) return fail("option " + flag + " needs a value; " + usage);
    int64_t value = std::atoll(argv[++i]);
    if (flag == "--batch") batch = value;
    else if (flag == "--seqlen") qLen = value;
    else if (flag == "--kv-seqlen") kvLen = value;
    else
      return fail("unknown option " + flag + "; " + usage);
  }
  if (kvLen == 0) kvLen = qLen;

  attnc::Diagnostics diags;
  std::optional<attnc::Spec> spec = attnc::parseSpecFile(specPath, diags);
  if (!spec) return fail(attnc::renderAll(diags));
  attnc::Status status;
  attnc::Target target = attnc::Target::fromDevice(0, &status);
  if (!status) return fail(status.message);

  attnc::JitCompiler jit;
  auto start = std::chrono::steady_clock::now();
  attnc::Kernel kernel = jit.compile(*spec, target, &status);
  double compileSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status) return fail(status.message);
  std::printf("%s for %s (%s): %d threads, %lld B shared memory; JIT %.3f s (cache %s)\n",
              kernel.name().c_str(), target.name.c_str(), target.description.c_str(), kernel.threads(),
              kernel.smemBytes(), compileSeconds, jit.cacheDirectory().c_str());

  const int64_t hq = spec->headsQ, hkv = spec->headsKV, d = spec->headDim, dv = spec->headDimV;
  bool bf16 = spec->dtype == attnc::DType::BF16;
  auto encode = [&](float f) { return bf16 ? toBf16(f) : toFp16(f); };
  auto decode = [&](uint16_t h) { return bf16 ? fromBf16(h) : fromFp16(h); };
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto randomTensor = [&](int64_t count) {
    std::vector<uint16_t> t(static_cast<size_t>(count));
    for (auto& x : t) x = encode(uniform(rng));
    return t;
  };
  // BSHD, as most frameworks store it.
  std::vector<uint16_t> q = randomTensor(batch * qLen * hq * d), k = randomTensor(batch * kvLen * hkv * d),
                        v = randomTensor(batch * kvLen * hkv * dv),
                        o(size_t(batch * qLen * hq * dv), bf16 ? 0x7fc0 : 0x7e00);  // NaN: poisoned
  std::vector<float> lse(size_t(batch * hq * qLen));

  // Declared inputs: positions get document ids of 64-token documents, other dims ALiBi-like slopes.
  std::vector<attnc::DeviceBuffer> inputBuffers;
  attnc::ForwardArgs args;
  for (const attnc::InputDecl& input : spec->inputs) {
    int64_t extent[3] = {1, 1, 1}, stride[3] = {0, 0, 0};
    for (attnc::InputDim dim : input.dims)
      extent[int(dim)] = dim == attnc::InputDim::B ? batch : dim == attnc::InputDim::H ? hq : std::max(qLen, kvLen);
    int64_t count = extent[0] * extent[1] * extent[2];
    stride[2] = 1, stride[1] = extent[2], stride[0] = extent[1] * extent[2];
    std::vector<int32_t> values(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      if (input.type == attnc::ScalarType::I32) values[size_t(i)] = int32_t((i % extent[2]) / 64);
      else { float f = std::exp2(-8.f * float(i % extent[1] + 1) / float(hq)); std::memcpy(&values[size_t(i)], &f, 4); }
    }
    attnc::DeviceBuffer buffer = attnc::DeviceBuffer::allocate(size_t(count) * 4, &status);
    if (!status || !(status = buffer.upload(values.data(), size_t(count) * 4))) return fail(status.message);
    args.inputs.push_back({buffer.data(), stride[0], stride[1], stride[2]});
    inputBuffers.push_back(std::move(buffer));
  }
  auto upload = [&](const std::vector<uint16_t>& host, attnc::DeviceBuffer& buffer) {
    buffer = attnc::DeviceBuffer::allocate(host.size() * 2, &status);
    if (status) status = buffer.upload(host.data(), host.size() * 2);
    return status.ok;
  };
  attnc::DeviceBuffer qd, kd, vd, od, lsed;
  if (!upload(q, qd) || !upload(k, kd) || !upload(v, vd) || !upload(o, od)) return fail(status.message);
  lsed = attnc::DeviceBuffer::allocate(lse.size() * 4, &status);
  if (!status) return fail(status.message);

  args.q = attnc::tensorArg(qd.data(), attnc::bshdStrides(hq, qLen, d));
  args.k = attnc::tensorArg(kd.data(), attnc::bshdStrides(hkv, kvLen, d));
  args.v = attnc::tensorArg(vd.data(), attnc::bshdStrides(hkv, kvLen, dv));
  args.o = attnc::outputArg(od.data(), attnc::bshdStrides(hq, qLen, dv));
  args.lse = static_cast<float*>(lsed.data());
  args.batch = batch, args.q_len = qLen, args.kv_len = kvLen;
  args.dropout_seed = 42;

  if (!(status = kernel.forward(args, nullptr)) || !(status = attnc::synchronize())) return fail(status.message);
  const int iterations = 20;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i)
    if (!(status = kernel.forward(args, nullptr))) return fail(status.message);
  if (!(status = attnc::synchronize())) return fail(status.message);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iterations;
  if (!(status = od.download(o.data(), o.size() * 2))) return fail(status.message);
  std::printf("forward: batch %lld, q_len %lld, kv_len %lld: %.3f ms\n", (long long)batch, (long long)qLen,
              (long long)kvLen, ms);
  if (timePrepared) {
    // The declared inputs' work (summaries, tile classes) made once, then forwards without it.
    attnc::PreparedInputs prepared;
    if (!(status = kernel.prepareInputs(args, nullptr, &prepared))) return fail(status.message);
    attnc::ForwardArgs withPrepared = args;
    withPrepared.prepared = &prepared;
    std::vector<uint16_t> plain = o;
    if (!(status = od.upload(std::vector<uint16_t>(o.size(), bf16 ? 0x7fc0 : 0x7e00).data(), o.size() * 2)))
      return fail(status.message);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      if (!(status = kernel.forward(withPrepared, nullptr))) return fail(status.message);
    if (!(status = attnc::synchronize())) return fail(status.message);
    double preparedMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iterations;
    if (!(status = od.download(o.data(), o.size() * 2))) return fail(status.message);
    bool same = std::memcmp(o.data(), plain.data(), o.size() * 2) == 0;
    std::printf("forward with prepared inputs (%zu bytes): %.3f ms; output %s\n", prepared.bytes(), preparedMs,
                same ? "bit-identical to the plain forward's" : "DIFFERS from the plain forward's");
    if (!same) return 1;
  }
  // FLOPs = 4 B Hq Sq Skv D times the fraction of (q, k) pairs the mask keeps.
  auto reportRate = [&](double keptFraction, const char* note) {
    double flops = 4.0 * double(batch) * double(hq) * double(qLen) * double(kvLen) * double(std::max(d, dv)) *
                   keptFraction;
    std::printf("%.1f TFLOP/s (%.1f%% of (q, k) pairs kept%s)\n", flops / (ms * 1e-3) / 1e12,
                100.0 * keptFraction, note);
  };

  using MK = attnc::MaskSpec;
  using SK = attnc::ScoreSpec;
  bool referenced = spec->dropout == 0 && spec->mask.kind != MK::Document && spec->mask.kind != MK::Expr &&
                    spec->score.kind != SK::Expr && spec->score.alibiSlopes.empty();
  if (!referenced) {
    std::printf("no CPU reference for this variant (expression/document mask or score, input slopes, "
                "dropout): timing only\n");
    reportRate(1.0, "; counted as unmasked");
    return 0;
  }
  std::vector<double> slopes = attnc::standardAlibiSlopes(hq);
  double scale = spec->effectiveScale(), maxError = 0;
  int64_t keptPairs = 0;
  std::vector<double> s(static_cast<size_t>(kvLen));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      int64_t hk = h / (hq / hkv);
      for (int64_t i = 0; i < qLen; ++i) {
        int64_t qa = spec->mask.topLeft ? i : i + kvLen - qLen;  // q'
        double rowMax = -INFINITY;
        for (int64_t j = 0; j < kvLen; ++j) {
          bool keep = true;
          switch (spec->mask.kind) {
            case MK::Causal: keep = j <= qa; break;
            case MK::Window: keep = j <= qa && qa - spec->mask.window < j; break;
            case MK::Prefix: keep = j < spec->mask.prefix || j <= qa; break;
            default: break;
          }
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(decode(q[size_t(((b * qLen + i) * hq + h) * d + c)])) *
                   double(decode(k[size_t(((b * kvLen + j) * hkv + hk) * d + c)]));
          double score = scale * dot;
          if (spec->score.kind == SK::Softcap) score = spec->score.softcap * std::tanh(score / spec->score.softcap);
          if (spec->score.kind == SK::Alibi) score -= slopes[size_t(h)] * std::abs(double(qa - j));
          s[size_t(j)] = keep ? score : -INFINITY;
          keptPairs += keep && b == 0 && h == 0 ? 1 : 0;
          rowMax = std::max(rowMax, s[size_t(j)]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = rowMax == -INFINITY ? 0 : std::exp(x - rowMax));
        for (int64_t c = 0; c < dv; ++c) {
          double out = 0;
          for (int64_t j = 0; j < kvLen; ++j)
            out += s[size_t(j)] * double(decode(v[size_t(((b * kvLen + j) * hkv + hk) * dv + c)]));
          out = sum > 0 ? out / sum : 0;
          double got = decode(o[size_t(((b * qLen + i) * hq + h) * dv + c)]);
          maxError = std::max(maxError, std::isnan(got) ? INFINITY : std::abs(got - out));
        }
      }
    }
  double tolerance = bf16 ? 2e-2 : 4e-3;
  std::printf("max |O - reference| = %.3g (tolerance %.1g): %s\n", maxError, tolerance,
              maxError <= tolerance ? "PASS" : "FAIL");
  reportRate(double(keptPairs) / double(qLen * kvLen), "");
  return maxError <= tolerance ? 0 : 1;
}
