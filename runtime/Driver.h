// The CUDA driver API, loaded with dlopen("libcuda.so.1") at first use, so attnc links and runs
// on machines with no GPU driver: only launching needs one. Types are declared here (ABI-stable
// since CUDA 4); no CUDA header is needed to build.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace attnc {

class DynamicLibrary;

namespace cu {
using Result = int;  // CUresult; 0 is CUDA_SUCCESS
using Device = int;  // CUdevice
using DevicePtr = unsigned long long;  // CUdeviceptr
using Context = struct CUctx_st*;
using Module = struct CUmod_st*;
using Function = struct CUfunc_st*;
using Stream = struct CUstream_st*;

constexpr Result kSuccess = 0;

// CUdevice_attribute values attnc reads.
enum DeviceAttribute : int {
  kMaxThreadsPerBlock = 1,
  kMaxSharedMemoryPerBlock = 8,
  kWarpSize = 10,
  kMaxRegistersPerBlock = 12,
  kClockRate = 13,
  kMultiprocessorCount = 16,
  kComputeCapabilityMajor = 75,
  kComputeCapabilityMinor = 76,
  kMaxSharedMemoryPerMultiprocessor = 81,
  kMaxRegistersPerMultiprocessor = 82,
  kMaxThreadsPerMultiprocessor = 39,
  kMaxSharedMemoryPerBlockOptin = 97,
};

// CUtensorMap* enum values attnc passes to cuTensorMapEncodeTiled.
enum TensorMapValue : int {
  kTensorMapFloat16 = 6,      // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
  kTensorMapBfloat16 = 9,     // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
  kTensorMapNoInterleave = 0, // CU_TENSOR_MAP_INTERLEAVE_NONE
  kTensorMapSwizzle128 = 3,   // CU_TENSOR_MAP_SWIZZLE_128B
  kTensorMapL2Promote256 = 3, // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
  kTensorMapZeroFill = 0,     // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read 0
};

// CUDA_MEMCPY2D, the argument of cuMemcpy2DAsync (device to device here: memory type 2).
struct Memcpy2D {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void* srcHost;
  DevicePtr srcDevice;
  void* srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void* dstHost;
  DevicePtr dstDevice;
  void* dstArray;
  size_t dstPitch;
  size_t widthInBytes, height;
};
constexpr int kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

// cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute: CUDA 12.0 and later), with
// the one attribute attnc sets.
enum LaunchAttributeId : int {
  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the grid may start before the previous
  // kernel in the stream ends, waiting for it with griddepcontrol.wait (sm_90 and later).
  kLaunchAttributeProgrammaticStreamSerialization = 6,
};
struct LaunchAttribute {
  int id;  // LaunchAttributeId
  char pad[4];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct LaunchConfig {
  unsigned gridX, gridY, gridZ, blockX, blockY, blockZ;
  unsigned sharedBytes;
  Stream stream;
  LaunchAttribute* attrs;
  unsigned numAttrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && offsetof(LaunchAttribute, value) == 8 &&
                  sizeof(LaunchConfig) == 56 && offsetof(LaunchConfig, stream) == 32 &&
                  offsetof(LaunchConfig, numAttrs) == 48,
              "the CUDA 12 ABI of CUlaunchAttribute and CUlaunchConfig");

// CUfunction_attribute values for cuFuncSetAttribute.
enum FunctionAttribute : int {
  kMaxDynamicSharedSizeBytes = 8,
  kPreferredSharedMemoryCarveout = 9,
};
}  // namespace cu

// Function pointers into libcuda, each resolved under its versioned ABI name (e.g. cuMemAlloc is
// cuMemAlloc_v2), as the CUDA headers' macros would. All are non-null once get() succeeds.
struct DriverApi {
  cu::Result (*cuInit)(unsigned flags);
  cu::Result (*cuDriverGetVersion)(int* version);
  cu::Result (*cuGetErrorString)(cu::Result, const char** text);
  cu::Result (*cuGetErrorName)(cu::Result, const char** name);

  cu::Result (*cuDeviceGetCount)(int* count);
  cu::Result (*cuDeviceGet)(cu::Device* device, int ordinal);
  cu::Result (*cuDeviceGetAttribute)(int* value, int attribute, cu::Device device);
  cu::Result (*cuDeviceGetName)(char* name, int length, cu::Device device);

  cu::Result (*cuDevicePrimaryCtxRetain)(cu::Context* context, cu::Device device);
  cu::Result (*cuDevicePrimaryCtxRelease)(cu::Device device);
  cu::Result (*cuCtxCreate)(cu::Context* context, unsigned flags, cu::Device device);
  cu::Result (*cuCtxSetCurrent)(cu::Context context);
  cu::Result (*cuCtxGetCurrent)(cu::Context* context);
  cu::Result (*cuCtxGetDevice)(cu::Device* device);
  cu::Result (*cuCtxSynchronize)();

  cu::Result (*cuModuleLoadData)(cu::Module* module, const void* image);
  cu::Result (*cuModuleUnload)(cu::Module module);
  cu::Result (*cuModuleGetFunction)(cu::Function* function, cu::Module module, const char* name);
  cu::Result (*cuFuncSetAttribute)(cu::Function function, int attribute, int value);
  cu::Result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, cu::Function function,
                                                            int blockSize, size_t dynamicSmem);
  cu::Result (*cuLaunchKernel)(cu::Function function, unsigned gridX, unsigned gridY,
                               unsigned gridZ, unsigned blockX, unsigned blockY, unsigned blockZ,
                               unsigned sharedBytes, cu::Stream stream, void** params,
                               void** extra);

  cu::Result (*cuMemAlloc)(cu::DevicePtr* pointer, size_t bytes);
  cu::Result (*cuMemFree)(cu::DevicePtr pointer);
  cu::Result (*cuMemcpyHtoD)(cu::DevicePtr destination, const void* source, size_t bytes);
  cu::Result (*cuMemcpyDtoH)(void* destination, cu::DevicePtr source, size_t bytes);
  cu::Result (*cuMemcpyDtoD)(cu::DevicePtr destination, cu::DevicePtr source, size_t bytes);
  cu::Result (*cuStreamSynchronize)(cu::Stream stream);
  cu::Result (*cuMemcpy2DAsync)(const cu::Memcpy2D* copy, cu::Stream stream);

  // CUDA 12.0 and later; null with an older driver (only the sm_90a forward needs it). The enum
  // arguments are passed as their int values (cu::TensorMap* below).
  cu::Result (*cuTensorMapEncodeTiled)(void* tensorMap, int dataType, unsigned rank,
                                       void* globalAddress, const unsigned long long* globalDim,
                                       const unsigned long long* globalStrides,
                                       const unsigned* boxDim, const unsigned* elementStrides,
                                       int interleave, int swizzle, int l2Promotion, int oobFill);

  // CUDA 12.0 and later; null with an older driver (decode then launches its combine plainly).
  cu::Result (*cuLaunchKernelEx)(const cu::LaunchConfig* config, cu::Function function,
                                 void** params, void** extra);

  // The process-wide driver, loaded and cuInit(0)-ed on the first call (thread-safe). Null, with
  // the reason in *error, when there is no libcuda.so.1, a symbol is missing or cuInit fails (for
  // example on a machine without a GPU).
  static const DriverApi* get(std::string* error);

  // "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a result code.
  std::string describe(cu::Result result) const;

  // True on success; otherwise false with "<what>: <describe(result)>" in *error.
  bool check(cu::Result result, const char* what, std::string* error) const;

  // CUDA 10.0 and later; null with an older driver. status: 0 none, 1 active, 2 invalidated.
  cu::Result (*cuStreamIsCapturing)(cu::Stream stream, int* status);
  // Whether `stream` is capturing a CUDA graph, when nothing may allocate or synchronize (false
  // where the driver cannot say).
  bool capturing(cu::Stream stream) const;

  // The libcuda that was loaded.
  std::string libraryName() const;

private:
  std::shared_ptr<DynamicLibrary> library_;
  friend struct DriverLoader;
};

// The current context, or device 0's primary context made current (as the CUDA runtime does).
cu::Context currentContext(const DriverApi& driver, std::string* error);

// The driver, with a current context in *context; null, and why in *error, if either is missing.
const DriverApi* driverInContext(cu::Context* context, std::string* error);

}  // namespace attnc
