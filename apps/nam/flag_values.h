// The numeric flag values the sluice-nam commands accept, parsed strictly
// (the whole text, no sign for unsigned, no overflow); each command's
// option parser turns a nullopt into its usage error naming the flag.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>

namespace sluice::nam {

inline std::optional<uint64_t> unsigned_value(const char* v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-') return std::nullopt;
  return x;
}

inline std::optional<double> real_value(const char* v) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0') return std::nullopt;
  return x;
}

}  // namespace sluice::nam
