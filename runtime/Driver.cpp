// The dlopen-ed CUDA driver (Driver.h) and the current context that launches and allocations use.
#include "runtime/Driver.h"

#include "runtime/DynamicLibrary.h"

#include <cstdlib>

namespace attnc {

struct DriverLoader {
  // libcuda.so.1 is the driver's soname: installed with the driver (never with the toolkit), so
  // the loader cache finds it on any machine that has a GPU. $ATTNC_CUDA_DRIVER_PATH overrides.
  static bool load(DriverApi& api, std::string* error) {
    std::vector<std::string> candidates;
    if (const char* explicitPath = std::getenv("ATTNC_CUDA_DRIVER_PATH");
        explicitPath && *explicitPath)
      candidates.push_back(explicitPath);
    candidates.push_back("libcuda.so.1");
    candidates.push_back("libcuda.so");
    std::string openError;
    std::shared_ptr<DynamicLibrary> library = DynamicLibrary::open(candidates, &openError);
    if (!library) {
      *error = "CUDA driver not found: " + openError;
      return false;
    }
    const DynamicLibrary& lib = *library;
    bool resolved =
        lib.resolve(api.cuInit, "cuInit", error) &&
        lib.resolve(api.cuDriverGetVersion, "cuDriverGetVersion", error) &&
        lib.resolve(api.cuGetErrorString, "cuGetErrorString", error) &&
        lib.resolve(api.cuGetErrorName, "cuGetErrorName", error) &&
        lib.resolve(api.cuDeviceGetCount, "cuDeviceGetCount", error) &&
        lib.resolve(api.cuDeviceGet, "cuDeviceGet", error) &&
        lib.resolve(api.cuDeviceGetAttribute, "cuDeviceGetAttribute", error) &&
        lib.resolve(api.cuDeviceGetName, "cuDeviceGetName", error) &&
        lib.resolve(api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", error) &&
        lib.resolve(api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", error) &&
        lib.resolve(api.cuCtxCreate, "cuCtxCreate_v2", error) &&
        lib.resolve(api.cuCtxSetCurrent, "cuCtxSetCurrent", error) &&
        lib.resolve(api.cuCtxGetCurrent, "cuCtxGetCurrent", error) &&
        lib.resolve(api.cuCtxGetDevice, "cuCtxGetDevice", error) &&
        lib.resolve(api.cuCtxSynchronize, "cuCtxSynchronize", error) &&
        lib.resolve(api.cuModuleLoadData, "cuModuleLoadData", error) &&
        lib.resolve(api.cuModuleUnload, "cuModuleUnload", error) &&
        lib.resolve(api.cuModuleGetFunction, "cuModuleGetFunction", error) &&
        lib.resolve(api.cuFuncSetAttribute, "cuFuncSetAttribute", error) &&
        lib.resolve(api.cuOccupancyMaxActiveBlocksPerMultiprocessor,
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor", error) &&
        lib.resolve(api.cuLaunchKernel, "cuLaunchKernel", error) &&
        lib.resolve(api.cuMemAlloc, "cuMemAlloc_v2", error) &&
        lib.resolve(api.cuMemFree, "cuMemFree_v2", error) &&
        lib.resolve(api.cuMemcpyHtoD, "cuMemcpyHtoD_v2", error) &&
        lib.resolve(api.cuMemcpyDtoH, "cuMemcpyDtoH_v2", error) &&
        lib.resolve(api.cuMemcpyDtoD, "cuMemcpyDtoD_v2", error) &&
        lib.resolve(api.cuStreamSynchronize, "cuStreamSynchronize", error) &&
        lib.resolve(api.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2", error);
    std::string optional;
    if (resolved && !lib.resolve(api.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", &optional))
      api.cuTensorMapEncodeTiled = nullptr;
    if (resolved && !lib.resolve(api.cuStreamIsCapturing, "cuStreamIsCapturing", &optional))
      api.cuStreamIsCapturing = nullptr;
    if (resolved && !lib.resolve(api.cuLaunchKernelEx, "cuLaunchKernelEx", &optional))
      api.cuLaunchKernelEx = nullptr;
    if (!resolved) {
      *error = "unusable CUDA driver: " + *error;
      return false;
    }
    api.library_ = std::move(library);
    return api.check(api.cuInit(0), "cuInit", error);
  }
};

const DriverApi* DriverApi::get(std::string* error) {
  struct Loaded {
    DriverApi api{};
    bool ok = false;
    std::string error;
  };
  static const Loaded loaded = [] {
    Loaded result;
    result.ok = DriverLoader::load(result.api, &result.error);
    return result;
  }();
  if (!loaded.ok) {
    if (error)
      *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

std::string DriverApi::describe(cu::Result result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName)
    cuGetErrorName(result, &name);
  if (cuGetErrorString)
    cuGetErrorString(result, &text);
  std::string description = name ? name : "CUresult " + std::to_string(result);
  if (text)
    description += std::string(": ") + text;
  return description;
}

bool DriverApi::check(cu::Result result, const char* what, std::string* error) const {
  if (result == cu::kSuccess)
    return true;
  if (error)
    *error = std::string(what) + ": " + describe(result);
  return false;
}

bool DriverApi::capturing(cu::Stream stream) const {
  int status = 0;
  return cuStreamIsCapturing && cuStreamIsCapturing(stream, &status) == cu::kSuccess &&
         status != 0;
}

std::string DriverApi::libraryName() const { return library_ ? library_->name() : ""; }

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

const DriverApi* driverInContext(cu::Context* context, std::string* error) {
  const DriverApi* driver = DriverApi::get(error);
  if (!driver) return nullptr;
  *context = currentContext(*driver, error);
  return *context ? driver : nullptr;
}

}  // namespace attnc
