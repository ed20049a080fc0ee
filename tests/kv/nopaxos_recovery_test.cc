// NOPaxos (apps/kv/nopaxos.h): recovery of a replica restarted without its
// state (message.h, Recovery), on the seeded simulated network and as rules
// checked on single replicas fed crafted messages. Every cluster test ends
// with expect_consistent() (kv_test_util.h).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>

#include "codec.h"
#include "nopaxos_test_util.h"

namespace kv {
namespace {

TEST(NoPaxosRecoveryTest, AFollowerRestartedWithoutStateRecoversAndCatchesUp) {
  SimCluster c(nopaxos(3, 3, 100));
  c.net().run(150, [] { return false; });
  ASSERT_GT(c.np(2).log_size(), 10u);
  c.restart(2);
  EXPECT_TRUE(c.recovering(2));
  EXPECT_EQ(c.np(2).log_size(), 0u);
  ASSERT_TRUE(run_until_recovered(c, 2, 5000));
  EXPECT_FALSE(c.clients_done()) << "recovered after the run: nothing happened meanwhile";
  EXPECT_EQ(c.np(2).view(), c.np(0).view());
  EXPECT_GT(c.np(2).log_size(), 10u);  // the leader's log, copied
  EXPECT_EQ(c.np(2).recovery_attempts(), 1u);
  ASSERT_TRUE(c.run_until_done(20000));
  expect_consistent(c);
  EXPECT_EQ(c.np(2).log(), c.np(0).log());
  EXPECT_EQ(c.np(2).store().digest(), c.np(0).store().digest());
  EXPECT_EQ(c.leader(), 0);
}

TEST(NoPaxosRecoveryTest, TheLeaderRestartedWithoutStateRecoversAsAFollowerOfTheNextView) {
  SimCluster c(nopaxos(3, 3, 100));
  c.net().run(150, [] { return false; });
  auto before = c.np(1).store().applied();
  ASSERT_FALSE(before.empty());
  c.restart(0);
  ASSERT_TRUE(run_until_recovered(c, 0, 5000));
  // It could not recover into view 0, which it led: the others had to move on.
  const int leader = c.leader();
  ASSERT_GT(leader, 0);
  EXPECT_FALSE(c.np(0).is_leader());
  EXPECT_GE(c.np(0).view(), 1u);
  EXPECT_EQ(c.np(0).view(), c.np(static_cast<uint32_t>(leader)).view());
  ASSERT_TRUE(c.run_until_done(20000));
  expect_consistent(c);
  expect_prefix(before, c.np(1).store().applied());
  EXPECT_NE(c.leader(), 0);
}

TEST(NoPaxosRecoveryTest, RestartsWhileMessagesAreLostOverManySeeds) {
  int in_the_middle = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = nopaxos(seed % 2 ? 3 : 5, 3, 60, seed);
    o.sim.drop_rate = 0.05;
    SimCluster c(o);
    // Two restarts, one after the other recovered; the leader among them
    // for some seeds.
    const uint32_t first = static_cast<uint32_t>(seed % o.replicas);
    const uint32_t second = static_cast<uint32_t>((first + 1 + seed % 2) % o.replicas);
    c.net().run(60 + 7 * seed, [] { return false; });
    in_the_middle += !c.clients_done();
    c.restart(first);
    ASSERT_TRUE(run_until_recovered(c, first, 20000));
    c.net().run(40, [] { return false; });
    c.restart(second);
    ASSERT_TRUE(run_until_recovered(c, second, 20000));
    ASSERT_TRUE(c.run_until_done(60000));
    expect_consistent(c);
  }
  EXPECT_GE(in_the_middle, 15) << "most restarts should happen while clients run";
}

TEST(NoPaxosRecoveryTest, ARecoveringReplicaNeitherAnswersClientsNorCountsAsAnAcknowledgement) {
  // Three replicas: with one follower down and the other recovering, only
  // the leader is left, so no operation may complete, and the recovering
  // replica may not recover either (it needs f + 1 = 2 answers).
  SimCluster c(nopaxos(3, 2, 40));
  c.net().run(100, [] { return false; });
  ASSERT_FALSE(c.clients_done());
  auto spoke = std::make_shared<std::map<MsgType, int>>();  // what 1 sent while recovering
  c.net().set_filter([&c, spoke](const Message& m) {
    if (m.from == 1 && c.recovering(1)) ++(*spoke)[m.type];
    return true;
  });
  c.net().crash(2);
  c.restart(1);
  c.net().run(20, [] { return false; });  // what replica 2 had sent arrives
  const size_t completed = c.history().size();
  c.net().run(1000, [] { return false; });
  EXPECT_TRUE(c.recovering(1)) << "recovered on the word of fewer than f + 1 others";
  EXPECT_EQ(c.history().size(), completed)
      << "a client completed with only the leader and a recovering replica up";
  EXPECT_GT((*spoke)[MsgType::kRecoveryRequest], 0);
  for (const auto& [type, n] : *spoke)
    EXPECT_EQ(type, MsgType::kRecoveryRequest) << n << " of type " << static_cast<int>(type);
  c.net().restore(2);
  ASSERT_TRUE(run_until_recovered(c, 1, 5000));
  ASSERT_TRUE(c.run_until_done(20000));
  expect_consistent(c);
}

TEST(NoPaxosRecoveryTest, ALongLogIsCopiedInBoundedPieces) {
  ClusterOptions o = nopaxos(3, 4, 400);
  o.workload = "a";
  o.keys = 16;
  o.value_bytes = 300;  // commands near the largest the store sees
  SimCluster c(o);
  c.net().run(60000, [&] { return c.np(0).log_size() >= 1200; });
  ASSERT_GE(c.np(0).log_size(), 1200u);
  ASSERT_FALSE(c.clients_done());
  auto pieces = std::make_shared<size_t>(0);
  auto most = std::make_shared<size_t>(0);
  auto largest = std::make_shared<size_t>(0);
  c.net().set_filter([=](const Message& m) {
    if (m.type != MsgType::kRecoveryReply || m.entries.empty()) return true;
    ++*pieces;
    *most = std::max(*most, m.entries.size());
    std::vector<std::byte> bytes;
    encode(m, bytes);
    *largest = std::max(*largest, bytes.size());
    return true;
  });
  c.restart(2);
  ASSERT_TRUE(run_until_recovered(c, 2, 10000));
  EXPECT_GE(c.np(2).log_size(), 1200u);
  EXPECT_GE(*pieces, 1200 / kRecoveryEntries);
  EXPECT_LE(*most, kRecoveryEntries);
  EXPECT_GE(*most, kRecoveryEntries / 2) << "pieces far smaller than they may be";
  EXPECT_LE(*largest, 48u * 1024);
  ASSERT_TRUE(c.run_until_done(60000));
  expect_consistent(c);
}

// Recovery rules on one replica fed crafted messages.

Message recovery_reply(uint32_t from, uint32_t to, uint64_t nonce, uint64_t view, uint64_t session,
                       bool leads, uint64_t last, uint64_t sync) {
  Message m = message(MsgType::kRecoveryReply, from, to);
  m.a = nonce;
  m.view = view;
  m.session = session;
  m.flag = leads;
  m.b = last;
  m.c = sync;
  return m;
}

Entry in_session(uint64_t slot, uint64_t session, uint64_t msgnum, uint64_t client) {
  Entry e = logged(slot, msgnum, client);
  e.session = session;
  return e;
}

TEST(NoPaxosRecoveryRulesTest, ARecoveringReplicaJoinsOnlyTheLeaderOfTheHighestView) {
  Config cfg{3};
  NoPaxosReplica r(cfg, 2, recovering(7));
  ASSERT_TRUE(r.recovering());
  Outbox out;
  r.tick(0, out);
  ASSERT_EQ(count(out, MsgType::kRecoveryRequest), 2u);
  const uint64_t nonce = out[0].a;
  EXPECT_EQ(out[0].b, 0u);
  out.clear();
  // Nothing else moves it: not requests, not a leader's log, not views.
  r.receive(ordered(2, 1, 1, 20), out);
  Message prepare = message(MsgType::kSyncPrepare, 0, 2, 0, 1);
  prepare.a = 1;
  prepare.b = 1;
  prepare.entries = {logged(1, 1, 20)};
  r.receive(prepare, out);
  Message req = message(MsgType::kViewChangeRequest, 0, 2, 4, 1);
  r.receive(req, out);
  r.tick(10, out);  // nor silence
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(r.log_size(), 0u);
  EXPECT_EQ(r.view_changes(), 0u);
  // Replica 1 leads (1, 1); replica 0 moved on to session 2: the highest
  // view is (1, 2), which nobody leads yet.
  r.receive(recovery_reply(1, 2, nonce, 1, 1, true, 5, 5), out);
  r.receive(recovery_reply(0, 2, nonce, 0, 2, false, 5, 5), out);
  EXPECT_TRUE(out.empty());
  // An answer to another incarnation or attempt does not count.
  r.receive(recovery_reply(1, 2, nonce + 1, 1, 2, true, 0, 0), out);
  EXPECT_TRUE(out.empty());
  // Replica 1 leads (1, 2) with two slots: copy them.
  r.receive(recovery_reply(1, 2, nonce, 1, 2, true, 2, 1), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, MsgType::kRecoveryRequest);
  EXPECT_EQ(out[0].to, 1u);
  EXPECT_EQ(out[0].b, 1u);
  out.clear();
  Message piece = recovery_reply(1, 2, nonce, 1, 2, true, 2, 1);
  piece.entries = {in_session(1, 2, 1, 20), in_session(2, 2, 2, 21)};
  r.receive(piece, out);
  ASSERT_FALSE(r.recovering());
  EXPECT_EQ(r.view(), 1u);
  EXPECT_EQ(r.session(), 2u);
  EXPECT_FALSE(r.is_leader());
  EXPECT_EQ(r.log(), piece.entries);
  EXPECT_EQ(r.store().applied().size(), 1u);   // up to the leader's sync point
  EXPECT_EQ(count(out, MsgType::kReply), 0u);  // no client hears of the copy
  const Message* rec = find(out, MsgType::kRecover);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->to, 1u);
  EXPECT_EQ(rec->a, 2u);
  out.clear();
  // Message 4 of the session arrives: 3 went by while it recovered, a gap
  // it asks the leader about ...
  r.receive(ordered(2, 2, 4, 23), out);
  const Message* gap = find(out, MsgType::kGapRequest);
  ASSERT_NE(gap, nullptr);
  EXPECT_EQ(gap->to, 1u);
  EXPECT_EQ(gap->a, 3u);
  EXPECT_EQ(gap->b, 3u);
  out.clear();
  // ... and which synchronization fills in as well.
  Message sync = message(MsgType::kSyncPrepare, 1, 2, 1, 2);
  sync.a = 4;
  sync.b = 3;
  sync.entries = {in_session(3, 2, 3, 22), in_session(4, 2, 4, 23)};
  r.receive(sync, out);
  EXPECT_EQ(r.log_size(), 4u);
  EXPECT_NE(find(out, MsgType::kSyncReply), nullptr);
  r.receive(ordered(2, 2, 5, 24), out);
  EXPECT_EQ(r.log_size(), 5u);  // and message 5 follows at once
}

TEST(NoPaxosRecoveryRulesTest, AViewChangeNobodyJoinedDoesNotHoldRecoveryUp) {
  Config cfg{5};  // f + 1 = 3 answers
  NoPaxosReplica r(cfg, 4, recovering(5));
  Outbox out;
  r.tick(0, out);
  ASSERT_EQ(count(out, MsgType::kRecoveryRequest), 4u);
  const uint64_t nonce = out[0].a;
  out.clear();
  // Replica 3 started a change to view 1 that nobody else heard of (it is
  // cut off); 0 leads view 0.
  r.receive(recovery_reply(3, 4, nonce, 1, 1, false, 7, 5), out);
  r.receive(recovery_reply(0, 4, nonce, 0, 1, true, 7, 5), out);
  r.receive(recovery_reply(1, 4, nonce, 0, 1, false, 7, 5), out);
  EXPECT_TRUE(out.empty()) << "view 0 is the highest of only 2 answers";
  r.receive(recovery_reply(2, 4, nonce, 0, 1, false, 7, 5), out);
  ASSERT_EQ(out.size(), 1u);  // 0, 1 and 2: view 0 is their highest
  EXPECT_EQ(out[0].to, 0u);
  EXPECT_EQ(out[0].b, 1u);
}

TEST(NoPaxosRecoveryRulesTest, ARecoveringReplicaStartsAgainWhenItsLeaderMovedOn) {
  Config cfg{3};
  NoPaxosReplica r(cfg, 0, recovering(3));
  Outbox out;
  r.tick(0, out);
  ASSERT_EQ(count(out, MsgType::kRecoveryRequest), 2u);
  const uint64_t nonce = out[0].a;
  out.clear();
  // The leader of view 0 is this replica, which forgot: wait for another.
  r.receive(recovery_reply(1, 0, nonce, 0, 1, false, 9, 9), out);
  r.receive(recovery_reply(2, 0, nonce, 0, 1, false, 9, 9), out);
  EXPECT_TRUE(out.empty());
  r.tick(60, out);  // asks everyone again
  EXPECT_EQ(count(out, MsgType::kRecoveryRequest), 2u);
  out.clear();
  r.receive(recovery_reply(1, 0, nonce, 1, 1, true, 300, 200), out);
  ASSERT_EQ(out.size(), 1u);
  out.clear();
  // It leads view 1 no more: start over, with a new nonce.
  r.receive(recovery_reply(1, 0, nonce, 2, 1, false, 300, 200), out);
  EXPECT_TRUE(r.recovering());
  ASSERT_EQ(count(out, MsgType::kRecoveryRequest), 2u);
  EXPECT_NE(out[0].a, nonce);
  EXPECT_EQ(out[0].b, 0u);
  EXPECT_EQ(r.recovery_attempts(), 2u);
  out.clear();
  // A chosen leader that goes silent is given up on as well.
  const uint64_t nonce2 = out[0].a;
  out.clear();
  r.receive(recovery_reply(1, 0, nonce2, 2, 1, false, 300, 200), out);
  r.receive(recovery_reply(2, 0, nonce2, 2, 1, true, 300, 200), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, 2u);
  for (uint64_t t = 70; t < 1000 && r.recovery_attempts() == 2; t += 10) r.tick(t, out);
  EXPECT_EQ(r.recovery_attempts(), 3u);
  EXPECT_TRUE(r.recovering());
}

TEST(NoPaxosRecoveryRulesTest, ALeaderSendsItsLogInPiecesBoundedInEntriesAndBytes) {
  Config cfg{3};
  NoPaxosReplica leader(cfg, 0);
  Outbox out;
  for (uint64_t n = 1; n <= 400; ++n) {
    Message m = ordered(0, 1, n, 20);
    m.cmds[0].seq = n;
    m.cmds[0].value.assign(n <= 200 ? 1000 : 10, 'x');  // larger than the store ever sees
    leader.receive(m, out);
  }
  ASSERT_EQ(leader.log_size(), 400u);
  auto piece = [&](uint64_t from) {
    Message req = message(MsgType::kRecoveryRequest, 1);
    req.a = 99;
    req.b = from;
    Outbox o;
    leader.receive(req, o);
    EXPECT_EQ(o.size(), 1u);
    return o.empty() ? Message{} : o[0];
  };
  Message p = piece(1);
  EXPECT_TRUE(p.flag);
  EXPECT_EQ(p.a, 99u);
  EXPECT_EQ(p.b, 400u);
  ASSERT_FALSE(p.entries.empty());
  EXPECT_LT(p.entries.size(), kRecoveryEntries);  // the bytes bound first
  EXPECT_EQ(p.entries.front().slot, 1u);
  std::vector<std::byte> bytes;
  encode(p, bytes);
  EXPECT_LE(bytes.size(), 48u * 1024);
  p = piece(181);
  EXPECT_EQ(p.entries.size(), kRecoveryEntries);  // the entries bound first
  EXPECT_EQ(p.entries.front().slot, 181u);
  p = piece(301);
  EXPECT_EQ(p.entries.size(), 100u);  // to the end of the log
  EXPECT_EQ(p.entries.back().slot, 400u);
  EXPECT_TRUE(piece(401).entries.empty());
  // A phase-1 question gets no entries.
  EXPECT_TRUE(piece(0).entries.empty());
}

TEST(NoPaxosRecoveryRulesTest, AForgottenGapCommitAcknowledgementCountsNoMore) {
  Config cfg{5};  // f = 2 followers must hold the no-op
  NoPaxosReplica leader(cfg, 0);
  Outbox out;
  leader.receive(ordered(0, 1, 2, 20), out);  // message 1 never arrives
  leader.tick(100, out);
  ASSERT_EQ(leader.gaps_committed(), 1u);
  Message ack = message(MsgType::kGapCommitReply, 0, 0, 0, 1);
  ack.a = 1;
  ack.from = 1;
  leader.receive(ack, out);
  leader.forget_replica(1);  // replica 1 restarted: its no-op is gone
  ack.from = 2;
  leader.receive(ack, out);
  EXPECT_FALSE(leader.is_leader()) << "went on with one follower holding the no-op";
  ack.from = 3;
  leader.receive(ack, out);
  EXPECT_TRUE(leader.is_leader());
}

TEST(NoPaxosRecoveryRulesTest, AForgottenViewChangeCountsNoMore) {
  Config cfg{5};  // the new leader needs f + 1 = 3 logs
  NoPaxosReplica r(cfg, 1);
  Outbox out;
  Message req = message(MsgType::kViewChangeRequest, 2, 1, 1, 1);
  r.receive(req, out);
  r.receive(view_change(2, 1, 1, 0, {}), out);
  r.forget_replica(2);
  r.receive(view_change(3, 1, 1, 0, {}), out);
  EXPECT_FALSE(r.normal()) << "started the view on a log its sender forgot";
  r.receive(view_change(4, 1, 1, 0, {}), out);
  EXPECT_TRUE(r.is_leader());
}

TEST(NoPaxosRecoveryRulesTest, AForgottenFollowerIsSynchronizedFromTheStart) {
  Config cfg{3};
  NoPaxosReplica leader(cfg, 0);
  Outbox out;
  for (uint64_t n = 1; n <= 5; ++n) leader.receive(ordered(0, 1, n, 20 + n), out);
  leader.tick(0, out);
  Message reply = message(MsgType::kSyncReply, 1, 0, 0, 1);
  reply.a = 5;
  leader.receive(reply, out);
  ASSERT_EQ(leader.sync_point(), 5u);
  auto sync_to_1 = [&](uint64_t now) {
    Outbox o;
    leader.tick(now, o);
    for (const Message& m : o)
      if (m.type == MsgType::kSyncPrepare && m.to == 1) return m;
    return Message{};
  };
  EXPECT_EQ(sync_to_1(20).b, 6u);
  leader.forget_replica(1);
  Message s = sync_to_1(40);
  EXPECT_EQ(s.b, 1u);
  EXPECT_EQ(s.entries.size(), 5u);
  EXPECT_EQ(leader.sync_point(), 5u);  // committed stays committed
}

}  // namespace
}  // namespace kv
