// Which module of a kernel defines an entry point, from the module's bytes alone (Kernel::Impl
// asks before cuModuleGetFunction, so that no lookup fails on a module without the entry:
// compute-sanitizer counts every failed driver call as an error).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace attnc {

// A cubin (ELF) names its entry points in its string table, each NUL-delimited.
inline bool cubinDefines(const std::vector<char>& cubin, const std::string& name) {
  const std::string needle = '\0' + name + '\0';
  return std::search(cubin.begin(), cubin.end(), needle.begin(), needle.end()) != cubin.end();
}

// PTX declares each entry point as `.entry <name>(`.
inline bool ptxDefines(const std::string& ptx, const std::string& name) {
  return ptx.find(".entry " + name + "(") != std::string::npos;
}

}  // namespace attnc
