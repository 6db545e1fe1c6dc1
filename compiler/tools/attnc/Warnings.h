// The spec's warnings on the command line: printed on stderr, once each, or with --Werror made
// errors that fail the command (docs/spec.md, Warnings).
#pragma once

#include "attnc/diagnostic.h"

namespace attnc {

// --Werror: the spec's warnings fail the command.
extern bool warningsAreErrors;

// Prints the warnings among `diags` to stderr and removes them, so a later failure does not print
// them again; one said already (the same mask's, for another --target) is not repeated. True when
// --Werror makes them fatal (they are then printed as errors).
bool reportWarnings(Diagnostics& diags);

}  // namespace attnc
