// attnc's error value: every public call reports failure as a Status with a message naming the
// argument and what was expected vs given; nothing in the API aborts or throws.
#pragma once

#include <string>

namespace attnc {

struct Status {
  bool ok = true;
  std::string message;  // empty when ok

  static Status success() { return {}; }
  static Status error(std::string message) { return {false, std::move(message)}; }
  explicit operator bool() const { return ok; }
};

}  // namespace attnc
