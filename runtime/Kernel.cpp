// attnc::Kernel: its forms (fromImages checks them), what it reports about itself, and its deferred
// modules. Loading is in ModuleLoader.cpp, the checks of launch arguments in LaunchValidation.cpp,
// the launches in ForwardLaunch.cpp and BackwardLaunch.cpp.
#include "attnc/attnc.h"

#include "attnc/common/params.h"
#include "runtime/ModuleLoader.h"

#include <cstring>

namespace attnc {

Kernel::Kernel() = default;
Kernel::~Kernel() = default;
Kernel::Kernel(const Kernel&) = default;
Kernel& Kernel::operator=(const Kernel&) = default;
Kernel::Kernel(Kernel&&) noexcept = default;
Kernel& Kernel::operator=(Kernel&&) noexcept = default;

Kernel Kernel::fromCubin(const KernelMetadata& metadata, const void* cubin, size_t size,
                         Status* status) {
  return fromImages({KernelImage{metadata, cubin, size, nullptr}}, status);
}

Kernel Kernel::fromImages(const std::vector<KernelImage>& images, Status* status) {
  auto fail = [&](std::string message) {
    if (status) *status = Status::error("Kernel::fromImages: " + message);
    return Kernel();
  };
  if (images.empty()) return fail("expected at least one image, got none");
  auto impl = std::make_shared<Impl>();
  for (size_t i = 0; i < images.size(); ++i) {
    const KernelImage& image = images[i];
    const KernelMetadata& m = image.metadata;
    std::string which = "image " + std::to_string(i) + " (" + m.target + ")";
    // The image's modules: its own cubin and PTX, then moreModules; each must be a cubin.
    std::vector<KernelImage::Module> modules = {{image.cubin, image.cubinSize, image.ptx}};
    modules.insert(modules.end(), image.moreModules.begin(), image.moreModules.end());
    for (size_t j = 0; j < modules.size(); ++j) {
      const KernelImage::Module& module = modules[j];
      if (!module.cubin || module.cubinSize < 4 || std::memcmp(module.cubin, "\x7f" "ELF", 4) != 0)
        return fail(which + (j > 0 ? ", module " + std::to_string(j) : "") +
                    ": expected a cubin (an ELF image), got " +
                    (module.cubin ? std::to_string(module.cubinSize) + " bytes of something else"
                                  : "null"));
    }
    if (m.entry.empty() || m.threads <= 0 || m.blockQ <= 0 || m.headsQ <= 0 || m.headsKV <= 0 ||
        m.computeMajor <= 0 || !(m.scale > 0))
      return fail(which + ": incomplete metadata (entry, threads, block_q, heads, compute "
                          "capability and scale are required)");
    if (int(m.inputs.size()) > kMaxInputs)
      return fail(which + ": expected at most " + std::to_string(kMaxInputs) + " inputs, got " +
                  std::to_string(m.inputs.size()));
    if (i > 0) {
      const KernelMetadata& first = images.front().metadata;
      if (m.name != first.name || m.headDim != first.headDim || m.headDimV != first.headDimV ||
          m.headsQ != first.headsQ || m.headsKV != first.headsKV || m.dtype != first.dtype ||
          m.inputs.size() != first.inputs.size())
        return fail(which + ": expected the same spec as image 0 ('" + first.name + "'), got '" +
                    m.name + "' with other shapes");
    }
    Impl::Image copy;
    copy.metadata = m;
    for (const KernelImage::Module& module : modules) {
      const char* cubin = static_cast<const char*>(module.cubin);
      copy.modules.push_back({std::vector<char>(cubin, cubin + module.cubinSize),
                              module.ptx ? module.ptx : ""});
    }
    impl->images.push_back(std::move(copy));
  }
  Kernel kernel;
  kernel.impl_ = std::move(impl);
  if (status) *status = Status::success();
  return kernel;
}

const KernelMetadata& Kernel::metadata() const {
  static const KernelMetadata empty;
  return impl_ ? impl_->images.front().metadata : empty;
}

std::vector<std::string> Kernel::targets() const {
  std::vector<std::string> names;
  if (impl_)
    for (const auto& image : impl_->images) names.push_back(image.metadata.target);
  return names;
}

std::vector<std::string> Kernel::inputNames() const {
  std::vector<std::string> names;
  for (const InputInfo& input : metadata().inputs) names.push_back(input.name);
  return names;
}

const std::vector<char>& Kernel::cubin() const { return cubin(0); }

const std::string& Kernel::ptx() const { return ptx(0); }

const std::string& Kernel::ptx(size_t module) const {
  static const std::string empty;
  if (!impl_) return empty;
  std::lock_guard<std::mutex> lock(impl_->mutex);  // deferred modules may be appended meanwhile
  const auto& modules = impl_->images.front().modules;
  return module < modules.size() ? modules[module].ptx : empty;
}

size_t Kernel::moduleCount() const {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->images.front().modules.size();
}

const std::vector<char>& Kernel::cubin(size_t module) const {
  static const std::vector<char> empty;
  if (!impl_) return empty;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const auto& modules = impl_->images.front().modules;
  return module < modules.size() ? modules[module].cubin : empty;
}

Status Kernel::compileDeferred() const {
  return impl_ ? impl_->buildDeferred() : Status::success();
}

bool Kernel::hasDeferred() const {
  return impl_ && impl_->deferred && !impl_->deferred->done.load();
}

}  // namespace attnc
