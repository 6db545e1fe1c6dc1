// GPU targets attnc compiles for: the architecture name NVRTC gets, and the on-chip limits the
// tile derivation starts from. Plain C++ (no LLVM), so the runtime can describe a live device too.
#pragma once

#include "attnc/status.h"

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
  int numSMs = 0;              // of the reference part named in `description`, or of the device
  int maxThreadsPerSM = 0;
  int maxBlocksPerSM = 0;      // resident blocks of one SM (the occupancy table's block limit)
  std::string description;     // e.g. "H100/H200 (Hopper)", or the device's name

  // Looks a target up by name; nullopt (and a message listing the known ones) otherwise.
  static std::optional<Target> byName(const std::string& name, std::string* error);
  static const std::vector<Target>& known();

  // The target of CUDA device `ordinal`, read from the driver: the architecture name from the
  // compute capability (9.0 -> "sm_90a", 8.x -> "sm_8x"), shared memory per block (opt-in) and per
  // SM, SM count, registers. On failure (no driver, no such device, an architecture attnc has no
  // templates for) returns a target with an empty name and sets *status.
  static Target fromDevice(int ordinal, Status* status);

  // The architecture name attnc uses for compute capability major.minor, or "" when none fits.
  static std::string nameForComputeCapability(int major, int minor);
};

}  // namespace attnc
