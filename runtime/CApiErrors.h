// Which ATTNC_ERROR_* code (attnc_c.h) a failed C++ call's Status message stands for, by the
// step that failed: libattnc.so's entry points (CApi.cpp) call these once they know the step.
#pragma once

#include <string>

namespace attnc::capi {

// Whether `message` is rendered spec diagnostics (attnc/diagnostic.h).
bool isSpecDiagnostic(const std::string& message);
// A JitCompiler compile's failure: ATTNC_ERROR_BAD_SPEC, _NVRTC, _INTERNAL or ATTNC_ERROR.
int compileFailureCode(const std::string& message);
// A launch's failure after its arguments passed Kernel::validate: ATTNC_ERROR_BAD_ARGUMENT,
// _OUT_OF_MEMORY or _NO_GPU.
int launchFailureCode(const std::string& message);

}  // namespace attnc::capi
