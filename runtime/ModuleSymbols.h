// Which module of a kernel defines an entry point, from the module's bytes alone (Kernel::Impl
// asks before cuModuleGetFunction, so that no lookup fails on a module without the entry:
// compute-sanitizer counts every failed driver call as an error).
#pragma once

#include <string>
#include <vector>

namespace attnc {

// A cubin (ELF) names its entry points in its string table, each NUL-delimited.
bool cubinDefines(const std::vector<char>& cubin, const std::string& name);

// PTX declares each entry point as `.entry <name>(`.
bool ptxDefines(const std::string& ptx, const std::string& name);

}  // namespace attnc
