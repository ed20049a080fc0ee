// SLUICE_CHECK: an always-on invariant check. On failure it prints the
// condition, the place and a message, then aborts: it guards states that only
// a bug in sluice (never user input, never a peer) can produce.
#pragma once

#include <string>

namespace sluice::detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               const std::string& msg);
}

#define SLUICE_CHECK(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::sluice::detail::check_failed(#cond, __FILE__, __LINE__, ::std::string{__VA_ARGS__}); \
  } while (0)
