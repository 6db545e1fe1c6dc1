// Rendering, ordering and counting of spec diagnostics.
#include "attnc/diagnostic.h"

#include <algorithm>

namespace attnc {

// The caret line copies the tabs of the source line so the caret lands under the right character
// whatever the terminal's tab width.
static std::string caretLine(const std::string& sourceLine, unsigned col) {
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
    if (loc.line != 0) out += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
  } else {
    out = "spec '" + specName + "'";
  }
  out += (severity == Severity::Warning ? ": warning: " : ": error: ") + message + "\n";
  if (sourceLine.empty() || loc.col == 0) return out;
  // A long line (a generated expression, a minified spec) is shown as a window around the caret,
  // so that an error about a 100 KB line is not itself 100 KB.
  constexpr size_t kShownColumns = 160;
  if (sourceLine.size() <= kShownColumns)
    return out + sourceLine + "\n" + caretLine(sourceLine, loc.col) + "\n";
  const size_t caret = std::min<size_t>(loc.col - 1, sourceLine.size());
  const size_t begin = caret > kShownColumns / 2 ? caret - kShownColumns / 2 : 0;
  const size_t end = std::min(sourceLine.size(), begin + kShownColumns);
  const std::string lead = begin > 0 ? "..." : "";
  const std::string window =
      lead + sourceLine.substr(begin, end - begin) + (end < sourceLine.size() ? "..." : "");
  return out + window + "\n" + caretLine(window, unsigned(lead.size() + caret - begin + 1)) + "\n";
}

std::string renderAll(const Diagnostics& diags) {
  std::string out;
  for (const Diagnostic& diag : diags) out += diag.render();
  return out;
}

bool hasErrors(const Diagnostics& diags) {
  return std::any_of(diags.begin(), diags.end(), [](const Diagnostic& d) { return d.isError(); });
}

size_t countWarnings(const Diagnostics& diags) {
  return size_t(std::count_if(diags.begin(), diags.end(),
                              [](const Diagnostic& d) { return !d.isError(); }));
}

void promoteWarnings(Diagnostics& diags) {
  for (Diagnostic& diag : diags) {
    if (diag.isError()) continue;
    diag.severity = Severity::Error;
    diag.message += " [-Werror]";
  }
}

void sortByPosition(Diagnostics& diags) {
  std::stable_sort(diags.begin(), diags.end(), [](const Diagnostic& a, const Diagnostic& b) {
    if (a.loc.line != b.loc.line) return a.loc.line < b.loc.line;
    return a.loc.col < b.loc.col;
  });
}

}  // namespace attnc
