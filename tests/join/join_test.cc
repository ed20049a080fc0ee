// sluice-join through `sluice run`, checked against the single-process
// reference join that rank 0 runs on the same data (--verify): the match
// count and the order-independent checksum of the result must be equal.
// Every run also checks exactly-once delivery through the flows: the bytes
// the targets consumed are exactly what the algorithm must move (each tuple
// once for the radix join; the small relation once per rank for the
// replicate join). The transport comes from SLUICE_TRANSPORT (CTest runs
// this suite once with shm and once with ofi).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::bin;
using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

ProcessResult run_join(int ranks, std::vector<std::string> args,
                       const std::string& program = "sluice-join",
                       std::vector<std::string> launcher = {}) {
  return run_process(sluice::testing::job_argv(ranks, 120, program, args, launcher), {},
                     std::chrono::seconds(150));
}

struct Case {
  const char* name;
  std::vector<std::string> args;
  uint64_t r, s;
  int64_t expect_matches;  // -1: only what the reference says
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

class JoinCorrectnessTest : public ::testing::TestWithParam<Case> {};

// Runs one case with one algorithm and checks it end to end.
void check(const Case& c, const std::string& algorithm, int ranks, int threads,
           uint32_t width = 16) {
  std::vector<std::string> args = {"--verify",    "--json",
                                   "--algorithm", algorithm,
                                   "--threads",   std::to_string(threads),
                                   "--width",     std::to_string(width),
                                   "--r",         std::to_string(c.r),
                                   "--s",         std::to_string(c.s)};
  args.insert(args.end(), c.args.begin(), c.args.end());
  const ProcessResult r = run_join(ranks, args);
  SCOPED_TRACE(c.name + std::string(" / ") + algorithm);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 1) << r.output;
  if (c.expect_matches >= 0) {
    EXPECT_EQ(json_number(r.output, "matches"), static_cast<uint64_t>(c.expect_matches))
        << r.output;
  }
  const uint64_t small = std::min(c.r, c.s);
  const uint64_t moved = algorithm == "radix" ? (c.r + c.s) * width : small * ranks * width;
  EXPECT_EQ(json_number(r.output, "bytes_moved"), moved) << "every tuple must arrive exactly once\n"
                                                         << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST_P(JoinCorrectnessTest, RadixJoinMatchesTheReference) { check(GetParam(), "radix", 3, 2); }

TEST_P(JoinCorrectnessTest, ReplicateJoinMatchesTheReference) {
  check(GetParam(), "replicate", 3, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Distributions, JoinCorrectnessTest,
    ::testing::Values(
        Case{"uniform", {"--dist", "uniform"}, 40000, 120000, 120000},
        Case{"zipf_0_5", {"--dist", "zipf", "--theta", "0.5"}, 40000, 120000, 120000},
        Case{"zipf_1_0", {"--dist", "zipf", "--theta", "1.0"}, 40000, 120000, 120000},
        Case{"zipf_1_5", {"--dist", "zipf", "--theta", "1.5"}, 40000, 120000, 120000},
        // Every key the same on both sides: the result is the cross product.
        Case{"all_keys_equal", {"--dist", "equal", "--r-keys", "dist"}, 300, 4000, 300 * 4000},
        Case{"empty_r", {}, 0, 50000, 0}, Case{"empty_s", {}, 50000, 0, 0},
        Case{"no_matches", {"--selectivity", "0"}, 40000, 60000, 0},
        Case{"half_match", {"--selectivity", "0.5"}, 40000, 60000, -1},
        // Keys from a small domain on both sides: many duplicates in R and in S.
        Case{"duplicates_both_sides", {"--r-keys", "dist", "--domain", "500"}, 20000, 30000, -1},
        Case{"duplicates_zipf_both_sides",
             {"--r-keys", "dist", "--dist", "zipf", "--theta", "0.8", "--domain", "2000"},
             5000,
             8000,
             -1}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(JoinTest, EightByteTuplesJoinOnTheKeyAlone) {
  check(Case{"width8", {}, 60000, 90000, 90000}, "radix", 2, 2, 8);
  check(Case{"width8", {}, 6000, 90000, 90000}, "replicate", 2, 2, 8);
}

TEST(JoinTest, SingleRankAndSingleThread) {
  check(Case{"one", {}, 30000, 30000, 30000}, "radix", 1, 1);
}

TEST(JoinTest, FourRanksOneThreadEach) {
  check(Case{"four", {"--dist", "zipf"}, 50000, 100000, 100000}, "radix", 4, 1);
}

TEST(JoinTest, AutoPicksReplicateForASmallRelationAndSaysWhy) {
  const ProcessResult r =
      run_join(3, {"--verify", "--algorithm", "auto", "--r", "2000", "--s", "200000"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fragment-and-replicate join"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("auto: replicate, because |R| = 2000"), std::string::npos) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 1) << r.output;

  const ProcessResult big =
      run_join(3, {"--verify", "--algorithm", "auto", "--r", "100000", "--s", "100000"});
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("auto: radix, because"), std::string::npos) << big.output;
}

// Fragments written by one run (binary and CSV, one file per rank, or one
// file for all) and loaded by another give the same result.
TEST(JoinFilesTest, LoadsPerRankBinaryAndCsvFiles) {
  char dir[] = "/tmp/sluice-join-files-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string d = dir;
  const ProcessResult gen =
      run_join(3, {"--json", "--r", "3000", "--s", "7000", "--r-keys", "dist", "--domain", "800",
                   "--save-r", d + "/r.{rank}.csv", "--save-s", d + "/s.{rank}.bin"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const ProcessResult load =
      run_join(3, {"--verify", "--json", "--r-file", d + "/r.{rank}.csv", "--s-file",
                   d + "/s.{rank}.bin", "--algorithm", "replicate", "--threads", "2"});
  ASSERT_EQ(load.exit_code, 0) << load.output;
  EXPECT_EQ(json_field(load.output, "verify"), "OK") << load.output;
  EXPECT_EQ(json_field(load.output, "checksum"), json_field(gen.output, "checksum"))
      << gen.output << load.output;
  EXPECT_EQ(json_field(load.output, "matches"), json_field(gen.output, "matches"));
  // One file read by every rank, each taking its share of the rows.
  const ProcessResult shared =
      run_join(2, {"--verify", "--json", "--r-file", d + "/r.1.csv", "--s-file", d + "/s.2.bin"});
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  EXPECT_EQ(json_field(shared.output, "verify"), "OK") << shared.output;
  std::filesystem::remove_all(d);
}

TEST(JoinFilesTest, MalformedInputIsAnErrorNamingTheFile) {
  char path[] = "/tmp/sluice-join-bad-XXXXXX.csv";
  const int fd = ::mkstemps(path, 4);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "1,2\nthree\n", 10), 10);
  ::close(fd);
  const ProcessResult r = run_join(1, {"--r-file", path, "--s-file", path});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string(path) + ":2"), std::string::npos) << r.output;
  ::unlink(path);
}

// Every CSV field is an unsigned decimal integer: a sign, an overflow or
// text is an error naming file:line:column and the field, never a key
// wrapped around 2^64 (strtoull read " -7" as 2^64 - 7 and joined it).
TEST(JoinFilesTest, ACsvKeyThatIsNotAnUnsignedIntegerIsRejectedWithItsPosition) {
  struct Case {
    std::string text, where, field;
  };
  for (const Case& c :
       {Case{"1,2\n -7\n", ":2:2:", "the key must be an unsigned integer below 2^64, not '-7'"},
        Case{"18446744073709551616\n", ":1:1:", "not '18446744073709551616'"},
        Case{"4,+5\n", ":1:3:", "the payload must be an unsigned integer"},
        Case{"4,5,6\n", ":1:4:", "trailing text after key,payload"},
        Case{"x7\n", ":1:1:", "not 'x7'"}}) {
    char path[] = "/tmp/sluice-join-key-XXXXXX.csv";
    const int fd = ::mkstemps(path, 4);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, c.text.data(), c.text.size()), static_cast<ssize_t>(c.text.size()));
    ::close(fd);
    const ProcessResult r = run_join(1, {"--r-file", path, "--s-file", path});
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string(path) + c.where), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.field), std::string::npos) << r.output;
    ::unlink(path);
  }
  // Spaces around a field and a CRLF line end are fine.
  char path[] = "/tmp/sluice-join-key-XXXXXX.csv";
  const int fd = ::mkstemps(path, 4);
  ASSERT_GE(fd, 0);
  const std::string good = " 5 , 6 \r\n7\r\n";
  ASSERT_EQ(::write(fd, good.data(), good.size()), static_cast<ssize_t>(good.size()));
  ::close(fd);
  const ProcessResult ok = run_join(1, {"--json", "--verify", "--r-file", path, "--s-file", path});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(json_field(ok.output, "verify"), "OK") << ok.output;
  ::unlink(path);
}

TEST(JoinBaselineTest, SingleThreadBaselineComputesTheSameResult) {
  const ProcessResult dist =
      run_join(2, {"--json", "--r", "50000", "--s", "80000", "--dist", "zipf"});
  ASSERT_EQ(dist.exit_code, 0) << dist.output;
  const ProcessResult single = run_process({bin("sluice-join-single"), "--json", "--verify", "--r",
                                            "50000", "--s", "80000", "--dist", "zipf"});
  ASSERT_EQ(single.exit_code, 0) << single.output;
  EXPECT_NE(single.output.find("verify: OK"), std::string::npos) << single.output;
  EXPECT_EQ(json_field(single.output, "checksum"), json_field(dist.output, "checksum"))
      << single.output << dist.output;
}

// The MPI baseline, where Open MPI is installed (bench/join/install.sh).
TEST(JoinBaselineTest, MpiBaselineComputesTheSameResult) {
  if (::access(bin("sluice-join-mpi").c_str(), X_OK) != 0 ||
      ::access("/usr/bin/mpirun", X_OK) != 0) {
    GTEST_SKIP() << "no MPI here: sluice-join-mpi is built only where find_package(MPI) finds it";
  }
  const ProcessResult mpi =
      run_process({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                   bin("sluice-join-mpi"), "--verify", "--json", "--r", "40000", "--s", "90000"},
                  // In sanitizer builds: Open MPI keeps allocations past
                  // MPI_Finalize (in libmpi and its plugins), which
                  // LeakSanitizer would report as the baseline's failure.
                  {{"ASAN_OPTIONS", "detect_leaks=0"}}, std::chrono::seconds(120));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  EXPECT_EQ(json_field(mpi.output, "verify"), "OK") << mpi.output;
  EXPECT_EQ(json_number(mpi.output, "matches"), 90000u) << mpi.output;
}

// kill -9 of one rank in the middle of the join: the job fails, says which
// rank died, the survivors report the lost peer instead of hanging, and
// nothing is left in /dev/shm.
void expect_clean_failure_after_kill(const std::string& algorithm) {
  const ProcessResult r =
      run_join(3,
               {"--algorithm", algorithm, "--r", "3000000", "--s", "3000000", "--threads", "2",
                "--test-kill-rank", "1", "--test-kill-after", "100000"},
               "sluice-join-test-hooks", {"--grace", "20"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  // Both survivors fail with PeerLost; at least one names the dead rank (the
  // other may first see a flow of the first survivor end, which says so).
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "join failed: "), 2) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "PeerLost"), 2) << r.output;
  const std::regex lost("rank [02]: join failed: .*rank 1[^0-9]");
  int naming = 0;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) naming += std::regex_search(line, lost);
  EXPECT_GE(naming, 1) << r.output;
  EXPECT_EQ(r.output.find("verify: OK"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60) << "the job should end soon after the kill, not at its timeout";
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(JoinFaultTest, RankKilledMidRadixJoinFailsTheJobWithAClearMessage) {
  expect_clean_failure_after_kill("radix");
}

TEST(JoinFaultTest, RankKilledWhileReplicatingFailsTheJobWithAClearMessage) {
  expect_clean_failure_after_kill("replicate");
}

}  // namespace
