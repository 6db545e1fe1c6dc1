// Internal to compiler/Spec: the semantic checks both front doors (YAML reader and SpecBuilder)
// share, and how a check finds where in the file to point. Not part of the public API.
#pragma once

#include "compiler/Spec/Spec.h"

#include "llvm/ADT/ArrayRef.h"

#include <functional>
#include <map>
#include <set>

namespace attnc::detail {

// A position in a spec file together with its line's text (for the caret).
struct Place {
  SourceLoc loc;
  std::string sourceLine;
};

// Where one field's value was written. For expression strings, `offsetPlace` maps a byte offset in
// the (unescaped) string to its place in the file.
struct FieldSite {
  Place place;
  std::function<Place(size_t offset)> offsetPlace;
};

// What the YAML reader knows about positions. Keys are field paths as users write them:
// "name", "head_dim", "head_dim_v", "dtype", "heads", "heads.q", "heads.kv", "scale", "dropout",
// "dropout.rounds", "mask", "score", "inputs.NAME", "inputs.NAME.dtype", "inputs.NAME.dims".
struct SpecSites {
  Place top;  // the top-level mapping, for problems with no field of their own
  std::map<std::string, FieldSite> fields;
  // Fields whose value already got a diagnostic (a wrong type): their checks are skipped, so one
  // mistake gives one error.
  std::set<std::string> reported;
};

// Checks value ranges and cross-field rules, type-checks the mask and score expressions (builtins
// included) into spec.mask.expr / spec.score.expr, and appends a diagnostic per problem. Without
// sites (the builder) diagnostics name the spec instead of a file position. Returns true when
// nothing was wrong.
bool checkSpec(Spec& spec, const SpecSites* sites, Diagnostics& diags);

// The nearest of `candidates` to a misspelt `name`, or "" when none is close.
std::string nearestName(llvm::StringRef name, llvm::ArrayRef<llvm::StringRef> candidates);

}  // namespace attnc::detail
