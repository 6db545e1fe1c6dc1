// Varlen launches as one contiguous launch per sequence: the forward of a prefill-shaped packed
// batch (the forward kernels' large tiles do each sequence's work), and the backward of any
// packed batch. Both need the host copies of cu_seqlens (VarlenArg::host_*), which say where each
// sequence's rows are; a packed LSE ([heads_q, total_q]) goes through a per-stream scratch of one
// sequence's [heads_q, q_len] rows, copied on the launch's stream (cuMemcpy2DAsync).
#pragma once

#include "attnc/attnc.h"
#include "runtime/ModuleLoader.h"

namespace attnc {

// Whether a varlen forward runs a launch per sequence: prefill-shaped (more than
// kDecodeAutoRows packed rows at q_len), decode not On, no paged K/V, host copies of the given
// cu_seqlens, no prepared inputs, and every sequence with queries has keys (else its rows are
// O = 0 and LSE -inf, the decode kernel's). Otherwise the decode kernel takes it.
bool takesPerSequence(const KernelMetadata& m, const ForwardArgs& args);

// forward() of each sequence's rows (batch 1, its lengths and first rows) on `stream`.
Status launchPerSequence(const Kernel& kernel, Kernel::Impl& impl, const KernelMetadata& m,
                         const ForwardArgs& args, void* stream);

// backward() of each sequence's rows (BackwardArgs::varlen; host copies required).
Status backwardPerSequence(const Kernel& kernel, Kernel::Impl& impl, const KernelMetadata& m,
                           const BackwardArgs& args, void* stream);

// The checks of a varlen backward before its launches: the offsets' host copies, and the
// forward's checks of the same tensors and layout (validate() of the forward they belong to).
Status validateBackwardVarlen(const Kernel& kernel, const BackwardArgs& args);

}  // namespace attnc
