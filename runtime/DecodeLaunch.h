// The decode path of Kernel::forward (templates/attnc/sm80/decode.h): which launches take it, the
// plan of a launch (rows, row tiles, kv splits, workspace) and the launch itself.
#pragma once

#include "attnc/attnc.h"
#include "attnc/common/params.h"
#include "runtime/PreparedInputs.h"

namespace attnc {

// Whether a forward with (validated) `args` takes the decode kernel: decode = On, or Auto with a
// varlen or paged layout, or with few packed rows (kDecodeAutoRows) where the kernel has one.
bool takesDecode(const KernelMetadata& m, const ForwardArgs& args);

// Packed rows (heads_q / heads_kv x q_len) up to which Auto takes the decode kernel for a
// contiguous launch: past them a block's rows are many tiles of mma work, which the forward
// kernel's larger tiles do better.
constexpr int64_t kDecodeAutoRows = 64;

// The plan of a decode launch of image `m` on a device of numSMs SMs that holds blocksPerSM decode
// blocks each (common/split_kv.h's rule, or args.num_splits).
DecodePlan decodePlanFor(const KernelMetadata& m, const ForwardArgs& args, int numSMs,
                         int blocksPerSM);

// Kernel::forward's launch when takesDecode(): `m` is the kernel's metadata, `prepared`
// args.prepared's implementation (or null). Validated arguments.
Status launchDecode(Kernel::Impl& impl, const KernelMetadata& m, const ForwardArgs& args,
                    const PreparedInputs::Impl* prepared, void* stream);

// The sequences' layout the kernels read (params.h SeqLayout) from the launch's arguments.
SeqLayout seqLayoutOf(const ForwardArgs& args);

}  // namespace attnc
