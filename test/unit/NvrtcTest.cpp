// NVRTC through attnc::Nvrtc: loading, PTX + CUBIN for both targets, headers passed by name,
// the ptxas resource report, errors; and the templates embedded at build time.
#include "runtime/Driver.h"
#include "runtime/EmbeddedTemplates.h"
#include "runtime/Nvrtc.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace attnc {
namespace {

Nvrtc* requireNvrtc() {
  std::string error;
  Nvrtc* nvrtc = Nvrtc::get(&error);
  if (!nvrtc)
    ADD_FAILURE() << error;
  return nvrtc;
}

// A header that includes another header by its full path, as the templates do.
const std::vector<EmbeddedFile> kHeaders = {
    {"attnc/x.h", "#pragma once\n#include \"attnc/common/y.h\"\n"
                  "__device__ inline float twice(float v) { return kFactor * v; }\n"},
    {"attnc/common/y.h", "#pragma once\nconstexpr float kFactor = 2.0f;\n"},
};

const char* kScaleKernel = R"(#include "attnc/x.h"
extern "C" __global__ void scale_kernel(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = twice(data[i]);
}
)";

TEST(Nvrtc, Loads) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  EXPECT_GE(nvrtc->versionMajor, 12);
  EXPECT_EQ(Nvrtc::get(nullptr), nvrtc);  // loaded once
}

class NvrtcArch : public testing::TestWithParam<const char*> {};

TEST_P(NvrtcArch, CompilesKernelWithEmbeddedHeaders) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  NvrtcResult result = nvrtc->compile(kScaleKernel, "scale.cu", kHeaders, GetParam(), {});
  ASSERT_TRUE(result.ok) << result.log;
  EXPECT_NE(result.ptx.find(".entry scale_kernel"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find(std::string(".target ") + GetParam()), std::string::npos);
  ASSERT_GE(result.cubin.size(), 4u);
  EXPECT_EQ(std::string(result.cubin.data(), 4), "\x7f" "ELF");
  ASSERT_EQ(result.resources.count("scale_kernel"), 1u) << result.log;
  const ResourceUsage& usage = result.resources.at("scale_kernel");
  EXPECT_GT(usage.registers, 0) << result.log;
  EXPECT_EQ(usage.spillStoreBytes, 0);
  EXPECT_EQ(usage.stackBytes, 0);
  EXPECT_GT(result.compileSeconds, 0.0);
  RecordProperty("compileSeconds", std::to_string(result.compileSeconds));
  std::printf("[ compile  ] %s: %.3f s, %d registers\n", GetParam(), result.compileSeconds,
              usage.registers);
}

TEST_P(NvrtcArch, ReportsStackAndSharedMemory) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  // A dynamically indexed local array cannot live in registers: it goes to the stack frame.
  const char* source = R"(
extern "C" __global__ void local_array(float* data, int n) {
  __shared__ float tile[1024];
  float values[256];
  for (int i = 0; i < 256; ++i) values[i] = data[i * n];
  tile[threadIdx.x] = values[(n * threadIdx.x) & 255];
  __syncthreads();
  data[threadIdx.x] = tile[n & 1023];
}
extern "C" __global__ void plain(float* data) { data[threadIdx.x] = 1.0f; }
)";
  NvrtcResult result =
      nvrtc->compile(source, "local.cu", {}, GetParam(), {"--maxrregcount=32"});
  ASSERT_TRUE(result.ok) << result.log;
  ASSERT_EQ(result.resources.size(), 2u) << result.log;
  const ResourceUsage& usage = result.resources.at("local_array");
  EXPECT_GT(usage.stackBytes + usage.spillStoreBytes, 0) << result.log;
  EXPECT_EQ(usage.staticSharedBytes, 4096) << result.log;
  EXPECT_EQ(usage.barriers, 1) << result.log;
  EXPECT_LE(usage.registers, 32) << result.log;
  EXPECT_EQ(result.resources.at("plain").stackBytes, 0);
}

// ptxas assembles a program's entry points on several threads (Nvrtc.h): each entry's report
// must still be its own, as when it is compiled alone.
TEST_P(NvrtcArch, EntriesReportAsWhenCompiledAlone) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  const std::vector<std::pair<std::string, std::string>> entries = {
      {"spill", R"(extern "C" __global__ void spill(float* data, int n) {
  float values[64];
  for (int i = 0; i < 64; ++i) values[i] = data[i * n];
  data[threadIdx.x] = values[(n * threadIdx.x) & 63];
})"},
      {"staged", R"(extern "C" __global__ void staged(float* data) {
  __shared__ float tile[512];
  tile[threadIdx.x] = data[threadIdx.x];
  __syncthreads();
  data[threadIdx.x] = tile[511 - threadIdx.x];
})"},
      {"unrolled", R"(extern "C" __global__ void unrolled(const float* in, float* out) {
  float acc[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) acc[i] = in[threadIdx.x + 32 * i];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 48; ++i) sum += acc[i] * acc[47 - i];
  out[threadIdx.x] = sum;
})"},
      {"plain", R"(extern "C" __global__ void plain(float* data) { data[threadIdx.x] = 1.0f; })"}};
  std::string all;
  for (const auto& [name, source] : entries) all += source + "\n";
  NvrtcResult together = nvrtc->compile(all, "entries.cu", {}, GetParam(), {"--maxrregcount=40"});
  ASSERT_TRUE(together.ok) << together.log;
  ASSERT_EQ(together.resources.size(), entries.size()) << together.log;
  for (const auto& [name, source] : entries) {
    NvrtcResult alone = nvrtc->compile(source, name + ".cu", {}, GetParam(), {"--maxrregcount=40"});
    ASSERT_TRUE(alone.ok) << alone.log;
    const ResourceUsage& a = alone.resources.at(name);
    const ResourceUsage& t = together.resources.at(name);
    EXPECT_EQ(t.registers, a.registers) << name;
    EXPECT_EQ(t.stackBytes, a.stackBytes) << name;
    EXPECT_EQ(t.spillStoreBytes, a.spillStoreBytes) << name;
    EXPECT_EQ(t.staticSharedBytes, a.staticSharedBytes) << name;
    EXPECT_EQ(t.barriers, a.barriers) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, NvrtcArch, testing::Values("sm_80", "sm_90a"));

TEST(Nvrtc, VirtualArchGivesPtxOnly) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  NvrtcResult result = nvrtc->compile(kScaleKernel, "scale.cu", kHeaders, "compute_90a", {});
  ASSERT_TRUE(result.ok) << result.log;
  EXPECT_NE(result.ptx.find(".entry scale_kernel"), std::string::npos);
  EXPECT_TRUE(result.cubin.empty());
}

TEST(Nvrtc, SyntaxErrorNamesTheLine) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  const char* source = "extern \"C\" __global__ void broken(float* data) {\n"
                       "  data[0] = 1.0f\n"
                       "}\n";
  NvrtcResult result = nvrtc->compile(source, "broken.cu", {}, "sm_90a", {});
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.log.find("broken.cu(3): error"), std::string::npos) << result.log;
  EXPECT_TRUE(result.ptx.empty());
  EXPECT_TRUE(result.cubin.empty());
}

TEST(Nvrtc, MissingHeaderIsAnError) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  NvrtcResult result = nvrtc->compile("#include \"attnc/absent.h\"\n", "missing.cu", {}, "sm_80", {});
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.log.find("attnc/absent.h"), std::string::npos) << result.log;
}

TEST(PtxasInfo, ParsesEntriesAndIgnoresDeviceFunctions) {
  const char* log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'fwd' for 'sm_80'\n"
      "ptxas info    : Function properties for fwd\n"
      "ptxas         .     1152 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 1152 bytes cumulative stack size, "
      "4096 bytes smem, 364 bytes cmem[0], 8 bytes cmem[2]\n"
      "ptxas info    : Compile time = 30.154 ms\n"
      "ptxas info    : Function properties for _Z6helperPfi\n"
      "ptxas         .     64 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'bwd' for 'sm_80'\n"
      "ptxas info    : Function properties for bwd\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 0 barriers\n";
  std::map<std::string, ResourceUsage> resources = parsePtxasInfo(log);
  ASSERT_EQ(resources.size(), 2u);
  const ResourceUsage& fwd = resources.at("fwd");
  EXPECT_EQ(fwd.registers, 40);
  EXPECT_EQ(fwd.barriers, 1);
  EXPECT_EQ(fwd.stackBytes, 1152);
  EXPECT_EQ(fwd.spillStoreBytes, 8);
  EXPECT_EQ(fwd.spillLoadBytes, 12);
  EXPECT_EQ(fwd.staticSharedBytes, 4096);
  EXPECT_EQ(fwd.constantBytes, 372);
  const ResourceUsage& bwd = resources.at("bwd");
  EXPECT_EQ(bwd.registers, 255);
  EXPECT_EQ(bwd.stackBytes, 0);
  EXPECT_EQ(bwd.staticSharedBytes, 0);
}

TEST(PtxasInfo, KeepsTheNoteOfAnEntryWhoseWgmmaPtxasSerialized) {
  // (the note comes before the entry's own lines, as NVRTC 13.0 prints it)
  const char* log =
      "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to insufficient register resources for the wgmma pipeline in the function "
      "'slow_fwd'\n"
      "ptxas info    : 217 bytes gmem\n"
      "ptxas info    : Compiling entry function 'slow_fwd' for 'sm_90a'\n"
      "ptxas info    : Function properties for slow_fwd\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 16 barriers\n"
      "ptxas info    : Compiling entry function 'fast_fwd' for 'sm_90a'\n"
      "ptxas info    : Function properties for fast_fwd\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 16 barriers\n";
  std::map<std::string, ResourceUsage> resources = parsePtxasInfo(log);
  ASSERT_EQ(resources.size(), 2u);
  EXPECT_EQ(resources.at("slow_fwd").wgmmaSerialized,
            "(C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
            "insufficient register resources for the wgmma pipeline in the function 'slow_fwd'");
  EXPECT_EQ(resources.at("slow_fwd").registers, 168);
  EXPECT_TRUE(resources.at("fast_fwd").wgmmaSerialized.empty());
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

TEST(EmbeddedTemplates, MatchFilesOnDisk) {
  const std::vector<EmbeddedFile>& templates = embeddedTemplates();
  const EmbeddedFile* params = nullptr;
  for (const EmbeddedFile& file : templates) {
    EXPECT_EQ(file.contents, readFile(std::string(ATTNC_SOURCE_DIR) + "/templates/" + file.path))
        << file.path;
    if (file.path == "attnc/common/params.h")
      params = &file;
  }
  ASSERT_NE(params, nullptr);
  EXPECT_FALSE(params->contents.empty());
}

TEST(EmbeddedTemplates, CompileUnderNvrtc) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  const char* source = R"(#include "attnc/common/params.h"
extern "C" __global__ void touch(attnc::FwdParams params) {
  if (threadIdx.x == 0) params.lse[0] = params.scale;
}
)";
  NvrtcResult result = nvrtc->compile(source, "params.cu", embeddedTemplates(), "sm_90a", {});
  ASSERT_TRUE(result.ok) << result.log;
  EXPECT_GT(result.resources.at("touch").registers, 0);
}

// The headers of common/ are what both kernel families include: none of them includes a header
// of one family (sm80/, sm90/).
TEST(EmbeddedTemplates, CommonHeadersIncludeNoKernelFamily) {
  int common = 0;
  for (const EmbeddedFile& file : embeddedTemplates()) {
    if (file.path.rfind("attnc/common/", 0) != 0)
      continue;
    ++common;
    EXPECT_EQ(file.contents.find("#include \"attnc/sm"), std::string::npos) << file.path;
  }
  EXPECT_GT(common, 0);
}

// Every template header includes what it uses: each compiles as the only include of a unit. PTX
// only (compute_90a): the front end is what a missing include breaks.
TEST(EmbeddedTemplates, EveryHeaderCompilesAlone) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  int headers = 0;
  for (const EmbeddedFile& file : embeddedTemplates()) {
    const std::string& path = file.path;
    if (path.size() < 2 || path.compare(path.size() - 2, 2, ".h") != 0)
      continue;
    ++headers;
    NvrtcResult result = nvrtc->compile("#include \"" + path + "\"\n", "alone.cu",
                                        embeddedTemplates(), "compute_90a", {});
    EXPECT_TRUE(result.ok) << path << ":\n" << result.log;
  }
  EXPECT_GT(headers, 0);
}

// A decode or varlen forward calls the score hooks with a sequence's view of FwdParams
// (seq_params.h): its tanh must be the forward's one MUFU instruction (tanh.approx), not the
// backward's ex2 + rcp; a view of BwdParams keeps the backward's.
TEST(EmbeddedTemplates, SeqViewScoresTakeTheForwardsTanh) {
  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  auto ptxOf = [&](const std::string& params) {
    const std::string source = "#include \"attnc/common/seq_params.h\"\n"
                               "extern \"C\" __global__ void softcap(float* x) {\n"
                               "  x[threadIdx.x] = attnc::expr::score_tanh<attnc::SeqView<attnc::" +
                               params + ">>(x[threadIdx.x]);\n}\n";
    NvrtcResult result =
        nvrtc->compile(source, "tanh.cu", embeddedTemplates(), "compute_90a", {});
    EXPECT_TRUE(result.ok) << result.log;
    return result.ptx;
  };
  EXPECT_NE(ptxOf("FwdParams").find("tanh.approx.f32"), std::string::npos);
  EXPECT_EQ(ptxOf("BwdParams").find("tanh.approx.f32"), std::string::npos);
}

// Runs only where a driver and a GPU exist (skipped in CI): the NVRTC cubin for the device's own
// architecture loads and runs through the dlopen-ed driver API.
TEST(Driver, LaunchesNvrtcCubin) {
  std::string error;
  const DriverApi* cuda = DriverApi::get(&error);
  if (!cuda)
    GTEST_SKIP() << error;
  int count = 0;
  ASSERT_TRUE(cuda->check(cuda->cuDeviceGetCount(&count), "cuDeviceGetCount", &error)) << error;
  if (count == 0)
    GTEST_SKIP() << "no CUDA device";
  cu::Device device = 0;
  ASSERT_TRUE(cuda->check(cuda->cuDeviceGet(&device, 0), "cuDeviceGet", &error)) << error;
  int major = 0, minor = 0;
  cuda->cuDeviceGetAttribute(&major, cu::kComputeCapabilityMajor, device);
  cuda->cuDeviceGetAttribute(&minor, cu::kComputeCapabilityMinor, device);
  std::string arch = "sm_" + std::to_string(major * 10 + minor) + (major == 9 ? "a" : "");

  Nvrtc* nvrtc = requireNvrtc();
  ASSERT_NE(nvrtc, nullptr);
  NvrtcResult compiled = nvrtc->compile(kScaleKernel, "scale.cu", kHeaders, arch, {});
  ASSERT_TRUE(compiled.ok) << compiled.log;

  cu::Context context = nullptr;
  ASSERT_TRUE(cuda->check(cuda->cuDevicePrimaryCtxRetain(&context, device),
                          "cuDevicePrimaryCtxRetain", &error)) << error;
  ASSERT_TRUE(cuda->check(cuda->cuCtxSetCurrent(context), "cuCtxSetCurrent", &error)) << error;
  cu::Module module = nullptr;
  ASSERT_TRUE(cuda->check(cuda->cuModuleLoadData(&module, compiled.cubin.data()),
                          "cuModuleLoadData", &error)) << error;
  cu::Function function = nullptr;
  ASSERT_TRUE(cuda->check(cuda->cuModuleGetFunction(&function, module, "scale_kernel"),
                          "cuModuleGetFunction", &error)) << error;

  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = float(i);
  size_t bytes = host.size() * sizeof(float);
  cu::DevicePtr data = 0;
  ASSERT_TRUE(cuda->check(cuda->cuMemAlloc(&data, bytes), "cuMemAlloc", &error)) << error;
  ASSERT_TRUE(cuda->check(cuda->cuMemcpyHtoD(data, host.data(), bytes), "cuMemcpyHtoD", &error));
  int n = int(host.size());
  void* params[] = {&data, &n};
  ASSERT_TRUE(cuda->check(cuda->cuLaunchKernel(function, (n + 255) / 256, 1, 1, 256, 1, 1, 0,
                                               nullptr, params, nullptr),
                          "cuLaunchKernel", &error)) << error;
  ASSERT_TRUE(cuda->check(cuda->cuStreamSynchronize(nullptr), "cuStreamSynchronize", &error))
      << error;
  std::vector<float> result(host.size());
  ASSERT_TRUE(cuda->check(cuda->cuMemcpyDtoH(result.data(), data, bytes), "cuMemcpyDtoH", &error));
  for (size_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(result[i], 2.0f * host[i]) << "at " << i;
  EXPECT_TRUE(cuda->check(cuda->cuMemFree(data), "cuMemFree", &error)) << error;
  EXPECT_TRUE(cuda->check(cuda->cuModuleUnload(module), "cuModuleUnload", &error)) << error;
  cuda->cuDevicePrimaryCtxRelease(device);

  // An error code becomes a readable message.
  EXPECT_NE(cuda->describe(2).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
  std::printf("[ driver   ] %s, %s\n", cuda->libraryName().c_str(), arch.c_str());
}

}  // namespace
}  // namespace attnc
