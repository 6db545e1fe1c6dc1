// What the JIT attaches to a Kernel beyond its images: the builder of its deferred modules
// (Kernel::compileDeferred). Internal to attnc (the compiler's JIT and the runtime).
#pragma once

#include "attnc/attnc.h"

#include <functional>
#include <string>
#include <vector>

namespace attnc {

// One compiled module: a cubin and its PTX (may be empty).
struct ModuleCode {
  std::vector<char> cubin;
  std::string ptx;
};

// Compiles the modules a kernel deferred (for the first image), appending them to *modules.
using DeferredBuild = std::function<Status(std::vector<ModuleCode>* modules)>;

struct KernelAccess {
  // `build` runs at most once, on the kernel's first compileDeferred() or deterministic backward();
  // it must not refer to anything that may end before the kernel does. A null build defers nothing.
  static void setDeferred(Kernel& kernel, DeferredBuild build);
};

}  // namespace attnc
