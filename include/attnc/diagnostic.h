// Errors and warnings about a spec as values: where (file:line:col, or the spec's name for
// builder-made specs), what went wrong, and the offending line so a caret can point at it, clang
// style. Plain C++17; the definitions are in the attncJit library (its attncSpec part).
#pragma once

#include <string>
#include <vector>

namespace attnc {

// A place in a spec file. line and col are 1-based; line 0 means "no line" (a whole-file problem,
// or a spec built in C++). col counts bytes, as compilers do.
struct SourceLoc {
  std::string file;
  unsigned line = 0, col = 0;
};

// An error stops the compile; a warning (a spec that compiles but likely does not mean what it
// says, or runs slower than it could) does not, unless the caller asks warnings to be errors.
enum class Severity { Error, Warning };

struct Diagnostic {
  SourceLoc loc;
  std::string message;
  // The text of the line loc points into (without its newline); empty when there is none. For a
  // builder-made spec it is the expression string an expression error points into.
  std::string sourceLine;
  // Names the spec when there is no file ("spec 'NAME'"): builder errors still say whose they are.
  std::string specName;
  Severity severity = Severity::Error;

  bool isError() const { return severity == Severity::Error; }

  // "file:line:col: error: message\n<sourceLine>\n    ^\n", or "spec 'NAME': error: message\n"
  // (plus the expression and a caret when an expression is at fault) for builder-made specs;
  // "warning:" in place of "error:" for a warning.
  std::string render() const;
};

using Diagnostics = std::vector<Diagnostic>;

// Whether any of `diags` is an error (warnings alone let a compile go on).
bool hasErrors(const Diagnostics& diags);
// How many of `diags` are warnings.
size_t countWarnings(const Diagnostics& diags);
// Turns every warning into an error marked "[-Werror]" (`attnc --Werror`).
void promoteWarnings(Diagnostics& diags);

// Renders every diagnostic, in order, as one string (what a CLI prints to stderr).
std::string renderAll(const Diagnostics& diags);

// Orders diagnostics by file position (stable for equal positions), so the first problem in the
// file is reported first whichever check found it.
void sortByPosition(Diagnostics& diags);

}  // namespace attnc
