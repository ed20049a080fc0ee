// A rank that dies of a signal is reported as such by `sluice run`, even
// though it links libfabric (whose Debian build pulls in libinfinipath, which
// would turn SIGTERM and SIGSEGV into exit(1)) and has an ofi endpoint open.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
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

TEST(RankSignalTest, AProgramThatOpensNoOfiEndpointDoesNotLoadLibfabric) {
  // (Linking it would cost every process the PSM libraries' start-up sleeps.)
  // Before the next test, which loads it into this process.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) EXPECT_EQ(line.find("libfabric"), std::string::npos) << line;
}

void program_handler(int) {}

TEST(RankSignalTest, LoadingLibfabricKeepsTheProgramsHandlersAndTheDefaults) {
  // libfabric is loaded when first needed, here: its dependencies'
  // constructors install handlers for all six signals, which loading puts
  // back to what they were (the program's own for SIGTERM, else the default).
  struct sigaction mine {};
  mine.sa_handler = program_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, nullptr), 0);
  detail::ofi::restore_signal_dispositions();
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM}) {
    struct sigaction now {};
    ASSERT_EQ(::sigaction(sig, nullptr, &now), 0);
    void* expected = reinterpret_cast<void*>(sig == SIGTERM ? program_handler : SIG_DFL);
    EXPECT_EQ(reinterpret_cast<void*>(now.sa_handler), expected) << "signal " << sig;
  }
}

}  // namespace
}  // namespace sluice
