// Replicate flows, one-sided regions and endpoint-set barriers across real
// processes. The transport comes from the environment (CTest runs this file
// over shm, ofi, and ofi without provider atomics or RMA).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;

testing::ProcessResult run_job(int ranks, std::vector<std::string> args,
                               std::vector<std::string> launcher_args = {}) {
  return testing::run_process(
      testing::job_argv(ranks, 200, "sluice-replicate-worker", args, launcher_args), {},
      std::chrono::seconds(240));
}

// For a job where a rank dies: the survivors must end on their own, in
// however long a loaded machine takes (the launcher's default is 10 s
// before it stops them).
const std::vector<std::string> kSurvivorsEndOnTheirOwn = {"--grace", "120"};

struct TargetResult {
  uint64_t count = 0;
  std::string sum, order, survivors, gaps, status;
};

std::map<uint32_t, TargetResult> results(const std::string& output) {
  const std::regex re(
      R"(RESULT target=(\d+) count=(\d+) sum=(\w+) order=(\w+) survivors=(\w+) gaps=\[([\d,]*)\] status=(\w+))");
  std::map<uint32_t, TargetResult> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) {
      out[std::stoul(m[1])] = TargetResult{std::stoull(m[2]), m[3], m[4], m[5], m[6], m[7]};
    }
  }
  return out;
}

void expect_clean(const testing::ProcessResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// 4 sources x 4 targets in 4 processes: every target gets all 4 x N
// records once (same count and order-independent checksum everywhere).
TEST(ReplicateFlowTest, EveryTargetGetsEveryRecordOfFourSources) {
  auto r = run_job(4, {"--tuples", "60000"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto res = results(r.output);
  ASSERT_EQ(res.size(), 4u) << r.output;
  for (const auto& [t, x] : res) {
    EXPECT_EQ(x.count, 4u * 60000) << "target " << t;
    EXPECT_EQ(x.sum, res.begin()->second.sum) << "target " << t;
    EXPECT_EQ(x.status, "EndOfFlow");
  }
}

// Ordered: the same records in the same order at every target (the hash of
// the whole sequence agrees), with no gaps.
TEST(ReplicateFlowTest, OrderedFlowGivesFourTargetsOneIdenticalSequence) {
  auto r = run_job(4, {"--tuples", "40000", "--ordered"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto res = results(r.output);
  ASSERT_EQ(res.size(), 4u) << r.output;
  for (const auto& [t, x] : res) {
    EXPECT_EQ(x.count, 4u * 40000) << "target " << t;
    EXPECT_EQ(x.order, res.begin()->second.order) << "target " << t << "\n" << r.output;
    EXPECT_EQ(x.gaps, "") << "target " << t;
    EXPECT_EQ(x.status, "EndOfFlow");
  }
}

// Sources that never flush: over ofi, runs of full segments take their
// sequence numbers with one fetch-and-add each. Every target still gets one
// identical sequence, and the numbers handed out are exactly 0 .. n - 1
// (none lost, none twice).
TEST(ReplicateFlowTest, OrderedRunsOfFullSegmentsAreNumberedWithoutHoles) {
  auto r = run_job(3, {"--tuples", "60000", "--ordered", "--flush-every", "0"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto res = results(r.output);
  ASSERT_EQ(res.size(), 3u) << r.output;
  for (const auto& [t, x] : res) {
    EXPECT_EQ(x.count, 3u * 60000) << "target " << t;
    EXPECT_EQ(x.order, res.begin()->second.order) << "target " << t << "\n" << r.output;
    EXPECT_EQ(x.gaps, "") << "target " << t;
    EXPECT_EQ(x.status, "EndOfFlow");
  }
  const std::regex re(R"(SEQUENCES target=(\d+) batches=(\d+) last=(\d+))");
  size_t seen = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    ++seen;
    EXPECT_GT(std::stoull((*it)[2]), 3u * 8) << r.output;  // several runs from every source
    EXPECT_EQ(std::stoull((*it)[2]), std::stoull((*it)[3]) + 1) << "target " << (*it)[1] << "\n"
                                                                << r.output;
  }
  EXPECT_EQ(seen, 3u) << r.output;
}

// A job of `ranks` ranks (`args`) whose last rank's source dies after
// taking a sequence number (the hook): each surviving target reports that
// number as a gap, all agree on the surviving sources' order, and each ends
// with kPeerLost. Returns the targets' results and the job's output.
std::pair<std::map<uint32_t, TargetResult>, std::string> expect_the_lost_number_a_gap(
    uint32_t ranks, const std::vector<std::string>& args) {
  auto r = run_job(ranks, args, kSurvivorsEndOnTheirOwn);
  expect_clean(r);
  std::smatch m;
  EXPECT_TRUE(
      std::regex_search(r.output, m, std::regex(R"(dying after taking sequence number (\d+))")))
      << r.output;
  const std::string lost = m.empty() ? "" : std::string(m[1]);
  auto res = results(r.output);
  EXPECT_EQ(res.size(), ranks - 1) << r.output;  // the dead rank's target died with it
  for (const auto& [t, x] : res) {
    EXPECT_NE(("," + x.gaps + ",").find("," + lost + ","), std::string::npos)
        << "target " << t << " gaps [" << x.gaps << "], lost " << lost << "\n"
        << r.output;
    EXPECT_EQ(x.survivors, res.begin()->second.survivors) << "target " << t << "\n" << r.output;
    EXPECT_EQ(x.status, "PeerLost") << r.output;
  }
  return {res, r.output};
}

// Each target's gaps in the same list.
void expect_the_same_gaps(const std::map<uint32_t, TargetResult>& res, const std::string& output) {
  for (const auto& [t, x] : res)
    EXPECT_EQ(x.gaps, res.begin()->second.gaps) << "target " << t << "\n" << output;
}

// The rank that holds the sequencer (rank 0's target) ends and leaves while
// rank 1's target has not started (the records all fit its rings, so no
// source waits for it); rank 1 then needs the sequencer to learn which
// numbers the dead source took. Its leave() waits for the other
// participants: freed at once, the sequencer could not be read and rank 1
// missed the gap ("ended without lost source(s) ...; the sequencer could
// not be read": SourceDyingInsideANumberedRunIsAGapOnEveryTarget below
// failed so once under load).
TEST(ReplicateFlowTest, ATargetEndingAfterTheSequencersRankLeftStillLearnsItsGaps) {
  const auto [res, output] = expect_the_lost_number_a_gap(
      3, {"--tuples", "2000", "--ordered", "--flush-every", "0", "--die-rank", "2", "--die-after",
          "3", "--gap-ms", "500", "--late-rank", "1", "--late-ms", "1500"});
  expect_the_same_gaps(res, output);
  EXPECT_EQ(output.find("could not be read"), std::string::npos) << output;
}

// A source that dies inside a numbered run: every number it took is a gap
// on every surviving target, the one the hook names among them. Over ofi
// the run is half a ring of 64 segments, so many gaps in a row: they cost
// one gap timeout, not one each (32 x 500 ms).
TEST(ReplicateFlowTest, SourceDyingInsideANumberedRunIsAGapOnEveryTarget) {
  const auto [res, output] =
      expect_the_lost_number_a_gap(3, {"--tuples", "40000", "--ordered", "--flush-every", "0",
                                       "--die-rank", "2", "--die-after", "20", "--gap-ms", "500"});
  expect_the_same_gaps(res, output);
  EXPECT_EQ(output.find("still running"), std::string::npos)
      << "the survivors did not end in time\n"
      << output;
  const char* transport = std::getenv("SLUICE_TRANSPORT");
  if (transport != nullptr && std::string(transport) == "ofi") {
    for (const auto& [t, x] : res) {
      EXPECT_NE(x.gaps.find(','), std::string::npos)
          << "a whole run's numbers: target " << t << " gaps [" << x.gaps << "]";
    }
  }
}

// Two clients in a closed loop over an ordered Latency flow (NOPaxos' shape,
// docs/kv.md's stall): each pushes its next request only once all three
// replicas answered the last, so a request that waited for its source's
// next push would hang the job (it fails at the job timeout). The replicas
// see every request once, in one order.
TEST(ReplicateFlowTest, ClosedLoopOverAnOrderedLatencyFlowNeverWaitsForTheNextPush) {
  auto r = run_job(5, {"--mode", "closed-loop", "--rounds", "1500", "--gap-ms", "30000"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::regex re(R"(LOOP replica=(\d+) count=(\d+) order=(\w+))");
  std::set<std::string> orders;
  size_t replicas = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    ++replicas;
    EXPECT_EQ(std::stoull((*it)[2]), 2u * 1500) << r.output;
    orders.insert((*it)[3]);
  }
  EXPECT_EQ(replicas, 3u) << r.output;
  EXPECT_EQ(orders.size(), 1u) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "LOOP client="), 2) << r.output;
}

TEST(ReplicateFlowTest, OrderedLatencyModeAgreesToo) {
  auto r = run_job(3, {"--tuples", "3000", "--ordered", "--latency"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto res = results(r.output);
  ASSERT_EQ(res.size(), 3u) << r.output;
  for (const auto& [t, x] : res) {
    EXPECT_EQ(x.count, 3u * 3000);
    EXPECT_EQ(x.order, res.begin()->second.order) << r.output;
  }
}

// Rank 3's source dies right after taking its 20th sequence number: every
// surviving target reports that number as a gap (never hangs), agrees on
// the order of the surviving sources' records, and ends naming the loss.
TEST(ReplicateFlowTest, SourceDyingAfterTakingASequenceNumberIsAGapOnEveryTarget) {
  const auto [res, output] =
      expect_the_lost_number_a_gap(4, {"--tuples", "40000", "--ordered", "--die-rank", "3",
                                       "--die-after", "20", "--gap-ms", "2000"});
  EXPECT_GE(testing::count_lines_with(output, "lost source(s)"), 3) << output;
}

TEST(MemoryRegionTest, CasAndFetchAddCountersAreExactAcrossFourProcesses) {
  auto r = run_job(4, {"--mode", "regions", "--ops", "500"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED regions"), 4) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "COUNTERS cas=2000 fetch_add=2000"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "was revoked by its owner"), 4) << r.output;
}

// A destroyed region is withdrawn from the registry: opening it is refused
// at once, naming it destroyed (the descriptor that the memory replacing it
// could have been reached through is gone; tests/unit/ covers the nonce that
// refuses such a descriptor if one is read just before the destruction).
TEST(MemoryRegionTest, DestroyedRegionIsRefusedAndNeverReachesTheMemoryThatReplacedIt) {
  auto r = run_job(2, {"--mode", "stale"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "STALE refused"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "'old' of rank 0 was destroyed by its owner"), 1)
      << r.output;
}

// The owner of a region is killed: every other rank's next reads fail with
// kPeerLost naming it, never kOk from memory nobody owns (over shm the
// mapping outlives the owner: before the check, reads went on with kOk), and
// never kClosed as if the owner had revoked it (over ofi the transport error
// came before the registry's word of the death).
TEST(MemoryRegionTest, OwnersDeathFailsEveryReaderWithPeerLost) {
  auto r = run_job(3, {"--mode", "owner-dies"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;  // rank 1 was killed
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED owner-lost"), 2) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(MemoryRegionTest, DestroyedRegionNameCanBeExposedAgainAndOpenedFiveTimes) {
  auto r = run_job(2, {"--mode", "reexpose"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED reexpose"), 2) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "DESTROYED refused"), 1) << r.output;
}

TEST(BarrierTest, EndpointSetBarrierHoldsAThousandRounds) {
  auto r = run_job(3, {"--mode", "barriers", "--rounds", "1000"});
  expect_clean(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED barriers"), 3) << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output, "barrier 'lonely' timed out after 300 ms waiting for endpoint (2,7)"),
            1)
      << r.output;
}

}  // namespace
}  // namespace sluice
