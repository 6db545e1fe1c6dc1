// Sizing and growing the device buffers the runtime keeps (workspaces, summaries, prepared
// inputs); attnc::DeviceBuffer itself is declared in attnc/attnc.h.
#pragma once

#include "attnc/attnc.h"

#include <cstddef>
#include <string>

namespace attnc {

// Byte counts computed from lengths saturate at SIZE_MAX rather than wrap: a buffer sized from
// them then fails to allocate instead of coming back too small.
size_t saturatingProduct(size_t a, size_t b);
size_t saturatingSum(size_t a, size_t b);

// `bytes` rounded up to a multiple of 256 (the alignment of each region inside one buffer),
// saturating at SIZE_MAX.
size_t align256(size_t bytes);

// Grows `buffer` to at least `bytes` (never shrinks). Work already enqueued may still use the old
// buffer, so `wait(&error)` (synchronizing whatever uses it) runs before it is freed; on failure
// *waitFailed says whether waiting (true) or allocating failed.
template <class Wait>
Status growBuffer(DeviceBuffer& buffer, size_t bytes, Wait wait, bool* waitFailed) {
  *waitFailed = false;
  if (buffer.size() >= bytes) return Status::success();
  std::string error;
  if (buffer.data() && !wait(&error)) {
    *waitFailed = true;
    return Status::error(error);
  }
  buffer = DeviceBuffer();
  Status status;
  buffer = DeviceBuffer::allocate(bytes, &status);
  return status;
}

struct DriverApi;
namespace cu {
using Stream = struct CUstream_st*;
}

// growBuffer for a buffer a kernel keeps for its launches (a workspace, a scratch): refused on a
// stream that is capturing a CUDA graph when it must grow (a capture cannot allocate), and waits
// for the context before freeing the old one. Messages start with `who` ("Kernel::backward")
// and name the buffer (`what`, "workspace"); `instead` says what the caller may pass instead
// ("BackwardArgs::workspace"), or is empty.
Status growKernelBuffer(const DriverApi& driver, cu::Stream stream, DeviceBuffer& buffer,
                        size_t bytes, const std::string& who, const std::string& what,
                        const std::string& instead);

}  // namespace attnc
