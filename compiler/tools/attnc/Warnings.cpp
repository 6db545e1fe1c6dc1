// The spec's warnings on the command line (Warnings.h).
#include "Warnings.h"

#include "llvm/Support/raw_ostream.h"

#include <set>
#include <string>

namespace attnc {

bool warningsAreErrors = false;

bool reportWarnings(Diagnostics& diags) {
  static std::set<std::string> said;
  Diagnostics warnings;
  for (auto it = diags.begin(); it != diags.end();)
    if (it->isError()) {
      ++it;
    } else {
      if (said.insert(it->render()).second) warnings.push_back(std::move(*it));
      it = diags.erase(it);
    }
  if (warningsAreErrors) promoteWarnings(warnings);
  llvm::errs() << renderAll(warnings);
  return warningsAreErrors && !warnings.empty();
}

}  // namespace attnc
