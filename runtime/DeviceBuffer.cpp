// attnc::DeviceBuffer through the dlopen-ed driver, synchronize(), and the byte arithmetic that
// sizes the runtime's buffers (DeviceBuffer.h).
#include "runtime/DeviceBuffer.h"

#include "runtime/Driver.h"

#include <cstdint>

namespace attnc {

size_t saturatingProduct(size_t a, size_t b) {
  size_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? SIZE_MAX : product;
}
size_t saturatingSum(size_t a, size_t b) {
  size_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? SIZE_MAX : sum;
}

size_t align256(size_t bytes) {
  return bytes > SIZE_MAX - 255 ? SIZE_MAX : (bytes + 255) / 256 * 256;
}

DeviceBuffer::~DeviceBuffer() {
  std::string error;
  if (pointer_)
    if (const DriverApi* driver = DriverApi::get(&error)) driver->cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(other.pointer_), size_(other.size_) {
  other.pointer_ = 0;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    pointer_ = other.pointer_;
    size_ = other.size_;
    other.pointer_ = 0;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer DeviceBuffer::allocate(size_t bytes, Status* status) {
  std::string error;
  DeviceBuffer buffer;
  cu::Context context = nullptr;
  const DriverApi* driver = driverInContext(&context, &error);
  if (driver && driver->check(driver->cuMemAlloc(&buffer.pointer_, bytes ? bytes : 1),
                              "cuMemAlloc", &error)) {
    buffer.size_ = bytes;
    if (status) *status = Status::success();
    return buffer;
  }
  if (status)
    *status = Status::error("DeviceBuffer::allocate(" + std::to_string(bytes) + "): " + error);
  return DeviceBuffer();
}

Status DeviceBuffer::upload(const void* host, size_t bytes) {
  std::string error;
  if (bytes > size_)
    return Status::error("DeviceBuffer::upload: expected at most " + std::to_string(size_) +
                         " bytes, got " + std::to_string(bytes));
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver ||
      !driver->check(driver->cuMemcpyHtoD(pointer_, host, bytes), "cuMemcpyHtoD", &error))
    return Status::error("DeviceBuffer::upload: " + error);
  return Status::success();
}

Status DeviceBuffer::download(void* host, size_t bytes) const {
  std::string error;
  if (bytes > size_)
    return Status::error("DeviceBuffer::download: expected at most " + std::to_string(size_) +
                         " bytes, got " + std::to_string(bytes));
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver ||
      !driver->check(driver->cuMemcpyDtoH(host, pointer_, bytes), "cuMemcpyDtoH", &error))
    return Status::error("DeviceBuffer::download: " + error);
  return Status::success();
}

Status DeviceBuffer::copyFrom(size_t offset, const DeviceBuffer& source, size_t sourceOffset,
                              size_t bytes) {
  auto outside = [&](const char* name, size_t start, size_t size) {
    return Status::error("DeviceBuffer::copyFrom: " + std::string(name) + " + bytes = " +
                         std::to_string(start) + " + " + std::to_string(bytes) +
                         ": expected at most the buffer's " + std::to_string(size) + " bytes");
  };
  if (offset > size_ || bytes > size_ - offset) return outside("offset", offset, size_);
  if (sourceOffset > source.size_ || bytes > source.size_ - sourceOffset)
    return outside("sourceOffset", sourceOffset, source.size_);
  if (&source == this && bytes > 0 && offset < sourceOffset + bytes &&
      sourceOffset < offset + bytes)
    return Status::error("DeviceBuffer::copyFrom: offset " + std::to_string(offset) +
                         " and sourceOffset " + std::to_string(sourceOffset) +
                         " in one buffer: expected ranges of " + std::to_string(bytes) +
                         " bytes that do not overlap");
  if (bytes == 0) return Status::success();
  std::string error;
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver || !driver->check(driver->cuMemcpyDtoD(pointer_ + offset,
                                                     source.pointer_ + sourceOffset, bytes),
                                "cuMemcpyDtoD", &error))
    return Status::error("DeviceBuffer::copyFrom: " + error);
  return Status::success();
}

Status synchronize() {
  std::string error;
  const DriverApi* driver = DriverApi::get(&error);
  if (!driver || !driver->check(driver->cuCtxSynchronize(), "cuCtxSynchronize", &error))
    return Status::error("synchronize: " + error);
  return Status::success();
}

Status growKernelBuffer(const DriverApi& driver, cu::Stream stream, DeviceBuffer& buffer,
                        size_t bytes, const std::string& who, const std::string& what,
                        const std::string& instead) {
  if (buffer.size() < bytes && driver.capturing(stream))
    return Status::error(who + ": the stream is capturing a CUDA graph, and the kernel's " + what +
                         " must first grow to " + std::to_string(bytes) +
                         " bytes, which a capture cannot hold: " +
                         (instead.empty() ? "" : "pass " + instead + ", or ") +
                         "launch once with these sizes before capturing");
  bool waitFailed = false;
  Status grown = growBuffer(
      buffer, bytes,
      [&](std::string* why) {
        return driver.check(driver.cuCtxSynchronize(), "cuCtxSynchronize", why);
      },
      &waitFailed);
  if (grown) return grown;
  if (waitFailed) return Status::error(who + ": growing the " + what + ": " + grown.message);
  return Status::error(who + ": allocating a " + std::to_string(bytes) + "-byte " + what + ": " +
                       grown.message + (instead.empty() ? "" : " (or pass " + instead + ")"));
}

}  // namespace attnc
