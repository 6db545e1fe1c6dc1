// The bounds every launch's arguments are checked against (Kernel::validate, validateBackward,
// the launch grids). The checks themselves are in LaunchValidation.cpp.
#pragma once

#include <cstdint>

namespace attnc {

// The grids put batch and heads along y and z, which take at most 65535 blocks.
inline constexpr int64_t kMaxGridYZ = 65535;
// The longest q_len and kv_len a launch takes: the templates add tile sizes and position offsets
// to positions in 32-bit ints (q0 + block, (q_len + 63) / 64 * 64, q + kv_len - q_len), and 2^30
// leaves room for every such sum.
inline constexpr int64_t kMaxLength = int64_t(1) << 30;

}  // namespace attnc
