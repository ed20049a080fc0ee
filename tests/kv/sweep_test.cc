// Both protocols over thousands of seeded runs on the simulated network,
// each with one fault scenario: none, a leader crash, a leader crash and
// restart, (NOPaxos) a sequencer replacement or (Multi-Paxos) a follower
// crash and restart, the leader down a while then restarted without its
// state, and a follower restarted without its state at once (both recover:
// message.h, Recovery); 3 or 5 replicas, message loss from 0 to 21%, FIFO or
// reordering links, one to three keys. Every run must finish and pass
// expect_consistent() (kv_test_util.h). Label slow: about ten seconds.
#include <gtest/gtest.h>

#include "kv_test_util.h"

namespace kv {
namespace {

void sweep(Protocol protocol, uint64_t seeds) {
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o;
    o.protocol = protocol;
    o.replicas = seed % 3 == 0 ? 5 : 3;
    o.clients = 3;
    // Every fifth run is a single-key history short enough for the
    // exhaustive checker.
    o.ops_per_client = seed % 5 == 0 ? 20 : 60;
    o.keys = seed % 5 == 0 ? 1 : 1 + seed % 3;
    o.seed = seed;
    o.sim.seed = seed;
    o.sim.drop_rate = 0.03 * static_cast<double>(seed % 8);
    o.sim.fifo = protocol == Protocol::kNoPaxos || seed % 2 == 0;
    // Every other run snapshots every few slots (message.h, Snapshots).
    if (seed % 2 == 1) o.nopaxos.snapshot_every = o.multipaxos.snapshot_every = 3 + seed % 17;
    SimCluster c(o);
    const int scenario = static_cast<int>(seed % 6);
    c.net().run(50 + seed * 37 % 400, [] { return false; });
    int crashed = -1;
    if (scenario == 1 || scenario == 2) crashed = c.leader();
    if (scenario == 3 && protocol == Protocol::kNoPaxos) c.new_sequencer();
    if (scenario == 3 && protocol == Protocol::kMultiPaxos)
      crashed = (c.leader() + 1) % static_cast<int>(o.replicas);
    if (scenario == 4) crashed = c.leader();
    if (scenario == 5 && c.leader() >= 0)
      c.restart(static_cast<uint32_t>((c.leader() + 1) % static_cast<int>(o.replicas)));
    if (crashed >= 0) c.net().crash(static_cast<uint32_t>(crashed));
    c.net().run(300, [] { return false; });
    if (crashed >= 0 && scenario == 4) c.restart(static_cast<uint32_t>(crashed));
    if (crashed >= 0 && scenario != 1 && scenario != 4)
      c.net().restore(static_cast<uint32_t>(crashed));
    ASSERT_TRUE(c.run_until_done(200000));
    expect_consistent(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(KvSweepTest, MultiPaxosStaysConsistentOverTwoThousandSeeds) {
  sweep(Protocol::kMultiPaxos, 2000);
}

TEST(KvSweepTest, NoPaxosStaysConsistentOverTwoThousandSeeds) { sweep(Protocol::kNoPaxos, 2000); }

}  // namespace
}  // namespace kv
