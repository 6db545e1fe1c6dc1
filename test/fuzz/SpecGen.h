// A grammar-aware generator of YAML spec texts for the spec fuzzer (spec_fuzz.cpp): valid specs
// built field by field from docs/spec.md's rules, with typed random mask and score expressions,
// plus single mutations that make a spec invalid and structural YAML damage. Each case carries the
// verdict the generator knows for it. Deterministic from (seed, case number) on every platform:
// it draws only from std::mt19937_64 through its own arithmetic, no std::*_distribution.
#pragma once

#include "compiler/Spec/Limits.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace attnc::fuzz {

enum class Verdict { Valid, Invalid, Unknown };
const char* toString(Verdict verdict);

// What the front end promises to refuse with a position. With `respect` the generator stays
// within these (every valid-by-construction case is then truly valid); without it some cases go
// far beyond them (flat chains of thousands of operands, nesting of any YAML kind hundreds of
// thousands deep, names of 100,000 characters, specs over the size limit), each expected to be
// rejected with a position.
struct Limits {
  bool respect = true;
  size_t maxOperands = limits::kMaxExprOperands;  // leaves of one expression
  size_t maxDepth = limits::kMaxExprDepth;  // expression nesting (operators, calls, parentheses)
  size_t maxNameLength = limits::kMaxNameLength;  // name and input names
  size_t maxSpecBytes = limits::kMaxSpecBytes;    // the whole text
};

struct Case {
  std::string text;
  Verdict expected = Verdict::Unknown;
  std::string recipe;  // what the generator did, e.g. "valid", "invalid: head_dim 100"
};

class SpecGenerator {
public:
  SpecGenerator(uint64_t seed, Limits limits) : seed(seed), limits(limits) {}
  // Case `index` of this seed; the same (seed, index) always gives the same case.
  Case generate(uint64_t index);

private:
  uint64_t seed;
  Limits limits;
};

}  // namespace attnc::fuzz
