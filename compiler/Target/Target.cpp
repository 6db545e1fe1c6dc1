// The known targets with their published limits (CUDA C++ Programming Guide, "Compute
// Capabilities" table: shared memory per SM and the per-block opt-in maximum).
#include "compiler/Target/Target.h"

namespace attnc {

const std::vector<Target>& Target::known() {
  static const std::vector<Target> targets = {
      {"sm_80", 8, 0, 166912, 167936, 255, 65536, 108, 2048, "A100 (Ampere)"},
      {"sm_86", 8, 6, 101376, 102400, 255, 65536, 84, 1536, "RTX 30xx / A10 / A40 (Ampere)"},
      {"sm_89", 8, 9, 101376, 102400, 255, 65536, 128, 1536, "L4 / L40 / RTX 40xx (Ada)"},
      {"sm_90", 9, 0, 232448, 233472, 255, 65536, 132, 2048, "H100 / H200 (Hopper)"},
      {"sm_90a", 9, 0, 232448, 233472, 255, 65536, 132, 2048,
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

}  // namespace attnc
