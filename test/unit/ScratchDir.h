// A test's own directory under $TMPDIR (else /tmp), named for the test and the process, empty when
// made and removed with everything in it when the object goes out of scope, so that test runs
// leave nothing behind. create=false leaves making it to the code under test.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

namespace attnc::testing {

class ScratchDir {
public:
  explicit ScratchDir(const std::string& name, bool create = true) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/attnc-unit-" + name + "-" +
            std::to_string(getpid());
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    if (create) std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  operator const std::string&() const { return path_; }

private:
  std::string path_;
};

}  // namespace attnc::testing
