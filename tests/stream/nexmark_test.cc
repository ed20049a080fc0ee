// The NEXMark queries of sluice-stream (nb7, nb8, nb11 and the standard
// q11) through `sluice run`, both strategies, checked two ways:
//  - against the single-threaded reference that rank 0 runs on the same
//    generated input (--verify: row count, order-independent checksum of
//    the rows, late records per window), with Zipf-skewed keys, ties at the
//    maximum, out-of-order input with late records, P x T in {1x1, 2x2, 3x1};
//  - against DuckDB (duckdb_oracle.py): the generator writes its input as
//    CSV, SQL computes the same windows, joins and sessions (LAG gap
//    detection), and the engine's CSV rows must equal DuckDB's as a
//    multiset, its late counts window for window.
// Every run checks that every record was ingested once and that nothing is
// left in /dev/shm. The transport comes from SLUICE_TRANSPORT.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

ProcessResult run_nexmark(int ranks, const std::vector<std::string>& args) {
  return run_process(sluice::testing::job_argv(ranks, 90, "sluice-stream", args), {},
                     std::chrono::seconds(120));
}

std::map<int64_t, uint64_t> nexmark_late_of(const std::string& output) {
  std::map<int64_t, uint64_t> late;
  const std::string obj = json_field(output, "late");
  const std::regex entry("\"(-?[0-9]+)\":([0-9]+)");
  for (auto it = std::sregex_iterator(obj.begin(), obj.end(), entry); it != std::sregex_iterator();
       ++it) {
    late[std::stoll((*it)[1].str())] = std::stoull((*it)[2].str());
  }
  return late;
}

struct NexmarkShape {
  int ranks, threads;
};

struct NexmarkCase {
  const char* name;
  std::vector<std::string> args;
  bool expect_late;
};
std::ostream& operator<<(std::ostream& os, const NexmarkCase& c) { return os << c.name; }

void check_nexmark(const NexmarkCase& c, const std::string& strategy) {
  for (const NexmarkShape s : {NexmarkShape{1, 1}, NexmarkShape{2, 2}, NexmarkShape{3, 1}}) {
    std::vector<std::string> args = {"--verify", "--json",    "--strategy",
                                     strategy,   "--workers", std::to_string(s.threads)};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const ProcessResult r = run_nexmark(s.ranks, args);
    SCOPED_TRACE(std::string(c.name) + " / " + strategy + " / " + std::to_string(s.ranks) + "x" +
                 std::to_string(s.threads));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
    EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 1) << r.output;
    EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
    const std::string records = *(std::find(c.args.begin(), c.args.end(), "--records") + 1);
    EXPECT_EQ(json_number(r.output, "records"), std::stoull(records))
        << "every record must be ingested once\n"
        << r.output;
    EXPECT_GT(json_number(r.output, "rows"), 0u) << r.output;
    if (c.expect_late) {
      EXPECT_GT(json_number(r.output, "late_total"), 0u) << "this input must have late records\n"
                                                         << r.output;
    } else {
      EXPECT_EQ(json_number(r.output, "late_total"), 0u) << r.output;
    }
    EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  }
}

class NexmarkReferenceTest : public ::testing::TestWithParam<NexmarkCase> {};

TEST_P(NexmarkReferenceTest, SlashMatchesTheSingleThreadedReference) {
  check_nexmark(GetParam(), "slash");
}
TEST_P(NexmarkReferenceTest, UpparMatchesTheSingleThreadedReference) {
  check_nexmark(GetParam(), "uppar");
}

// Small epochs so that deltas and markers travel often; --rate 5 spreads
// the records over many windows and sessions.
INSTANTIATE_TEST_SUITE_P(
    Queries, NexmarkReferenceTest,
    ::testing::Values(
        // Prices in [1, 40]: many bids tie at the maximum of every window;
        // disorder 300 ms against a 20 ms watermark lag makes late bids.
        NexmarkCase{
            "nb7_ties_zipf_late",
            {"--query", "nb7",  "--records",   "40000", "--rate",      "5",  "--window-ms", "1000",
             "--keys",  "1000", "--zipf",      "1.5",   "--max-price", "40", "--disorder",  "300",
             "--lag",   "20",   "--epoch-mib", "0.02"},
            true},
        NexmarkCase{"nb7_one_window",
                    {"--query", "nb7", "--records", "30000", "--max-price", "1000000",
                     "--epoch-mib", "0.02"},
                    false},
        NexmarkCase{"q11_sessions_zipf_late",
                    {"--query",
                     "q11",
                     "--records",
                     "40000",
                     "--rate",
                     "5",
                     "--keys",
                     "2000",
                     "--zipf",
                     "1.2",
                     "--session-gap-ms",
                     "300",
                     "--disorder",
                     "200",
                     "--lag",
                     "20",
                     "--allowed-lateness",
                     "10",
                     "--epoch-mib",
                     "0.02"},
                    true},
        // One bidder: every worker's partial sessions of the one key chain
        // into one another and must merge into few long sessions.
        NexmarkCase{
            "q11_one_key",
            {"--query", "q11", "--records", "30000", "--rate", "5", "--keys", "1",
             "--session-gap-ms", "50", "--disorder", "80", "--lag", "30", "--epoch-mib", "0.01"},
            true},
        NexmarkCase{"nb11_session_join",
                    {"--query", "nb11", "--records", "30000", "--rate", "5", "--keys", "40",
                     "--session-gap-ms", "200", "--disorder", "100", "--epoch-mib", "0.1"},
                    false},
        NexmarkCase{
            "nb8_window_join_late",
            {"--query", "nb8", "--records", "20000", "--rate", "2", "--keys", "200", "--window-ms",
             "1000", "--disorder", "300", "--lag", "30", "--epoch-mib", "0.2"},
            true}),
    [](const ::testing::TestParamInfo<NexmarkCase>& info) { return std::string(info.param.name); });

// ----------------------------------------------------------- DuckDB oracle

// The engine's rows (every out-*.csv line but the header), sorted.
std::vector<std::string> nexmark_engine_rows(const std::string& dir) {
  std::vector<std::string> rows;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("out-", 0) != 0) continue;
    std::ifstream in(e.path());
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) rows.push_back(line);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Runs `query` on 2 ranks x 2 workers with its input written as CSV, and
// compares its rows and late counts with DuckDB's. Returns the engine's rows.
std::vector<std::string> check_against_duckdb(const std::string& query, const std::string& strategy,
                                              const std::vector<std::string>& extra,
                                              const std::vector<std::string>& oracle_args) {
  char tmpl[] = "/tmp/sluice-nexmark-oracle-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<std::string> args = {"--query",
                                   query,
                                   "--strategy",
                                   strategy,
                                   "--workers",
                                   "2",
                                   "--json",
                                   "--input-csv-dir",
                                   dir,
                                   "--csv-out",
                                   dir + "/out-{worker}.csv",
                                   "--epoch-mib",
                                   "0.05"};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcessResult r = run_nexmark(2, args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> sql_args = {
      SLUICE_STREAM_PYTHON, SLUICE_STREAM_ORACLE, "--query", query, "--dir", dir};
  sql_args.insert(sql_args.end(), oracle_args.begin(), oracle_args.end());
  const ProcessResult sql = run_process(sql_args, {}, std::chrono::seconds(60));
  EXPECT_EQ(sql.exit_code, 0) << sql.output;
  std::vector<std::string> expected;
  std::map<int64_t, uint64_t> expected_late;
  std::istringstream in(sql.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("row,", 0) == 0) {
      expected.push_back(line.substr(4));
    } else if (line.rfind("late,", 0) == 0) {
      char* p = line.data() + 5;
      const int64_t start = std::strtoll(p, &p, 10);
      expected_late[start] = std::strtoull(p + 1, &p, 10);
    }
  }
  std::sort(expected.begin(), expected.end());
  const std::vector<std::string> got = nexmark_engine_rows(dir);
  EXPECT_FALSE(expected.empty()) << sql.output;
  EXPECT_EQ(got.size(), expected.size()) << r.output;
  std::vector<std::string> only_engine, only_sql;
  std::set_difference(got.begin(), got.end(), expected.begin(), expected.end(),
                      std::back_inserter(only_engine));
  std::set_difference(expected.begin(), expected.end(), got.begin(), got.end(),
                      std::back_inserter(only_sql));
  EXPECT_TRUE(only_engine.empty() && only_sql.empty())
      << only_engine.size() << " rows only in the engine's output, first: "
      << (only_engine.empty() ? "-" : only_engine[0]) << "; " << only_sql.size()
      << " only in DuckDB's, first: " << (only_sql.empty() ? "-" : only_sql[0]);
  EXPECT_EQ(nexmark_late_of(r.output), expected_late) << r.output;
  EXPECT_EQ(json_number(r.output, "rows"), expected.size());
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  return got;
}

class NexmarkOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(SLUICE_STREAM_PYTHON)) {
      GTEST_SKIP() << "no " << SLUICE_STREAM_PYTHON
                   << ": run scripts/install-deps.sh to make .venv with DuckDB";
    }
  }
};

TEST_F(NexmarkOracleTest, Nb7BidsAtTheMaximumEqualDuckDb) {
  for (const char* strategy : {"slash", "uppar"}) {
    SCOPED_TRACE(strategy);
    const auto rows = check_against_duckdb(
        "nb7", strategy,
        {"--records", "40000", "--rate", "5", "--window-ms", "1000", "--keys", "500", "--zipf",
         "1.1", "--max-price", "30", "--disorder", "300", "--lag", "25"},
        {"--window-ms", "1000", "--lag", "25"});
    // Prices in [1, 30]: windows must have several bids at their maximum.
    std::set<std::string> windows;
    for (const std::string& r : rows) windows.insert(r.substr(0, r.find(',')));
    EXPECT_GT(rows.size(), 2 * windows.size()) << "ties at the maximum must all be emitted";
  }
}

TEST_F(NexmarkOracleTest, Nb8WindowJoinEqualsDuckDb) {
  for (const char* strategy : {"slash", "uppar"}) {
    SCOPED_TRACE(strategy);
    check_against_duckdb("nb8", strategy,
                         {"--records", "20000", "--rate", "5", "--keys", "300", "--window-ms",
                          "1000", "--disorder", "200", "--lag", "40", "--zipf", "0.8"},
                         {"--window-ms", "1000", "--lag", "40"});
  }
}

TEST_F(NexmarkOracleTest, Q11SessionsEqualDuckDbLagGapDetection) {
  for (const char* strategy : {"slash", "uppar"}) {
    SCOPED_TRACE(strategy);
    check_against_duckdb(
        "q11", strategy,
        {"--records", "40000", "--rate", "5", "--keys", "1000", "--zipf", "1.3", "--session-gap-ms",
         "250", "--disorder", "150", "--lag", "20", "--allowed-lateness", "5"},
        {"--session-gap-ms", "250", "--lag", "20", "--allowed-lateness", "5"});
  }
}

TEST_F(NexmarkOracleTest, Nb11SessionJoinEqualsDuckDb) {
  for (const char* strategy : {"slash", "uppar"}) {
    SCOPED_TRACE(strategy);
    check_against_duckdb("nb11", strategy,
                         {"--records", "20000", "--rate", "5", "--keys", "60", "--session-gap-ms",
                          "200", "--disorder", "120", "--lag", "30"},
                         {"--session-gap-ms", "200", "--lag", "30"});
  }
}

TEST(NexmarkCommandTest, HelpNamesTheQueriesAndSessionFlagsAreChecked) {
  const ProcessResult help =
      run_process({sluice::testing::bin("sluice-stream"), "--help"}, {}, std::chrono::seconds(20));
  EXPECT_EQ(help.exit_code, 0) << help.output;
  for (const char* word : {"nb7", "nb8", "nb11", "q11", "--session-gap-ms", "--max-price"})
    EXPECT_NE(help.output.find(word), std::string::npos) << word;
  const ProcessResult bad =
      run_process({sluice::testing::bin("sluice-stream"), "--query", "q11", "--window-ms", "100"},
                  {}, std::chrono::seconds(20));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("do not apply to q11"), std::string::npos) << bad.output;
}

}  // namespace
