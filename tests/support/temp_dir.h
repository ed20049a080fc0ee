// tests/support/temp_dir.h: a directory of a test's own under the system's
// temporary one (kv's --data-dir tests, the replay test's saved states),
// removed with what it holds when the test is done. Header-only, so that
// unit tests that link no test support use it too.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace sluice::testing {

class TempDir {
 public:
  // `prefix`: the start of its name, e.g. "sluice-kv-wal".
  explicit TempDir(const std::string& prefix) {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path_ = ::mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Empty if it could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace sluice::testing
