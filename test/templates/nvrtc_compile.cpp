// Compiles one template sample with NVRTC exactly as the runtime will (no CUDA or C++ headers on the
// include path: only the templates), to a cubin, and prints NVRTC's log with ptxas's resource report.
// Usage: nvrtc_compile <templates dir> <arch, e.g. sm_90a> <file.cu> <out.cubin>
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <templates dir> <arch> <file.cu> <out.cubin>\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[3]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[3]);
    return 2;
  }
  std::stringstream source;
  source << in.rdbuf();

  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, source.str().c_str(), argv[3], 0, nullptr, nullptr) != NVRTC_SUCCESS) return 2;
  const std::string include = std::string("-I") + argv[1];
  const std::string arch = std::string("-arch=") + argv[2];
  std::vector<const char*> options = {include.c_str(), arch.c_str(), "-std=c++17",
                                      "-default-device", "-Xptxas=-v"};
  const nvrtcResult result = nvrtcCompileProgram(prog, int(options.size()), options.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  nvrtcGetProgramLog(prog, log.data());
  std::fprintf(stderr, "%s", log.c_str());
  if (result != NVRTC_SUCCESS) {
    std::fprintf(stderr, "NVRTC failed: %s\n", nvrtcGetErrorString(result));
    return 1;
  }
  size_t cubinSize = 0;
  nvrtcGetCUBINSize(prog, &cubinSize);
  std::vector<char> cubin(cubinSize);
  nvrtcGetCUBIN(prog, cubin.data());
  std::ofstream(argv[4], std::ios::binary).write(cubin.data(), std::streamsize(cubin.size()));
  nvrtcDestroyProgram(&prog);
  return 0;
}
