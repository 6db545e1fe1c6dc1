// `attnc explain`: what the compiler derived for a spec and why (tiles, block classes and their
// map, the kernel's resources, the IO model). attnc.cpp parses the arguments and loads the spec.
#pragma once

#include "compiler/Pipeline.h"

#include <string>
#include <vector>

namespace attnc {

struct ExplainOptions {
  long long seqLen = 4096, kvSeqLen = 0, batch = 1;  // kvSeqLen 0: seqLen
  bool seqLenGiven = false;  // else sample inputs along positions set the lengths
  long long numSMs = 0;      // --sms: the decode plan's SMs (0: the target's)
  // Stop before NVRTC (Stage::CUDA): everything but the kernel's resources, in milliseconds and
  // without NVRTC installed.
  bool noCompile = false;
  std::string pngPath;              // --png: the block map as an image
  std::vector<std::string> inputs;  // --input NAME=FILE.npy | NAME=V,V,...
};

// Prints the explanation to stdout; errors to stderr. Returns the exit status. `compile` carries
// the tile overrides, --backward and NVRTC's limits; the lengths are set here.
int explainSpec(const Spec& spec, const Target& target, const ExplainOptions& options,
                CompileOptions compile);

}  // namespace attnc
