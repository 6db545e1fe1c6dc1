// CodeGen: attn.tiled_forward -> one CUDA C++ translation unit that instantiates the sm80 forward
// template with a generated Variant (the mask and score regions as device functions).
#pragma once

#include "dialects/Attn/IR/AttnOps.h"

#include <string>

namespace attnc {

struct KernelSource {
  std::string code;       // the translation unit (includes "attnc/sm80/forward.h")
  std::string entry;      // extern "C" kernel symbol: <name>_fwd
  int threads = 0;        // block size
  long long smemBytes = 0;  // dynamic shared memory per block
};

// Fails (with an error on the op) for an op in a region that has no device form.
mlir::FailureOr<KernelSource> emitCUDA(mlir::attn::TiledForwardOp op);

}  // namespace attnc
