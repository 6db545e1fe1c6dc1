// attnc::Kernel: argument validation, per-context module loading and the launch of one forward
// kernel through the dlopen-ed driver. The launch ABI is attnc::FwdParams (templates/attnc/common/
// params.h): grid (ceil(q_len / block_q), heads_q, batch), or orderedGrid(q tiles, heads_q x batch)
// for a kernel built for it (forwardGrid, runtime/LaunchGrid.h), block `threads`, dynamic shared memory
// `smemBytes` (opted into above 48 KiB). A kernel whose mask reads declared inputs along positions
// first runs its summary entry (KernelMetadata::summaryEntry, attnc::SummaryParams) on the same
// stream: grid summaryBlocks(entries), block kSummaryThreads, into a buffer per (context, stream).
// The backward (attnc::BwdParams, or BwdParamsTma for the sm_90a dK/dV entries):
//   <stem>_preprocess, <stem>_convert_dq: grid (ceil(q_len / preprocessRows), heads_q, batch),
//     block preprocessThreads, no dynamic shared memory;
//   <stem>_kv, <stem>_kv_nodq: grid (ceil(kv_len / kvBlockKV), heads_kv, batch), or
//     (heads_kv, ceil(kv_len / kvBlockKV), batch) with kvOrderedGrid (backwardKvGrid,
//     runtime/LaunchGrid.h), block kvThreads, kvSmemBytes;
//   <stem>_q: grid (ceil(q_len / qBlockQ), heads_q, batch), block qThreads, qSmemBytes.
// Default: preprocess (zeroes dq_accum, writes delta), kv (dK, dV, atomics into dq_accum),
// convert_dq. Deterministic: preprocess (dq_accum null), kv_nodq, q.
#include "attnc/attnc.h"

#include "attnc/common/block_order.h"
#include "attnc/common/params.h"
#include "attnc/common/tile_classes.h"
#include "runtime/Driver.h"
#include "runtime/KernelAccess.h"
#include "runtime/LaunchGrid.h"
#include "runtime/ModuleSymbols.h"
#include "runtime/Summaries.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace attnc {

namespace {

// Byte counts computed from lengths saturate at SIZE_MAX rather than wrap: a buffer sized from
// them then fails to allocate instead of coming back too small.
size_t saturatingProduct(size_t a, size_t b) {
  size_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? SIZE_MAX : product;
}
size_t saturatingSum(size_t a, size_t b) {
  size_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? SIZE_MAX : sum;
}

// Grows `buffer` to at least `bytes` (never shrinks). Work already enqueued may still use the old
// buffer, so `wait(&error)` (synchronizing whatever uses it) runs before it is freed; on failure
// *waitFailed says whether waiting (true) or allocating failed.
template <class Wait>
Status growBuffer(DeviceBuffer& buffer, size_t bytes, Wait wait, bool* waitFailed) {
  *waitFailed = false;
  if (buffer.size() >= bytes) return Status::success();
  std::string error;
  if (buffer.data() && !wait(&error)) {
    *waitFailed = true;
    return Status::error(error);
  }
  buffer = DeviceBuffer();
  Status status;
  buffer = DeviceBuffer::allocate(bytes, &status);
  return status;
}

}  // namespace

struct Kernel::Impl {
  using Module = ModuleCode;  // a cubin and its PTX
  struct Image {
    KernelMetadata metadata;
    // [0] holds the forward entry (KernelImage, moreModules); the deferred modules are appended
    // once built (a deque: the references cubin(i) and ptx(i) returned stay valid).
    std::deque<Module> modules;
  };
  struct Loaded {
    std::vector<cu::Module> modules;  // Image::modules loaded into one context, in order
    cu::Function function = nullptr;
    cu::Function summary = nullptr;  // the image's summary entry, if it has one
    cu::Function tileClasses = nullptr;  // its tile-classes entry, if it has one
    cu::Function tileOrder = nullptr;    // <tile-classes entry>_order, if it has one
    const Image* image = nullptr;  // the form loaded into this context
    bool usePtx = false;           // loaded from its PTX (else its cubins)
    std::string error;  // why this context cannot run the kernel (kept: the answer will not change)
    // The backward entries (kBackwardSuffixes order), resolved on the first backward launch.
    bool backwardResolved = false;
    cu::Function backward[5] = {};
    cu::Function backwardTileClasses = nullptr;  // <stem>_tile_classes, with tile classes
    // <stem>_q_tile_classes, with tile classes and an sm_90a _q
    cu::Function backwardQTileClasses = nullptr;
    std::string backwardError;
    // The deterministic mode's entries (kv_nodq, q), resolved on its first launch (they may be in
    // a deferred module, loaded into the context then).
    bool deterministicResolved = false;
    std::string deterministicError;
  };

  // The modules the JIT left for first use (Kernel::compileDeferred): built once, under `mutex`,
  // then appended to the first image's modules under Impl::mutex.
  struct Deferred {
    DeferredBuild build;
    std::mutex mutex;
    std::atomic<bool> done{false};  // also read without the mutex (hasDeferred)
    Status status;
  };
  std::unique_ptr<Deferred> deferred;

  std::vector<Image> images;
  std::mutex mutex;
  std::map<cu::Context, Loaded> loaded;
  // The backward workspace used when the caller passes none: one per context, grow-only.
  std::mutex workspaceMutex;
  std::map<cu::Context, DeviceBuffer> workspaces;
  // Block-summary buffers, one per (context, stream), grow-only. Per stream because the summary
  // entry writes them and the attention kernels read them later in the same stream: launches on
  // other streams must not overwrite them in between.
  std::mutex summaryMutex;
  std::map<std::pair<cu::Context, cu::Stream>, DeviceBuffer> summaryBuffers;

  ~Impl() {
    // Errors are ignored: at process exit the driver may be gone before static kernels are.
    std::string error;
    if (const DriverApi* driver = DriverApi::get(&error))
      for (auto& [context, entry] : loaded)
        for (cu::Module module : entry.modules) driver->cuModuleUnload(module);
  }

  // `name` from the loaded module that defines it (ModuleSymbols.h; the first one when none seems
  // to: its error is then the driver's); false with *why.
  bool getFunction(const DriverApi& driver, const Loaded& entry, const std::string& name,
                   cu::Function* fn, std::string* why) const {
    size_t module = 0;
    for (size_t i = 0; i < entry.modules.size(); ++i)
      if (entry.usePtx ? ptxDefines(entry.image->modules[i].ptx, name)
                       : cubinDefines(entry.image->modules[i].cubin, name)) {
        module = i;
        break;
      }
    return driver.check(driver.cuModuleGetFunction(fn, entry.modules[module], name.c_str()),
                        ("cuModuleGetFunction(" + name + ")").c_str(), why);
  }

  // The image to load on a device of compute capability major.minor, and whether to use its PTX:
  // an exact architecture first, then a cubin of the same major and no greater minor, then PTX of
  // a lower architecture (not an arch-specific "a" one: its PTX only runs on that architecture).
  const Image* choose(int major, int minor, bool* usePtx) const {
    const Image* best = nullptr;
    for (const Image& image : images) {
      const KernelMetadata& m = image.metadata;
      if (m.computeMajor == major && m.computeMinor == minor) {
        *usePtx = false;
        return &image;
      }
      bool archSpecific = !m.target.empty() && m.target.back() == 'a';
      if (!archSpecific && m.computeMajor == major && m.computeMinor < minor &&
          (!best || m.computeMinor > best->metadata.computeMinor))
        best = &image;
    }
    if (best) {
      *usePtx = false;
      return best;
    }
    for (const Image& image : images) {
      const KernelMetadata& m = image.metadata;
      bool archSpecific = !m.target.empty() && m.target.back() == 'a';
      bool older = m.computeMajor < major || (m.computeMajor == major && m.computeMinor <= minor);
      bool ptx = true;  // every module's PTX
      for (const Module& module : image.modules) ptx = ptx && !module.ptx.empty();
      if (!archSpecific && older && ptx &&
          (!best || m.computeMajor * 10 + m.computeMinor >
                        best->metadata.computeMajor * 10 + best->metadata.computeMinor))
        best = &image;
    }
    *usePtx = best != nullptr;
    return best;
  }

  std::string describeTargets() const {
    std::string text;
    for (const Image& image : images) {
      if (!text.empty()) text += ", ";
      text += image.metadata.target +
              (image.modules.front().ptx.empty() ? " (cubin)" : " (cubin + PTX)");
    }
    return text;
  }

  // Loads the modules of entry.image that `entry` (one context's) does not hold yet, in order:
  // all of them at first, the deferred ones once built. False with *why at the first that fails.
  // Under `mutex`.
  bool loadModules(const DriverApi& driver, Loaded& entry, std::string* why) const {
    const Image& image = *entry.image;
    for (size_t i = entry.modules.size(); i < image.modules.size(); ++i) {
      const Module& module = image.modules[i];
      const void* code = entry.usePtx ? static_cast<const void*>(module.ptx.c_str())
                                      : static_cast<const void*>(module.cubin.data());
      cu::Module loadedModule = nullptr;
      std::string what =
          std::string(entry.usePtx ? "cuModuleLoadData (PTX" : "cuModuleLoadData (cubin") +
          (image.modules.size() > 1 ? ", module " + std::to_string(i) : "") + ")";
      if (!driver.check(driver.cuModuleLoadData(&loadedModule, code), what.c_str(), why))
        return false;
      entry.modules.push_back(loadedModule);
    }
    return true;
  }

  // Builds the deferred modules (once; concurrent callers wait for the one build) and appends
  // them to the first image. Not under `mutex`, which launches on other threads take meanwhile.
  Status buildDeferred() {
    if (!deferred) return Status::success();
    // Every deterministic launch asks: once built, the status (not written again) without the lock.
    if (deferred->done.load()) return deferred->status;
    std::lock_guard<std::mutex> once(deferred->mutex);
    if (deferred->done) return deferred->status;
    std::vector<ModuleCode> built;
    Status status = deferred->build(&built);
    if (status) {
      std::lock_guard<std::mutex> lock(mutex);
      for (ModuleCode& module : built) images.front().modules.push_back(std::move(module));
    } else {
      status = Status::error("kernel '" + images.front().metadata.name +
                             "': compiling its deferred kernels (the deterministic backward's): " +
                             status.message);
    }
    deferred->status = status;
    deferred->done = true;
    deferred->build = nullptr;  // what it held (the kernel's source) is not needed any more
    return status;
  }

  // Loads the module into `context` (once per context); the function, or null with *error set.
  Loaded* function(const DriverApi& driver, cu::Context context, std::string* error) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, inserted] = loaded.try_emplace(context);
    Loaded& entry = it->second;
    if (!inserted) {
      if (!entry.function) *error = entry.error;
      return entry.function ? &entry : nullptr;
    }
    auto fail = [&](std::string message) -> Loaded* {
      entry.error = "kernel '" + images.front().metadata.name + "': " + message;
      *error = entry.error;
      return nullptr;
    };
    std::string why;
    cu::Device device = 0;
    int major = 0, minor = 0, smemOptin = 0;
    if (!driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice", &why) ||
        !driver.check(driver.cuDeviceGetAttribute(&major, cu::kComputeCapabilityMajor, device),
                      "cuDeviceGetAttribute", &why) ||
        !driver.check(driver.cuDeviceGetAttribute(&minor, cu::kComputeCapabilityMinor, device),
                      "cuDeviceGetAttribute", &why) ||
        !driver.check(driver.cuDeviceGetAttribute(&smemOptin, cu::kMaxSharedMemoryPerBlockOptin,
                                                  device),
                      "cuDeviceGetAttribute", &why))
      return fail(why);
    bool usePtx = false;
    const Image* image = choose(major, minor, &usePtx);
    std::string cc = std::to_string(major) + "." + std::to_string(minor);
    if (!image)
      return fail("the current device has compute capability " + cc +
                  ", which none of the kernel's targets runs on: expected a device for " +
                  describeTargets() + " (sm_90a needs exactly 9.0; sm_8x cubins run on 8.x with "
                  "the same or a higher minor; PTX of sm_8x also on newer GPUs)");
    if (image->metadata.smemBytes > smemOptin)
      return fail("needs " + std::to_string(image->metadata.smemBytes) +
                  " bytes of shared memory per block, the device (cc " + cc + ") allows " +
                  std::to_string(smemOptin));
    entry.image = image;
    entry.usePtx = usePtx;
    if (!loadModules(driver, entry, &why)) {
      for (cu::Module done : entry.modules) driver.cuModuleUnload(done);
      entry.modules.clear();
      entry.image = nullptr;
      return fail(why);
    }
    cu::Function fn = nullptr;
    if (!getFunction(driver, entry, image->metadata.entry, &fn, &why) ||
        !driver.check(driver.cuFuncSetAttribute(fn, cu::kMaxDynamicSharedSizeBytes,
                                                int(image->metadata.smemBytes)),
                      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", &why))
      return fail(why);
    const std::string& tileClassesEntry = image->metadata.tileClassesEntry;
    if (!tileClassesEntry.empty()) {
      if (!getFunction(driver, entry, tileClassesEntry, &entry.tileClasses, &why)) return fail(why);
      std::string none;  // optional: images built before the entry existed keep the plain order
      if (!getFunction(driver, entry, tileClassesEntry + "_order", &entry.tileOrder, &none))
        entry.tileOrder = nullptr;
    }
    const std::string& summaryEntry = image->metadata.summaryEntry;
    if (!summaryEntry.empty() && !getFunction(driver, entry, summaryEntry, &entry.summary, &why))
      return fail(why);
    entry.function = fn;
    return &entry;
  }

  // Launches the summary entry on `stream` for the summarized inputs of `inputs` (as the kernels
  // will see them) and points their InputRef::summary at the result. The returned lock keeps the
  // stream's buffer until the caller has enqueued the kernels that read it. Nothing to do (and
  // no lock) when the loaded image summarizes no input. `extraBytes` more of the same buffer, after
  // the summaries, are the caller's at *extra (the forward's tile classes); null without summaries.
  // With `own` (PreparedInputs), the summaries and the extra bytes go into that buffer, which
  // must be empty (no lock).
  Status summarize(const DriverApi& driver, cu::Context context, const Loaded& entry,
                   InputRef* inputs, int batch, int q_len, int kv_len, cu::Stream stream,
                   std::unique_lock<std::mutex>* lock, size_t extraBytes = 0,
                   char** extra = nullptr, DeviceBuffer* own = nullptr) {
    const KernelMetadata& m = entry.image->metadata;
    SummaryPlan plan = planSummaries(m, inputs, batch, q_len, kv_len);
    if (extra) *extra = nullptr;
    if (!entry.summary || plan.totalBytes == 0) return Status::success();
    if (!own) *lock = std::unique_lock<std::mutex>(summaryMutex);
    DeviceBuffer& buffer = own ? *own : summaryBuffers[{context, stream}];
    bool waitFailed = false;
    Status grown = growBuffer(
        buffer, saturatingSum(plan.totalBytes, extraBytes),
        [&](std::string* error) {
          return driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize", error);
        },
        &waitFailed);
    if (!grown)
      return Status::error(
          "kernel '" + m.name + "': " +
          (waitFailed ? "growing the summary buffer: "
                      : "allocating " + std::to_string(saturatingSum(plan.totalBytes, extraBytes)) +
                            " bytes of input summaries: ") +
          grown.message);
    if (extra && extraBytes > 0) *extra = static_cast<char*>(buffer.data()) + plan.totalBytes;
    std::string error;
    SummaryParams p{};
    p.batch = batch;
    p.heads_q = m.headsQ;
    p.q_len = q_len;
    p.kv_len = kv_len;
    for (int i = 0; i < kMaxInputs; ++i) {
      if (plan.used[i]) inputs[i].summary = static_cast<char*>(buffer.data()) + plan.offset[i];
      p.inputs[i] = inputs[i];
    }
    void* params[] = {&p};
    if (!driver.check(driver.cuLaunchKernel(entry.summary, summaryBlocks(plan.mostEntries), 1, 1,
                                            kSummaryThreads, 1, 1, 0, stream, params, nullptr),
                      ("cuLaunchKernel(" + m.summaryEntry + ")").c_str(), &error))
      return Status::error("kernel '" + m.name + "': " + error);
    return Status::success();
  }

  static constexpr const char* kBackwardSuffixes[5] = {"_preprocess", "_kv", "_kv_nodq",
                                                       "_convert_dq", "_q"};

  // The module in `context` with its backward entries resolved, or null with *error set.
  Loaded* backwardFunctions(const DriverApi& driver, cu::Context context, std::string* error) {
    Loaded* entry = function(driver, context, error);
    if (!entry) return nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    if (entry->backwardResolved) {
      if (!entry->backwardError.empty()) *error = entry->backwardError;
      return entry->backwardError.empty() ? entry : nullptr;
    }
    entry->backwardResolved = true;
    auto fail = [&](std::string message) -> Loaded* {
      entry->backwardError = "kernel '" + images.front().metadata.name + "': " + message;
      *error = entry->backwardError;
      return nullptr;
    };
    const KernelMetadata& m = entry->image->metadata;
    if (!m.backward)
      return fail("the form loaded for this device (" + m.target +
                  ") was compiled without backward kernels: compile with backward enabled");
    const BackwardMetadata& b = *m.backward;
    std::string why;
    // With a separate dQ the unit has no _kv (EmitCUDA.cpp); its _kv_nodq and _q are not deferred.
    static constexpr int kWithAccum[] = {0, 1, 3, -1}, kSeparate[] = {0, 2, 3, 4};
    for (int i : b.separateDq ? kSeparate : kWithAccum)
      if (i >= 0 && !resolveBackward(driver, *entry, i, &why)) return fail(why);
    if (!m.tileClassesEntry.empty()) {
      const std::string name = b.entryStem + "_tile_classes";
      if (!getFunction(driver, *entry, name, &entry->backwardTileClasses, &why)) return fail(why);
      if (b.qKernel == "sm90" &&
          !getFunction(driver, *entry, b.entryStem + "_q_tile_classes",
                       &entry->backwardQTileClasses, &why))
        return fail(why);
    }
    return entry;
  }

  // backwardFunctions() and the deterministic mode's entries, after building the deferred modules
  // that hold them where the JIT deferred them (the first image's) and loading those here.
  Loaded* deterministicFunctions(const DriverApi& driver, cu::Context context, std::string* error) {
    Loaded* entry = backwardFunctions(driver, context, error);
    if (!entry) return nullptr;
    if (entry->image == &images.front())
      if (Status built = buildDeferred(); !built) {
        *error = built.message;
        return nullptr;
      }
    std::lock_guard<std::mutex> lock(mutex);
    if (entry->deterministicResolved) {
      if (!entry->deterministicError.empty()) *error = entry->deterministicError;
      return entry->deterministicError.empty() ? entry : nullptr;
    }
    entry->deterministicResolved = true;
    std::string why;
    if (!loadModules(driver, *entry, &why) || !resolveBackward(driver, *entry, 2, &why) ||
        !resolveBackward(driver, *entry, 4, &why)) {
      entry->deterministicError = "kernel '" + images.front().metadata.name + "': " + why;
      *error = entry->deterministicError;
      return nullptr;
    }
    return entry;
  }

  // Backward entry `which` (kBackwardSuffixes) into entry.backward, with its shared memory opted
  // into. Under `mutex`.
  bool resolveBackward(const DriverApi& driver, Loaded& entry, int which, std::string* why) const {
    const BackwardMetadata& b = *entry.image->metadata.backward;
    const std::string name = b.entryStem + kBackwardSuffixes[which];
    cu::Function fn = nullptr;
    if (!getFunction(driver, entry, name, &fn, why)) return false;
    const long long smem =
        (which == 1 || which == 2) ? b.kvSmemBytes : which == 4 ? b.qSmemBytes : 0;
    if (smem > 0 &&
        !driver.check(driver.cuFuncSetAttribute(fn, cu::kMaxDynamicSharedSizeBytes, int(smem)),
                      ("cuFuncSetAttribute(" + name + ", MAX_DYNAMIC_SHARED_SIZE_BYTES=" +
                       std::to_string(smem) + ")").c_str(),
                      why))
      return false;
    entry.backward[which] = fn;
    return true;
  }
};

namespace {

std::string hexAddress(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// The grids put batch and heads along y and z, which take at most 65535 blocks.
constexpr int64_t kMaxGridYZ = 65535;
// The longest q_len and kv_len a launch takes: the templates add tile sizes and position offsets
// to positions in 32-bit ints (q0 + block, (q_len + 63) / 64 * 64, q + kv_len - q_len), and 2^30
// leaves room for every such sum.
constexpr int64_t kMaxLength = int64_t(1) << 30;
// Bytes of an element of Q, K, V, O, dO, dQ, dK and dV (bf16 and fp16).
constexpr int64_t kTensorElementBytes = 2;
// Bytes of an element of the LSE (f32) and of a declared input (i32 or f32).
constexpr int64_t kWordBytes = 4;

// The bytes a tensor spans: rows (b, h, s) of `row` contiguous bytes, row (i, j, k) at `base` +
// i stride[0] + j stride[1] + k stride[2] (bytes) for indices below `extent`; `end` is one past
// the offset of its last byte.
struct Footprint {
  std::string name;
  const char* strideNames[3] = {"stride_b", "stride_h", "stride_s"};
  int64_t elementBytes = kTensorElementBytes;
  uintptr_t base = 0;
  int64_t stride[3] = {}, extent[3] = {1, 1, 1};
  int64_t row = 0, end = 0;
};

// One dimension of a lattice of rows: its stride in bytes and how many rows it spans.
struct LatticeDim {
  __int128 stride, extent;
};

// Whether the rows of `dims` (each `row` bytes) are pairwise disjoint because their dimensions
// nest: ordered by stride, each stride is at least the span of the rows below it (the rows of
// the smaller strides, from the first byte to one past the last). This is the rule for written
// tensors; it is sufficient, and cheap, though a layout whose dimensions interleave without
// sharing bytes fails it. -1 if they nest, else the position in `dims` of the first dimension
// that breaks it; *needed is then the stride it would need.
int firstNonNestingDim(const LatticeDim* dims, int count, __int128 row, __int128* needed) {
  int order[4];
  int used = 0;
  for (int i = 0; i < count; ++i)
    if (dims[i].extent > 1) order[used++] = i;
  // (stable: of two equal strides, the one later in b, h, s order is the one named)
  std::stable_sort(order, order + used,
                   [&](int a, int b) { return dims[a].stride < dims[b].stride; });
  __int128 span = row;
  for (int i = 0; i < used; ++i) {
    const LatticeDim& d = dims[order[i]];
    if (d.stride < span) {
      *needed = span;
      return order[i];
    }
    span += d.stride * (d.extent - 1);
  }
  return -1;
}

// Whether two footprints share no byte: their byte ranges are apart, or (a packed layout: dQ, dK
// and dV in one [b, s, 3, h, d] buffer) they have the same strides over every dimension either
// spans and, with the distance between their bases as one more dimension of extent 2, the
// combined lattice of rows of the longer row nests.
bool disjoint(const Footprint& a, const Footprint& b) {
  const Footprint& low = a.base <= b.base ? a : b;
  const Footprint& high = a.base <= b.base ? b : a;
  const uintptr_t distance = high.base - low.base;
  if (distance >= uint64_t(low.end)) return true;
  LatticeDim dims[4];
  int count = 0;
  for (int d = 0; d < 3; ++d) {
    if (a.extent[d] > 1 && b.extent[d] > 1 && a.stride[d] != b.stride[d]) return false;
    dims[count++] = {a.extent[d] > 1 ? a.stride[d] : b.stride[d],
                     std::max(a.extent[d], b.extent[d])};
  }
  dims[count++] = {__int128(distance), 2};
  __int128 needed = 0;
  return firstNonNestingDim(dims, count, std::max(a.row, b.row), &needed) < 0;
}

// Collects the first problem with a launch's arguments.
struct Checker {
  Status status;
  std::string prefix = "ForwardArgs.";

  bool fail(const std::string& argument, const std::string& expected, const std::string& given) {
    if (status.ok) status = Status::error(prefix + argument + ": expected " + expected + ", got " + given);
    return false;
  }
  void pointer(const std::string& argument, const void* p, unsigned alignment) {
    if (!p) {
      fail(argument, "a device pointer", "null");
    } else if (reinterpret_cast<uintptr_t>(p) % alignment) {
      fail(argument, std::to_string(alignment) + "-byte alignment",
           hexAddress(p) + " (address % " + std::to_string(alignment) + " = " +
               std::to_string(reinterpret_cast<uintptr_t>(p) % alignment) + ")");
    }
  }
  void length(const std::string& argument, int64_t value, int64_t most) {
    if (value < 1 || value > most)
      fail(argument, "a value in [1, " + std::to_string(most) + "]", std::to_string(value));
  }
  // Tensor strides: multiples of 8 elements (16-byte vector loads); O's also positive (rows never
  // overlap), inputs' at least 0.
  void stride(const std::string& argument, int64_t value, bool positive, bool multipleOf8) {
    if (positive ? value <= 0 : value < 0)
      fail(argument, positive ? "a positive stride" : "a non-negative stride", std::to_string(value));
    else if (multipleOf8 && value % 8 != 0)
      fail(argument, "a multiple of 8 elements", std::to_string(value));
  }
  template <class T>
  void tensor(const std::string& name, const T& t, bool output) {
    pointer(name + ".data", t.data, 16);
    stride(name + ".stride_b", t.stride_b, output, true);
    stride(name + ".stride_h", t.stride_h, output, true);
    stride(name + ".stride_s", t.stride_s, output, true);
  }
  // One InputArg per declared input, in the spec's order.
  void inputs(const KernelMetadata& m, const std::vector<InputArg>& given) {
    if (given.size() != m.inputs.size()) {
      std::string names;
      for (const InputInfo& input : m.inputs) names += (names.empty() ? "" : ", ") + input.name;
      fail("inputs", std::to_string(m.inputs.size()) + " input(s)" +
                         (names.empty() ? "" : " (" + names + ")"),
           std::to_string(given.size()));
      return;
    }
    for (size_t i = 0; i < given.size(); ++i) {
      const InputArg& in = given[i];
      std::string name = inputName(m, i);
      pointer(name + ".data", in.data, 4);
      if (inputHas(m, i, "b")) stride(name + ".stride_b", in.stride_b, false, false);
      if (inputHas(m, i, "h")) stride(name + ".stride_h", in.stride_h, false, false);
      if (inputHas(m, i, "pos")) stride(name + ".stride_pos", in.stride_pos, false, false);
    }
  }
  static std::string inputName(const KernelMetadata& m, size_t i) {
    return "inputs[" + std::to_string(i) + "] (" + m.inputs[i].name + ")";
  }
  static bool inputHas(const KernelMetadata& m, size_t i, const char* dim) {
    return ("," + m.inputs[i].dims + ",").find(std::string(",") + dim + ",") != std::string::npos;
  }

  // *out: the footprint of `rowElements` elements of `elementBytes` at `data` with element
  // strides `strides` over `extents`, or false (and why) where its last byte's offset passes
  // INT64_MAX or its last byte the end of the address space.
  bool span(Footprint* out, const std::string& name, const void* data, const int64_t (&strides)[3],
            const int64_t (&extents)[3], int64_t rowElements, int64_t elementBytes) {
    out->name = name;
    out->elementBytes = elementBytes;
    out->base = reinterpret_cast<uintptr_t>(data);
    out->row = rowElements * elementBytes;
    int64_t last = 0;
    for (int d = 0; d < 3; ++d) {
      out->extent[d] = extents[d];
      if (extents[d] == 1) continue;  // its stride is never used
      int64_t bytes = 0, reach = 0;
      if (__builtin_mul_overflow(strides[d], elementBytes, &bytes) ||
          __builtin_mul_overflow(bytes, extents[d] - 1, &reach) ||
          __builtin_add_overflow(last, reach, &last))
        return fail(name + "." + out->strideNames[d],
                    "a stride that keeps the tensor's last byte within 2^63 bytes of its start "
                    "(" + std::to_string(extents[d]) + " along it, " +
                        std::to_string(elementBytes) + "-byte elements)",
                    std::to_string(strides[d]));
      out->stride[d] = bytes;
    }
    uintptr_t endAddress = 0;
    if (__builtin_add_overflow(last, out->row, &out->end) ||
        __builtin_add_overflow(out->base, uint64_t(out->end), &endAddress))
      return fail(name + ".data", "a tensor that ends inside the address space",
                  hexAddress(data) + " + " + std::to_string(last) + " + " +
                      std::to_string(out->row) + " bytes");
    return true;
  }
  // A Q, K, V, O, dO, dQ, dK or dV tensor of [batch, heads, len, dim] elements.
  template <class T>
  bool tensorSpan(Footprint* out, const std::string& name, const T& t, int64_t batch,
                  int64_t heads, int64_t len, int64_t dim) {
    return span(out, name, t.data, {t.stride_b, t.stride_h, t.stride_s}, {batch, heads, len}, dim,
                kTensorElementBytes);
  }
  // The LSE: [batch, heads_q, q_len] f32, contiguous.
  bool lseSpan(Footprint* out, const std::string& name, const void* lse, int64_t batch,
               int64_t heads, int64_t len) {
    if (__int128(batch) * heads * len * kWordBytes > INT64_MAX)
      return fail(name, "batch x heads_q x q_len x 4 bytes within 2^63 bytes",
                  std::to_string(batch) + " x " + std::to_string(heads) + " x " +
                      std::to_string(len) + " x 4");
    return span(out, name, lse, {heads * len, len, 1}, {batch, heads, len}, 1, kWordBytes);
  }
  // The declared inputs: 4-byte elements indexed by b (batch), h (heads_q) and pos (the longer
  // length, expr::input_extents); dimensions an input lacks span one element.
  bool inputSpans(std::vector<Footprint>* out, const KernelMetadata& m,
                  const std::vector<InputArg>& inputs, int64_t batch, int64_t q_len,
                  int64_t kv_len) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputArg& in = inputs[i];
      const bool b = inputHas(m, i, "b"), h = inputHas(m, i, "h"), pos = inputHas(m, i, "pos");
      Footprint f;
      f.strideNames[2] = "stride_pos";
      if (!span(&f, inputName(m, i), in.data,
                {b ? in.stride_b : 0, h ? in.stride_h : 0, pos ? in.stride_pos : 0},
                {b ? batch : 1, h ? int64_t(m.headsQ) : 1, pos ? std::max(q_len, kv_len) : 1}, 1,
                kWordBytes))
        return false;
      out->push_back(f);
    }
    return true;
  }
  // Each written footprint's rows nest (no row overlaps another), and no written footprint shares
  // a byte with any other footprint, read or written. Read ones may overlap each other (Q == K).
  void noOverlaps(const std::vector<Footprint>& written, const std::vector<Footprint>& read) {
    for (const Footprint& w : written) {
      LatticeDim dims[3];
      for (int d = 0; d < 3; ++d) dims[d] = {w.stride[d], w.extent[d]};
      __int128 needed = 0;
      if (int d = firstNonNestingDim(dims, 3, w.row, &needed); d >= 0)
        return void(fail(
            w.name + "." + w.strideNames[d],
            "a stride of at least " + std::to_string(int64_t(needed / w.elementBytes)) +
                " elements (the rows of a written tensor must not overlap: ordered by stride, "
                "each stride covers the rows of the smaller ones)",
            std::to_string(w.stride[d] / w.elementBytes)));
    }
    auto range = [](const Footprint& f) {
      return f.name + " at [" + hexAddress(reinterpret_cast<const void*>(f.base)) + ", +" +
             std::to_string(f.end) + ")";
    };
    for (size_t i = 0; i < written.size(); ++i) {
      const Footprint& w = written[i];
      for (size_t j = i + 1; j < written.size(); ++j)
        if (!disjoint(w, written[j]))
          return void(fail(w.name, "no byte in common with " + written[j].name,
                           range(w) + " and " + range(written[j])));
      for (const Footprint& r : read)
        if (!disjoint(w, r))
          return void(fail(w.name, "no byte in common with " + r.name,
                           range(w) + " and " + range(r)));
    }
  }
};

size_t align256(size_t bytes) {
  return bytes > SIZE_MAX - 255 ? SIZE_MAX : (bytes + 255) / 256 * 256;
}

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

}  // namespace

SummaryPlan planSummaries(const KernelMetadata& m, const InputRef* inputs, int batch, int q_len,
                          int kv_len) {
  SummaryPlan plan;
  const int positions = q_len > kv_len ? q_len : kv_len;
  for (size_t i = 0; i < m.inputs.size() && i < size_t(kMaxInputs); ++i) {
    if (!m.inputs[i].summarized) continue;
    const i64 entries = summaryLayout(inputs[i], batch, m.headsQ, positions).entries();
    plan.used[i] = true;
    plan.offset[i] = plan.totalBytes;
    plan.totalBytes =
        saturatingSum(plan.totalBytes,
                      align256(saturatingProduct(size_t(entries), sizeof(SummaryEntry))));
    if (entries > plan.mostEntries) plan.mostEntries = entries;
  }
  return plan;
}

namespace {

// The current context, or device 0's primary context made current (as the CUDA runtime does).
cu::Context currentContext(const DriverApi& driver, std::string* error) {
  cu::Context context = nullptr;
  if (!driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent", error)) return nullptr;
  if (context) return context;
  cu::Device device = 0;
  if (!driver.check(driver.cuDeviceGet(&device, 0), "cuDeviceGet(0)", error) ||
      !driver.check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain",
                    error) ||
      !driver.check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent", error)) {
    *error = "no current CUDA context and none could be made: " + *error;
    return nullptr;
  }
  return context;
}

// The driver, with a current context in *context; null, and why in *error, if either is missing.
const DriverApi* driverInContext(cu::Context* context, std::string* error) {
  const DriverApi* driver = DriverApi::get(error);
  if (!driver) return nullptr;
  *context = currentContext(*driver, error);
  return *context ? driver : nullptr;
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  std::string error;
  if (pointer_)
    if (const DriverApi* driver = DriverApi::get(&error)) driver->cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(other.pointer_), size_(other.size_) {
  other.pointer_ = 0;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    pointer_ = other.pointer_;
    size_ = other.size_;
    other.pointer_ = 0;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer DeviceBuffer::allocate(size_t bytes, Status* status) {
  std::string error;
  DeviceBuffer buffer;
  cu::Context context = nullptr;
  const DriverApi* driver = driverInContext(&context, &error);
  if (driver &&
      driver->check(driver->cuMemAlloc(&buffer.pointer_, bytes ? bytes : 1), "cuMemAlloc", &error)) {
    buffer.size_ = bytes;
    if (status) *status = Status::success();
    return buffer;
  }
  if (status) *status = Status::error("DeviceBuffer::allocate(" + std::to_string(bytes) + "): " + error);
  return DeviceBuffer();
}

Status DeviceBuffer::upload(const void* host, size_t bytes) {
  std::string error;
  if (bytes > size_)
    return Status::error("DeviceBuffer::upload: expected at most " + std::to_string(size_) +
                         " bytes, got " + std::to_string(bytes));
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver || !driver->check(driver->cuMemcpyHtoD(pointer_, host, bytes), "cuMemcpyHtoD", &error))
    return Status::error("DeviceBuffer::upload: " + error);
  return Status::success();
}

Status DeviceBuffer::download(void* host, size_t bytes) const {
  std::string error;
  if (bytes > size_)
    return Status::error("DeviceBuffer::download: expected at most " + std::to_string(size_) +
                         " bytes, got " + std::to_string(bytes));
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver || !driver->check(driver->cuMemcpyDtoH(host, pointer_, bytes), "cuMemcpyDtoH", &error))
    return Status::error("DeviceBuffer::download: " + error);
  return Status::success();
}

Status synchronize() {
  std::string error;
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver || !driver->check(driver->cuCtxSynchronize(), "cuCtxSynchronize", &error))
    return Status::error("synchronize: " + error);
  return Status::success();
}

Kernel::Kernel() = default;
Kernel::~Kernel() = default;
Kernel::Kernel(const Kernel&) = default;
Kernel& Kernel::operator=(const Kernel&) = default;
Kernel::Kernel(Kernel&&) noexcept = default;
Kernel& Kernel::operator=(Kernel&&) noexcept = default;

Kernel Kernel::fromCubin(const KernelMetadata& metadata, const void* cubin, size_t size,
                         Status* status) {
  return fromImages({KernelImage{metadata, cubin, size, nullptr}}, status);
}

Kernel Kernel::fromImages(const std::vector<KernelImage>& images, Status* status) {
  auto fail = [&](std::string message) {
    if (status) *status = Status::error("Kernel::fromImages: " + message);
    return Kernel();
  };
  if (images.empty()) return fail("expected at least one image, got none");
  auto impl = std::make_shared<Impl>();
  for (size_t i = 0; i < images.size(); ++i) {
    const KernelImage& image = images[i];
    const KernelMetadata& m = image.metadata;
    std::string which = "image " + std::to_string(i) + " (" + m.target + ")";
    // The image's modules: its own cubin and PTX, then moreModules; each must be a cubin.
    std::vector<KernelImage::Module> modules = {{image.cubin, image.cubinSize, image.ptx}};
    modules.insert(modules.end(), image.moreModules.begin(), image.moreModules.end());
    for (size_t j = 0; j < modules.size(); ++j) {
      const KernelImage::Module& module = modules[j];
      if (!module.cubin || module.cubinSize < 4 || std::memcmp(module.cubin, "\x7f" "ELF", 4) != 0)
        return fail(which + (j > 0 ? ", module " + std::to_string(j) : "") +
                    ": expected a cubin (an ELF image), got " +
                    (module.cubin ? std::to_string(module.cubinSize) + " bytes of something else"
                                  : "null"));
    }
    if (m.entry.empty() || m.threads <= 0 || m.blockQ <= 0 || m.headsQ <= 0 || m.headsKV <= 0 ||
        m.computeMajor <= 0 || !(m.scale > 0))
      return fail(which + ": incomplete metadata (entry, threads, block_q, heads, compute "
                          "capability and scale are required)");
    if (int(m.inputs.size()) > kMaxInputs)
      return fail(which + ": expected at most " + std::to_string(kMaxInputs) + " inputs, got " +
                  std::to_string(m.inputs.size()));
    if (i > 0) {
      const KernelMetadata& first = images.front().metadata;
      if (m.name != first.name || m.headDim != first.headDim || m.headDimV != first.headDimV ||
          m.headsQ != first.headsQ || m.headsKV != first.headsKV || m.dtype != first.dtype ||
          m.inputs.size() != first.inputs.size())
        return fail(which + ": expected the same spec as image 0 ('" + first.name + "'), got '" +
                    m.name + "' with other shapes");
    }
    Impl::Image copy;
    copy.metadata = m;
    for (const KernelImage::Module& module : modules) {
      const char* cubin = static_cast<const char*>(module.cubin);
      copy.modules.push_back({std::vector<char>(cubin, cubin + module.cubinSize),
                              module.ptx ? module.ptx : ""});
    }
    impl->images.push_back(std::move(copy));
  }
  Kernel kernel;
  kernel.impl_ = std::move(impl);
  if (status) *status = Status::success();
  return kernel;
}

const KernelMetadata& Kernel::metadata() const {
  static const KernelMetadata empty;
  return impl_ ? impl_->images.front().metadata : empty;
}

std::vector<std::string> Kernel::targets() const {
  std::vector<std::string> names;
  if (impl_)
    for (const auto& image : impl_->images) names.push_back(image.metadata.target);
  return names;
}

std::vector<std::string> Kernel::inputNames() const {
  std::vector<std::string> names;
  for (const InputInfo& input : metadata().inputs) names.push_back(input.name);
  return names;
}

const std::vector<char>& Kernel::cubin() const { return cubin(0); }

const std::string& Kernel::ptx() const { return ptx(0); }

const std::string& Kernel::ptx(size_t module) const {
  static const std::string empty;
  if (!impl_) return empty;
  std::lock_guard<std::mutex> lock(impl_->mutex);  // deferred modules may be appended meanwhile
  const auto& modules = impl_->images.front().modules;
  return module < modules.size() ? modules[module].ptx : empty;
}

size_t Kernel::moduleCount() const {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->images.front().modules.size();
}

const std::vector<char>& Kernel::cubin(size_t module) const {
  static const std::vector<char> empty;
  if (!impl_) return empty;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const auto& modules = impl_->images.front().modules;
  return module < modules.size() ? modules[module].cubin : empty;
}

Status Kernel::compileDeferred() const {
  return impl_ ? impl_->buildDeferred() : Status::success();
}

bool Kernel::hasDeferred() const {
  return impl_ && impl_->deferred && !impl_->deferred->done.load();
}

void KernelAccess::setDeferred(Kernel& kernel, DeferredBuild build) {
  if (!kernel.impl_ || !build) return;
  kernel.impl_->deferred = std::make_unique<Kernel::Impl::Deferred>();
  kernel.impl_->deferred->build = std::move(build);
}

namespace {
template <class Args>
Status checkPrepared(const PreparedInputs::Impl* prepared, const Kernel::Impl* kernel,
                     const Args& args, const std::string& what);
}  // namespace

Status Kernel::validate(const ForwardArgs& args) const {
  if (!impl_) return Status::error("Kernel: empty kernel (its creation failed)");
  const KernelMetadata& m = metadata();
  Checker check;
  check.tensor("q", args.q, false);
  check.tensor("k", args.k, false);
  check.tensor("v", args.v, false);
  check.tensor("o", args.o, true);
  if (args.lse) check.pointer("lse", args.lse, 4);
  check.length("batch", args.batch, kMaxGridYZ);
  check.length("q_len", args.q_len, kMaxLength);
  check.length("kv_len", args.kv_len, kMaxLength);
  if (m.headsQ > kMaxGridYZ)
    check.fail("(kernel) heads_q", "at most 65535 (the grid's y dimension)", std::to_string(m.headsQ));
  check.inputs(m, args.inputs);
  // What the launch writes (O, the LSE) shares no byte with anything else it reads or writes.
  if (check.status.ok) {
    Footprint q, k, v, o, lse;
    std::vector<Footprint> inputs, read, written;
    if (check.tensorSpan(&q, "q", args.q, args.batch, m.headsQ, args.q_len, m.headDim) &&
        check.tensorSpan(&k, "k", args.k, args.batch, m.headsKV, args.kv_len, m.headDim) &&
        check.tensorSpan(&v, "v", args.v, args.batch, m.headsKV, args.kv_len, m.headDimV) &&
        check.tensorSpan(&o, "o", args.o, args.batch, m.headsQ, args.q_len, m.headDimV) &&
        (!args.lse || check.lseSpan(&lse, "lse", args.lse, args.batch, m.headsQ, args.q_len)) &&
        check.inputSpans(&inputs, m, args.inputs, args.batch, args.q_len, args.kv_len)) {
      read = {q, k, v};
      read.insert(read.end(), inputs.begin(), inputs.end());
      written.push_back(o);
      if (args.lse) written.push_back(lse);
      check.noOverlaps(written, read);
    }
  }
  if (check.status.ok && args.prepared)
    return checkPrepared(args.prepared->impl_.get(), impl_.get(), args, "ForwardArgs.prepared: ");
  return check.status;
}

namespace {

template <class Tensor>
void setStrides(const Tensor& t, i64& b, i64& h, i64& s) {
  b = t.stride_b, h = t.stride_h, s = t.stride_s;
}

// The launch fields FwdParams and BwdParams share (the same names in both, so the mask and
// score hooks read them alike): q, k, v, o and the LSE, sizes, scale, dropout and the declared
// inputs.
template <class Params, class Args>
void setSharedFields(Params& p, const KernelMetadata& m, const Args& args) {
  p.q = args.q.data;
  p.k = args.k.data;
  p.v = args.v.data;
  p.o = args.o.data;
  p.lse = args.lse;
  setStrides(args.q, p.q_stride_b, p.q_stride_h, p.q_stride_s);
  setStrides(args.k, p.k_stride_b, p.k_stride_h, p.k_stride_s);
  setStrides(args.v, p.v_stride_b, p.v_stride_h, p.v_stride_s);
  setStrides(args.o, p.o_stride_b, p.o_stride_h, p.o_stride_s);
  p.batch = int(args.batch);
  p.heads_q = m.headsQ;
  p.heads_kv = m.headsKV;
  p.q_len = int(args.q_len);
  p.kv_len = int(args.kv_len);
  p.scale = m.scale;
  p.dropout_p = m.dropout;
  p.dropout_seed = args.dropout_seed;
  p.dropout_offset = args.dropout_offset;
  dropoutKeySchedule(args.dropout_seed, args.dropout_offset, p.dropout_keys);
  // Strides of dimensions an input does not have are never used for loads (its index there is
  // 0) but would size its summaries (summaryLayout): they are 0 here whatever the caller passed.
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const InputArg& in = args.inputs[i];
    const std::string dims = "," + m.inputs[i].dims + ",";
    auto has = [&](const char* dim) { return dims.find(std::string(",") + dim + ",") != std::string::npos; };
    p.inputs[i] = {in.data, has("b") ? in.stride_b : 0, has("h") ? in.stride_h : 0,
                   has("pos") ? in.stride_pos : 0, nullptr};
  }
}

// One tile-classes entry's launch (tile_classes.h) and where its output goes: `rows` rows of
// first/last live tile and of `words` class words, which `bounds`, `classWords` and `wordCount`
// (fields of the launch's parameters) are pointed at; with `groupWords` > 0 (the sm_90a forward)
// rows of that many words of its consumer warpgroups' classes follow, at *groups; with `order`, an
// int a row after them (the forward's q tile order).
struct TileClassOutput {
  cu::Function entry = nullptr;
  // The entry's name (for errors): `name` then `suffix`.
  const std::string* name = nullptr;
  const char* suffix = "";
  i64 rows = 0;
  int words = 0;
  const int** bounds = nullptr;
  const u32** classWords = nullptr;
  int* wordCount = nullptr;
  int groupWords = 0;
  const u32** groups = nullptr;
  int* groupWordCount = nullptr;
  const int** order = nullptr;

  size_t boundsBytes() const { return align256(saturatingProduct(size_t(rows), 2 * sizeof(int))); }
  size_t wordsBytes() const { return align256(rowBytes(size_t(words) * sizeof(u32))); }
  size_t groupBytes() const { return align256(rowBytes(size_t(groupWords) * sizeof(u32))); }
  size_t orderBytes() const { return order ? align256(rowBytes(sizeof(int))) : 0; }
  size_t bytes() const {
    return saturatingSum(saturatingSum(boundsBytes(), wordsBytes()),
                         saturatingSum(groupBytes(), orderBytes()));
  }
  size_t rowBytes(size_t perRow) const { return saturatingProduct(size_t(rows), perRow); }
};

// The summaries of the declared inputs the mask reads (Impl::summarize: on `stream`, the
// InputRefs pointed at them; *lock held until the kernels using them are enqueued), then each of
// `outputs` whose entry the image has (the others are skipped), after them in the same buffer,
// each entry launched on `stream` with p once p points at all of them. A kernel whose unit has
// such an entry reads them instead of classifying tiles itself, so they are not optional.
template <class Params>
Status summarizeAndClassify(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                            const Kernel::Impl::Loaded& loaded, Params& p,
                            std::initializer_list<TileClassOutput> outputs, cu::Stream stream,
                            std::unique_lock<std::mutex>* lock, DeviceBuffer* own = nullptr) {
  size_t bytes = 0;
  bool any = false;
  for (const TileClassOutput& o : outputs)
    if (o.entry) bytes = saturatingSum(bytes, o.bytes()), any = true;
  char* buffer = nullptr;
  if (Status status = impl.summarize(driver, context, loaded, p.inputs, p.batch, p.q_len, p.kv_len,
                                     stream, lock, bytes, &buffer, own);
      !status)
    return status;
  if (!any) return Status::success();
  const std::string& kernel = loaded.image->metadata.name;
  if (!buffer)
    return Status::error("kernel '" + kernel + "': its tile classes need the input summaries, and "
                         "the launch made none");
  for (const TileClassOutput& o : outputs) {
    if (!o.entry) continue;
    *o.bounds = reinterpret_cast<const int*>(buffer);
    *o.classWords = reinterpret_cast<const u32*>(buffer + o.boundsBytes());
    *o.wordCount = o.words;
    if (o.groupWords > 0) {
      *o.groups = reinterpret_cast<const u32*>(buffer + o.boundsBytes() + o.wordsBytes());
      *o.groupWordCount = o.groupWords;
    }
    if (o.order)
      *o.order = reinterpret_cast<const int*>(buffer + o.boundsBytes() + o.wordsBytes() +
                                              o.groupBytes());
    buffer += o.bytes();
  }
  for (const TileClassOutput& o : outputs) {
    if (!o.entry) continue;
    void* params[] = {&p};
    std::string error;
    if (!driver.check(driver.cuLaunchKernel(o.entry, tileClassBlocks(o.rows), 1, 1,
                                            kTileClassThreads, 1, 1, 0, stream, params, nullptr),
                      ("cuLaunchKernel(" + *o.name + o.suffix + ")").c_str(), &error))
      return Status::error("kernel '" + kernel + "': " + error);
  }
  return Status::success();
}

// The 4-D tensor map (head dim, sequence, head, batch) of one operand of the sm_90a forward kernel
// (templates/attnc/sm90/forward.h): boxes of 64 head-dim elements (128 bytes, 128-byte swizzle) by
// `rows` positions; elements past the tensor's edges read as zeros. TMA needs a 16-byte aligned
// base and strides that are multiples of 16 bytes; the stride of a dimension of size 1 is never
// used, so a valid stand-in replaces it.
Status encodeTensorMap(const DriverApi& driver, TensorMap& map, const std::string& where,
                       const TensorArg& t, const KernelMetadata& m, int64_t dim, int64_t batch,
                       int64_t heads, int64_t len, unsigned rows) {
  const int64_t e = 2;  // bf16 and fp16
  int64_t strides[3] = {t.stride_s, t.stride_h, t.stride_b};
  const int64_t sizes[3] = {len, heads, batch};
  int64_t fallback = dim;
  for (int i = 0; i < 3; ++i) {
    if (sizes[i] == 1) strides[i] = fallback;
    fallback = strides[i] * sizes[i];
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return Status::error(where + ".data: the sm_90a kernel reads through TMA, which needs a 16-byte "
                         "aligned address");
  static const char* kStrideNames[3] = {"stride_s", "stride_h", "stride_b"};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 1 && (strides[i] * e) % 16 != 0)
      return Status::error(where + "." + kStrideNames[i] + ": the sm_90a kernel reads through TMA, "
                           "which needs strides that are multiples of 8 elements (16 bytes), got " +
                           std::to_string(strides[i]));
  if (!driver.cuTensorMapEncodeTiled)
    return Status::error("kernel '" + m.name + "': the sm_90a kernel needs cuTensorMapEncodeTiled "
                         "(a CUDA 12 or newer driver)");
  const unsigned long long globalDim[4] = {
      static_cast<unsigned long long>(dim), static_cast<unsigned long long>(len),
      static_cast<unsigned long long>(heads), static_cast<unsigned long long>(batch)};
  const unsigned long long globalStrides[3] = {static_cast<unsigned long long>(strides[0] * e),
                                               static_cast<unsigned long long>(strides[1] * e),
                                               static_cast<unsigned long long>(strides[2] * e)};
  const unsigned box[4] = {64, rows, 1, 1};
  const unsigned elementStrides[4] = {1, 1, 1, 1};
  std::string error;
  if (!driver.check(driver.cuTensorMapEncodeTiled(
                        &map, m.dtype == "bf16" ? cu::kTensorMapBfloat16 : cu::kTensorMapFloat16, 4,
                        const_cast<void*>(t.data), globalDim, globalStrides, box, elementStrides,
                        cu::kTensorMapNoInterleave, cu::kTensorMapSwizzle128,
                        cu::kTensorMapL2Promote256, cu::kTensorMapZeroFill),
                    "cuTensorMapEncodeTiled", &error))
    return Status::error(where + ": " + error);
  return Status::success();
}

// The tensor maps of Q (boxes of 64 rows), K and V (boxes of kvRows rows) that the sm_90a kernels
// read through; `what` names the argument struct in errors.
template <class Args>
Status encodeQKVMaps(const DriverApi& driver, const std::string& what, const Args& args,
                     const KernelMetadata& m, unsigned kvRows, TensorMap& q, TensorMap& k,
                     TensorMap& v) {
  Status status = encodeTensorMap(driver, q, what + ".q", args.q, m, m.headDim, args.batch,
                                  m.headsQ, args.q_len, 64);
  if (status)
    status = encodeTensorMap(driver, k, what + ".k", args.k, m, m.headDim, args.batch, m.headsKV,
                             args.kv_len, kvRows);
  if (status)
    status = encodeTensorMap(driver, v, what + ".v", args.v, m, m.headDimV, args.batch, m.headsKV,
                             args.kv_len, kvRows);
  return status;
}

}  // namespace

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

PreparedInputs::PreparedInputs() = default;
PreparedInputs::~PreparedInputs() = default;
PreparedInputs::PreparedInputs(const PreparedInputs&) = default;
PreparedInputs& PreparedInputs::operator=(const PreparedInputs&) = default;
size_t PreparedInputs::bytes() const {
  return impl_ ? impl_->buffer.size() + impl_->backwardBuffer.size() : 0;
}

namespace {

// The heads the tile-class rows of a loaded image have (templates/attnc/common/kv_tiles.h
// tileClassHeads): heads_q, or 1 where its mask ignores the head.
int tileClassHeads(const KernelMetadata& image) {
  return image.maskIgnoresHead ? 1 : image.headsQ;
}

// The forward's launches before the attention kernel, for masks that read declared inputs: the
// inputs' summaries, the tile classes and (sm_90a) the q tiles' order, on `stream`, with p's
// fields pointed at their output. Into the Kernel's per-stream buffer (*summaryLock held until
// the attention kernel is enqueued), or with `own` into that buffer (PreparedInputs).
Status launchInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                       const Kernel::Impl::Loaded& loaded, const KernelMetadata& m, FwdParams& p,
                       cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                       DeviceBuffer* own) {
  const KernelMetadata& tiles = loaded.image->metadata;
  const bool orderTiles = loaded.tileOrder && tiles.forwardKernel == "sm90" &&
                          ceilDiv(p.q_len, tiles.blockQ) <= kTileOrderMaxTiles;
  // Tile classes: rows (b, h, q tile) of kv tiles, 2 bits a tile; for the sm_90a kernel also
  // 8 bits a tile of its consumer warpgroups' classes.
  const int heads = tileClassHeads(tiles);
  TileClassOutput classes;
  classes.entry = loaded.tileClasses;
  classes.name = &tiles.tileClassesEntry;
  classes.rows = tileClassRows(p.batch, heads, p.q_len, tiles.blockQ);
  classes.words = tileClassWords(p.kv_len, tiles.blockKV);
  classes.bounds = &p.kv_tile_bounds;
  classes.classWords = &p.kv_tile_classes;
  classes.wordCount = &p.kv_class_words;
  if (tiles.forwardKernel == "sm90") {
    classes.groupWords = tileGroupWords(p.kv_len, tiles.blockKV);
    classes.groups = &p.kv_group_classes;
    classes.groupWordCount = &p.kv_group_words;
  }
  if (orderTiles) classes.order = &p.q_tile_order;
  if (Status status = summarizeAndClassify(impl, driver, context, loaded, p, {classes}, stream,
                                           summaryLock, own);
      !status)
    return status;
  // The q tiles of each (b, h) longest kv range first, after the classes (tile_classes.h
  // writeTileOrder; docs/templates.md).
  if (orderTiles) {  // (tileOrder is looked up only beside tileClasses)
    void* orderParams[] = {&p};
    const unsigned blocks = unsigned(std::min<long long>((long long)p.batch * heads, 65535));
    std::string error;
    if (!driver.check(driver.cuLaunchKernel(loaded.tileOrder, blocks, 1, 1, kTileClassThreads, 1,
                                            1, 0, stream, orderParams, nullptr),
                      "cuLaunchKernel(tile order)", &error))
      return Status::error("kernel '" + m.name + "': " + error);
  }
  return Status::success();
}

// The backward's launches before its kernels, for masks that read declared inputs: the
// summaries and the dK/dV kernel's tile classes, rows (b, h, kv tile of kvBlockKV) of q tiles, the
// words a row sized for q tiles of 16 rows, the least any dK/dV kernel uses (its own q block is
// not in the metadata); with `dqKernel` (a launch that runs the sm_90a dQ kernel) also that
// kernel's, rows (b, h, q tile of qBlockQ) of kv tiles of qBlockKV. As launchInputWork, into the
// Kernel's per-stream buffer or `own`.
Status launchBackwardInputWork(Kernel::Impl& impl, const DriverApi& driver, cu::Context context,
                               const Kernel::Impl::Loaded& loaded, BwdParams& p, bool dqKernel,
                               cu::Stream stream, std::unique_lock<std::mutex>* summaryLock,
                               DeviceBuffer* own) {
  const KernelMetadata& image = loaded.image->metadata;
  const BackwardMetadata& b = *image.backward;
  const int heads = tileClassHeads(image);
  TileClassOutput kv;
  kv.entry = loaded.backwardTileClasses;
  kv.name = &b.entryStem;
  kv.suffix = "_tile_classes";
  kv.rows = tileClassRows(p.batch, heads, p.kv_len, b.kvBlockKV);
  kv.words = tileClassWords(p.q_len, 16);
  kv.bounds = &p.q_tile_bounds;
  kv.classWords = &p.q_tile_classes;
  kv.wordCount = &p.q_class_words;
  TileClassOutput q;
  if (dqKernel && b.qKernel == "sm90") {
    q.entry = loaded.backwardQTileClasses;
    q.name = &b.entryStem;
    q.suffix = "_q_tile_classes";
    q.rows = tileClassRows(p.batch, heads, p.q_len, b.qBlockQ);
    q.words = tileClassWords(p.kv_len, b.qBlockKV);
    q.bounds = &p.kv_tile_bounds;
    q.classWords = &p.kv_tile_classes;
    q.wordCount = &p.kv_class_words;
  }
  return summarizeAndClassify(impl, driver, context, loaded, p, {kv, q}, stream, summaryLock, own);
}

// The fields of a launch's parameters that its input work sets (launchInputWork,
// launchBackwardInputWork), from `from` into `to`.
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

// p's input-work fields from a preparation (`made`: its parameters), if it was made in `context`.
template <class Params>
Status usePrepared(const PreparedInputs::Impl& prepared, const Params& made, cu::Context context,
                   const std::string& what, Params& p) {
  if (prepared.context != context)
    return Status::error(what + "made in another CUDA context than the current one");
  copyInputWork(made, p);
  return Status::success();
}

// The driver, the current context and the kernel's modules loaded there (the forward's entries).
struct InContext {
  const DriverApi* driver = nullptr;
  cu::Context context = nullptr;
  const Kernel::Impl::Loaded* loaded = nullptr;
};
// They, or why not (`who` starts a driver error).
Status loadedInContext(Kernel::Impl& impl, const char* who, InContext* at) {
  std::string error;
  at->driver = driverInContext(&at->context, &error);
  if (!at->driver) return Status::error(std::string(who) + ": " + error);
  at->loaded = impl.function(*at->driver, at->context, &error);
  return at->loaded ? Status::success() : Status::error(error);
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

}  // namespace

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

Status Kernel::forward(const ForwardArgs& args, void* stream) const {
  if (Status status = validate(args); !status) return status;
  const KernelMetadata& m = metadata();
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
  if (tiles.forwardKernel == "sm90") {
    withMaps.base = p;
    Status status = encodeQKVMaps(*driver, "ForwardArgs", args, m, unsigned(tiles.blockKV),
                                  withMaps.tma_q, withMaps.tma_k, withMaps.tma_v);
    if (!status) return status;
    params[0] = &withMaps;
  }
  if (!driver->check(driver->cuLaunchKernel(loaded->function, grid.x, grid.y, grid.z,
                                            unsigned(tiles.threads), 1, 1,
                                            unsigned(tiles.smemBytes), static_cast<cu::Stream>(stream),
                                            params, nullptr),
                     "cuLaunchKernel", &error))
    return Status::error("kernel '" + m.name + "': " + error);
  return Status::success();
}

// Whether every compiled form's backward runs without dq_accum (BackwardMetadata::separateDq), so
// that the default mode's workspace needs none either (a form the device may load otherwise does).
bool everyFormSeparatesDq(const std::vector<Kernel::Impl::Image>& images) {
  for (const auto& image : images)
    if (!image.metadata.backward || !image.metadata.backward->separateDq) return false;
  return !images.empty();
}

size_t Kernel::backwardWorkspaceBytes(int64_t batch, int64_t q_len, bool deterministic) const {
  const bool noAccum = deterministic || (impl_ && everyFormSeparatesDq(impl_->images));
  return workspaceLayout(metadata(), batch, q_len, noAccum).total;
}

Status Kernel::validateBackward(const BackwardArgs& args) const {
  if (!impl_) return Status::error("Kernel: empty kernel (its creation failed)");
  const KernelMetadata& m = metadata();
  if (!m.backward)
    return Status::error("kernel '" + m.name +
                         "': this kernel was compiled without backward kernels: compile with "
                         "backward enabled (JitCompiler::compile(..., withBackward = true), "
                         "attnc_compile_*_ex with ATTNC_COMPILE_BACKWARD)");
  Checker check;
  check.prefix = "BackwardArgs.";
  check.tensor("q", args.q, false);
  check.tensor("k", args.k, false);
  check.tensor("v", args.v, false);
  check.tensor("o", args.o, false);
  check.tensor("d_o", args.d_o, false);
  check.tensor("dq", args.dq, true);
  check.tensor("dk", args.dk, true);
  check.tensor("dv", args.dv, true);
  check.pointer("lse", args.lse, 4);
  check.length("batch", args.batch, kMaxGridYZ);
  check.length("q_len", args.q_len, kMaxLength);
  check.length("kv_len", args.kv_len, kMaxLength);
  if (m.headsQ > kMaxGridYZ)
    check.fail("(kernel) heads_q", "at most 65535 (the grid's y dimension)", std::to_string(m.headsQ));
  check.inputs(m, args.inputs);
  // The workspace the launch uses, the caller's or the kernel's: a size that fits in int64.
  const size_t needed = check.status.ok
                            ? backwardWorkspaceBytes(args.batch, args.q_len, args.deterministic)
                            : 0;
  if (check.status.ok && needed == 0)
    check.fail("q_len", "a backward workspace (fp32 rows of batch x heads_q x q_len) within 2^63 "
                        "bytes", "batch " + std::to_string(args.batch) + ", heads_q " +
                                     std::to_string(m.headsQ) + ", q_len " +
                                     std::to_string(args.q_len));
  if (check.status.ok && args.workspace) {
    check.pointer("workspace", args.workspace, 16);
    if (args.workspace_bytes < needed)
      check.fail("workspace_bytes",
                 "at least " + std::to_string(needed) + " (backwardWorkspaceBytes(" +
                     std::to_string(args.batch) + ", " + std::to_string(args.q_len) + ", " +
                     (args.deterministic ? "true" : "false") + "))",
                 std::to_string(args.workspace_bytes));
  }
  // What the launch writes (dQ, dK, dV, the workspace's first `needed` bytes) shares no byte with
  // anything else it reads or writes.
  if (check.status.ok) {
    Footprint q, k, v, o, d_o, lse, dq, dk, dv, workspace;
    std::vector<Footprint> inputs, read, written;
    const int64_t B = args.batch, Sq = args.q_len, Skv = args.kv_len;
    if (check.tensorSpan(&q, "q", args.q, B, m.headsQ, Sq, m.headDim) &&
        check.tensorSpan(&k, "k", args.k, B, m.headsKV, Skv, m.headDim) &&
        check.tensorSpan(&v, "v", args.v, B, m.headsKV, Skv, m.headDimV) &&
        check.tensorSpan(&o, "o", args.o, B, m.headsQ, Sq, m.headDimV) &&
        check.tensorSpan(&d_o, "d_o", args.d_o, B, m.headsQ, Sq, m.headDimV) &&
        check.lseSpan(&lse, "lse", args.lse, B, m.headsQ, Sq) &&
        check.tensorSpan(&dq, "dq", args.dq, B, m.headsQ, Sq, m.headDim) &&
        check.tensorSpan(&dk, "dk", args.dk, B, m.headsKV, Skv, m.headDim) &&
        check.tensorSpan(&dv, "dv", args.dv, B, m.headsKV, Skv, m.headDimV) &&
        (!args.workspace ||
         check.span(&workspace, "workspace", args.workspace, {0, 0, 0}, {1, 1, 1},
                    int64_t(needed), 1)) &&
        check.inputSpans(&inputs, m, args.inputs, B, Sq, Skv)) {
      read = {q, k, v, o, d_o, lse};
      read.insert(read.end(), inputs.begin(), inputs.end());
      written = {dq, dk, dv};
      if (args.workspace) written.push_back(workspace);
      check.noOverlaps(written, read);
    }
  }
  if (check.status.ok && args.prepared) {
    const PreparedInputs::Impl* prepared = args.prepared->impl_.get();
    if (Status status = checkPrepared(prepared, impl_.get(), args, "BackwardArgs.prepared: ");
        !status)
      return status;
    if (!prepared->backward)
      return Status::error("BackwardArgs.prepared: expected one with the backward's part, got "
                           "one without");
  }
  return check.status;
}

Status Kernel::backward(const BackwardArgs& args, void* stream) const {
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
  if (Status status = backwardKvGrid(m.name, b, m.headsKV, args.batch, args.kv_len, kvGrid); !status)
    return status;
  // (no dq_accum where no form needs one: backwardWorkspaceBytes)
  WorkspaceLayout layout =
      workspaceLayout(m, args.batch, args.q_len, args.deterministic || everyFormSeparatesDq(impl_->images));

  // The caller's workspace, or this kernel's (held for the launches: they are enqueued in order).
  std::unique_lock<std::mutex> workspaceLock;
  char* workspace = static_cast<char*>(args.workspace);
  if (!workspace) {
    workspaceLock = std::unique_lock<std::mutex>(impl_->workspaceMutex);
    DeviceBuffer& buffer = impl_->workspaces[context];
    bool waitFailed = false;
    Status grown = growBuffer(
        buffer, layout.total,
        [&](std::string* why) {
          return driver->check(driver->cuCtxSynchronize(), "cuCtxSynchronize", why);
        },
        &waitFailed);
    if (!grown)
      return Status::error(waitFailed ? "Kernel::backward: growing the workspace: " + grown.message
                                      : "Kernel::backward: allocating a " +
                                            std::to_string(layout.total) + "-byte workspace: " +
                                            grown.message + " (or pass BackwardArgs::workspace)");
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
  if (b.kvKernel == "sm90") {
    if (Status status = withMaps(kvMaps, b.kvBlockKV); !status) return status;
    kvParams[0] = &kvMaps;
  }
  if (separateDq && b.qKernel == "sm90") {
    if (Status status = withMaps(qMaps, b.qBlockKV); !status) return status;
    qParams[0] = &qMaps;
  }
  auto blocks = [](int64_t n, int per) { return unsigned((n + per - 1) / per); };
  auto launch = [&](int which, OrderedGrid grid, int threads, long long smem) {
    std::string what = "cuLaunchKernel(" + b.entryStem + Impl::kBackwardSuffixes[which] + ")";
    return driver->check(driver->cuLaunchKernel(loaded->backward[which], grid.x, grid.y, grid.z,
                                                unsigned(threads), 1, 1,
                                                unsigned(smem), static_cast<cu::Stream>(stream),
                                                which == 1 || which == 2 ? kvParams
                                                : which == 4             ? qParams
                                                                         : params,
                                                nullptr),
                         what.c_str(), &error);
  };
  const OrderedGrid rowGrid{blocks(args.q_len, b.preprocessRows), unsigned(m.headsQ),
                            unsigned(args.batch)};
  bool ok = launch(0, rowGrid, b.preprocessThreads, 0);
  if (ok && !separateDq)
    ok = launch(1, kvGrid, b.kvThreads, b.kvSmemBytes) &&
         launch(3, rowGrid, b.preprocessThreads, 0);
  else if (ok)
    ok = launch(2, kvGrid, b.kvThreads, b.kvSmemBytes) &&
         launch(4, {blocks(args.q_len, b.qBlockQ), unsigned(m.headsQ), unsigned(args.batch)},
                b.qThreads, b.qSmemBytes);
  if (!ok) return Status::error("kernel '" + m.name + "' (backward): " + error);
  return Status::success();
}

namespace {

// block_order.h's orderedGrid of `tiles` tiles (the y dimension) for `pairs` (head, batch) pairs
// (groups along z), or why it does not fit. `who` starts each message ("kernel 'k'"), `tilesWhy`
// says what made the tiles, `pairsName` names the pairs' product, and `gridName` the grid.
Status checkedOrderedGrid(const std::string& who, int64_t tiles, const std::string& tilesWhy,
                          int64_t pairs, const std::string& pairsName, const std::string& gridName,
                          OrderedGrid& grid) {
  if (tiles > kMaxGridYZ)
    return Status::error(who + ": " + tilesWhy + "; " + gridName +
                         " takes at most 65535 (its y dimension)");
  if (pairs > INT32_MAX)
    return Status::error(who + ": " + pairsName + " = " + std::to_string(pairs) + "; " + gridName +
                         " takes at most 2147483647 (head, batch) pairs");
  grid = orderedGrid(int(tiles), int(pairs));
  if (grid.z > kMaxGridYZ)
    return Status::error(who + ": " + pairsName + " = " + std::to_string(pairs) + " makes " +
                         std::to_string(grid.z) + " groups; " + gridName +
                         " takes at most 65535 (its z dimension)");
  return Status::success();
}

}  // namespace

Status backwardKvGrid(const std::string& kernel, const BackwardMetadata& b, int64_t heads_kv,
                      int64_t batch, int64_t kv_len, OrderedGrid& grid) {
  const int64_t kvTiles = (kv_len + b.kvBlockKV - 1) / b.kvBlockKV;
  if (!b.kvOrderedGrid) {
    grid = {unsigned(kvTiles), unsigned(heads_kv), unsigned(batch)};
    return Status::success();
  }
  // The ordered dK/dV grid: the kv tiles along y, groups of (kv head, batch) pairs along z.
  return checkedOrderedGrid("kernel '" + kernel + "' (backward)", kvTiles,
                            "kv_len " + std::to_string(kv_len) + " makes " +
                                std::to_string(kvTiles) + " kv tiles",
                            heads_kv * batch, "heads_kv x batch",
                            "this dK/dV kernel's ordered grid", grid);
}

Status forwardGrid(const KernelMetadata& m, int64_t batch, int64_t q_len, OrderedGrid& grid) {
  const int64_t qTiles = (q_len + m.blockQ - 1) / m.blockQ;
  if (!m.orderedGrid) {
    grid = {unsigned(qTiles), unsigned(m.headsQ), unsigned(batch)};
    return Status::success();
  }
  // The ordered grid: the q tiles along y, groups of (head, batch) pairs along z.
  return checkedOrderedGrid("kernel '" + m.name + "'", qTiles,
                            "q_len " + std::to_string(q_len) + " makes " + std::to_string(qTiles) +
                                " q tiles of " + std::to_string(m.blockQ) + " rows",
                            int64_t(m.headsQ) * batch, "heads_q x batch",
                            "this kernel's ordered grid", grid);
}

}  // namespace attnc
