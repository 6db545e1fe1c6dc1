#include "runtime/DynamicLibrary.h"

#include <dlfcn.h>

namespace attnc {

std::unique_ptr<DynamicLibrary> DynamicLibrary::open(const std::vector<std::string>& candidates,
                                                     std::string* error) {
  std::string reasons;
  for (const std::string& candidate : candidates) {
    // RTLD_LOCAL: the CUDA libraries' symbols must not leak into later dlopens or the host app.
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL))
      return std::unique_ptr<DynamicLibrary>(new DynamicLibrary(handle, candidate));
    const char* reason = dlerror();
    reasons += "\n  " + candidate + ": " + (reason ? reason : "unknown dlopen error");
  }
  if (error)
    *error = "could not load any of:" + reasons;
  return nullptr;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_)
    dlclose(handle_);
}

void* DynamicLibrary::symbol(const char* symbol, std::string* error) const {
  dlerror();
  void* address = dlsym(handle_, symbol);
  if (!address && error)
    *error = "symbol '" + std::string(symbol) + "' not found in " + name_;
  return address;
}

}  // namespace attnc
