// The C API's error codes for failures the C++ API reports as a Status message (CApiErrors.h).
#include "runtime/CApiErrors.h"

#include "attnc/attnc_c.h"

#include <cctype>

namespace attnc::capi {

// Whether `message` is rendered spec diagnostics (attnc/diagnostic.h): its first line is
// "<file>:<line>:<col>: error: ...", "spec '<name>': error: ..." or "<file>: error: cannot read
// spec file: ...".
bool isSpecDiagnostic(const std::string& message) {
  const std::string firstLine = message.substr(0, message.find('\n'));
  const size_t at = firstLine.find(": error: ");
  if (at == std::string::npos) return false;
  if (firstLine.find(": error: cannot read spec file") == at) return true;
  const std::string where = firstLine.substr(0, at);
  if (where.rfind("spec '", 0) == 0) return true;
  // ":<line>:<col>" at the end of `where`: two runs of digits, each after a colon.
  size_t end = where.size();
  for (int field = 0; field < 2; ++field) {
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(where[begin - 1]))) --begin;
    if (begin == end || begin == 0 || where[begin - 1] != ':') return false;
    end = begin - 1;
  }
  return true;
}

// The code of a JitCompiler failure, from the kind of step that failed: the spec's checks and
// the pipeline report spec diagnostics; an unusable $ATTNC_COMPILE_TIMEOUT is the environment's;
// a missing backward is attnc's own bug; what remains is NVRTC's (not found, failed, timed out).
int compileFailureCode(const std::string& message) {
  if (isSpecDiagnostic(message)) return ATTNC_ERROR_BAD_SPEC;
  if (message.find("ATTNC_COMPILE_TIMEOUT: expected") != std::string::npos) return ATTNC_ERROR;
  if (message.find("a bug in attnc") != std::string::npos) return ATTNC_ERROR_INTERNAL;
  return ATTNC_ERROR_NVRTC;
}

// The code of a launch's failure once its arguments passed validation: what the launch itself
// checks of its arguments (the prepared inputs, sm_90a's TMA alignment, a capturing stream),
// device memory running out, else the CUDA driver.
int launchFailureCode(const std::string& message) {
  for (const char* argument :
       {".prepared", "prepareInputs", "reads through TMA", "capturing a CUDA graph", "Args."})
    if (message.find(argument) != std::string::npos) return ATTNC_ERROR_BAD_ARGUMENT;
  if (message.find("OUT_OF_MEMORY") != std::string::npos ||
      message.find("out of memory") != std::string::npos)
    return ATTNC_ERROR_OUT_OF_MEMORY;
  return ATTNC_ERROR_NO_GPU;
}

}  // namespace attnc::capi
