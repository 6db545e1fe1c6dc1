// The checks of a forward's inference options that need no GPU (ForwardArgs::varlen, paged,
// decode, num_splits): Kernel::validate calls them before it sizes the tensors by the layout.
#pragma once

#include "attnc/attnc.h"

namespace attnc {

// The first problem with args' varlen, paged, decode and num_splits fields for a kernel of
// `metadata`, as "ForwardArgs.<field> = <given>: <expected>": the host scalars always, the host
// copies of the device arrays element by element where they are given. The tensors' footprints
// and the workspace are Kernel::validate's.
Status validateSeqLayout(const KernelMetadata& metadata, const ForwardArgs& args);

}  // namespace attnc
