// GPU targets: attnc::Target is part of the public API (include/attnc/target.h) and implemented in
// the LLVM-free runtime (runtime/Target.cpp), so build-time apps and the JIT describe devices alike.
#pragma once

#include "attnc/target.h"
