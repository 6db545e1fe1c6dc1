// The known targets with their published limits (CUDA C++ Programming Guide, "Compute
// Capabilities" table: shared memory per SM and the per-block opt-in maximum), and the target of a
// live device read from the driver.
#include "attnc/target.h"

#include "runtime/Driver.h"

namespace attnc {

const std::vector<Target>& Target::known() {
  static const std::vector<Target> targets = {
      // SM counts of the reference part: A100 108, A40/A6000 84, RTX 4090 128, H100/H200 SXM
      // 132 (a live device's own count replaces them: fromDevice). Block limits: 32 on 8.0 and
      // 9.0, 16 on 8.6, 24 on 8.9.
      {"sm_80", 8, 0, 166912, 167936, 255, 65536, 108, 2048, 32, "A100 (Ampere)"},
      {"sm_86", 8, 6, 101376, 102400, 255, 65536, 84, 1536, 16, "RTX 30xx / A10 / A40 (Ampere)"},
      {"sm_89", 8, 9, 101376, 102400, 255, 65536, 128, 1536, 24, "L4 / L40 / RTX 40xx (Ada)"},
      {"sm_90", 9, 0, 232448, 233472, 255, 65536, 132, 2048, 32, "H100 / H200 (Hopper)"},
      {"sm_90a", 9, 0, 232448, 233472, 255, 65536, 132, 2048, 32,
       "H100 / H200 (Hopper, arch-specific features)"},
  };
  return targets;
}

std::optional<Target> Target::byName(const std::string& name, std::string* error) {
  for (const Target& target : known())
    if (target.name == name) return target;
  if (error) {
    *error = "unknown target '" + name + "'; known targets:";
    for (const Target& target : known()) *error += " " + target.name;
  }
  return std::nullopt;
}

std::string Target::nameForComputeCapability(int major, int minor) {
  // 9.0 gets the arch-specific target: its wgmma/TMA templates are the fast path on Hopper.
  if (major == 9 && minor == 0) return "sm_90a";
  for (const Target& target : known())
    if (target.computeMajor == major && target.computeMinor == minor) return target.name;
  return "";
}

Target Target::fromDevice(int ordinal, Status* status) {
  auto failWith = [&](std::string message) {
    if (status) *status = Status::error("Target::fromDevice(" + std::to_string(ordinal) + "): " + message);
    return Target{};
  };
  std::string error;
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver) return failWith(error);
  int count = 0;
  if (!driver->check(driver->cuDeviceGetCount(&count), "cuDeviceGetCount", &error))
    return failWith(error);
  if (ordinal < 0 || ordinal >= count)
    return failWith("expected a device ordinal in [0, " + std::to_string(count) + "), got " +
                    std::to_string(ordinal));
  cu::Device device = 0;
  if (!driver->check(driver->cuDeviceGet(&device, ordinal), "cuDeviceGet", &error))
    return failWith(error);
  auto attribute = [&](cu::DeviceAttribute which, const char* what, int& value) {
    return driver->check(driver->cuDeviceGetAttribute(&value, which, device), what, &error);
  };
  int major = 0, minor = 0, smemOptin = 0, smemSM = 0, sms = 0, regsSM = 0, threadsSM = 0;
  if (!attribute(cu::kComputeCapabilityMajor, "compute capability", major) ||
      !attribute(cu::kComputeCapabilityMinor, "compute capability", minor) ||
      !attribute(cu::kMaxSharedMemoryPerBlockOptin, "shared memory per block", smemOptin) ||
      !attribute(cu::kMaxSharedMemoryPerMultiprocessor, "shared memory per SM", smemSM) ||
      !attribute(cu::kMultiprocessorCount, "SM count", sms) ||
      !attribute(cu::kMaxRegistersPerMultiprocessor, "registers per SM", regsSM) ||
      !attribute(cu::kMaxThreadsPerMultiprocessor, "threads per SM", threadsSM))
    return failWith(error);
  std::string name = nameForComputeCapability(major, minor);
  if (name.empty())
    return failWith("compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                    " has no attnc templates (expected 8.0, 8.6, 8.9 or 9.0)");
  Target target = *byName(name, nullptr);
  target.smemPerBlock = smemOptin;
  target.smemPerSM = smemSM;
  target.numSMs = sms;
  target.regsPerSM = regsSM;
  target.maxThreadsPerSM = threadsSM;
  char deviceName[256] = {};
  if (driver->cuDeviceGetName(deviceName, sizeof deviceName - 1, device) == cu::kSuccess)
    target.description = deviceName;
  if (status) *status = Status::success();
  return target;
}

}  // namespace attnc
