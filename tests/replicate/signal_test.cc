// A rank that dies of a signal is reported as such by `sluice run`, even
// though it links libfabric (whose Debian build pulls in libinfinipath, which
// would turn SIGTERM and SIGSEGV into exit(1)) and has an ofi endpoint open.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <string>

#include "support/test_support.h"
#include "transport/ofi/ofi.h"

namespace sluice {
namespace {

using testing::bin;
using testing::count_lines_with;

testing::ProcessResult die_of(int sig) {
  return testing::run_process(
      {bin("sluice"), "run", "-n", "1", "--timeout", "60", "--", bin("sluice-replicate-worker"),
       "--mode", "signal", "--signal", std::to_string(sig)},
      {{"SLUICE_TRANSPORT", "ofi"}}, std::chrono::seconds(90));
}

TEST(RankSignalTest, RankWithAnOfiEndpointTerminatedBySigtermIsReportedAsKilledBySignal15) {
  auto r = die_of(SIGTERM);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "exposed over ofi"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "rank 0 was killed by signal 15 (SIGTERM)"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "exited with status"), 0) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(RankSignalTest, RankWithAnOfiEndpointThatCrashesIsReportedAsKilledBySignal11) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer runtime reports a SIGSEGV itself and exits with status 1";
#endif
  auto r = die_of(SIGSEGV);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "rank 0 was killed by signal 11 (SIGSEGV)"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "exited with status"), 0) << r.output;
}

// Whether libfabric is mapped into this process.
bool libfabric_loaded() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("libfabric") != std::string::npos) return true;
  }
  return false;
}

TEST(RankSignalTest, AProgramThatOpensNoOfiEndpointDoesNotLoadLibfabric) {
  // (Linking it would cost every process the PSM libraries' start-up sleeps.)
  // Before the next test, which loads it into this process.
  EXPECT_FALSE(libfabric_loaded());
}

void program_handler(int) {}

TEST(RankSignalTest, LoadingLibfabricKeepsWhatTheSignalsHadBefore) {
  // libfabric is loaded when first needed, here: its dependencies'
  // constructors install handlers for all six signals, which loading puts
  // back to what they were: the program's own for SIGTERM, and whatever the
  // others had (the default, or a sanitizer runtime's handler).
  ASSERT_FALSE(libfabric_loaded()) << "the test needs a process that has not loaded it yet";
  struct sigaction mine {};
  mine.sa_handler = program_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, nullptr), 0);
  const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM};
  void* before[std::size(sigs)];
  for (size_t i = 0; i < std::size(sigs); ++i) {
    struct sigaction now {};
    ASSERT_EQ(::sigaction(sigs[i], nullptr, &now), 0);
    before[i] = reinterpret_cast<void*>(now.sa_handler);
  }
  detail::ofi::restore_signal_dispositions();
  ASSERT_TRUE(libfabric_loaded());
  for (size_t i = 0; i < std::size(sigs); ++i) {
    struct sigaction now {};
    ASSERT_EQ(::sigaction(sigs[i], nullptr, &now), 0);
    EXPECT_EQ(reinterpret_cast<void*>(now.sa_handler), before[i]) << "signal " << sigs[i];
  }
  EXPECT_EQ(before[std::size(sigs) - 1], reinterpret_cast<void*>(program_handler));
}

}  // namespace
}  // namespace sluice
