// A shared library opened with dlopen at run time, so attnc builds and runs on machines that lack
// it (no GPU driver, no CUDA toolkit) and reports its absence as an error instead of failing to load.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace attnc {

class DynamicLibrary {
public:
  // Opens the first candidate that loads. Each candidate goes to dlopen as written: a bare soname
  // is looked up through the loader cache and LD_LIBRARY_PATH, a path is opened directly. On
  // failure returns null and lists every candidate with dlerror()'s reason in *error.
  static std::unique_ptr<DynamicLibrary> open(const std::vector<std::string>& candidates,
                                              std::string* error);

  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // The candidate that was opened (a soname or a path).
  const std::string& name() const { return name_; }

  // The address of `symbol`, or null with a message naming the symbol and the library.
  void* symbol(const char* symbol, std::string* error) const;

  // Resolves `symbol` into a typed function pointer; false (and *error set) when it is missing.
  template <typename Fn>
  bool resolve(Fn*& fn, const char* symbol, std::string* error) const {
    fn = reinterpret_cast<Fn*>(this->symbol(symbol, error));
    return fn != nullptr;
  }

private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  void* handle_;
  std::string name_;
};

}  // namespace attnc
