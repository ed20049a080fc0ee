#include "support/test_support.h"

#include <dirent.h>

#include <sstream>

namespace sluice::testing {

std::string bin(const std::string& name) { return std::string(SLUICE_BIN_DIR) + "/" + name; }

std::vector<std::string> sluice_shm_entries() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.find("sluice") != std::string::npos) out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace sluice::testing
