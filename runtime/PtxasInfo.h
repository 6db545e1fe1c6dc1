// What ptxas reports about each entry function it assembles (`--ptxas-options=-v`): registers,
// barriers, spills, stack, shared and constant memory, and a serialized wgmma pipeline. Read from
// NVRTC's program log, so it needs no CUDA header and no GPU.
#pragma once

#include <map>
#include <string>

namespace attnc {

// What ptxas reports for one entry function (`--ptxas-options=-v`); -1 registers = not reported.
struct ResourceUsage {
  int registers = -1;
  int barriers = 0;
  int staticSharedBytes = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int stackBytes = 0;     // the entry's own stack frame (local arrays, spills)
  int constantBytes = 0;  // sum over the constant banks ptxas lists (cmem[0] holds the params)
  // ptxas's note when it serialized the entry's wgmma instructions (each one waited for before the
  // next issues, so no GEMM overlaps anything), e.g. "(C7511) Potential Performance Loss: ...
  // due to insufficient register resources for the wgmma pipeline"; empty when they are pipelined.
  std::string wgmmaSerialized;
};

// Whether the entry spills to local memory.
inline bool spills(const ResourceUsage& r) { return r.spillStoreBytes > 0 || r.spillLoadBytes > 0; }

// Parses ptxas' "-v" report (as NVRTC 12/13 put it into the program log) per entry function.
std::map<std::string, ResourceUsage> parsePtxasInfo(const std::string& log);

}  // namespace attnc
