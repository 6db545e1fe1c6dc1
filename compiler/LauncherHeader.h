// What the build-time path writes for a compiled spec: the KernelMetadata of a pipeline result,
// and a C++ header that embeds one or more compiled forms (cubin + PTX per target) with a typed
// launcher over attnc::Kernel::fromImages, so an app links only the LLVM-free attncRuntime.
#pragma once

#include "attnc/attnc.h"
#include "compiler/Pipeline.h"

#include <string>
#include <vector>

namespace attnc {

KernelMetadata kernelMetadata(const Spec& spec, const CompiledKernel& kernel, const Target& target);

struct LauncherForm {
  KernelMetadata metadata;
  const std::vector<char>* cubin;
  const std::string* ptx;
};

// The header text: `<name>_kernel(Status*)` (every form; the launch picks the one for the current
// device) and `attnc::Status <name>_forward(const attnc::ForwardArgs&, void* stream)`.
std::string emitLauncherHeader(const std::string& specPath, const std::vector<LauncherForm>& forms);

}  // namespace attnc
