// Sample values of a spec's declared inputs for `attnc explain --input NAME=VALUES`: a .npy file
// (1-D or 2-D, int32 or float32 by the input's dtype) or an inline comma-separated list.
#pragma once

#include "attnc/common/params.h"
#include "attnc/spec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

struct SampleInput {
  std::string name;
  const InputDecl* decl = nullptr;  // in the spec the sample was parsed against
  int slot = 0;              // the input's index among the spec's declared inputs
  std::string source;        // the file, or "inline"
  std::vector<int64_t> shape;  // 1 or 2 extents, the trailing ones of the input's dims
  std::vector<uint32_t> words; // int32 or float32 bits, row-major
  // The InputRef the kernel would get: the sample's extents along the input's last dims, and
  // stride 0 along the dims it leaves out (one value for every index there).
  InputRef ref() const;
  // The sample's extent along `dim` (1 where the sample leaves it out).
  int64_t extent(InputDim dim) const;
};

// Parses one `--input NAME=FILE.npy` or `--input NAME=V,V,...` against the spec's inputs. Errors
// name the argument or the file and what is wrong.
std::optional<SampleInput> parseSampleInput(const std::string& argument, const Spec& spec,
                                            std::string& error);

}  // namespace attnc
