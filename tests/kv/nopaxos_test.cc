// NOPaxos (apps/kv/nopaxos.h) on the seeded simulated network, modelled on
// the reference implementation's test list: one op, many ops, replica gap,
// leader gap, leader-and-replica gap, committed gap, gap timeouts, random
// gaps, synchronization, view change, session change (recovery, snapshots
// and bounded view changes: nopaxos_transfer_test.cc). Every test ends with
// expect_consistent(): identical applied logs and digests on all live
// replicas, exactly-once results that a sequential replay of the log
// reproduces, real-time order kept (kv_test_util.h).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "codec.h"
#include "nopaxos_test_util.h"

namespace kv {
namespace {

TEST(NoPaxosTest, OneOpCompletesWithALeaderReplyAndAQuorumOfLogs) {
  SimCluster c(nopaxos(5, 1, 1));
  ASSERT_TRUE(c.run_until_done(1000));
  ASSERT_EQ(c.client(0).history().size(), 1u);
  // The leader executed it; at least f + 1 replicas logged it at slot 1.
  EXPECT_EQ(c.np(0).store().applied().size(), 1u);
  int logged = 0;
  for (uint32_t r = 0; r < 5; ++r)
    if (c.np(r).log_size() >= 1 && c.np(r).log()[0].cmds.at(0).seq == 1) ++logged;
  EXPECT_GE(logged, 3);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) EXPECT_EQ(c.np(r).log_size(), 1u);
}

TEST(NoPaxosTest, ManyOpsKeepOneOrderWithoutGaps) {
  SimCluster c(nopaxos(5, 1, 10));
  ASSERT_TRUE(c.run_until_done(5000));
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) {
    ASSERT_EQ(c.np(r).log_size(), 10u);
    for (uint64_t s = 1; s <= 10; ++s) EXPECT_EQ(c.np(r).log()[s - 1].cmds.at(0).seq, s);
    EXPECT_EQ(noops(c.np(r)), 0u);
  }
}

TEST(NoPaxosTest, ReplicaGapIsFilledFromTheLeader) {
  SimCluster c(nopaxos(5, 2, 6));
  drop_ordered(c, {1, 2, 3, 4}, {3, 5, 8});
  ASSERT_TRUE(c.run_until_done(5000));
  // The leader had every request: no slot became a no-op, none was retried.
  EXPECT_EQ(c.np(0).gaps_committed(), 0u);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) {
    EXPECT_EQ(c.np(r).log_size(), 12u);
    EXPECT_EQ(noops(c.np(r)), 0u);
  }
}

TEST(NoPaxosTest, LeaderGapIsFilledFromAFollower) {
  SimCluster c(nopaxos(5, 2, 6));
  drop_ordered(c, {0}, {3, 5, 8});
  ASSERT_TRUE(c.run_until_done(5000));
  EXPECT_EQ(c.np(0).gaps_recovered(), 3u);
  EXPECT_EQ(c.np(0).gaps_committed(), 0u);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) EXPECT_EQ(noops(c.np(r)), 0u);
}

TEST(NoPaxosTest, LeaderAndReplicaGapIsFilledFromTheOthers) {
  SimCluster c(nopaxos(5, 4, 4));
  drop_ordered(c, {0, 1}, {5, 6, 10});
  ASSERT_TRUE(c.run_until_done(5000));
  EXPECT_EQ(c.np(0).gaps_recovered(), 3u);
  EXPECT_EQ(c.np(0).gaps_committed(), 0u);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) EXPECT_EQ(noops(c.np(r)), 0u);
}

TEST(NoPaxosTest, GapNobodyHasBecomesANoOpEverywhereAndTheClientRetries) {
  SimCluster c(nopaxos(5, 2, 6));
  // Messages 3 and 7 reach no replica: only a no-op can fill those slots.
  drop_ordered(c, {0, 1, 2, 3, 4}, {3, 7});
  ASSERT_TRUE(c.run_until_done(5000));
  EXPECT_EQ(c.np(0).gaps_committed(), 2u);
  expect_consistent(c);
  for (uint32_t r = 0; r < 5; ++r) {
    EXPECT_EQ(noops(c.np(r)), 2u);
    EXPECT_EQ(c.np(r).log_size(), 14u);  // 12 requests, 2 no-ops
  }
  EXPECT_GE(c.client(0).retries() + c.client(1).retries(), 2u);
}

TEST(NoPaxosTest, GapAgreementSurvivesLostGapMessages) {
  // Lose the first few gap requests, replies and gap commits as well: the
  // timeouts resend them until agreement is reached.
  SimCluster c(nopaxos(3, 2, 8));
  auto lost = std::make_shared<std::map<MsgType, int>>();
  auto counts = std::make_shared<std::map<uint32_t, int>>();
  c.net().set_filter([=](const Message& m) {
    if (m.type == MsgType::kGapRequest || m.type == MsgType::kGapReply ||
        m.type == MsgType::kGapCommit || m.type == MsgType::kGapCommitReply)
      return ++(*lost)[m.type] > 3;
    if (m.type != MsgType::kOrdered) return true;
    int n = ++(*counts)[m.to];
    return !(n == 4 || (m.to == 0 && n == 9) || n == 12);
  });
  ASSERT_TRUE(c.run_until_done(10000));
  EXPECT_GE((*lost)[MsgType::kGapRequest], 3);
  expect_consistent(c);
}

TEST(NoPaxosTest, RandomGapsOverManySeedsStayLinearizable) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = nopaxos(seed % 2 ? 3 : 5, 3, 20, seed);
    o.sim.drop_rate = 0.02 * static_cast<double>(seed % 6);
    SimCluster c(o);
    auto rng = std::make_shared<std::mt19937_64>(seed);
    // On top of the random loss of any message, lose 10% of the ordered
    // multicast to each replica.
    c.net().set_filter(
        [=](const Message& m) { return m.type != MsgType::kOrdered || (*rng)() % 10 != 0; });
    ASSERT_TRUE(c.run_until_done(60000));
    expect_consistent(c);
  }
}

// Clients with 8 operations in flight: a gap (a lost multicast, a no-op in
// its slot) leaves the client's later requests in the log before it; the
// store skips them until the lost one is back, so each client's operations
// still take effect in order, once. With one request per sequence number,
// with batches of 3 (a client's window is 3 slots) and with whole windows as
// one batch (a lost batch is one no-op for all its requests). Whole windows
// never skip: a batch's requests complete together, so a client's next
// batch leaves only after the one before it is in the log.
TEST(NoPaxosTest, ClientsWithEightInFlightKeepTheirOrderAcrossGaps) {
  for (uint32_t batch : {1u, 3u, 0u}) {
    uint64_t skipped = 0, gaps = 0;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", seed " + std::to_string(seed));
      ClusterOptions o = nopaxos(3, 3, 40, seed);
      o.client_window = 8;
      o.client_batch = batch;
      o.sim.drop_rate = 0.02;
      SimCluster c(o);
      auto rng = std::make_shared<std::mt19937_64>(seed);
      // Lose one in 30 copies of the ordered multicast (batched: one in 4,
      // there being far fewer of them): gaps.
      const uint64_t one_in = batch == 1 ? 30 : 4;
      c.net().set_filter(
          [=](const Message& m) { return m.type != MsgType::kOrdered || (*rng)() % one_in != 0; });
      skipped += expect_consistent_in_client_order(c);
      for (uint32_t r = 0; r < 3; ++r) gaps += noops(c.np(r));
    }
    SCOPED_TRACE("batch " + std::to_string(batch));
    EXPECT_GT(gaps, 0u) << "no slot became a no-op: the test tests nothing";
    if (batch != 0) {
      EXPECT_GT(skipped, 0u) << "no request ever followed a gap: the test tests nothing";
    }
  }
}

// One ordered multicast holding several clients' requests takes one log
// slot; the leader executes them in order and answers each client once for
// the slot, with every result; a follower acknowledges each client once.
TEST(NoPaxosRulesTest, ABatchTakesOneSlotAndEachClientIsAnsweredOnce) {
  Config cfg{3};
  Message m = ordered(0, 1, 1, 20);
  Message more = ordered(0, 1, 1, 21);
  m.cmds.push_back(more.cmds[0]);
  Command get = m.cmds[0];
  get.op = Op::kGet;
  get.seq = 2;
  m.cmds.push_back(get);  // client 20's second: reads its own put
  for (uint32_t id : {0u, 1u}) {
    SCOPED_TRACE(id == 0 ? "leader" : "follower");
    NoPaxosReplica r(cfg, id);
    Outbox out;
    m.to = id;
    r.receive(m, out);
    ASSERT_EQ(r.log_size(), 1u);
    EXPECT_EQ(r.log()[0].cmds.size(), 3u);
    ASSERT_EQ(count(out, MsgType::kReply), 2u);
    for (const Message& reply : out) {
      EXPECT_EQ(reply.a, 1u);
      EXPECT_EQ(reply.flag, id == 0);
      for (const Command& c : reply.cmds) {
        EXPECT_EQ(c.client, reply.to);
        EXPECT_TRUE(c.key.empty() && c.value.empty()) << "a reply names a command only";
      }
      if (reply.to == 20) {
        ASSERT_EQ(reply.cmds.size(), 2u);
        EXPECT_EQ(reply.cmds[0].seq, 1u);
        EXPECT_EQ(reply.cmds[1].seq, 2u);
        if (id == 0) {
          ASSERT_EQ(reply.results.size(), 2u);
          EXPECT_TRUE(reply.results[1].ok);
          EXPECT_EQ(reply.results[1].value, "v21") << "client 21's put came first";
        } else {
          EXPECT_TRUE(reply.results.empty());
        }
      } else {
        EXPECT_EQ(reply.to, 21u);
        EXPECT_EQ(reply.cmds.size(), 1u);
      }
    }
  }
}

// A client completes each command of a batch on f + 1 answers for its slot,
// one of them the leader's, and not before.
TEST(NoPaxosRulesTest, AClientCompletesABatchOnTheLeadersAnswerAndAFollowers) {
  Config cfg{3};
  std::vector<Command> ops(3);
  for (uint64_t i = 0; i < ops.size(); ++i) {
    ops[i].op = Op::kPut;
    ops[i].key = "k" + std::to_string(i);
    ops[i].value = "v";
  }
  Client client(cfg, Protocol::kNoPaxos, 0, ops, 40, 8);
  Outbox out;
  client.tick(0, out);
  ASSERT_EQ(out.size(), 1u) << "the window goes out as one request";
  ASSERT_EQ(out[0].cmds.size(), 3u);
  EXPECT_EQ(out[0].to, cfg.sequencer_id());
  Message ack = message(MsgType::kReply, 1, client.id(), 0, 1);
  ack.a = 7;
  for (const Command& c : out[0].cmds) {
    Command id;
    id.client = c.client;
    id.seq = c.seq;
    ack.cmds.push_back(id);
  }
  Message lead = ack;
  lead.from = 0;
  lead.flag = true;
  lead.results.assign(3, Result{true, ""});
  Outbox none;
  client.receive(ack, none);
  EXPECT_TRUE(client.history().empty()) << "one follower is not enough";
  Message other_slot = lead;
  other_slot.a = 8;
  client.receive(other_slot, none);
  EXPECT_TRUE(client.history().empty()) << "answers for different slots do not add up";
  client.receive(lead, none);
  EXPECT_EQ(client.history().size(), 3u);
  EXPECT_TRUE(client.done());
}

TEST(NoPaxosTest, FollowersExecuteOnlyUpToTheSyncPointAndSynchronizationBringsThemUp) {
  ClusterOptions o = nopaxos(3, 2, 30);
  o.sim.drop_rate = 0.05;
  SimCluster c(o);
  bool within = true;
  uint64_t followers_below_leader = 0;
  c.net().run(20000, [&] {
    for (uint32_t r = 1; r < 3; ++r) {
      within = within && c.np(r).store().applied().size() <= c.np(r).sync_point();
      followers_below_leader += c.np(r).store().applied().size() < c.np(0).store().applied().size();
    }
    return c.clients_done();
  });
  EXPECT_TRUE(c.clients_done());
  EXPECT_TRUE(within) << "a follower executed a slot past its sync point";
  EXPECT_GT(followers_below_leader, 0u) << "followers never lagged the leader (nothing tested)";
  expect_consistent(c);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c.np(r).sync_point(), c.np(0).log_size());
}

TEST(NoPaxosTest, ViewChangeAfterLeaderCrashKeepsEveryCompletedOp) {
  ClusterOptions o = nopaxos(5, 3, 20);
  o.sim.drop_rate = 0.02;
  SimCluster c(o);
  c.net().run(150, [] { return false; });
  auto before = c.np(1).store().applied();
  c.net().crash(0);
  ASSERT_TRUE(c.run_until_done(20000));
  EXPECT_EQ(c.leader(), 1);
  EXPECT_GE(c.np(1).view(), 1u);
  expect_consistent(c);
  expect_prefix(before, c.np(1).store().applied());
  // The old leader comes back, learns the new view and converges.
  c.net().restore(0);
  expect_consistent(c);
  EXPECT_EQ(c.np(0).view(), c.np(1).view());
}

// The new view's leader tells the clients the store knows that it leads,
// so that what they wait for goes again without their retry timeout: here
// the clients never retry within the run (a timeout far beyond it), and
// still finish after the leader's crash.
TEST(NoPaxosTest, ANewLeaderAnnouncesItselfSoClientsResendBeforeTheirRetryTimeout) {
  expect_clients_follow_an_announced_leader(nopaxos(3, 3, 40));
}

TEST(NoPaxosTest, SessionChangeWhenTheSequencerIsReplaced) {
  ClusterOptions o = nopaxos(3, 3, 20);
  o.sim.drop_rate = 0.02;
  SimCluster c(o);
  c.net().run(150, [] { return false; });
  c.new_sequencer();
  ASSERT_TRUE(c.run_until_done(20000));
  expect_consistent(c);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(c.np(r).session(), 2u);
    EXPECT_GE(c.np(r).view_changes(), 1u);
  }
  EXPECT_EQ(c.leader(), 0);  // the leader stays; only the session moved
}

TEST(NoPaxosTest, LeaderCrashesDuringASessionChange) {
  ClusterOptions o = nopaxos(5, 3, 20, 7);
  o.sim.drop_rate = 0.03;
  SimCluster c(o);
  c.net().run(120, [] { return false; });
  c.new_sequencer();
  c.net().run(3, [] { return false; });
  c.net().crash(0);
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  EXPECT_NE(c.leader(), 0);
}

// Rules checked on one replica fed crafted messages: the cases a random run
// rarely reaches but safety rests on.

TEST(NoPaxosRulesTest, LeaderWaitsForFollowersToHoldTheNoOpBeforeGoingOn) {
  Config cfg{3};
  NoPaxosReplica leader(cfg, 0);
  Outbox out;
  leader.receive(ordered(0, 1, 2, 20), out);  // message 1 never arrives
  EXPECT_EQ(count(out, MsgType::kGapRequest), 2u);
  out.clear();
  leader.tick(100, out);  // nobody had it: commit a no-op
  EXPECT_EQ(leader.gaps_committed(), 1u);
  EXPECT_EQ(count(out, MsgType::kGapCommit), 2u);
  out.clear();
  leader.receive(ordered(0, 1, 3, 30), out);
  // Until a follower holds the no-op, a view change could replace it by the
  // request, so nothing after it may be executed or answered.
  EXPECT_EQ(count(out, MsgType::kReply), 0u);
  EXPECT_EQ(leader.store().applied().size(), 1u);  // just the no-op
  Message ack = message(MsgType::kGapCommitReply, 1, 0, 0, 1);
  ack.a = 1;
  leader.receive(ack, out);
  EXPECT_EQ(count(out, MsgType::kReply), 2u);
  EXPECT_EQ(leader.store().applied().size(), 3u);
}

TEST(NoPaxosRulesTest, ViewChangeMergeKeepsACommittedNoOpOverTheRequest) {
  Config cfg{3};
  NoPaxosReplica r(cfg, 1);  // leader of view 1
  Outbox out;
  r.receive(ordered(1, 1, 1, 20), out);  // slot 1: the request, in r's own log
  out.clear();
  Message req = message(MsgType::kViewChangeRequest, 2, 1, 1, 1);
  r.receive(req, out);
  // Replica 2 holds the old leader's no-op for slot 1.
  r.receive(view_change(2, 1, 1, 0, {logged(1, 1, 0), logged(2, 2, 30)}), out);
  ASSERT_TRUE(r.is_leader());
  ASSERT_EQ(r.log_size(), 2u);
  EXPECT_TRUE(r.log()[0].cmds.empty());
  EXPECT_EQ(r.log()[1].cmds.at(0).client, 30u);
  const Message* sv = find(out, MsgType::kStartView);
  ASSERT_NE(sv, nullptr);
  EXPECT_EQ(sv->entries, r.log());
}

TEST(NoPaxosRulesTest, ViewChangeMergeUsesOnlyLogsOfTheLatestNormalView) {
  Config cfg{3};
  NoPaxosReplica r(cfg, 2);  // leader of view 2
  Outbox out;
  r.receive(ordered(2, 1, 1, 20), out);
  r.receive(ordered(2, 1, 2, 21), out);  // r's stale log from view 0: two requests
  out.clear();
  Message req = message(MsgType::kViewChangeRequest, 1, 2, 2, 1);
  r.receive(req, out);
  // Replica 1 was normal in view 1, whose log has a no-op at slot 1 and
  // nothing after: that log wins whole; r's view-0 entries must not leak in.
  r.receive(view_change(1, 2, 2, 1, {logged(1, 1, 0)}), out);
  ASSERT_TRUE(r.is_leader());
  ASSERT_EQ(r.log_size(), 1u);
  EXPECT_TRUE(r.log()[0].cmds.empty());
  // As the new leader it executes the merged log, and only that.
  EXPECT_EQ(r.store().applied().size(), 1u);
}

TEST(NoPaxosRulesTest, FollowerExecutesOnlyWhatItInstalledFromTheLeader) {
  Config cfg{3};
  NoPaxosReplica f(cfg, 1);
  Outbox out;
  f.receive(ordered(1, 1, 1, 20), out);  // the follower has the request at slot 1 ...
  // ... but the leader made slot 1 a no-op and the follower missed both the
  // GapCommit and the SyncPrepare: a SyncCommit alone must not make it
  // execute its own, different, slot 1.
  Message commit = message(MsgType::kSyncCommit, 0, 1, 0, 1);
  commit.a = 1;
  f.receive(commit, out);
  EXPECT_EQ(f.store().applied().size(), 0u);
  Message prepare = message(MsgType::kSyncPrepare, 0, 1, 0, 1);
  prepare.a = 1;
  prepare.b = 1;
  prepare.entries = {logged(1, 1, 0)};
  out.clear();
  f.receive(prepare, out);
  EXPECT_NE(find(out, MsgType::kSyncReply), nullptr);
  f.receive(commit, out);
  ASSERT_EQ(f.store().applied().size(), 1u);
  EXPECT_EQ(f.store().applied()[0].first, 0u);  // the no-op
}

TEST(NoPaxosRulesTest, AClockThatStartsLateDoesNotTriggerAViewChange) {
  NoPaxosReplica r(Config{3}, 1);
  Outbox out;
  r.tick(5'000'000'000, out);
  EXPECT_EQ(r.view_changes(), 0u);
  r.tick(5'000'000'000 + 1000, out);
  EXPECT_EQ(r.view_changes(), 1u);
}

// The membership's epoch names the replicas left (Node::replicas_present):
// a replica whose view's leader is gone changes at its next tick to the
// smallest later view whose leader is present (all pick the same one);
// with the leader present nothing changes.
TEST(NoPaxosRulesTest, ALeaderGoneMakesThePresentChangeToTheNextViewThatOneOfThemLeads) {
  Outbox out;
  NoPaxosReplica r2(Config{5}, 2), r3(Config{5}, 3), r1(Config{3}, 1);
  for (NoPaxosReplica* r : {&r2, &r3, &r1}) r->tick(1000, out);
  r2.replicas_present(0b11100);  // replicas 0 (view 0's leader) and 1 are gone
  r3.replicas_present(0b11100);
  r1.replicas_present(0b011);  // replica 2 gone, the leader 0 present
  out.clear();
  for (NoPaxosReplica* r : {&r2, &r3, &r1}) r->tick(1001, out);
  EXPECT_EQ(r2.view(), 2u);
  EXPECT_EQ(r3.view(), 2u);
  EXPECT_EQ(r2.view_changes(), 1u);
  EXPECT_EQ(r3.view_changes(), 1u);
  EXPECT_NE(find(out, MsgType::kViewChangeRequest), nullptr);
  EXPECT_EQ(r1.view(), 0u);
  EXPECT_EQ(r1.view_changes(), 0u);

  // Already changing to the gone leader's view (a new sequencer's first
  // request began a session change in view 0): it moves on to view 1 at
  // once, the new session kept.
  NoPaxosReplica r(Config{3}, 2);
  r.tick(1000, out);
  Message first;
  first.type = MsgType::kOrdered;
  first.from = 3;
  first.to = 2;
  first.session = 2;
  first.a = 1;
  r.receive(first, out);
  EXPECT_FALSE(r.normal());
  EXPECT_EQ(r.view(), 0u);
  EXPECT_EQ(r.session(), 2u);
  r.replicas_present(0b110);
  r.tick(1001, out);
  EXPECT_EQ(r.view(), 1u);
  EXPECT_EQ(r.session(), 2u);
}

TEST(NoPaxosTest, SynchronizationSendsBoundedChunksToAFollowerFarBehind) {
  ClusterOptions o = nopaxos(3, 3, 40);
  o.nopaxos.max_sync_entries = 16;
  SimCluster c(o);
  auto largest = std::make_shared<size_t>(0);
  c.net().set_filter([=](const Message& m) {
    if (m.type == MsgType::kSyncPrepare) *largest = std::max(*largest, m.entries.size());
    return true;
  });
  c.net().crash(2);  // misses everything; the others carry on (f = 1)
  ASSERT_TRUE(c.run_until_done(20000));
  c.net().restore(2);
  c.quiesce(500);
  EXPECT_LE(*largest, 16u);
  EXPECT_EQ(c.np(2).sync_point(), c.np(0).log_size());
  EXPECT_GT(c.np(0).log_size(), 100u);
  expect_consistent(c);
}

// Synchronization sends positions, not commands: a follower that holds a
// slot's batch keeps it; one that lacks a batch asks for the full entries
// from that slot (SyncReply c) and gets them; a slot the leader made a no-op
// becomes one at the follower without the leader sending anything more.
TEST(NoPaxosRulesTest, SynchronizationSendsPositionsAndFullEntriesOnlyWhereMissing) {
  Config cfg{3};
  NoPaxosReplica leader(cfg, 0);
  NoPaxosReplica follower(cfg, 1);
  Outbox out;
  leader.tick(0, out);
  follower.tick(0, out);
  for (uint64_t n = 1; n <= 3; ++n) leader.receive(ordered(0, 1, n, 20 + n), out);
  follower.receive(ordered(1, 1, 1, 21), out);  // msgnums 2 and 3 lost on the way to it
  out.clear();
  leader.tick(10, out);
  const Message* sync = nullptr;
  for (const Message& m : out)
    if (m.type == MsgType::kSyncPrepare && m.to == 1) sync = &m;
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->flag) << "positions";
  ASSERT_EQ(sync->entries.size(), 3u);
  for (const Entry& e : sync->entries) {
    EXPECT_TRUE(e.cmds.empty()) << "slot " << e.slot << " carries its commands";
    EXPECT_EQ(e.ballot, 1u) << "slot " << e.slot << "'s count of commands";
  }
  Outbox back;
  follower.receive(*sync, back);
  const Message* reply = find(back, MsgType::kSyncReply);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->a, 1u) << "it holds slot 1 as the leader does";
  EXPECT_EQ(reply->c, 2u) << "it lacks slot 2's batch";
  out.clear();
  leader.receive(*reply, out);
  sync = find(out, MsgType::kSyncPrepare);
  ASSERT_NE(sync, nullptr);
  EXPECT_FALSE(sync->flag) << "full entries";
  EXPECT_EQ(sync->b, 2u);
  ASSERT_EQ(sync->entries.size(), 2u);
  EXPECT_EQ(sync->entries[0].cmds.size(), 1u);
  back.clear();
  follower.receive(*sync, back);
  ASSERT_EQ(follower.log_size(), 3u);
  EXPECT_EQ(follower.log(), leader.log());
  reply = find(back, MsgType::kSyncReply);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->a, 3u);
  EXPECT_EQ(reply->c, 0u);

  // A no-op: the leader misses msgnum 4, nobody has it, and it commits a
  // no-op in slot 4; the follower, which got msgnum 4, installs the no-op
  // from the positions alone.
  out.clear();
  leader.receive(ordered(0, 1, 5, 25), out);  // 4 is missing: a gap request
  leader.tick(20, out);  // the gap timeout passes (5 waits for the no-op's acks)
  ASSERT_EQ(leader.gaps_committed(), 1u);
  ASSERT_EQ(leader.log_size(), 4u);
  ASSERT_TRUE(leader.log()[3].cmds.empty());
  back.clear();
  follower.receive(ordered(1, 1, 4, 24), back);
  ASSERT_EQ(follower.log_size(), 4u);
  ASSERT_FALSE(follower.log()[3].cmds.empty());
  out.clear();
  leader.tick(40, out);
  sync = nullptr;
  for (const Message& m : out)
    if (m.type == MsgType::kSyncPrepare && m.to == 1) sync = &m;
  ASSERT_NE(sync, nullptr);
  ASSERT_TRUE(sync->flag);
  back.clear();
  follower.receive(*sync, back);
  reply = find(back, MsgType::kSyncReply);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->a, 4u);
  EXPECT_EQ(reply->c, 0u);
  EXPECT_TRUE(follower.log()[3].cmds.empty()) << "slot 4 became the no-op";
  EXPECT_EQ(follower.log(), leader.log());
}

// Log entries travel with their batches (a sync or view change carries
// them): an entry's commands, a no-op's none, round-trip exactly, and a
// count of commands larger than the bytes left is refused, not allocated.
TEST(NoPaxosCodecTest, BatchedEntriesRoundTrip) {
  Message m;
  m.type = MsgType::kSyncPrepare;
  Entry batch = logged(1, 1, 20);
  batch.cmds.push_back(ordered(0, 1, 1, 21).cmds[0]);
  batch.cmds[1].expected = std::string("a\0b", 3);
  m.entries = {batch, logged(2, 2, 0), logged(3, 3, 22)};
  std::vector<std::byte> bytes;
  encode(m, bytes);
  Message back;
  std::string why;
  ASSERT_TRUE(decode(bytes, &back, &why)) << why;
  EXPECT_EQ(back.entries, m.entries);
  bytes.pop_back();
  EXPECT_FALSE(decode(bytes, &back, &why));
  // The first entry's count of commands (after its 33 fixed bytes and its
  // empty Multi-Paxos command) said to be a billion.
  encode(m, bytes);
  const size_t count_at = 50 + 4 + 33 + 47;
  uint32_t two = 0;
  std::memcpy(&two, bytes.data() + count_at, sizeof two);
  ASSERT_EQ(two, 2u);
  uint32_t huge = 1u << 30;
  std::memcpy(bytes.data() + count_at, &huge, sizeof huge);
  EXPECT_FALSE(decode(bytes, &back, &why));
}

}  // namespace
}  // namespace kv
