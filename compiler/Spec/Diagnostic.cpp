// Rendering and ordering of spec diagnostics.
#include "compiler/Spec/Diagnostic.h"

#include <algorithm>

namespace attnc {

// The caret line copies the tabs of the source line so the caret lands under the right character
// whatever the terminal's tab width.
static std::string caretLine(const std::string &sourceLine, unsigned col) {
  std::string caret;
  for (unsigned i = 0; i + 1 < col; ++i)
    caret += (i < sourceLine.size() && sourceLine[i] == '\t') ? '\t' : ' ';
  caret += '^';
  return caret;
}

std::string Diagnostic::render() const {
  std::string out;
  if (!loc.file.empty()) {
    out = loc.file;
    if (loc.line != 0)
      out += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
  } else {
    out = "spec '" + specName + "'";
  }
  out += ": error: " + message + "\n";
  if (!sourceLine.empty() && loc.col != 0)
    out += sourceLine + "\n" + caretLine(sourceLine, loc.col) + "\n";
  return out;
}

std::string renderAll(const Diagnostics &diags) {
  std::string out;
  for (const Diagnostic &diag : diags)
    out += diag.render();
  return out;
}

void sortByPosition(Diagnostics &diags) {
  std::stable_sort(diags.begin(), diags.end(), [](const Diagnostic &a, const Diagnostic &b) {
    if (a.loc.line != b.loc.line)
      return a.loc.line < b.loc.line;
    return a.loc.col < b.loc.col;
  });
}

} // namespace attnc
