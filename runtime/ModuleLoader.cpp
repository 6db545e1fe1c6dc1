// Kernel::Impl's loading (ModuleLoader.h): the image for the current device, its modules in each
// CUDA context, the forward's and backward's entries, and the modules the JIT deferred.
#include "runtime/ModuleLoader.h"

#include "runtime/ModuleSymbols.h"

#include <cstdlib>
#include <vector>

namespace attnc {

Kernel::Impl::~Impl() {
  // Errors are ignored: at process exit the driver may be gone before static kernels are.
  std::string error;
  if (const DriverApi* driver = DriverApi::get(&error))
    for (auto& [context, entry] : loaded)
      for (cu::Module module : entry.modules) driver->cuModuleUnload(module);
}

bool Kernel::Impl::getFunction(const DriverApi& driver, const Loaded& entry,
                               const std::string& name, cu::Function* fn,
                               std::string* why) const {
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

const Kernel::Impl::Image* Kernel::Impl::choose(int major, int minor, bool* usePtx) const {
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

std::string Kernel::Impl::describeTargets() const {
  std::string text;
  for (const Image& image : images) {
    if (!text.empty()) text += ", ";
    text += image.metadata.target +
            (image.modules.front().ptx.empty() ? " (cubin)" : " (cubin + PTX)");
  }
  return text;
}

bool Kernel::Impl::loadModules(const DriverApi& driver, Loaded& entry,
                               std::string* why) const {
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

Status Kernel::Impl::buildDeferred() {
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

Kernel::Impl::Loaded* Kernel::Impl::function(const DriverApi& driver, cu::Context context,
                                             std::string* error) {
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

Kernel::Impl::Loaded* Kernel::Impl::backwardFunctions(const DriverApi& driver,
                                                      cu::Context context,
                                                      std::string* error) {
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
  using E = BackwardEntry;
  const std::vector<E> entries = b.separateDq
                                     ? std::vector<E>{E::Preprocess, E::KvNoDq, E::ConvertDq, E::Q}
                                     : std::vector<E>{E::Preprocess, E::Kv, E::ConvertDq};
  for (E which : entries)
    if (!resolveBackward(driver, *entry, which, &why)) return fail(why);
  if (!m.tileClassesEntry.empty()) {
    const std::string name = b.entryStem + "_tile_classes";
    if (!getFunction(driver, *entry, name, &entry->backwardTileClasses, &why)) return fail(why);
    if (b.qKernel == KernelFamily::Sm90 &&
        !getFunction(driver, *entry, b.entryStem + "_q_tile_classes",
                     &entry->backwardQTileClasses, &why))
      return fail(why);
  }
  return entry;
}

Kernel::Impl::Loaded* Kernel::Impl::deterministicFunctions(const DriverApi& driver,
                                                           cu::Context context,
                                                           std::string* error) {
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
  if (!loadModules(driver, *entry, &why) ||
      !resolveBackward(driver, *entry, BackwardEntry::KvNoDq, &why) ||
      !resolveBackward(driver, *entry, BackwardEntry::Q, &why)) {
    entry->deterministicError = "kernel '" + images.front().metadata.name + "': " + why;
    *error = entry->deterministicError;
    return nullptr;
  }
  return entry;
}

Kernel::Impl::Loaded* Kernel::Impl::decodeFunctions(const DriverApi& driver, cu::Context context,
                                                    std::string* error) {
  Loaded* entry = function(driver, context, error);
  if (!entry) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (entry->decodeResolved) {
    if (!entry->decodeError.empty()) *error = entry->decodeError;
    return entry->decodeError.empty() ? entry : nullptr;
  }
  entry->decodeResolved = true;
  auto fail = [&](std::string message) -> Loaded* {
    entry->decodeError = "kernel '" + images.front().metadata.name + "': " + message;
    *error = entry->decodeError;
    return nullptr;
  };
  const KernelMetadata& m = entry->image->metadata;
  if (!m.decode)
    return fail("the form loaded for this device (" + m.target + ") has no decode kernel" +
                (m.dropout > 0 ? " (the spec has dropout)" : ""));
  const DecodeMetadata& d = *m.decode;
  std::string why;
  cu::Device device = 0;
  if (!getFunction(driver, *entry, d.entry, &entry->decode, &why) ||
      !getFunction(driver, *entry, d.combineEntry, &entry->decodeCombine, &why) ||
      !driver.check(driver.cuFuncSetAttribute(entry->decode, cu::kMaxDynamicSharedSizeBytes,
                                              int(d.smemBytes)),
                    "cuFuncSetAttribute(decode, MAX_DYNAMIC_SHARED_SIZE_BYTES)", &why) ||
      !driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice", &why) ||
      !driver.check(driver.cuDeviceGetAttribute(&entry->numSMs, cu::kMultiprocessorCount, device),
                    "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", &why) ||
      !driver.check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        &entry->decodeBlocksPerSM, entry->decode, d.threads, size_t(d.smemBytes)),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor(decode)", &why))
    return fail(why);
  if (entry->decodeBlocksPerSM < 1)
    return fail("its decode kernel (" + std::to_string(d.threads) + " threads, " +
                std::to_string(d.smemBytes) + " B shared memory) fits no SM of this device");
  int major = 0;
  const char* pdl = std::getenv("ATTNC_DECODE_PDL");
  entry->decodeCombineOverlaps =
      driver.cuLaunchKernelEx != nullptr && !(pdl != nullptr && std::string(pdl) == "0") &&
      driver.cuDeviceGetAttribute(&major, cu::kComputeCapabilityMajor, device) == 0 && major >= 9;
  return entry;
}

bool Kernel::Impl::resolveBackward(const DriverApi& driver, Loaded& entry,
                                   BackwardEntry which, std::string* why) const {
  const BackwardMetadata& b = *entry.image->metadata.backward;
  const std::string name = b.entryStem + backwardEntrySuffix(which);
  cu::Function fn = nullptr;
  if (!getFunction(driver, entry, name, &fn, why)) return false;
  const long long smem =
      (which == BackwardEntry::Kv || which == BackwardEntry::KvNoDq) ? b.kvSmemBytes
      : which == BackwardEntry::Q                                    ? b.qSmemBytes
                                                                     : 0;
  if (smem > 0 &&
      !driver.check(driver.cuFuncSetAttribute(fn, cu::kMaxDynamicSharedSizeBytes, int(smem)),
                    ("cuFuncSetAttribute(" + name + ", MAX_DYNAMIC_SHARED_SIZE_BYTES=" +
                     std::to_string(smem) + ")").c_str(),
                    why))
    return false;
  entry.backward[int(which)] = fn;
  return true;
}

Status loadedInContext(Kernel::Impl& impl, const char* who, InContext* at) {
  std::string error;
  at->driver = driverInContext(&at->context, &error);
  if (!at->driver) return Status::error(std::string(who) + ": " + error);
  at->loaded = impl.function(*at->driver, at->context, &error);
  return at->loaded ? Status::success() : Status::error(error);
}

}  // namespace attnc
