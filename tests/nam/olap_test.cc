// sluice-nam-olap through `sluice run`: the RDMA radix join (and the grace
// hash join with and without a Bloom-filter semi-join reduction) and the
// RDMA aggregation (and the hierarchical one). Every run checks each
// algorithm against the command's single-process reference (its exit status
// and "verify: OK"); the tests also check the results against DuckDB
// (tests/nam/duckdb_olap.py on the CSV the memory servers wrote with
// --dump): match counts, group counts and order-independent checksums must
// be equal exactly. The transport comes from SLUICE_TRANSPORT (CTest runs
// the suite over shm, ofi, and ofi with emulated atomics).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::count_lines_with;
using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::over_ofi;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

// Compute threads per rank: over ofi (tcp) every thread's flow endpoints
// take setup time on this shared machine.
std::string threads() { return over_ofi() ? "1" : "2"; }

std::string expected_path() {
  const char* atomic = std::getenv("SLUICE_OFI_ATOMIC");
  if (!over_ofi()) return "shm";
  return atomic != nullptr && std::string(atomic) == "0" ? "ofi (emulated atomics)" : "ofi";
}

ProcessResult run_olap(int ranks, const std::vector<std::string>& args,
                       const std::string& program = "sluice-nam-olap",
                       const std::vector<std::string>& launcher = {}) {
  return run_process(sluice::testing::job_argv(ranks, 90, program, args, launcher), {},
                     std::chrono::seconds(120));
}

// A fresh directory for --dump, removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("nam-olap-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// DuckDB's answer as "name value" pairs, or a skip reason.
std::string duckdb(const std::string& kind, const std::string& dir) {
  const ProcessResult r =
      run_process({SLUICE_NAM_PYTHON, SLUICE_NAM_OLAP_ORACLE, "--kind", kind, "--dir", dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

uint64_t word_after(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (w == name) {
      uint64_t v = 0;
      in >> v;
      return v;
    }
  }
  ADD_FAILURE() << "no '" << name << "' in " << text;
  return ~uint64_t{0};
}

bool have_python() { return ::access(SLUICE_NAM_PYTHON, X_OK) == 0; }

void expect_join_ok(const ProcessResult& r, const std::vector<std::string>& algorithms) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(json_field(r.output, "path"), expected_path()) << r.output;
  const uint64_t matches = json_number(r.output, "reference_matches");
  const uint64_t checksum = json_number(r.output, "reference_checksum");
  // apps/join's flow radix join folds its pairs with apps/join's checksum,
  // which the reference computes too.
  const uint64_t flow_checksum = json_number(r.output, "reference_flow_checksum");
  EXPECT_NE(flow_checksum, checksum) << r.output;
  for (const std::string& a : algorithms) {
    EXPECT_EQ(json_number(r.output, a + "_matches"), matches) << a << "\n" << r.output;
    EXPECT_EQ(json_number(r.output, a + "_checksum"), a == "flow_radix" ? flow_checksum : checksum)
        << a << "\n"
        << r.output;
    EXPECT_EQ(json_field(r.output, a + "_verify"), "OK") << a << "\n" << r.output;
  }
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Two memory servers, two compute ranks of two threads: all three joins,
// against the reference and DuckDB; the RRJ really used the one-sided path
// and the Bloom filters really cut the shuffled tuples.
TEST(NamOlapTest, JoinsMatchTheReferenceAndDuckDB) {
  TempDir dir;
  const std::string rows = over_ofi() ? "6000" : "20000";
  const ProcessResult r =
      run_olap(4, {"join", "--memory-servers", "2", "--threads", threads(), "--r", rows, "--s",
                   rows, "--selectivity", "0.5", "--dump", dir.path.string(), "--json"});
  expect_join_ok(r, {"rrj", "ghj", "ghj_bloom", "flow_radix"});
  const uint64_t matches = json_number(r.output, "reference_matches");
  const uint64_t n = std::stoull(rows);
  EXPECT_GT(matches, n * 4 / 10) << r.output;
  EXPECT_LT(matches, n * 6 / 10) << r.output;
  EXPECT_GT(json_number(r.output, "rrj_remote_ops"), 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "ghj_flow_records"), 2 * n) << r.output;
  EXPECT_LT(json_number(r.output, "ghj_bloom_flow_records"), 2 * n * 7 / 10) << r.output;
  // The flow radix join ran on the compute ranks only, over the same data:
  // every tuple of R and S went through its flows once.
  EXPECT_EQ(json_number(r.output, "flow_radix_flow_records"), 2 * n) << r.output;
  if (!have_python())
    GTEST_SKIP() << "no " << SLUICE_NAM_PYTHON << ": run scripts/install-deps.sh for DuckDB";
  const std::string oracle = duckdb("join", dir.path.string());
  EXPECT_EQ(word_after(oracle, "matches"), matches) << oracle;
  EXPECT_EQ(word_after(oracle, "checksum"), json_number(r.output, "reference_checksum")) << oracle;
  EXPECT_EQ(word_after(oracle, "flow_checksum"), json_number(r.output, "reference_flow_checksum"))
      << oracle;
}

// The paper's other selectivities (and a partly filled last chunk: odd
// sizes; S larger than R: R keys with two partners), one memory server,
// against the reference; the first with inline shipping.
TEST(NamOlapTest, JoinSelectivities) {
  for (const char* selectivity : {"0.25", "0.75", "1.0"}) {
    const std::string shipping = std::string(selectivity) == "0.25" ? "inline" : "background";
    const ProcessResult r = run_olap(
        3, {"join", "--r", over_ofi() ? "3001" : "12345", "--s", over_ofi() ? "4999" : "15001",
            "--selectivity", selectivity, "--partitions", "8", "--shipping", shipping, "--json"});
    SCOPED_TRACE(selectivity);
    expect_join_ok(r, {"rrj", "ghj", "ghj_bloom", "flow_radix"});
  }
}

// All of S on one key (|R| = 1): one partition gets everything. Its memory
// server, sized for an even share, runs out of space: a clear error naming
// the flag and no result, never a partial one; with more space the skewed
// join is exact (20000 matches of the one R row).
TEST(NamOlapTest, SkewedJoinRunsOutOfSpaceClearlyAndFitsWithMore) {
  const std::vector<std::string> args = {
      "join", "--r",          "1", "--s",          "20000",  "--memory-servers",
      "2",    "--partitions", "8", "--algorithms", "rrj,ghj"};
  ProcessResult r = run_olap(4, args);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("is out of partition space"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raise --space-factor"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("verify:"), std::string::npos) << r.output;
  std::vector<std::string> more = args;
  more.insert(more.end(), {"--space-factor", "2.5", "--json"});
  r = run_olap(4, more);
  expect_join_ok(r, {"rrj", "ghj"});
  EXPECT_EQ(json_number(r.output, "reference_matches"), 20000u) << r.output;
}

void expect_agg_ok(const ProcessResult& r, uint64_t rows) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  for (const std::string a : {"rdma", "hierarchical"}) {
    EXPECT_EQ(json_number(r.output, a + "_groups"), json_number(r.output, "reference_groups"))
        << r.output;
    EXPECT_EQ(json_number(r.output, a + "_rows"), rows) << r.output;
    EXPECT_EQ(json_number(r.output, a + "_checksum"), json_number(r.output, "reference_checksum"))
        << r.output;
  }
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Many groups and a tiny pre-aggregation table, so that the threads spill
// into the overflow partitions over and over; against DuckDB too.
TEST(NamOlapTest, AggregationsMatchTheReferenceAndDuckDB) {
  TempDir dir;
  const uint64_t rows = over_ofi() ? 8000 : 30000;
  const ProcessResult r = run_olap(
      4, {"agg", "--memory-servers", "2", "--threads", threads(), "--rows", std::to_string(rows),
          "--groups", "3000", "--table-entries", "64", "--dump", dir.path.string(), "--json"});
  expect_agg_ok(r, rows);
  EXPECT_GT(json_number(r.output, "reference_groups"), 2500u) << r.output;
  if (!have_python())
    GTEST_SKIP() << "no " << SLUICE_NAM_PYTHON << ": run scripts/install-deps.sh for DuckDB";
  const std::string oracle = duckdb("agg", dir.path.string());
  EXPECT_EQ(word_after(oracle, "groups"), json_number(r.output, "reference_groups")) << oracle;
  EXPECT_EQ(word_after(oracle, "rows"), rows) << oracle;
  EXPECT_EQ(word_after(oracle, "checksum"), json_number(r.output, "reference_checksum")) << oracle;
}

// One group (everything pre-aggregates) and groups outnumbering the table.
TEST(NamOlapTest, AggregationGroupCounts) {
  for (const char* groups : {"1", "100000"}) {
    SCOPED_TRACE(groups);
    const uint64_t rows = over_ofi() ? 5000 : 20000;
    const std::string shipping = std::string(groups) == "1" ? "inline" : "background";
    const ProcessResult r =
        run_olap(3, {"agg", "--rows", std::to_string(rows), "--groups", groups, "--table-entries",
                     "1024", "--shipping", shipping, "--json"});
    expect_agg_ok(r, rows);
    if (std::string(groups) == "1") {
      EXPECT_EQ(json_number(r.output, "reference_groups"), 1u);
    }
  }
}

TEST(NamOlapTest, HelpAndBadOptions) {
  const std::string bin = sluice::testing::bin("sluice-nam-olap");
  ProcessResult r = run_process({bin, "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--selectivity"), std::string::npos) << r.output;
  r = run_process({bin, "sort"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("must be join or agg, not 'sort'"), std::string::npos) << r.output;
  r = run_process({bin, "join", "--selectivity", "1.5"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--selectivity must be within 0 .. 1"), std::string::npos) << r.output;
  r = run_process({bin, "join", "--selectivity", "half"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--selectivity wants a number, not 'half'"), std::string::npos)
      << r.output;
  r = run_process({bin, "agg", "--shipping", "later"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--shipping wants background or inline, not 'later'"), std::string::npos)
      << r.output;
  r = run_process({bin, "agg", "--groups", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--groups must be at least 1"), std::string::npos) << r.output;
  r = run_process({bin, "agg", "--algorithms", "rrj"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--algorithms: 'rrj' is not one of rdma, hierarchical"),
            std::string::npos)
      << r.output;
  r = run_process({bin, "join", "--frobnicate", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not expected: 1 --frobnicate"), std::string::npos) << r.output;
  r = run_process({bin, "join", "--threads", "65"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--threads"), std::string::npos) << r.output;
  r = run_olap(1, {"join", "--r", "10"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at least one compute rank"), std::string::npos) << r.output;
}

// ------------------------------------------------------------ faults
//
// The launcher kills a rank and no rank is told which or when: the kill's
// clock starts when the first compute rank prints that the algorithm
// started on every compute rank (sluice run --faults-after), so it lands
// while the algorithm runs however long the input's loading took on a
// loaded machine. A run that still finished first (too late) is tried
// again with the kill at the start line itself.

// Whether a rank said that its run of `algorithm` failed (not only the
// exchange of results after it, "...; no results").
bool run_failed(const std::string& output, const std::string& algorithm) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(algorithm + " failed:") != std::string::npos &&
        line.find("; no results") == std::string::npos)
      return true;
  }
  return false;
}

ProcessResult run_killed(const std::vector<std::string>& args, int victim,
                         const std::string& algorithm, double after_start) {
  ProcessResult r;
  for (const double at : {after_start, 0.0}) {
    r = run_olap(
        4, args, "sluice-nam-olap",
        sluice::testing::fault_at_line("sluice-nam-olap: " + algorithm + " start", victim, at));
    EXPECT_NE(r.output.find("sluice run: a rank printed"), std::string::npos) << r.output;
    if (run_failed(r.output, algorithm)) return r;
  }
  ADD_FAILURE() << "the kill at the start of " << algorithm << " landed after its end";
  return r;
}

// What every loss must end in: the launcher injected it, the job failed in
// bounded time, printed no result, and left nothing in /dev/shm.
void expect_loss_reported(const ProcessResult& r, int victim) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "sluice run: injecting --kill " + std::to_string(victim)), 1)
      << r.output;
  EXPECT_NE(r.output.find("rank " + std::to_string(victim) + " was killed by signal 9"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("verify:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("matches,"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("groups over"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60) << "the job should end soon after the loss\n" << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Every line saying that `algorithm` failed names the lost rank (or, for a
// flow baseline, a survivor's source aborted after it; see below), and
// there are at least `ranks` of them.
void expect_failures_name(const ProcessResult& r, const std::string& algorithm, int victim,
                          int ranks) {
  std::istringstream lines(r.output);
  int failures = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(algorithm + " failed:") == std::string::npos) continue;
    ++failures;
    EXPECT_NE(line.find("PeerLost"), std::string::npos) << line;
    EXPECT_TRUE(line.find("rank " + std::to_string(victim)) != std::string::npos ||
                line.find(" was aborted (abort(), a failure, or destroyed without close())") !=
                    std::string::npos)
        << line;
  }
  EXPECT_GE(failures, ranks) << r.output;
}

// A memory server dies while the compute threads write partitions into it:
// they fail with PeerLost naming it (in a one-sided operation, or, over shm
// where the dead server's memory stays mapped until its death is known, at
// the latest when the ranks exchange their results), and no result is
// printed.
TEST(NamOlapFaultTest, MemoryServerLossDuringTheJoinFailsWithPeerLost) {
  const ProcessResult r =
      run_killed({"join", "--memory-servers", "2", "--r", over_ofi() ? "20000" : "2000000",
                  "--buffer-bytes", "64", "--shipping", "inline", "--algorithms", "rrj"},
                 1, "rrj", over_ofi() ? 0.5 : 0.1);
  expect_loss_reported(r, 1);
  expect_failures_name(r, "rrj", 1, 2);
  EXPECT_EQ(count_lines_with(r.output, "region 'olap-rrj-store' of rank 0 was destroyed"), 0)
      << r.output;
}

// A compute rank dies while the threads spill into the overflow partitions:
// every other rank fails with PeerLost naming it (at the barrier before the
// post-aggregation, which cannot be complete without its partials), the
// memory server too, and no result is printed.
TEST(NamOlapFaultTest, ComputeRankLossDuringTheAggregationFailsWithPeerLost) {
  const ProcessResult r =
      run_killed({"agg", "--rows", over_ofi() ? "40000" : "3000000", "--groups", "1000000",
                  "--table-entries", "16", "--buffer-bytes", "64", "--shipping", "inline",
                  "--threads", threads(), "--algorithms", "rdma"},
                 2, "rdma", over_ofi() ? 0.5 : 0.1);
  expect_loss_reported(r, 2);
  expect_failures_name(r, "rdma", 2, 2);
  EXPECT_NE(r.output.find("memory server rank 0: rank 2 is lost"), std::string::npos) << r.output;
}

// The flow baselines: compute rank 2 (of 3) dies while the first
// algorithm's threads push into its flows. Every survivor fails with
// PeerLost naming rank 2 (its threads in the flows, the rank at the exchange
// of results), the memory server says so too, no result is printed, the job
// ends well within its timeout, and nothing is left in /dev/shm.
void expect_flow_baseline_loss(const std::vector<std::string>& args, const std::string& algorithm,
                               double after_start) {
  std::vector<std::string> a = args;
  a.insert(a.end(), {"--threads", threads(), "--algorithms", algorithm});
  const ProcessResult r = run_killed(a, 2, algorithm, after_start);
  expect_loss_reported(r, 2);
  // Every failure is PeerLost naming rank 2, also that of a thread whose
  // push went to a target of its own rank that had already failed and been
  // destroyed (worker.h): its source names the lost rank of the flow beside
  // "destroyed before the end of the flow". A rank may instead name a
  // survivor's source that aborted after rank 2's loss, if that abort
  // reached it first (a clean-clone CI run: rank 3's thread saw rank 1's
  // aborted join-S source); such an abort carries the rank its process had
  // lost (layout::abort_word), so the line names rank 2 unless that process
  // had not heard of it yet; the rank-level verdicts below must still name
  // rank 2.
  expect_failures_name(r, algorithm, 2, 2);
  // Each survivor's rank-level verdict (ranks 1 and 3) names rank 2.
  for (const std::string rank : {"1", "3"}) {
    EXPECT_NE(r.output.find("[" + rank + "] sluice-nam-olap: rank " + rank + ": " + algorithm +
                            " failed: PeerLost: rank 2 is lost"),
              std::string::npos)
        << "rank " << rank << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find("memory server rank 0: rank 2 is lost"), std::string::npos) << r.output;
}

TEST(NamOlapFaultTest, ComputeRankLossDuringTheFlowRadixJoinFailsWithPeerLost) {
  expect_flow_baseline_loss({"join", "--r", over_ofi() ? "200000" : "4000000"}, "flow-radix",
                            over_ofi() ? 0.5 : 0.1);
}

TEST(NamOlapFaultTest, ComputeRankLossDuringTheHierarchicalAggregationFailsWithPeerLost) {
  expect_flow_baseline_loss(
      {"agg", "--rows", over_ofi() ? "400000" : "4000000", "--groups", "2000000"}, "hierarchical",
      over_ofi() ? 0.5 : 0.1);
}

}  // namespace
