// The LLVM-facing half of the spec front end: reading YAML specs, and the spelling of the spec's
// enums as llvm::StringRef. The Spec value type and SpecBuilder are public: include/attnc/spec.h.
#pragma once

#include "attnc/spec.h"

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace attnc {

llvm::StringRef toString(DType);       // "bf16" | "fp16"
llvm::StringRef toString(ScalarType);  // "i1" | "i32" | "f32"
llvm::StringRef toString(InputDim);    // "b" | "h" | "pos"

// Reads a YAML spec. On any error returns nullopt and appends at least one diagnostic (all that
// could be found, in file order). A file that cannot be read is a diagnostic too. Warnings (the
// spec compiles, but likely not to what was meant: docs/spec.md, Warnings) are appended too, with
// the spec returned.
std::optional<Spec> parseSpecFile(llvm::StringRef path, Diagnostics& diags);
std::optional<Spec> parseSpecText(llvm::StringRef text, llvm::StringRef fileName,
                                  Diagnostics& diags);

}  // namespace attnc
