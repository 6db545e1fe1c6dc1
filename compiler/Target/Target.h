// GPU targets attnc compiles for: the architecture name NVRTC gets, and the on-chip limits the
// tile derivation starts from. No LLVM dependency, so the runtime can describe a live device too.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace attnc {

struct Target {
  std::string name;            // "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"
  int computeMajor = 0, computeMinor = 0;
  long long smemPerBlock = 0;  // bytes one block may opt into
  long long smemPerSM = 0;     // bytes of one SM
  int regsPerThread = 255;     // most 32-bit registers one thread may use
  int regsPerSM = 65536;
  int numSMs = 0;              // of the reference part named in `description`
  int maxThreadsPerSM = 0;
  std::string description;     // e.g. "H100/H200 (Hopper)"

  // Looks a target up by name; nullopt (and a message listing the known ones) otherwise.
  static std::optional<Target> byName(const std::string& name, std::string* error);
  static const std::vector<Target>& known();
};

}  // namespace attnc
