// Which module defines an entry point, from its bytes (ModuleSymbols.h).
#include "runtime/ModuleSymbols.h"

#include <algorithm>

namespace attnc {

bool cubinDefines(const std::vector<char>& cubin, const std::string& name) {
  const std::string needle = '\0' + name + '\0';
  return std::search(cubin.begin(), cubin.end(), needle.begin(), needle.end()) != cubin.end();
}

bool ptxDefines(const std::string& ptx, const std::string& name) {
  return ptx.find(".entry " + name + "(") != std::string::npos;
}

}  // namespace attnc
