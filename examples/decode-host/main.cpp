// decode-host: the decode loop of an inference server around attnc, without a model. It
// JIT-compiles a spec (default: GQA 32/8, head dim 128, bf16, causal), keeps a paged K/V cache (a
// pool of pages handed out from a free list, a block table per sequence) for a batch of sequences
// of different prompt lengths, and runs one decode step per generated token: every sequence
// appends the new token's K/V row to its pages, then one launch attends each sequence's single
// query over all of its keys (ForwardArgs::paged, decode = Auto). Q, K and V are random. Some
// steps check a sampled (sequence, query head) against a float64 reference; at the end it prints
// tokens/s and the fraction of the GPU's measured copy bandwidth the decode steps reached.
#include "attnc/attnc.h"
#include "compiler/Spec/Spec.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace {

using attnc::DeviceBuffer;
using attnc::PagedKVArg;
using attnc::Status;

// What --help prints (stdout, exit 0); its first line also ends the message of a bad call.
const char* kUsage =
    "usage: decode-host [--spec FILE] [--batch B] [--max-prompt P] [--steps N] [--page-size S]\n"
    "                   [--check-every K] [--splits S] [--seed X]\n"
    "\n"
    "Runs a decode loop over a paged K/V cache: B sequences with prompts of 1..P tokens (drawn\n"
    "from seed X) each generate N tokens, one decode step (q_len 1 a sequence) per token, with\n"
    "random Q, K and V. Checks one sampled (sequence, head) against float64 at step 1 and every\n"
    "K-th step, and prints tokens/s and the fraction of the device's copy bandwidth reached.\n"
    "\n"
    "  --spec FILE       spec to compile (default: GQA 32/8, head dim 128, bf16, causal)\n"
    "  --batch B         sequences (default 8)\n"
    "  --max-prompt P    longest prompt, in tokens (default 32768)\n"
    "  --steps N         tokens each sequence generates (default 64)\n"
    "  --page-size S     rows of a cache page, a power of two in [1, 256] (default 16)\n"
    "  --check-every K   check every K-th step against float64; 0: never (default 16)\n"
    "  --splits S        kv splits of the decode kernel; 0: derived (default 0)\n"
    "  --seed X          seed of the lengths and values (default 1)\n"
    "  -h, --help        print this and exit\n";

// Exit codes: a check beyond its tolerance or a failing call, and a bad command line.
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// ForwardArgs::kv_len's limit (docs/runtime.md, "Launch arguments").
constexpr int64_t kMaxKeys = int64_t(1) << 30;

int fail(std::string message) {
  while (!message.empty() && message.back() == '\n') message.pop_back();  // renderAll's last
  std::fprintf(stderr, "decode-host: %s\n", message.c_str());
  return kExitFailure;
}

struct Options {
  std::string specPath;  // empty: the built-in GQA 32/8 spec
  int64_t batch = 8, maxPrompt = 32768, steps = 64, pageSize = 16, checkEvery = 16, splits = 0;
  int64_t seed = 1;
};

// Reads `text` as an integer in [low, high] for `flag`, or says what was expected.
bool parseInteger(const std::string& flag, const char* text, int64_t low, int64_t high,
                  int64_t* out, std::string* error) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < low || value > high) {
    *error = flag + " " + text + ": expected an integer in [" + std::to_string(low) + ", " +
             std::to_string(high) + "]";
    return false;
  }
  *out = value;
  return true;
}

// Fills *options from the command line; false with *error naming the flag otherwise. Needs no GPU.
bool parseOptions(int argc, char** argv, Options* options, std::string* error) {
  struct IntegerFlag {
    const char* name;
    int64_t* field;
    int64_t low, high;
  };
  const IntegerFlag integerFlags[] = {
      {"--batch", &options->batch, 1, 65535},  // ForwardArgs::batch's range
      {"--max-prompt", &options->maxPrompt, 1, kMaxKeys - 1},
      {"--steps", &options->steps, 1, kMaxKeys - 1},
      {"--page-size", &options->pageSize, 1, 256},
      {"--check-every", &options->checkEvery, 0, INT64_MAX},
      {"--splits", &options->splits, 0, 128},  // ForwardArgs::num_splits' range
      {"--seed", &options->seed, 0, INT64_MAX},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag.rfind("-", 0) != 0) {
      *error = "unexpected argument " + flag + " (a spec file is given with --spec FILE)";
      return false;
    }
    if (i + 1 >= argc) {
      *error = "option " + flag + " needs a value";
      return false;
    }
    const char* value = argv[++i];
    if (flag == "--spec") {
      options->specPath = value;
      continue;
    }
    const IntegerFlag* known = nullptr;
    for (const IntegerFlag& candidate : integerFlags)
      if (flag == candidate.name) known = &candidate;
    if (!known) {
      *error = "unknown option " + flag;
      return false;
    }
    if (!parseInteger(flag, value, known->low, known->high, known->field, error)) return false;
  }
  if ((options->pageSize & (options->pageSize - 1)) != 0) {
    *error = "--page-size " + std::to_string(options->pageSize) +
             ": expected a power of two in [1, 256]";
    return false;
  }
  if (options->maxPrompt + options->steps > kMaxKeys) {
    *error = "--max-prompt + --steps = " + std::to_string(options->maxPrompt + options->steps) +
             ": expected at most 2^30 keys a sequence";
    return false;
  }
  return true;
}

// bf16 and fp16 bit patterns from and to float (inputs here are in [-1, 1], outputs small).
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
uint16_t toFp16(float f) {  // normal range only, which [-1, 1] inputs and small outputs stay in
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
  if (exponent == 0) {
    float subnormal = std::ldexp(float(mantissa), -24);
    return sign ? -subnormal : subnormal;
  }
  uint32_t u = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// splitmix64: fast enough for the prompts' hundreds of millions of K/V values, and seeded.
class Random {
public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // In [low, high].
  int64_t integer(int64_t low, int64_t high) {
    return low + int64_t(next() % uint64_t(high - low + 1));
  }
  // In [-1, 1): 24 random bits, exactly representable as a float.
  float uniform() { return float(int64_t(next() >> 40) - (1 << 23)) / float(1 << 23); }

private:
  uint64_t state_;
};

// One sequence of the batch: its pages in order and host copies of its keys and values
// ([length, heads_kv, dim], what the reference reads).
struct Sequence {
  int64_t length = 0;
  std::vector<int32_t> pages;
  std::vector<uint16_t> k, v;
};

// The paged K/V cache: pools of pages of `pageSize` rows ([num_pages, page_size, heads_kv, dim],
// vLLM's and FlashInfer's NHD layout, so a token's row over all heads is one contiguous copy), a
// free list of pages, and the block table and lengths the launch reads, on the host and the
// device. New rows go to a device staging buffer, then each into its page slot.
class PagedKvCache {
public:
  // `capacity`: the keys each sequence will hold at most; the pool has exactly the pages they
  // need, handed out in a shuffled order so that a sequence's pages are scattered through the
  // pool, as in a server that has been running for a while.
  Status create(int64_t batch, const std::vector<int64_t>& capacity, int64_t pageSize,
                int64_t kRowElements, int64_t vRowElements, int64_t stagingRows, Random& rng) {
    pageSize_ = pageSize;
    kRow_ = kRowElements;
    vRow_ = vRowElements;
    sequences_.assign(size_t(batch), Sequence());
    int64_t pages = 0;
    maxPages_ = 1;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t needed = (capacity[size_t(b)] + pageSize - 1) / pageSize;
      pages += needed;
      maxPages_ = std::max(maxPages_, needed);
      sequences_[size_t(b)].k.reserve(size_t(capacity[size_t(b)] * kRow_));
      sequences_[size_t(b)].v.reserve(size_t(capacity[size_t(b)] * vRow_));
    }
    if (pages > INT32_MAX)
      return Status::error(std::to_string(pages) + " pages: expected at most 2^31 - 1 (int32 "
                           "page ids); use fewer or longer pages, or shorter sequences");
    numPages_ = pages;
    freePages_.resize(size_t(pages));
    for (int64_t i = 0; i < pages; ++i) freePages_[size_t(i)] = int32_t(i);
    for (int64_t i = pages - 1; i > 0; --i)  // Fisher-Yates
      std::swap(freePages_[size_t(i)], freePages_[size_t(rng.integer(0, i))]);
    hostBlockTable_.assign(size_t(batch * maxPages_), -1);  // -1: unused, as vLLM pads
    hostSeqLens_.assign(size_t(batch), 0);

    Status status;
    const size_t rowsInPool = size_t(pages * pageSize);
    kPool_ = DeviceBuffer::allocate(rowsInPool * size_t(kRow_) * 2, &status);
    if (status) vPool_ = DeviceBuffer::allocate(rowsInPool * size_t(vRow_) * 2, &status);
    if (status) kStaging_ = DeviceBuffer::allocate(size_t(stagingRows * kRow_) * 2, &status);
    if (status) vStaging_ = DeviceBuffer::allocate(size_t(stagingRows * vRow_) * 2, &status);
    if (status)
      deviceBlockTable_ = DeviceBuffer::allocate(hostBlockTable_.size() * 4, &status);
    if (status) deviceSeqLens_ = DeviceBuffer::allocate(hostSeqLens_.size() * 4, &status);
    return status;
  }

  // Appends `rows` tokens' K and V rows ([rows, heads_kv, dim] each) to sequence b, taking pages
  // from the free list as it crosses into new ones.
  Status append(int64_t b, const uint16_t* k, const uint16_t* v, int64_t rows) {
    Sequence& seq = sequences_[size_t(b)];
    const size_t kRowBytes = size_t(kRow_) * 2, vRowBytes = size_t(vRow_) * 2;
    Status status = kStaging_.upload(k, size_t(rows) * kRowBytes);
    if (status) status = vStaging_.upload(v, size_t(rows) * vRowBytes);
    for (int64_t done = 0; status && done < rows;) {
      const int64_t position = seq.length + done, slot = position % pageSize_;
      if (slot == 0) {
        if (freePages_.empty())
          return Status::error("sequence " + std::to_string(b) + " needs a page at position " +
                               std::to_string(position) + ": the pool's free list is empty");
        hostBlockTable_[size_t(b * maxPages_) + seq.pages.size()] = freePages_.back();
        seq.pages.push_back(freePages_.back());
        freePages_.pop_back();
        tableChanged_ = true;
      }
      const int64_t pageRow = int64_t(seq.pages[size_t(position / pageSize_)]) * pageSize_ + slot;
      const int64_t run = std::min(rows - done, pageSize_ - slot);
      status = kPool_.copyFrom(size_t(pageRow) * kRowBytes, kStaging_, size_t(done) * kRowBytes,
                               size_t(run) * kRowBytes);
      if (status)
        status = vPool_.copyFrom(size_t(pageRow) * vRowBytes, vStaging_,
                                 size_t(done) * vRowBytes, size_t(run) * vRowBytes);
      done += run;
    }
    if (!status) return status;
    seq.k.insert(seq.k.end(), k, k + rows * kRow_);
    seq.v.insert(seq.v.end(), v, v + rows * vRow_);
    seq.length += rows;
    hostSeqLens_[size_t(b)] = int32_t(seq.length);
    return Status::success();
  }

  // Uploads the lengths, and the block table where a sequence took a page since the last call.
  Status publish() {
    Status status = deviceSeqLens_.upload(hostSeqLens_.data(), hostSeqLens_.size() * 4);
    if (status && tableChanged_)
      status = deviceBlockTable_.upload(hostBlockTable_.data(), hostBlockTable_.size() * 4);
    tableChanged_ = !status;
    return status;
  }

  // The launch's description of the cache; the host copies let forward() check every entry.
  PagedKVArg arg() const {
    PagedKVArg paged;
    paged.block_table = static_cast<const int32_t*>(deviceBlockTable_.data());
    paged.seq_lens_kv = static_cast<const int32_t*>(deviceSeqLens_.data());
    paged.block_table_stride = maxPages_;
    paged.max_pages = maxPages_;
    paged.page_size = pageSize_;
    paged.num_pages = numPages_;
    paged.k_stride_page = pageSize_ * kRow_;
    paged.v_stride_page = pageSize_ * vRow_;
    paged.host_block_table = hostBlockTable_.data();
    paged.host_seq_lens_kv = hostSeqLens_.data();
    return paged;
  }
  const void* kPool() const { return kPool_.data(); }
  const void* vPool() const { return vPool_.data(); }
  const Sequence& sequence(int64_t b) const { return sequences_[size_t(b)]; }
  int64_t longest() const {
    int64_t longest = 0;
    for (const Sequence& seq : sequences_) longest = std::max(longest, seq.length);
    return longest;
  }
  int64_t numPages() const { return numPages_; }
  size_t poolBytes() const { return kPool_.size() + vPool_.size(); }

private:
  int64_t pageSize_ = 0, kRow_ = 0, vRow_ = 0, maxPages_ = 0, numPages_ = 0;
  std::vector<Sequence> sequences_;
  std::vector<int32_t> freePages_;
  std::vector<int32_t> hostBlockTable_, hostSeqLens_;  // [batch, maxPages_], [batch]
  bool tableChanged_ = true;
  DeviceBuffer kPool_, vPool_, kStaging_, vStaging_, deviceBlockTable_, deviceSeqLens_;
};

// max |O - reference| over head h's row of sequence `seq` (query `q`, output `o`), in float64;
// nullopt where the spec's mask or score has no reference here (expressions, documents).
std::optional<double> referenceError(const attnc::Spec& spec, const Sequence& seq, int64_t h,
                                     const uint16_t* q, const uint16_t* o) {
  using MK = attnc::MaskSpec;
  using SK = attnc::ScoreSpec;
  if (spec.mask.kind == MK::Document || spec.mask.kind == MK::Expr || spec.score.kind == SK::Expr)
    return std::nullopt;
  const bool bf16 = spec.dtype == attnc::DType::BF16;
  auto value = [&](uint16_t x) { return double(bf16 ? fromBf16(x) : fromFp16(x)); };
  const int64_t d = spec.headDim, dv = spec.headDimV, hkv = spec.headsKV;
  const int64_t hk = h / (spec.headsQ / hkv), kvLen = seq.length;
  const int64_t qa = spec.mask.topLeft ? 0 : kvLen - 1;  // q' of the one query (q_len 1)
  const double slope = spec.score.kind == SK::Alibi
                           ? attnc::standardAlibiSlopes(spec.headsQ)[size_t(h)]
                           : 0.0;
  std::vector<double> p(static_cast<size_t>(kvLen));
  double rowMax = -INFINITY;
  for (int64_t j = 0; j < kvLen; ++j) {
    bool keep = true;
    switch (spec.mask.kind) {
    case MK::Causal: keep = j <= qa; break;
    case MK::Window: keep = j <= qa && qa - spec.mask.window < j; break;
    case MK::Prefix: keep = j < spec.mask.prefix || j <= qa; break;
    default: break;
    }
    double dot = 0;
    const uint16_t* key = &seq.k[size_t((j * hkv + hk) * d)];
    for (int64_t c = 0; c < d; ++c) dot += value(q[c]) * value(key[c]);
    double score = spec.effectiveScale() * dot;
    if (spec.score.kind == SK::Softcap)
      score = spec.score.softcap * std::tanh(score / spec.score.softcap);
    if (spec.score.kind == SK::Alibi) score -= slope * std::abs(double(qa - j));
    p[size_t(j)] = keep ? score : -INFINITY;
    rowMax = std::max(rowMax, p[size_t(j)]);
  }
  double sum = 0;
  for (double& x : p) sum += (x = rowMax == -INFINITY ? 0 : std::exp(x - rowMax));
  double maxError = 0;
  for (int64_t c = 0; c < dv; ++c) {
    double out = 0;
    for (int64_t j = 0; j < kvLen; ++j)
      out += p[size_t(j)] * value(seq.v[size_t((j * hkv + hk) * dv + c)]);
    out = sum > 0 ? out / sum : 0;
    const double got = value(o[c]);
    maxError = std::max(maxError, std::isnan(got) ? INFINITY : std::abs(got - out));
  }
  return maxError;
}

// Device-to-device copy bandwidth (read + write bytes a second): the ceiling the decode's K/V
// reads are measured against.
Status measureCopyBandwidth(double* bytesPerSecond) {
  constexpr size_t kBytes = size_t(1) << 30;  // 1 GiB: far past any L2, so the copy streams DRAM
  constexpr int kRepeats = 5;
  Status status;
  DeviceBuffer source = DeviceBuffer::allocate(kBytes, &status);
  if (!status) return status;
  DeviceBuffer destination = DeviceBuffer::allocate(kBytes, &status);
  if (!status) return status;
  if (!(status = destination.copyFrom(0, source, 0, kBytes)) || !(status = attnc::synchronize()))
    return status;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRepeats && status; ++i) status = destination.copyFrom(0, source, 0, kBytes);
  if (!status || !(status = attnc::synchronize())) return status;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *bytesPerSecond = 2.0 * double(kBytes) * kRepeats / seconds;
  return status;
}

void printPlan(const attnc::Kernel& kernel, const attnc::ForwardArgs& args, const char* when) {
  attnc::DecodePlan plan;
  Status status = kernel.decodePlan(args, 0, &plan);
  if (!status) {
    std::printf("decode plan %s: %s\n", when, status.message.c_str());
    return;
  }
  if (!plan.decode) {
    std::printf("decode plan %s: the forward kernel\n", when);
    return;
  }
  std::printf("decode plan %s (longest kv_len %lld): %d packed rows a block, %d row tile(s), "
              "%d split(s) of %d kv tiles of %d keys, workspace %zu B\n",
              when, (long long)args.kv_len, plan.rows, plan.rowTiles, plan.splits,
              plan.splitTiles, plan.blockKV, plan.workspaceBytes);
}

int run(const Options& options) {
  // The spec, and what this example cannot give it, before any GPU work.
  attnc::Diagnostics diags;
  std::optional<attnc::Spec> spec;
  if (options.specPath.empty())
    spec = attnc::SpecBuilder("gqa_32_8").headDim(128).heads(32, 8).causal().build(diags);
  else
    spec = attnc::parseSpecFile(options.specPath, diags);
  if (!spec) return fail(attnc::renderAll(diags));
  if (!diags.empty()) std::fputs(attnc::renderAll(diags).c_str(), stderr);
  if (!spec->inputs.empty())
    return fail("spec '" + spec->name + "' declares inputs (" + spec->inputs.front().name +
                "); this example passes none: pick a spec without `inputs`");
  if (spec->dropout > 0)
    return fail("spec '" + spec->name + "' has dropout; paged K/V runs the decode kernel, which "
                "has none");

  Status status;
  attnc::Target target = attnc::Target::fromDevice(0, &status);
  if (!status) return fail(status.message);
  attnc::JitCompiler jit;
  auto start = std::chrono::steady_clock::now();
  attnc::Kernel kernel = jit.compile(*spec, target, &status);
  if (!status) return fail(status.message);
  std::printf("%s for %s (%s): JIT %.3f s (cache %s)\n", kernel.name().c_str(),
              target.name.c_str(), target.description.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              jit.cacheDirectory().c_str());

  const int64_t batch = options.batch, hq = spec->headsQ, hkv = spec->headsKV;
  const int64_t d = spec->headDim, dv = spec->headDimV;
  const bool bf16 = spec->dtype == attnc::DType::BF16;
  Random rng(uint64_t(options.seed));
  auto encode = [&](float f) { return bf16 ? toBf16(f) : toFp16(f); };
  auto fillRandom = [&](std::vector<uint16_t>& values) {
    for (uint16_t& x : values) x = encode(rng.uniform());
  };

  // The prompts: lengths in [1, --max-prompt], their K/V written into the cache page by page.
  std::vector<int64_t> prompt(static_cast<size_t>(batch)), capacity(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    prompt[size_t(b)] = rng.integer(1, options.maxPrompt);
    capacity[size_t(b)] = prompt[size_t(b)] + options.steps;
  }
  const int64_t stagingRows = *std::max_element(prompt.begin(), prompt.end());
  PagedKvCache cache;
  if (!(status = cache.create(batch, capacity, options.pageSize, hkv * d, hkv * dv, stagingRows,
                              rng)))
    return fail("allocating the cache: " + status.message);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<uint16_t> k(static_cast<size_t>(prompt[size_t(b)] * hkv * d));
    std::vector<uint16_t> v(static_cast<size_t>(prompt[size_t(b)] * hkv * dv));
    fillRandom(k);
    fillRandom(v);
    if (!(status = cache.append(b, k.data(), v.data(), prompt[size_t(b)])))
      return fail("writing the prompts: " + status.message);
  }
  std::printf("cache: %lld sequences, prompts of %lld..%lld tokens, %lld pages of %lld rows "
              "(%.1f MiB of K and V)\n",
              (long long)batch, (long long)*std::min_element(prompt.begin(), prompt.end()),
              (long long)stagingRows, (long long)cache.numPages(), (long long)options.pageSize,
              double(cache.poolBytes()) / double(1 << 20));

  // One step's Q and O: [batch, 1, heads, dim] (BSHD with q_len 1).
  std::vector<uint16_t> q(static_cast<size_t>(batch * hq * d));
  std::vector<uint16_t> o(static_cast<size_t>(batch * hq * dv), bf16 ? 0x7fc0 : 0x7e00);  // NaN
  std::vector<uint16_t> newK(static_cast<size_t>(hkv * d)), newV(static_cast<size_t>(hkv * dv));
  DeviceBuffer qDevice = DeviceBuffer::allocate(q.size() * 2, &status);
  if (!status) return fail(status.message);
  DeviceBuffer oDevice = DeviceBuffer::allocate(o.size() * 2, &status);
  if (!status || !(status = oDevice.upload(o.data(), o.size() * 2)))  // unwritten rows: NaN
    return fail(status.message);
  DeviceBuffer workspace;

  PagedKVArg paged = cache.arg();
  attnc::ForwardArgs args;
  args.q = attnc::tensorArg(qDevice.data(), attnc::bshdStrides(hq, 1, d));
  args.k = {cache.kPool(), 0, d, hkv * d};  // in a page: rows hkv * d apart, heads d apart
  args.v = {cache.vPool(), 0, dv, hkv * dv};
  args.o = attnc::outputArg(oDevice.data(), attnc::bshdStrides(hq, 1, dv));
  args.batch = batch;
  args.q_len = 1;
  args.paged = &paged;
  args.decode = attnc::DecodeChoice::Auto;
  args.num_splits = int(options.splits);

  // Everything a step does before its launch: new Q, new K/V rows appended, lengths published,
  // and the workspace grown to what this step's split count needs (a caller-owned workspace,
  // as a server capturing CUDA graphs keeps).
  auto prepareStep = [&](bool appendTokens) -> Status {
    Status s;
    fillRandom(q);
    for (int64_t b = 0; appendTokens && b < batch && s; ++b) {
      fillRandom(newK);
      fillRandom(newV);
      s = cache.append(b, newK.data(), newV.data(), 1);
    }
    if (s) s = cache.publish();
    if (s) s = qDevice.upload(q.data(), q.size() * 2);
    if (!s) return s;
    paged = cache.arg();
    args.kv_len = cache.longest();
    const size_t needed = kernel.forwardWorkspaceBytes(args);
    if (needed > workspace.size()) {
      if (!(s = attnc::synchronize())) return s;  // the old one may still be in use
      workspace = DeviceBuffer();
      workspace = DeviceBuffer::allocate(needed, &s);
    }
    args.workspace = workspace.data();
    args.workspace_bytes = workspace.size();
    return s;
  };

  // A first launch over the prompts, untimed: it loads the kernel's modules on the device.
  if (!(status = prepareStep(false))) return fail(status.message);
  printPlan(kernel, args, "at the first step");
  if (!(status = kernel.forward(args, nullptr)) || !(status = attnc::synchronize()))
    return fail("warm-up step: " + status.message);

  const double tolerance = bf16 ? 2e-2 : 4e-3;  // jit-host's: a few ulps of O's dtype
  double decodeSeconds = 0, kvBytes = 0, worstError = 0;
  int checks = 0;
  bool referenceMissingSaid = false;
  const auto loopStart = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= options.steps; ++step) {
    if (!(status = prepareStep(true)) || !(status = attnc::synchronize()))
      return fail("step " + std::to_string(step) + ": " + status.message);
    start = std::chrono::steady_clock::now();
    if (!(status = kernel.forward(args, nullptr)) || !(status = attnc::synchronize()))
      return fail("step " + std::to_string(step) + ": " + status.message);
    decodeSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int64_t b = 0; b < batch; ++b)
      kvBytes += double(cache.sequence(b).length) * double(hkv * (d + dv) * 2);

    if (options.checkEvery == 0 || (step != 1 && step % options.checkEvery != 0)) continue;
    if (!(status = oDevice.download(o.data(), o.size() * 2)))
      return fail("step " + std::to_string(step) + ": " + status.message);
    const int64_t b = rng.integer(0, batch - 1), h = rng.integer(0, hq - 1);
    std::optional<double> error = referenceError(*spec, cache.sequence(b), h,
                                                 &q[size_t((b * hq + h) * d)],
                                                 &o[size_t((b * hq + h) * dv)]);
    if (!error) {
      if (!referenceMissingSaid)
        std::printf("no float64 reference for this spec's mask or score (an expression or "
                    "documents): timing only\n");
      referenceMissingSaid = true;
      continue;
    }
    ++checks;
    worstError = std::max(worstError, *error);
    const bool pass = *error <= tolerance;
    std::printf("step %lld: sequence %lld (kv_len %lld), query head %lld: max |O - reference| = "
                "%.3g (tolerance %.1g): %s\n",
                (long long)step, (long long)b, (long long)cache.sequence(b).length, (long long)h,
                *error, tolerance, pass ? "ok" : "FAIL");
    if (!pass)
      return fail("step " + std::to_string(step) + ": the error is beyond the tolerance");
  }
  const double loopSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loopStart).count();
  printPlan(kernel, args, "at the last step");

  const double tokens = double(batch * options.steps);
  std::printf("decode: %lld steps of %lld sequences, %.4f s in the launches (synchronized): "
              "%.0f tokens/s, %.3f ms a step; %.3f s with the appends and checks\n",
              (long long)options.steps, (long long)batch, decodeSeconds, tokens / decodeSeconds,
              1e3 * decodeSeconds / double(options.steps), loopSeconds);
  if (checks > 0)
    std::printf("checked %d step(s) against float64: worst max |O - reference| = %.3g\n", checks,
                worstError);
  const double kvBytesPerSecond = kvBytes / decodeSeconds;
  double copyBytesPerSecond = 0;
  if (!(status = measureCopyBandwidth(&copyBytesPerSecond))) {
    std::printf("K/V read: %.1f GB/s\n", kvBytesPerSecond / 1e9);
    return fail("measuring the device-to-device copy bandwidth: " + status.message);
  }
  std::printf("K/V read: %.1f GB/s = %.1f%% of the device-to-device copy's %.1f GB/s (1 GiB, "
              "read + write)\n",
              kvBytesPerSecond / 1e9, 100.0 * kvBytesPerSecond / copyBytesPerSecond,
              copyBytesPerSecond / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = std::string(kUsage).substr(0, std::string(kUsage).find('\n'));
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  Options options;
  std::string error;
  if (!parseOptions(argc, argv, &options, &error)) {
    fail(error + "; " + usage);
    return kExitUsage;
  }
  try {
    return run(options);
  } catch (const std::bad_alloc&) {
    return fail("out of host memory for the cache's host copies: try a smaller --batch, "
                "--max-prompt or --steps");
  }
}
