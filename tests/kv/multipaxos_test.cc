// Multi-Paxos (apps/kv/multipaxos.h) on the seeded simulated network: one op,
// many ops in batches, lost messages, leader change with commands in flight,
// duelling candidates, follower catch-up, repeated leader failures, and
// random faults over many seeds. Every test ends with expect_consistent()
// (kv_test_util.h).
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "codec.h"
#include "kv_test_util.h"

namespace kv {
namespace {

ClusterOptions multipaxos(uint32_t replicas, uint32_t clients, uint32_t ops, uint64_t seed = 1) {
  return sim_options(Protocol::kMultiPaxos, replicas, clients, ops, seed);
}

TEST(MultiPaxosTest, OneOpCommitsOnAMajorityAndIsAppliedEverywhere) {
  SimCluster c(multipaxos(5, 1, 1));
  ASSERT_TRUE(c.run_until_done(1000));
  EXPECT_TRUE(c.mp(0).is_leader());
  EXPECT_EQ(c.mp(0).commit_index(), 1u);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) {
    EXPECT_EQ(c.mp(r).commit_index(), 1u);
    EXPECT_EQ(c.mp(r).elections(), 0u) << "a stable leader needs no phase 1";
  }
}

TEST(MultiPaxosTest, ManyClientsAreBatchedIntoOneLogInOneOrder) {
  ClusterOptions o = multipaxos(3, 8, 25);
  o.keys = 4;
  SimCluster c(o);
  ASSERT_TRUE(c.run_until_done(20000));
  expect_consistent(c);
  EXPECT_EQ(c.mp(0).log_size(), 200u);  // no message lost: no retries in the log
}

TEST(MultiPaxosTest, LostAndReorderedMessagesAreRepaired) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = multipaxos(3, 3, 20, seed);
    o.sim.drop_rate = 0.1;
    o.sim.fifo = false;
    o.sim.max_delay_ms = 8;
    SimCluster c(o);
    ASSERT_TRUE(c.run_until_done(60000));
    expect_consistent(c);
  }
}

// Clients with 8 operations in flight on a lossy, reordering network: a
// lost or overtaken request leaves later ones of its client to arrive
// first. The store skips those until their predecessor is in (they are sent
// again), so each client's operations still take effect in order, once.
TEST(MultiPaxosTest, ClientsWithEightInFlightKeepTheirOrderUnderLossAndReordering) {
  uint64_t skipped = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = multipaxos(3, 3, 100, seed);
    o.client_window = 8;
    // Small Accepts commit a client's 8 in pieces, so that it has several
    // requests in flight at once.
    o.multipaxos.max_batch = 3;
    o.sim.drop_rate = 0.1;
    o.sim.fifo = false;
    o.sim.max_delay_ms = 8;
    SimCluster c(o);
    skipped += expect_consistent_in_client_order(c);
  }
  EXPECT_GT(skipped, 0u) << "no request ever overtook a lost one: the test tests nothing";
}

TEST(MultiPaxosTest, LeaderChangeWithCommandsInFlightLosesNothingCommitted) {
  ClusterOptions o = multipaxos(5, 4, 15);
  SimCluster c(o);
  c.net().run(100, [] { return false; });
  // Hold back the followers' votes so the leader's latest batches are
  // accepted by some followers but not committed, then crash the leader.
  c.net().set_filter([](const Message& m) { return m.type != MsgType::kAccepted; });
  c.net().run(30, [] { return false; });
  uint64_t committed = c.mp(0).commit_index();
  uint64_t in_log = c.mp(0).log_size();
  auto before = c.mp(0).store().applied();
  EXPECT_GT(in_log, committed) << "no command was in flight at the crash";
  c.net().crash(0);
  c.net().set_filter(nullptr);
  ASSERT_TRUE(c.run_until_done(20000));
  int leader = c.leader();
  ASSERT_GT(leader, 0);
  EXPECT_GE(c.mp(static_cast<uint32_t>(leader)).elections(), 1u);
  expect_consistent(c);
  expect_prefix(before, c.mp(static_cast<uint32_t>(leader)).store().applied());
}

// A new leader tells the clients the replicated state knows that it leads,
// so that what they sent to the old one reaches it without waiting for
// their retry timeout: here the clients never retry within the run at all
// (a timeout far beyond it), and still finish after the leader's crash.
TEST(MultiPaxosTest, ANewLeaderAnnouncesItselfSoClientsResendBeforeTheirRetryTimeout) {
  expect_clients_follow_an_announced_leader(multipaxos(3, 3, 40));
}

TEST(MultiPaxosTest, DuellingCandidatesSettleOnOneLeader) {
  ClusterOptions o = multipaxos(5, 3, 20);
  o.sim.drop_rate = 0.02;
  SimCluster c(o);
  c.net().run(50, [] { return false; });
  c.net().crash(0);
  // Replicas 1 and 2 campaign against each other every few milliseconds,
  // each pre-empting the other's ballot, while the clients keep going.
  for (int round = 0; round < 20; ++round) {
    c.net().act(1, [&](Outbox& out) { c.mp(1).campaign(out); });
    c.net().run(2, [] { return false; });
    c.net().act(2, [&](Outbox& out) { c.mp(2).campaign(out); });
    c.net().run(3, [] { return false; });
  }
  EXPECT_GE(c.mp(1).elections(), 20u);
  EXPECT_GE(c.mp(2).elections(), 20u);
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  int leaders = 0;
  for (uint32_t r = 1; r < 5; ++r)
    leaders += c.mp(r).is_leader() && c.mp(r).ballot() == c.mp(1).ballot();
  EXPECT_EQ(leaders, 1);
}

TEST(MultiPaxosTest, FollowerCatchesUpAfterMissingHundredsOfSlots) {
  ClusterOptions o = multipaxos(3, 4, 60);
  o.keys = 3;
  SimCluster c(o);
  c.net().run(30, [] { return false; });
  c.net().crash(2);
  ASSERT_TRUE(c.run_until_done(30000));
  uint64_t missed = c.mp(0).commit_index() - c.mp(2).commit_index();
  EXPECT_GT(missed, 200u);
  c.net().restore(2);
  expect_consistent(c);
  EXPECT_EQ(c.mp(2).commit_index(), c.mp(0).commit_index());
}

TEST(MultiPaxosTest, RepeatedLeaderFailuresNeverLoseOrReorderAppliedCommands) {
  ClusterOptions o = multipaxos(5, 4, 40, 3);
  o.sim.drop_rate = 0.03;
  o.keys = 2;
  SimCluster c(o);
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> snapshots[5];
  for (int round = 0; round < 4 && !c.clients_done(); ++round) {
    c.net().run(120, [] { return false; });
    for (uint32_t r = 0; r < 5; ++r) snapshots[r].push_back(c.mp(r).store().applied());
    int l = c.leader();
    if (l < 0) continue;
    c.net().crash(static_cast<uint32_t>(l));
    c.net().run(150, [] { return false; });
    c.net().restore(static_cast<uint32_t>(l));
  }
  ASSERT_TRUE(c.run_until_done(60000));
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r)
    for (const auto& s : snapshots[r]) expect_prefix(s, c.mp(r).store().applied());
}

TEST(MultiPaxosTest, RandomFaultsOverManySeedsStayLinearizable) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = multipaxos(seed % 2 ? 3 : 5, 3, 20, seed);
    o.sim.drop_rate = 0.03 * static_cast<double>(seed % 5);
    o.sim.fifo = seed % 3 != 0;
    SimCluster c(o);
    c.net().run(40 + seed * 13 % 200, [] { return false; });
    int l = c.leader();
    if (seed % 2 == 0 && l >= 0) c.net().crash(static_cast<uint32_t>(l));
    c.net().run(200, [] { return false; });
    if (seed % 4 == 0 && l >= 0) c.net().restore(static_cast<uint32_t>(l));
    ASSERT_TRUE(c.run_until_done(60000));
    expect_consistent(c);
  }
}

// Rules checked on one replica fed crafted messages: the cases a random run
// rarely reaches but Paxos safety rests on.

Entry entry(uint64_t slot, uint64_t ballot, uint64_t client, bool committed = false) {
  Entry e;
  e.slot = slot;
  e.ballot = ballot;
  e.committed = committed;
  e.cmd.op = Op::kPut;
  e.cmd.client = client;
  e.cmd.seq = 1;
  e.cmd.key = "k";
  e.cmd.value = "v" + std::to_string(client);
  return e;
}

Message promise(uint32_t from, uint64_t ballot, std::vector<Entry> entries) {
  Message m = message(MsgType::kPromise, from, 1, ballot);
  m.entries = std::move(entries);
  return m;
}

TEST(MultiPaxosRulesTest, NewLeaderProposesTheValueOfTheHighestBallot) {
  Config cfg{5};
  MultiPaxosReplica r(cfg, 1);
  Outbox out;
  r.campaign(out);  // ballot 1
  r.campaign(out);  // ballot 6
  ASSERT_EQ(r.ballot(), 6u);
  out.clear();
  // Slot 1 holds client 20's value from ballot 0 on one replica, client 30's
  // from ballot 1 on another: only the latter can have been chosen.
  r.receive(promise(2, 6, {entry(1, 0, 20)}), out);
  r.receive(promise(3, 6, {entry(1, 1, 30)}), out);
  ASSERT_TRUE(r.is_leader());
  const Message* accept = find(out, MsgType::kAccept);
  ASSERT_NE(accept, nullptr);
  ASSERT_EQ(accept->entries.size(), 1u);
  EXPECT_EQ(accept->entries[0].cmd.client, 30u);
  EXPECT_EQ(accept->entries[0].ballot, 6u);
}

TEST(MultiPaxosRulesTest, NewLeaderPrefersAValueKnownCommittedAndFillsHolesWithNoOps) {
  Config cfg{5};
  MultiPaxosReplica r(cfg, 1);
  Outbox out;
  r.campaign(out);
  r.campaign(out);
  out.clear();
  r.receive(promise(2, 6, {entry(1, 1, 30), entry(3, 1, 40)}), out);
  r.receive(promise(3, 6, {entry(1, 0, 20, /*committed=*/true)}), out);
  ASSERT_TRUE(r.is_leader());
  const Message* accept = find(out, MsgType::kAccept);
  ASSERT_NE(accept, nullptr);
  ASSERT_EQ(accept->entries.size(), 3u);
  EXPECT_EQ(accept->entries[0].cmd.client, 20u);
  EXPECT_TRUE(accept->entries[1].cmd.is_noop());
  EXPECT_EQ(accept->entries[2].cmd.client, 40u);
}

TEST(MultiPaxosRulesTest, FollowerCommitsOnlyEntriesOfTheLeadersBallot) {
  Config cfg{3};
  MultiPaxosReplica r(cfg, 2);
  Outbox out;
  // Slot 1 accepted from ballot 0 ...
  Message a = message(MsgType::kAccept, 0, 2);
  a.a = 1;
  a.entries = {entry(1, 0, 20)};
  r.receive(a, out);
  EXPECT_EQ(r.commit_index(), 0u);
  // ... but ballot 4's leader says slot 1 is committed: its value may differ,
  // so the follower must fetch it rather than apply its own.
  out.clear();
  Message hb = message(MsgType::kAccept, 1, 2, 4);
  hb.a = 2;
  hb.b = 1;
  r.receive(hb, out);
  EXPECT_EQ(r.commit_index(), 0u);
  const Message* catch_up = find(out, MsgType::kCatchUp);
  ASSERT_NE(catch_up, nullptr);
  EXPECT_EQ(catch_up->a, 1u);
  Message committed = message(MsgType::kCommitted, 1, 2, 4);
  committed.a = 1;
  committed.entries = {entry(1, 4, 30)};
  r.receive(committed, out);
  EXPECT_EQ(r.commit_index(), 1u);
  ASSERT_EQ(r.store().applied().size(), 1u);
  EXPECT_EQ(r.store().applied()[0].first, 30u);
}

TEST(MultiPaxosRulesTest, AClockThatStartsLateDoesNotTriggerAnElection) {
  // Real clocks count from boot: the first tick must not look like a long
  // silence of the leader (found running over flows: every job started
  // with a needless view change).
  MultiPaxosReplica r(Config{3}, 1);
  Outbox out;
  r.tick(5'000'000'000, out);
  r.tick(5'000'000'001, out);
  EXPECT_EQ(r.elections(), 0u);
  EXPECT_EQ(find(out, MsgType::kPrepare), nullptr);
  r.tick(5'000'000'000 + 1000, out);  // a real silence still does
  EXPECT_EQ(r.elections(), 1u);
}

// The membership's epoch names the replicas left (Node::replicas_present):
// a follower whose leader is gone elects at its next tick only if it leads
// the smallest ballot above the current one among those present, so the
// survivors do not duel; with the leader present nothing changes.
TEST(MultiPaxosRulesTest, OnlyTheNextLeaderAmongThePresentElectsAtOnceWhenItsLeaderIsGone) {
  Outbox out;
  MultiPaxosReplica r2(Config{5}, 2), r3(Config{5}, 3);
  r2.tick(1000, out);
  r3.tick(1000, out);
  const uint32_t present = 0b11100;  // replicas 0 (the leader) and 1 are gone
  r2.replicas_present(present);
  r3.replicas_present(present);
  out.clear();
  r2.tick(1001, out);
  r3.tick(1001, out);
  EXPECT_EQ(r2.elections(), 1u);
  EXPECT_EQ(r3.elections(), 0u);
  const Message* prepare = find(out, MsgType::kPrepare);
  ASSERT_NE(prepare, nullptr);
  EXPECT_EQ(prepare->from, 2u);
  EXPECT_EQ(prepare->view, 2u);

  MultiPaxosReplica r1(Config{3}, 1);
  r1.tick(1000, out);
  r1.replicas_present(0b111);
  r1.replicas_present(0b011);  // replica 2 gone, the leader 0 present
  r1.tick(1001, out);
  EXPECT_EQ(r1.elections(), 0u);
}

// A client learns that a replica is gone: for its retry timeout it sends
// what is unanswered again every Client::kFastRetryMs (to every replica),
// so that the operations reach the new leader soon after its election.
TEST(ClientRulesTest, AReplicaGoneMakesUnansweredOperationsGoAgainSoon) {
  Command put;
  put.op = Op::kPut;
  put.key = "k";
  put.value = "v";
  for (const bool gone : {false, true}) {
    Client c(Config{3}, Protocol::kMultiPaxos, 0, {put}, /*retry_ms=*/10'000);
    Outbox out;
    c.tick(1000, out);  // sent
    c.replicas_present(0b111);
    if (gone) c.replicas_present(0b110);
    c.tick(1000 + Client::kFastRetryMs, out);
    EXPECT_EQ(c.retries(), gone ? 1u : 0u) << (gone ? "a replica gone" : "all present");
    c.tick(1000 + 3 * Client::kFastRetryMs, out);
    EXPECT_EQ(c.retries(), gone ? 2u : 0u);
    c.tick(1000 + 10'000 + 3 * Client::kFastRetryMs, out);  // past the fast window: the timeout
    EXPECT_EQ(c.retries(), gone ? 3u : 1u);
    c.tick(1000 + 10'000 + 5 * Client::kFastRetryMs, out);
    EXPECT_EQ(c.retries(), gone ? 3u : 1u);
  }
}

// The same once the job's flows were declared anew (Node::flows_renewed:
// a rank lost, replica or not; NOPaxos's ordered flow of the old session
// is gone with what it held), each protocol: what is unanswered goes again
// after kFastRetryMs, not after the retry timeout (a gateway holding the
// sequencer stopped: the other gateways' writes paused 2 s, the default
// retry timeout of `sluice-kv run`, at the epoch that went on without it).
TEST(ClientRulesTest, FlowsDeclaredAnewMakeUnansweredOperationsGoAgainSoon) {
  Command put;
  put.op = Op::kPut;
  put.key = "k";
  put.value = "v";
  for (const Protocol protocol : {Protocol::kMultiPaxos, Protocol::kNoPaxos}) {
    for (const bool renewed : {false, true}) {
      Client c(Config{3}, protocol, 0, {put}, /*retry_ms=*/10'000);
      Outbox out;
      c.tick(1000, out);  // sent
      if (renewed) c.flows_renewed();
      c.tick(1000 + Client::kFastRetryMs, out);
      EXPECT_EQ(c.retries(), renewed ? 1u : 0u) << (renewed ? "renewed" : "the same flows");
      c.tick(1000 + 10'000 + 3 * Client::kFastRetryMs, out);
      EXPECT_EQ(c.retries(), renewed ? 2u : 1u);
    }
  }
}

// --- A replica whose process restarted without its state (message.h,
// Recovery; SimCluster::restart).

// Runs until replica r finished recovering, or `ms` passed.
bool recovered(SimCluster& c, uint32_t r, uint64_t ms) {
  return c.net().run(ms, [&] { return !c.recovering(r); });
}

TEST(MultiPaxosRecoveryTest, AFollowerRestartedWithoutStateCatchesUpFromTheLeader) {
  ClusterOptions o = multipaxos(3, 4, 60);
  o.keys = 3;
  SimCluster c(o);
  c.net().run(60, [] { return false; });
  const uint64_t before = c.mp(0).commit_index();
  ASSERT_GT(before, 0u);
  c.restart(2);
  EXPECT_TRUE(c.recovering(2));
  EXPECT_EQ(c.mp(2).log_size(), 0u) << "the new process starts with nothing";
  ASSERT_TRUE(recovered(c, 2, 2000));
  EXPECT_GE(c.mp(2).commit_index(), before) << "it holds every slot committed before it";
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  EXPECT_EQ(c.mp(2).commit_index(), c.mp(0).commit_index());
  EXPECT_EQ(c.mp(2).ballot(), c.mp(0).ballot());
}

TEST(MultiPaxosRecoveryTest, ALeaderRestartedWithoutStateRecoversAsAFollowerOfTheNextLeader) {
  ClusterOptions o = multipaxos(5, 4, 40, 5);
  o.keys = 2;
  SimCluster c(o);
  c.net().run(80, [] { return false; });
  ASSERT_EQ(c.leader(), 0);
  c.restart(0);
  ASSERT_TRUE(recovered(c, 0, 5000));
  EXPECT_FALSE(c.mp(0).is_leader());
  EXPECT_GT(c.mp(0).ballot(), 0u) << "it recovered into the ballot elected without it";
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
}

// The case recovery exists for. Leader 0 commits with replica 2's votes
// alone (replica 1 is down), then 0 is lost and 2 restarts, and 1 comes
// back. 1 and 2 are a majority: had 2 come back as an empty follower, their
// election would fill slots already chosen with no-ops. Recovering, 2 waits
// for the leader of the latest ballot, and nothing happens until 0 is back.
// (This test fails with recovery skipped.)
TEST(MultiPaxosRecoveryTest, ValuesChosenWithARestartedReplicasVotesSurviveTheLeadersLoss) {
  ClusterOptions o = multipaxos(3, 2, 30, 2);
  o.keys = 2;
  SimCluster c(o);
  c.net().crash(1);
  c.net().run(150, [] { return false; });
  const uint64_t chosen = c.mp(0).commit_index();
  ASSERT_GT(chosen, 5u);
  const auto applied = c.mp(0).store().applied();
  c.net().crash(0);
  c.restart(2);
  c.net().restore(1);
  c.net().run(500, [] { return false; });
  EXPECT_TRUE(c.recovering(2)) << "no leader of the latest ballot answered";
  EXPECT_FALSE(c.mp(1).is_leader());
  EXPECT_EQ(c.mp(1).commit_index(), 0u);
  c.net().restore(0);
  ASSERT_TRUE(recovered(c, 2, 5000));
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  for (uint32_t r = 0; r < 3; ++r) expect_prefix(applied, c.mp(r).store().applied());
}

// With one follower down and the other restarted, the restarted one cannot
// learn which ballot is latest (f + 1 answers) and must neither vote nor
// promise meanwhile: nothing commits. Once the down one is back, it
// recovers and the run completes. (Fails if a recovering replica votes.)
TEST(MultiPaxosRecoveryTest, ARecoveringReplicaNeitherVotesNorPromises) {
  ClusterOptions o = multipaxos(3, 2, 30, 4);
  SimCluster c(o);
  c.net().run(60, [] { return false; });
  c.net().crash(1);
  c.restart(2);
  c.net().run(20, [] { return false; });  // what 1 had sent still lands
  const uint64_t commit = c.mp(0).commit_index();
  c.net().run(600, [] { return false; });
  EXPECT_TRUE(c.recovering(2));
  EXPECT_EQ(c.mp(0).commit_index(), commit) << "a recovering replica's vote was counted";
  EXPECT_EQ(c.mp(2).elections(), 0u);
  c.net().restore(1);
  ASSERT_TRUE(recovered(c, 2, 2000));
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
}

// A long log comes in pieces of kRecoveryEntries.
TEST(MultiPaxosRecoveryTest, ALogOfThousandsOfSlotsIsCopiedInPieces) {
  ClusterOptions o = multipaxos(3, 4, 300);
  o.keys = 8;
  SimCluster c(o);
  ASSERT_TRUE(c.run_until_done(60000));
  ASSERT_GT(c.mp(0).log_size(), 8 * kRecoveryEntries);
  uint64_t replies = 0;
  c.net().set_filter([&](const Message& m) {
    if (m.type == MsgType::kRecoveryReply && !m.entries.empty()) {
      ++replies;
      EXPECT_LE(m.entries.size(), kRecoveryEntries);
    }
    return true;
  });
  c.restart(1);
  ASSERT_TRUE(recovered(c, 1, 5000));
  EXPECT_GE(replies, c.mp(0).log_size() / kRecoveryEntries);
  expect_consistent(c);
  EXPECT_EQ(c.mp(1).store().digest(), c.mp(0).store().digest());
}

TEST(MultiPaxosRecoveryTest, RestartsUnderLossOverManySeeds) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = multipaxos(seed % 2 ? 3 : 5, 3, 25, seed);
    o.keys = 2;
    o.sim.drop_rate = 0.05;
    o.sim.fifo = seed % 3 != 0;
    SimCluster c(o);
    c.net().run(30 + seed * 17 % 150, [] { return false; });
    // The leader on odd seeds, a follower on even ones; on every third seed
    // a second replica restarts once the first recovered.
    const int l = std::max(c.leader(), 0);
    const uint32_t r =
        seed % 2 ? static_cast<uint32_t>(l) : (static_cast<uint32_t>(l) + 1) % o.replicas;
    c.restart(r);
    ASSERT_TRUE(recovered(c, r, 10000));
    if (seed % 3 == 0) {
      const uint32_t r2 = (r + 2) % o.replicas;
      c.restart(r2);
      ASSERT_TRUE(recovered(c, r2, 10000));
    }
    ASSERT_TRUE(c.run_until_done(60000));
    expect_consistent(c);
  }
}

// --- Snapshots and the log kept (message.h, Snapshots).

ClusterOptions multipaxos_snapshotting(uint32_t replicas, uint32_t clients, uint32_t ops,
                                       uint64_t every, uint64_t seed = 1) {
  ClusterOptions o = multipaxos(replicas, clients, ops, seed);
  o.keys = 5;
  o.multipaxos.snapshot_every = every;
  return o;
}

TEST(MultiPaxosSnapshotTest, EveryLogStaysWithinTwoSnapshotIntervals) {
  SimCluster c(multipaxos_snapshotting(3, 4, 100, 50));
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(c.mp(r).log_size(), 400u);
    EXPECT_GE(c.mp(r).snapshots_taken(), 7u);
    EXPECT_LE(c.mp(r).log_entries_held(), 100u) << "replica " << r;
    EXPECT_GE(c.mp(r).log_base(), 300u) << "replica " << r;
  }
}

TEST(MultiPaxosSnapshotTest, AFollowerFarBehindCatchesUpFromASnapshot) {
  SimCluster c(multipaxos_snapshotting(3, 4, 60, 40));
  c.net().run(20, [] { return false; });
  c.net().crash(2);
  ASSERT_TRUE(c.run_until_done(30000));
  ASSERT_GT(c.mp(0).log_base(), c.mp(2).commit_index()) << "the slots 2 lacks are gone";
  c.net().restore(2);
  expect_consistent(c);
  EXPECT_EQ(c.mp(2).snapshots_installed(), 1u);
  EXPECT_EQ(c.mp(2).commit_index(), c.mp(0).commit_index());
}

TEST(MultiPaxosSnapshotTest, ARestartedReplicaRecoversFromTheSnapshotThenTheLogAfterIt) {
  SimCluster c(multipaxos_snapshotting(3, 4, 150, 40));
  c.net().run(250, [] { return false; });
  ASSERT_GT(c.mp(0).log_base(), 0u);
  c.restart(1);
  ASSERT_TRUE(recovered(c, 1, 5000));
  EXPECT_EQ(c.mp(1).snapshots_installed(), 1u);
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
}

// Values of a few hundred bytes on a thousand keys make a snapshot of many
// chunks; 5% of all messages (chunks too) are lost while a restarted
// replica fetches it.
TEST(MultiPaxosSnapshotTest, ASnapshotOfManyChunksArrivesWholeUnderLoss) {
  ClusterOptions o = multipaxos_snapshotting(3, 4, 300, 200, 3);
  o.workload = "a";
  o.keys = 1000;
  o.value_bytes = 300;
  SimCluster c(o);
  ASSERT_TRUE(c.run_until_done(60000));
  uint64_t chunks = 0;
  c.net().set_filter([&](const Message& m) {
    if (m.type == MsgType::kSnapshotChunk) {
      ++chunks;
      EXPECT_LE(m.blob.size(), kSnapshotChunkBytes);
    }
    return true;
  });
  c.net().set_drop_rate(0.05);
  c.restart(2);
  ASSERT_TRUE(recovered(c, 2, 20000));
  EXPECT_GE(chunks, 5u);
  expect_consistent(c);
}

// Replica 2 is down while 0 and 1 commit and drop their old slots; then 0
// is lost and 2 comes back. 2's clock ran out while it was down, so it
// campaigns at once, far behind 1's snapshot: 1's promise cannot carry the
// chosen slots it dropped, so 2 must stand down and fetch the snapshot, not
// lead with no-ops in their place. (Fails if the candidate ignores it.)
TEST(MultiPaxosSnapshotTest, ACandidateBehindAPromisersSnapshotStandsDownAndFetchesIt) {
  ClusterOptions o = multipaxos_snapshotting(3, 3, 80, 20, 6);
  SimCluster c(o);
  c.net().crash(2);
  c.net().run(300, [] { return false; });
  ASSERT_GT(c.mp(1).log_base(), 0u);
  const auto applied = c.mp(1).store().applied();
  uint64_t behind = 0;
  c.net().set_filter([&](const Message& m) {
    if (m.type == MsgType::kPromise && m.flag) ++behind;
    return true;
  });
  c.net().crash(0);
  c.net().restore(2);
  ASSERT_TRUE(c.run_until_done(60000));
  EXPECT_GE(behind, 1u);
  EXPECT_GE(c.mp(2).snapshots_installed(), 1u);
  expect_consistent(c);
  expect_prefix(applied, c.mp(1).store().applied());
  expect_prefix(applied, c.mp(2).store().applied());
}

// Over flows every message must fit a 64 KiB segment. A follower stopped
// while 3,000 slots of 200-byte values commit, then the leader lost: the
// follower, far behind but within the others' logs, campaigns at once, so
// promises carry thousands of slots (in parts), the new leader re-proposes
// what is uncommitted (in several Accepts), and catch-up runs. Every
// message stays under 48 KiB encoded.
TEST(MultiPaxosSnapshotTest, EveryMessageStaysBoundedThroughALongLogAndALeaderChange) {
  ClusterOptions o = multipaxos_snapshotting(3, 4, 900, 100000, 8);
  o.workload = "a";
  o.keys = 200;
  o.value_bytes = 200;
  o.client_window = 16;
  SimCluster c(o);
  size_t largest = 0;
  uint64_t multipart = 0;
  std::vector<std::byte> bytes;
  c.net().set_filter([&](const Message& m) {
    encode(m, bytes);
    largest = std::max(largest, bytes.size());
    if (m.type == MsgType::kPromise && m.b > 1) ++multipart;
    return true;
  });
  c.net().run(20, [] { return false; });
  c.net().crash(2);
  c.net().run(3000, [&] { return c.mp(0).commit_index() > 3000; });
  ASSERT_GT(c.mp(0).commit_index(), 3000u);
  c.net().crash(0);
  c.net().restore(2);
  ASSERT_TRUE(c.run_until_done(60000));
  EXPECT_GT(multipart, 0u) << "no promise needed parts";
  EXPECT_LE(largest, 48u * 1024) << "a message would not fit a segment";
  c.net().restore(0);
  expect_consistent(c);
  EXPECT_LE(largest, 48u * 1024);
}

}  // namespace
// Batched requests and replies survive the flows' byte encoding, down to
// commands with every string empty (29 bytes each, the least there is); a
// record cut short is refused.
TEST(MultiPaxosCodecTest, BatchedRequestsAndRepliesRoundTrip) {
  Message req;
  req.type = MsgType::kRequest;
  req.from = 4;
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    Command c;
    c.op = Op::kGet;
    c.client = 4;
    c.seq = seq;
    req.cmds.push_back(c);
  }
  req.cmds[2].op = Op::kCas;
  req.cmds[2].key = "k";
  req.cmds[2].value = "new";
  req.cmds[2].expected = std::string("a\0b", 3);
  Message rep;
  rep.type = MsgType::kReply;
  rep.cmds = req.cmds;
  rep.results = {{true, "v"}, {false, ""}, {true, ""}, {true, std::string(256, 'x')}, {}};
  for (const Message& m : {req, rep}) {
    std::vector<std::byte> bytes;
    encode(m, bytes);
    Message back;
    std::string why;
    ASSERT_TRUE(decode(bytes, &back, &why)) << why;
    EXPECT_EQ(back.cmds, m.cmds);
    EXPECT_EQ(back.results, m.results);
    bytes.pop_back();
    EXPECT_FALSE(decode(bytes, &back, &why));
  }
}

}  // namespace kv
