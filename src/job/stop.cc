// sluice::enable_stop_signals and stop_requested (sluice/job.h): the first
// SIGINT or SIGTERM asks a program that runs until stopped to finish; a
// second one ends it as by default.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "sluice/job.h"

namespace sluice {
namespace {

std::atomic<bool> stop_flag{false};

// Async-signal-safe: an atomic store, sigaction and write(2) only.
extern "C" void on_stop_signal(int sig) {
  stop_flag.store(true, std::memory_order_release);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)sigaction(sig, &dfl, nullptr);
  const char* line = sig == SIGINT ? "sluice: SIGINT: stopping (send it again to end at once)\n"
                                   : "sluice: SIGTERM: stopping (send it again to end at once)\n";
  (void)!::write(STDERR_FILENO, line, std::strlen(line));
}

}  // namespace

void enable_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  (void)sigaction(SIGINT, &sa, nullptr);
  (void)sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return stop_flag.load(std::memory_order_acquire); }

}  // namespace sluice
