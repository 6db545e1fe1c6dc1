// What the JIT attaches to a Kernel (KernelAccess.h).
#include "runtime/KernelAccess.h"

#include "runtime/ModuleLoader.h"

namespace attnc {

void KernelAccess::setDeferred(Kernel& kernel, DeferredBuild build) {
  if (!kernel.impl_ || !build) return;
  kernel.impl_->deferred = std::make_unique<Kernel::Impl::Deferred>();
  kernel.impl_->deferred->build = std::move(build);
}

}  // namespace attnc
