// The canonical text of a Spec that the JIT cache key hashes (compiler/Jit.cpp): every field that
// can change what a kernel computes or how it is launched, numbers as their exact bits, so that
// two specs share a cache entry only if they are the same spec.
#pragma once

#include "compiler/Spec/Spec.h"

#include <string>

namespace attnc {

// One "field value" line per field, nested fields as "mask.window", inputs as "input[i].name";
// strings length-prefixed ("5:bf16"), doubles in hexadecimal ("0x1p-2"). Source locations are
// left out: where a spec was read from changes nothing in its kernel.
std::string canonicalSpecText(const Spec& spec);

}  // namespace attnc
