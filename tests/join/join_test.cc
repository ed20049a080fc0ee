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
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::bin;
using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::over_ofi;
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
  EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
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
  EXPECT_EQ(r.exit_code, 2) << "unusable input is a usage error\n" << r.output;
  EXPECT_NE(r.output.find(std::string(path) + ":2"), std::string::npos) << r.output;
  ::unlink(path);
}

// Every CSV field is an unsigned decimal integer: a sign, an overflow or
// text is a usage error (exit status 2) naming file:line:column and the
// field, never a key wrapped around 2^64 (strtoull read " -7" as 2^64 - 7
// and joined it).
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
    EXPECT_EQ(r.exit_code, 2) << r.output;
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

// A whole-number flag is decimal digits: CLI11 alone would read "-7" as
// 2^64 - 7 and "010" as octal 8. Bad values are usage errors (status 2)
// that name the flag, found before the job starts.
TEST(JoinOptionsTest, ANumberFlagThatIsNotADecimalWholeNumberIsAUsageError) {
  for (const std::string bad : {"--r=-7", "--s= 5", "--seed=0x10", "--domain=1e6"}) {
    const ProcessResult r = run_process({bin("sluice-join"), bad});
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find(bad.substr(0, bad.find('=')) + ": needs a whole number"),
              std::string::npos)
        << r.output;
  }
  const ProcessResult octal =
      run_join(1, {"--json", "--r", "1000", "--s", "3000", "--seed", "010"});
  const ProcessResult decimal =
      run_join(1, {"--json", "--r", "1000", "--s", "3000", "--seed", "10"});
  ASSERT_EQ(octal.exit_code, 0) << octal.output;
  ASSERT_EQ(decimal.exit_code, 0) << decimal.output;
  EXPECT_EQ(json_field(octal.output, "seed"), "10") << octal.output;
  EXPECT_EQ(json_field(octal.output, "checksum"), json_field(decimal.output, "checksum"));
  // Flags of the same program that go together, and values from a set.
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--r-file", "r.csv"},
                                              {"--width", "12"},
                                              {"--dist", "normal"},
                                              {"--algorithm", "nested-loop"},
                                              {"--selectivity", "1.5"}}) {
    std::vector<std::string> argv = {bin("sluice-join")};
    argv.insert(argv.end(), bad.begin(), bad.end());
    const ProcessResult r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << "\n" << r.output;
    EXPECT_NE(r.output.find(bad[0]), std::string::npos) << r.output;
  }
}

// --help lists every flag, the program's own and the shared data flags.
TEST(JoinOptionsTest, HelpListsTheFlagsOfEachProgram) {
  const ProcessResult join = run_process({bin("sluice-join"), "--help"});
  EXPECT_EQ(join.exit_code, 0) << join.output;
  for (const char* flag : {"--threads", "--verify", "--json", "--algorithm", "--segment-bytes",
                           "--save-r", "--r ", "--width", "--dist", "--r-file", "--seed"}) {
    EXPECT_NE(join.output.find(flag), std::string::npos) << flag << "\n" << join.output;
  }
  const ProcessResult single = run_process({bin("sluice-join-single"), "--help"});
  EXPECT_EQ(single.exit_code, 0) << single.output;
  for (const char* flag : {"--method", "--repeat", "--ranks", "--verify", "--json", "--r ",
                           "--theta", "--selectivity", "--s-file"}) {
    EXPECT_NE(single.output.find(flag), std::string::npos) << flag << "\n" << single.output;
  }
  EXPECT_EQ(single.output.find("--threads"), std::string::npos) << single.output;
  EXPECT_EQ(single.output.find("--algorithm"), std::string::npos) << single.output;
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

// The launcher kills rank 1 (SIGKILL, `sluice run --kill`; no rank is told)
// in the middle of the join: the job fails, each survivor names rank 1 as
// the cause instead of hanging or naming the echoes of its loss, and nothing
// is left in /dev/shm. One-tuple segments in rings of two keep 8 M tuples
// in flight for long (over shm about 12 s for the radix join, 15 s for
// replicate; far longer over ofi), and the kill comes well after set-up
// (generating the data and declaring the flows: about a second over shm, a
// few over ofi, more on a loaded machine).
void expect_clean_failure_after_kill(const std::string& algorithm) {
  // Half a second after rank 0 says the join started on every rank (the
  // flows are up, the tuples moving through 16-byte segments; no rank is
  // told of the fault).
  const std::string kill = "1@0.5";
  const ProcessResult r =
      run_join(3,
               {"--algorithm", algorithm, "--r", "4000000", "--s", "4000000", "--threads", "2",
                "--segment-bytes", "16", "--ring-segments", "2"},
               "sluice-join",
               {"--grace", "20", "--faults-after", "join started on every rank", "--kill", kill});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "injecting --kill " + kill), 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  // Each survivor names rank 1 as the root cause: mostly as "join failed:
  // rank 1 was lost", or without the "join failed" where a survivor's
  // worker had not yet passed its own start when the kill came.
  for (const std::string rank : {"0", "2"}) {
    EXPECT_EQ(
        sluice::testing::count_lines_with_all(
            r.output, {"[" + rank + "] sluice-join: rank " + rank + ": ", "rank 1 was lost: "}),
        1)
        << r.output;
  }
  EXPECT_EQ(r.output.find("verify: OK"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("matches,"), std::string::npos) << r.output;
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
