// sluice-nam through `sluice run`: RSI transactions on network-attached
// memory. Every run ends with the application's own invariant check (it
// scans every table with one-sided reads: per product stock + ordered
// quantity = the initial stock, every order has exactly its 3 lines, every
// client's orders are as many as it reported committing, no slot locked,
// every header names its newest version), and the tests check its verdict
// and counts. Transaction histories of list-append and write-skew runs are
// checked by an independent checker, adya (crates.io, Elle-style;
// scripts/install-adya.sh builds it into .tools/adya): valid under snapshot
// isolation, and for write skew not serializable (so the runs really
// overlap); the same checker must reject known anomalies (fixtures). The
// fault tests (a rank killed, stopped or joining from outside):
// nam_fault_test.cc. The transport comes from SLUICE_TRANSPORT (CTest runs
// the suite over shm, ofi, and ofi with emulated atomics).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nam_test_util.h"

namespace {

using nam_test::count_lines_with;
using nam_test::expect_invariants_ok;
using nam_test::json_field;
using nam_test::json_number;
using nam_test::over_ofi;
using nam_test::ProcessResult;
using nam_test::run_nam;
using nam_test::run_process;
using nam_test::txns;

TEST(NamTest, CheckoutKeepsItsInvariants) {
  const ProcessResult r =
      run_nam(3, {"--clients", "2", "--products", "500", "--record-bytes", "64", "--txns",
                  txns(150, 40), "--browse-percent", "20", "--json", "--timeline"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
  // The one-sided operations took the path this variant is about.
  const char* atomic = std::getenv("SLUICE_OFI_ATOMIC");
  const std::string path = !over_ofi() ? "shm"
                           : atomic != nullptr && std::string(atomic) == "0"
                               ? "ofi (emulated atomics)"
                               : "ofi";
  EXPECT_EQ(json_field(r.output, "path"), path) << r.output;
  const uint64_t per_client = over_ofi() ? 40 : 150;
  EXPECT_EQ(json_number(r.output, "commits"), 4 * per_client) << r.output;
  EXPECT_EQ(json_number(r.output, "checkouts") + json_number(r.output, "read_only"), 4 * per_client)
      << r.output;
  EXPECT_GT(json_number(r.output, "read_only"), 0u) << r.output;
  // --timeline: the commits per 100 ms add up to every commit.
  const size_t at = r.output.find("timeline: {");
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t open = r.output.find('[', at), close = r.output.find(']', at);
  std::istringstream counts(r.output.substr(open + 1, close - open - 1));
  uint64_t sum = 0;
  for (std::string c; std::getline(counts, c, ',');) sum += std::stoull(c);
  EXPECT_EQ(sum, 4 * per_client) << r.output;
  // Every committed checkout is exactly one order with exactly 3 lines.
  EXPECT_EQ(json_number(r.output, "orders"), json_number(r.output, "checkouts")) << r.output;
  EXPECT_EQ(json_number(r.output, "lines"), 3 * json_number(r.output, "checkouts")) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Four hot products, two versions, two memory servers: the clients collide
// all the time (conflicts and too-old snapshots), and nothing is lost.
TEST(NamTest, HotProductsOnTwoMemoryServersConflictButKeepTheInvariants) {
  const ProcessResult r = run_nam(
      4, {"--memory-servers", "2", "--clients", "2", "--products", "200", "--record-bytes", "32",
          "--hot-products", "4", "--versions", "2", "--txns", txns(120, 30), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
  EXPECT_GT(json_number(r.output, "conflicts") + json_number(r.output, "too_old"), 0u)
      << "4 clients on 4 products must collide\n"
      << r.output;
  EXPECT_EQ(json_number(r.output, "orders"), json_number(r.output, "checkouts")) << r.output;
}

// The baseline: the same workload and invariants with the message-based
// two-phase commit (the memory servers as resource managers).
TEST(NamTest, TwoPhaseCommitBaselineKeepsTheInvariants) {
  const ProcessResult r =
      run_nam(4, {"--protocol", "2pc", "--memory-servers", "2", "--clients", "2", "--products",
                  "200", "--record-bytes", "64", "--hot-products", "20", "--browse-percent", "20",
                  "--txns", txns(100, 25), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
  EXPECT_EQ(json_field(r.output, "protocol"), "2pc") << r.output;
  EXPECT_EQ(json_number(r.output, "commits"), 4u * (over_ofi() ? 25 : 100)) << r.output;
  EXPECT_EQ(json_number(r.output, "orders"), json_number(r.output, "checkouts")) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// `--protocol both`: RSI and then 2PC in one job, each on its own fresh
// copy of the data, each checked, and the ratio of their throughputs.
TEST(NamTest, BothProtocolsInOneJob) {
  const ProcessResult r =
      run_nam(3, {"--protocol", "both", "--clients", "2", "--products", "300", "--record-bytes",
                  "64", "--browse-percent", "20", "--txns", txns(80, 20), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "invariants: OK"), 2) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "\"protocol\":\"rsi\""), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "\"protocol\":\"2pc\""), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "rsi / 2pc throughput on the same cores"), 1) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(NamTest, HelpAndBadOptions) {
  ProcessResult r = run_process({sluice::testing::bin("sluice-nam"), "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--memory-servers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--protocol"), std::string::npos) << r.output;
  r = run_process({sluice::testing::bin("sluice-nam"), "--versions", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--versions must be at least 2"), std::string::npos) << r.output;
  r = run_process({sluice::testing::bin("sluice-nam"), "--protocol", "3pc"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--protocol wants rsi, 2pc or both"), std::string::npos) << r.output;
  r = run_process({sluice::testing::bin("sluice-nam"), "--workload", "tpcc"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not 'tpcc'"), std::string::npos) << r.output;
  // One rank only: nobody to run transactions.
  r = run_nam(1, {"--products", "10"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at least one compute rank"), std::string::npos) << r.output;
}

// ------------------------------------------------------------ histories

const std::string kAdya = SLUICE_ADYA;

struct Adya {
  int exit_code;
  std::string output;
};

Adya adya_check(const std::string& file, const std::string& model) {
  const ProcessResult r = run_process({kAdya, "check", "-m", "list-append", "-c", model, file});
  return {r.exit_code, r.output};
}

class NamHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kAdya.c_str(), X_OK) != 0) {
      FAIL() << "the adya checker is missing at " << kAdya
             << ": run scripts/install-adya.sh (needs cargo)";
    }
    char tmpl[] = "/tmp/sluice-nam-history-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Runs a workload with --history and merges the clients' files into one.
  std::string record(const std::vector<std::string>& args, int clients) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--clients", "2", "--history", dir_ + "/h", "--json"});
    const ProcessResult r = run_nam(1 + clients / 2, a);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    expect_invariants_ok(r);
    const std::string merged = dir_ + "/all.jsonl";
    std::ofstream out(merged);
    oks_ = 0;
    for (int c = 0; c < clients; ++c) {
      std::ifstream in(dir_ + "/h." + std::to_string(c) + ".jsonl");
      EXPECT_TRUE(in.good()) << "no history from client " << c;
      for (std::string line; std::getline(in, line);) {
        oks_ += line.find("\"type\":\"ok\"") != std::string::npos;
        out << line << '\n';
      }
    }
    // Every committed transaction is in the history, once.
    EXPECT_EQ(static_cast<uint64_t>(oks_), json_number(r.output, "commits")) << r.output;
    last_hits_ = json_number(r.output, "overflow_hits");
    last_recovered_ = json_number(r.output, "clients_recovered");
    return merged;
  }
  std::string dir_;
  int oks_ = 0;
  uint64_t last_hits_ = 0, last_recovered_ = 0;
};

TEST_F(NamHistoryTest, ListAppendHistoryIsSnapshotIsolation) {
  const std::string h = record({"--workload", "list-append", "--keys", "8", "--list-capacity",
                                "256", "--txns", txns(150, 40)},
                               4);
  const Adya si = adya_check(h, "snapshot-isolation");
  EXPECT_EQ(si.exit_code, 0) << "the history must be valid under snapshot isolation\n" << si.output;
  EXPECT_NE(si.output.find("\ttrue"), std::string::npos) << si.output;
}

TEST_F(NamHistoryTest, TwoPhaseCommitHistoryIsSnapshotIsolation) {
  const std::string h = record({"--protocol", "2pc", "--workload", "list-append", "--keys", "8",
                                "--list-capacity", "256", "--txns", txns(100, 25)},
                               4);
  const Adya si = adya_check(h, "snapshot-isolation");
  EXPECT_EQ(si.exit_code, 0) << "the history must be valid under snapshot isolation\n" << si.output;
}

// Read two lists, think, append to one: snapshot isolation admits write skew
// (G2-item), serializability does not. A history with G2 proves the
// transactions overlapped for real.
TEST_F(NamHistoryTest, WriteSkewIsSnapshotIsolationButNotSerializable) {
  bool skew = false;
  for (int attempt = 0; attempt < 3 && !skew; ++attempt) {
    const std::string h =
        record({"--workload", "write-skew", "--keys", "4", "--list-capacity", "256", "--txns",
                txns(60, 25), "--think-us", "300", "--seed", std::to_string(attempt + 1)},
               4);
    const Adya si = adya_check(h, "snapshot-isolation");
    ASSERT_EQ(si.exit_code, 0) << "the history must be valid under snapshot isolation\n"
                               << si.output;
    const Adya ser = adya_check(h, "serializable");
    skew = ser.exit_code == 1 && ser.output.find("G2-item") != std::string::npos;
  }
  EXPECT_TRUE(skew) << "three write-skew runs without a G2 anomaly: the clients never overlapped";
}

// Long readers (every list, 3 ms between reads) among writers on 3 lists,
// 2 versions per record, with an overflow area: writers move the versions
// the readers' snapshots see into it, the readers find them there, and adya
// finds the history valid under snapshot isolation: what they read there is
// what their snapshots saw.
TEST_F(NamHistoryTest, LongReadersReadOldVersionsFromTheOverflowArea) {
  std::string merged;
  uint64_t hits = 0;
  for (int attempt = 0; attempt < 3 && hits == 0; ++attempt) {
    merged = record(
        {"--workload", "list-append", "--keys", "3", "--list-capacity", "256", "--versions", "2",
         "--overflow-entries", "256", "--long-read-percent", "25", "--long-read-think-us", "3000",
         "--txns", txns(60, 25), "--seed", std::to_string(attempt + 1)},
        4);
    hits = last_hits_;
  }
  EXPECT_GT(hits, 0u) << "three runs without a read from the overflow area";
  const Adya si = adya_check(merged, "snapshot-isolation");
  EXPECT_EQ(si.exit_code, 0) << "the history must be valid under snapshot isolation\n" << si.output;
}

// Long read-only readers (begin_read_only: every list, 1 s between reads,
// so 3 s each) among writers, with the default recovery timeout of 2 s. A
// reader started with begin() would hold its next timestamp pending that
// long, the writers would wait for it in begin() and, after 2 s, recover it
// as dead (and the run would fail: a fenced client). Parked, it holds no
// one back: nobody is recovered, every commit is in the history once, and
// adya finds the history valid under snapshot isolation. (The readers
// outlast the timeout by a second, and a writer has the 2 s every other
// test has: with 300 ms and readers of 450 ms, a writer slowed by a loaded
// CI machine was itself recovered.)
TEST_F(NamHistoryTest, LongReadOnlyReadersHoldNoWriterBack) {
  const std::string h = record(
      {"--workload", "list-append", "--keys", "3", "--list-capacity", "256", "--versions", "2",
       "--overflow-entries", "1024", "--long-read-percent", "10", "--long-read-think-us", "1000000",
       "--recovery-timeout-ms", "2000", "--txns", txns(30, 15)},
      4);
  EXPECT_EQ(last_recovered_, 0u) << "a writer was held back long enough to recover a reader";
  const Adya si = adya_check(h, "snapshot-isolation");
  EXPECT_EQ(si.exit_code, 0) << "the history must be valid under snapshot isolation\n" << si.output;
}

TEST_F(NamHistoryTest, CheckerRejectsALostUpdateAndAReadSkew) {
  const std::string fixtures = SLUICE_NAM_FIXTURES;
  const Adya lost = adya_check(fixtures + "/lost_update.jsonl", "snapshot-isolation");
  EXPECT_EQ(lost.exit_code, 1) << lost.output;
  EXPECT_NE(lost.output.find("lost-update"), std::string::npos) << lost.output;
  const Adya skew = adya_check(fixtures + "/read_skew.jsonl", "snapshot-isolation");
  EXPECT_EQ(skew.exit_code, 1) << skew.output;
  EXPECT_NE(skew.output.find("G-single"), std::string::npos) << skew.output;
}

}  // namespace
