#include "common/test_hooks.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "sluice/version.h"

namespace sluice::detail::test_hooks {
namespace {

[[maybe_unused]] uint64_t number(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? 0 : std::strtoull(v, nullptr, 10);
}

}  // namespace

#if defined(SLUICE_TEST_HOOKS)
bool enabled() { return true; }
uint64_t die_after_sequence() {
  static const uint64_t n = number("SLUICE_TEST_DIE_AFTER_SEQUENCE");
  return n;
}
uint64_t ofi_eagain_every() {
  static const uint64_t n = number("SLUICE_TEST_OFI_EAGAIN_EVERY");
  return n;
}
bool ofi_unordered() {
  static const bool on = [] {
    const char* v = std::getenv("SLUICE_OFI_TEST_UNORDERED");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
uint64_t ofi_close_delay_ms() {
  static const uint64_t n = number("SLUICE_TEST_OFI_CLOSE_DELAY_MS");
  return n;
}
bool ofi_no_wait_fd() {
  static const bool on = number("SLUICE_TEST_OFI_NO_WAIT_FD") != 0;
  return on;
}
bool ofi_close_no_flush() {
  static const bool on = number("SLUICE_TEST_OFI_CLOSE_NO_FLUSH") != 0;
  return on;
}
uint64_t ofi_impersonate(uint32_t rank) {
  const char* v = std::getenv("SLUICE_TEST_OFI_IMPERSONATE");
  if (v == nullptr) return 0;
  char* colon = nullptr;
  const uint64_t r = std::strtoull(v, &colon, 10);
  if (colon == nullptr || *colon != ':' || r != rank) return 0;
  return std::strtoull(colon + 1, nullptr, 10) + 1;
}
bool region_post_refused() {
  const char* v = std::getenv("SLUICE_TEST_REGION_POST_REFUSED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}
uint64_t map_delay_ms(uint32_t rank, const std::string& flow) {
  const char* v = std::getenv("SLUICE_TEST_MAP_DELAY");
  if (v == nullptr) return 0;
  const std::string all(v);
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    const std::string entry = all.substr(at, end - at);
    at = end + 1;
    const size_t first = entry.find(':'), last = entry.rfind(':');
    if (first == std::string::npos || last == first) continue;
    if (std::strtoull(entry.c_str(), nullptr, 10) != rank) continue;
    if (entry.compare(first + 1, last - first - 1, flow) != 0) continue;
    return std::strtoull(entry.c_str() + last + 1, nullptr, 10);
  }
  return 0;
}

namespace {
std::atomic<uint64_t> delayed_fences{0};
std::atomic<uint64_t> ended_fence_delays{0};
}  // namespace
void delay_fence() {
  const uint64_t ms = number("SLUICE_TEST_FENCE_DELAY_MS");
  if (ms == 0) return;
  delayed_fences.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  ended_fence_delays.fetch_add(1);
}
uint64_t fences_delayed() { return delayed_fences.load(); }
uint64_t fence_delays_ended() { return ended_fence_delays.load(); }

namespace {
thread_local int destructor_depth = 0;
std::atomic<uint64_t> waits_in_destructors{0};
std::once_flag first_wait_once;
std::string first_wait;  // written once, under first_wait_once

bool check_destructor_waits() {
  static const bool on = number("SLUICE_TEST_DESTRUCTOR_WAITS") != 0;
  return on;
}

void report_destructor_waits() {
  const uint64_t n = waits_in_destructors.load();
  if (n == 0) return;
  std::fprintf(stderr,
               "sluice: %llu blocking wait(s) were entered from a destructor (the first: %s); "
               "destructors must never block\n",
               static_cast<unsigned long long>(n), first_wait.c_str());
  std::fflush(stderr);
  std::_Exit(kDestructorWaitStatus);
}
}  // namespace

DestructorScope::DestructorScope() { ++destructor_depth; }
DestructorScope::~DestructorScope() { --destructor_depth; }
void note_blocking_wait(const char* what) {
  if (destructor_depth == 0 || !check_destructor_waits()) return;
  std::call_once(first_wait_once, [what] {
    first_wait = what;
    std::atexit(report_destructor_waits);
  });
  waits_in_destructors.fetch_add(1);
}
uint64_t destructor_waits() { return waits_in_destructors.load(); }
#else
DestructorScope::DestructorScope() {}
DestructorScope::~DestructorScope() {}
void note_blocking_wait(const char*) {}
uint64_t destructor_waits() { return 0; }
bool enabled() { return false; }
uint64_t die_after_sequence() { return 0; }
uint64_t ofi_eagain_every() { return 0; }
bool ofi_unordered() { return false; }
uint64_t ofi_close_delay_ms() { return 0; }
uint64_t ofi_impersonate(uint32_t) { return 0; }
bool ofi_no_wait_fd() { return false; }
bool ofi_close_no_flush() { return false; }
bool region_post_refused() { return false; }
uint64_t map_delay_ms(uint32_t, const std::string&) { return 0; }
void delay_fence() {}
uint64_t fences_delayed() { return 0; }
uint64_t fence_delays_ended() { return 0; }
#endif

}  // namespace sluice::detail::test_hooks

namespace sluice {

// In this file, as enabled() is: a test program's object of it (hooks on)
// supplies both, and the library's copy is never linked there.
bool test_hooks_enabled() { return detail::test_hooks::enabled(); }

}  // namespace sluice
