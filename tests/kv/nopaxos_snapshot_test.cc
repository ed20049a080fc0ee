// NOPaxos (apps/kv/nopaxos.h): snapshots, log truncation and view changes
// whose messages stay bounded whatever the log's length (message.h,
// Snapshots), on the seeded simulated network and as rules checked on
// single replicas fed crafted messages. Every cluster test ends
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

// --- Snapshots, log truncation and bounded view changes (message.h,
// Snapshots; nopaxos.cc, View change).

ClusterOptions nopaxos_snapshotting(uint32_t replicas, uint32_t clients, uint32_t ops,
                                    uint64_t every, uint64_t seed = 1) {
  ClusterOptions o = nopaxos(replicas, clients, ops, seed);
  o.keys = 5;
  o.nopaxos.snapshot_every = every;
  return o;
}

// Every message on the network, encoded as the flows carry it, stays within
// 48 KiB; *largest records the largest, *count[type] how many of each.
struct Sizes {
  size_t largest = 0;
  MsgType largest_type = MsgType::kRequest;
  std::map<MsgType, uint64_t> count;
  uint64_t view_change_parts_with_more = 0;  // ViewChange parts with more to follow
};
std::shared_ptr<Sizes> watch_sizes(SimCluster& c) {
  auto sizes = std::make_shared<Sizes>();
  c.net().set_filter([sizes](const Message& m) {
    std::vector<std::byte> bytes;
    encode(m, bytes);
    if (bytes.size() > sizes->largest) {
      sizes->largest = bytes.size();
      sizes->largest_type = m.type;
    }
    ++sizes->count[m.type];
    if (m.type == MsgType::kViewChange && m.flag) ++sizes->view_change_parts_with_more;
    return true;
  });
  return sizes;
}

TEST(NoPaxosSnapshotTest, EveryLogStaysWithinTwoSnapshotIntervals) {
  SimCluster c(nopaxos_snapshotting(3, 4, 100, 50));
  uint64_t most_held = 0;
  ASSERT_TRUE(c.net().run(30000, [&] {
    for (uint32_t r = 0; r < 3; ++r) most_held = std::max(most_held, c.np(r).log_entries_held());
    return c.clients_done();
  }));
  expect_consistent(c);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(c.np(r).log_size(), 400u);  // no loss: every request once
    EXPECT_GE(c.np(r).snapshots_taken(), 6u) << "replica " << r;
    EXPECT_LE(c.np(r).log_entries_held(), 100u) << "replica " << r;
    EXPECT_GE(c.np(r).log_base(), 300u) << "replica " << r;
    EXPECT_EQ(c.np(r).log_base() + c.np(r).log_entries_held(), c.np(r).log_size());
    EXPECT_LE(c.np(r).snapshot_slot(), c.np(r).sync_point());
  }
  // While it ran, too: two intervals, and what the leader had not synchronized yet.
  EXPECT_LE(most_held, 100u + 16u);
}

TEST(NoPaxosSnapshotTest, AFollowerFarBehindCatchesUpFromASnapshot) {
  SimCluster c(nopaxos_snapshotting(3, 4, 60, 40));
  c.net().run(20, [] { return false; });
  c.net().crash(2);
  ASSERT_TRUE(c.run_until_done(30000));
  ASSERT_GT(c.np(0).log_base(), c.np(2).sync_point()) << "the slots 2 lacks are gone";
  c.net().restore(2);
  expect_consistent(c);
  EXPECT_GE(c.np(2).snapshots_installed(), 1u);
  EXPECT_EQ(c.np(2).sync_point(), c.np(0).sync_point());
  EXPECT_EQ(c.np(2).log_size(), c.np(0).log_size());
}

TEST(NoPaxosSnapshotTest, ARestartedReplicaRecoversFromTheSnapshotThenTheLogAfterIt) {
  SimCluster c(nopaxos_snapshotting(3, 4, 150, 40));
  c.net().run(250, [] { return false; });
  ASSERT_GT(c.np(0).log_base(), 0u);
  ASSERT_FALSE(c.clients_done());
  c.restart(1);
  ASSERT_TRUE(run_until_recovered(c, 1, 5000));
  EXPECT_EQ(c.np(1).snapshots_installed(), 1u);
  EXPECT_GT(c.np(1).log_base(), 0u);
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
}

// Values of a few hundred bytes on a thousand keys make a snapshot of many
// chunks; 5% of all messages (chunks too) are lost while a restarted
// replica fetches it.
TEST(NoPaxosSnapshotTest, ASnapshotOfManyChunksArrivesWholeUnderLoss) {
  ClusterOptions o = nopaxos_snapshotting(3, 4, 300, 200, 3);
  o.workload = "a";
  o.keys = 1000;
  o.value_bytes = 300;
  SimCluster c(o);
  ASSERT_TRUE(c.run_until_done(60000));
  auto chunks = std::make_shared<uint64_t>(0);
  auto largest = std::make_shared<size_t>(0);
  c.net().set_filter([=](const Message& m) {
    if (m.type == MsgType::kSnapshotChunk) {
      ++*chunks;
      EXPECT_LE(m.blob.size(), kSnapshotChunkBytes);
      std::vector<std::byte> bytes;
      encode(m, bytes);
      *largest = std::max(*largest, bytes.size());
    }
    return true;
  });
  c.net().set_drop_rate(0.05);
  c.restart(2);
  ASSERT_TRUE(run_until_recovered(c, 2, 20000));
  EXPECT_GE(*chunks, 5u);
  EXPECT_LE(*largest, 48u * 1024);
  EXPECT_EQ(c.np(2).snapshots_installed(), 1u);
  expect_consistent(c);
}

// Thousands of slots, and followers with hundreds of unsynchronized ones
// (a long synchronization period, many requests in flight, 300-byte
// values), when the leader crashes: the ViewChanges come in several parts,
// the new log reaches the others in pieces, and no message on the network
// passes 48 KiB. (A ViewChange or StartView with the whole log, as before,
// takes about a megabyte here.) Replica 2 is down for a while first, so
// that synchronization brings it a long stretch of log, bounded in bytes as
// well as entries. The old leader comes back and copies the new log too.
TEST(NoPaxosSnapshotTest, AViewChangeAfterThousandsOfSlotsKeepsEveryMessageBounded) {
  ClusterOptions o = nopaxos(3, 8, 1000, 5);
  o.workload = "a";
  o.keys = 16;
  o.value_bytes = 300;
  o.client_window = 8;
  o.client_batch = 1;  // a slot a request: thousands of slots
  o.nopaxos.sync_ms = 50;
  o.nopaxos.view_timeout_ms = 300;
  SimCluster c(o);
  auto sizes = watch_sizes(c);
  c.net().run(100, [] { return false; });
  c.net().crash(2);
  c.net().run(60000, [&] { return c.np(0).log_size() >= 1500; });
  c.net().restore(2);
  c.net().run(60000, [&] { return c.np(0).log_size() >= 3000; });
  ASSERT_GE(c.np(0).log_size(), 3000u);
  ASSERT_FALSE(c.clients_done());
  c.net().crash(0);
  c.net().run(5000, [&] { return c.leader() == 1; });
  ASSERT_EQ(c.leader(), 1);
  EXPECT_GT(sizes->view_change_parts_with_more, 0u) << "no ViewChange needed several parts";
  c.net().run(5000, [&] { return c.np(2).normal() && c.np(2).view() == 1; });
  ASSERT_TRUE(c.np(2).normal());
  c.net().restore(0);
  ASSERT_TRUE(c.run_until_done(120000));
  EXPECT_GT(sizes->count[MsgType::kStartView], 2u);
  EXPECT_LE(sizes->largest, 48u * 1024) << "message type " << static_cast<int>(sizes->largest_type);
  expect_consistent(c);
  EXPECT_EQ(c.np(0).view(), 1u);
  EXPECT_EQ(c.np(0).store().digest(), c.np(1).store().digest());
}

// The final-slot fetch of the view change: the next leader (replica 1)
// missed every synchronization, so its sync point is 0, while the leader
// and replica 2 are synchronized past a slot that gap agreement made a
// no-op and that replica 1 holds the request for. The leader crashes (and,
// in the second run, the sequencer is replaced at the same time): replica 1
// must take slots up to replica 2's sync point from replica 2, not from its
// own log, or it puts the request in a slot replica 2 executed as a no-op.
TEST(NoPaxosSnapshotTest, ANewLeaderBehindAnotherSyncPointFetchesTheFinalSlots) {
  for (bool new_session : {false, true}) {
    SCOPED_TRACE(new_session ? "with a session change" : "leader crash");
    ClusterOptions o = nopaxos(3, 2, 30);
    o.keys = 3;
    // (Without the session change, replica 2 has dropped the first slots by
    // then: replica 1 takes its snapshot, then the final slots after it.)
    o.nopaxos.snapshot_every = new_session ? 0 : 2;
    SimCluster c(o);
    auto counts = std::make_shared<std::map<uint32_t, int>>();
    c.net().set_filter([=](const Message& m) {
      // Ordered message 3 reaches only replica 1, which nobody hears from
      // about it; replica 1 hears nothing of gap agreement or
      // synchronization.
      if (m.type == MsgType::kOrdered && m.to != 1 && ++(*counts)[m.to] == 3) return false;
      if (m.to == 1 && (m.type == MsgType::kGapRequest || m.type == MsgType::kGapCommit ||
                        m.type == MsgType::kSyncPrepare || m.type == MsgType::kSyncCommit))
        return false;
      if (m.from == 1 && m.type == MsgType::kGapReply) return false;
      return true;
    });
    c.net().run(45, [] { return false; });
    ASSERT_EQ(c.np(0).gaps_committed(), 1u);
    ASSERT_EQ(c.np(1).sync_point(), 0u);
    ASSERT_GE(c.np(2).sync_point(), 3u);
    ASSERT_TRUE(c.np(2).store().applied().size() >= 3 && c.np(2).store().applied()[2].first == 0)
        << "replica 2 executed the no-op";
    ASSERT_FALSE(c.np(1).log()[2].cmds.empty()) << "replica 1 holds the request";
    c.net().set_filter(nullptr);
    c.net().crash(0);
    if (new_session) c.new_sequencer();
    ASSERT_TRUE(c.run_until_done(30000));
    EXPECT_EQ(c.leader(), 1);
    EXPECT_GE(c.np(1).final_fetches(), 1u);
    if (!new_session) {
      EXPECT_GE(c.np(1).snapshots_installed(), 1u) << "the snapshot first";
    }
    expect_consistent(c);
    c.net().restore(0);
    expect_consistent(c);
  }
}

// A follower counts a view as its last normal one only once it holds that
// view's whole starting log. Replica 2 is down while 0 (the leader) and 1
// complete hundreds of requests past their last sync point. Then 0 crashes
// and 2 comes back: 1 starts view 1 with that log, but only the first
// piece of it reaches 2 before 1 crashes too. 0 comes back, and view 2
// (led by 2) must still hold every completed request: its log comes from
// 0's log of view 0 (2's last normal view is 0 as well), not from the piece
// of view 1's log 2 holds. (Fails if a follower takes part in a view with
// part of its log: view 2 then merges only 2's piece above the sync point.)
TEST(NoPaxosSnapshotTest, AFollowerJoinsANewViewOnlyWithItsWholeStartingLog) {
  ClusterOptions o = nopaxos(3, 8, 400, 2);
  o.workload = "a";
  o.keys = 16;
  o.value_bytes = 300;
  o.client_window = 8;
  o.client_batch = 1;  // a slot a request: hundreds of slots
  o.nopaxos.sync_ms = 100;
  o.nopaxos.view_timeout_ms = 300;
  SimCluster c(o);
  c.net().crash(2);
  ASSERT_TRUE(c.net().run(60000, [&] {
    return c.np(0).log_size() >= 600 && c.np(0).log_size() - c.np(0).sync_point() >= 300;
  }));
  c.net().crash(0);
  c.net().restore(2);
  auto pieces = std::make_shared<int>(0);
  c.net().set_filter([=](const Message& m) {
    if (m.from != 1 || m.to != 2) return true;
    if (m.type == MsgType::kStartView) ++*pieces;
    return m.type == MsgType::kStartView && *pieces == 1;  // its first piece only
  });
  ASSERT_TRUE(c.net().run(5000, [&] { return c.leader() == 1; }));
  c.net().run(20, [] { return false; });
  ASSERT_GE(*pieces, 1);
  EXPECT_FALSE(c.np(2).normal()) << "took part in view 1 with a piece of its log";
  c.net().crash(1);
  c.net().restore(0);
  c.net().set_filter(nullptr);
  // (A completed request lost stalls its client: the store skips its later ones.)
  ASSERT_TRUE(c.run_until_done(120000)) << c.check_results();
  EXPECT_EQ(c.leader(), 2);
  expect_consistent(c);
  c.net().restore(1);
  expect_consistent(c);
}

// The leader executes ahead of its sync point; a snapshot of that state is
// the leader's only once the sync point reaches it. Here the leader is cut
// off from its followers and gets every request the clients send: it
// executes (and would snapshot) dozens of slots nobody else holds, which
// the next view, formed by the other two, replaces. When it learns that
// view it must rebuild its store from a snapshot of final slots only.
// (Fails if the leader takes its speculative state as a snapshot at once.)
TEST(NoPaxosSnapshotTest, ALeaderSnapshotsOnlyWhatItsSyncPointMadeFinal) {
  ClusterOptions o = nopaxos_snapshotting(3, 4, 60, 10);
  o.client_window = 4;
  SimCluster c(o);
  c.net().run(60, [] { return false; });
  ASSERT_TRUE(c.np(0).is_leader());
  auto cut = std::make_shared<int>(1);  // 1: only 0 gets requests; 2: only 1 and 2
  c.net().set_filter([=](const Message& m) {
    if (m.type == MsgType::kOrdered) return *cut == 1 ? m.to == 0 : m.to != 0;
    const bool from0 = m.from == 0, to0 = m.to == 0;
    const bool replica_from = m.from < 3, replica_to = m.to < 3;
    return !(replica_from && replica_to && from0 != to0);
  });
  c.net().run(40, [] { return false; });
  const uint64_t ahead = c.np(0).store().applied().size() - c.np(0).sync_point();
  ASSERT_GE(ahead, 20u) << "the leader executed little past its sync point";
  EXPECT_LE(c.np(0).snapshot_slot(), c.np(0).sync_point()) << "a snapshot of slots not final";
  EXPECT_LE(c.np(0).log_base(), c.np(0).sync_point());
  *cut = 2;
  ASSERT_TRUE(c.net().run(5000, [&] { return c.np(1).is_leader(); }));
  // (At once, while the new view's base is still below the old leader's
  // sync point: it rebuilds its store from its own snapshot, not the new
  // leader's.)
  c.net().set_filter(nullptr);
  ASSERT_TRUE(c.run_until_done(30000));
  expect_consistent(c);
  EXPECT_EQ(c.np(0).view(), 1u);
  EXPECT_LE(c.np(0).snapshot_slot(), c.np(0).sync_point());
}

TEST(NoPaxosSnapshotTest, RestartsCrashesAndLossWithSmallSnapshotsOverManySeeds) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ClusterOptions o = nopaxos_snapshotting(seed % 2 ? 3 : 5, 3, 80, 5 + seed % 4 * 5, seed);
    o.keys = 1 + seed % 3;
    o.sim.drop_rate = 0.02 * static_cast<double>(seed % 5);
    SimCluster c(o);
    auto sizes = watch_sizes(c);
    c.net().run(60 + 9 * seed, [] { return false; });
    // The leader crashes and comes back; a follower restarts without its
    // state; for some seeds the sequencer is replaced.
    const int leader = c.leader();
    ASSERT_GE(leader, 0);
    c.net().crash(static_cast<uint32_t>(leader));
    c.net().run(150, [] { return false; });
    c.net().restore(static_cast<uint32_t>(leader));
    c.net().run(50, [] { return false; });
    const uint32_t other = static_cast<uint32_t>(leader + 1 + seed % 2) % o.replicas;
    c.restart(other);
    ASSERT_TRUE(run_until_recovered(c, other, 20000));
    if (seed % 3 == 0) c.new_sequencer();
    ASSERT_TRUE(c.run_until_done(120000));
    EXPECT_LE(sizes->largest, 48u * 1024);
    expect_consistent(c);
    const uint64_t every = o.nopaxos.snapshot_every;
    for (uint32_t r = 0; r < o.replicas; ++r) {
      EXPECT_LE(c.np(r).log_entries_held(), 2 * every + 16) << "replica " << r;
      EXPECT_LE(c.np(r).snapshot_slot(), c.np(r).sync_point());
    }
  }
}

// Rules on one replica fed crafted messages.

TEST(NoPaxosSnapshotRulesTest, ANewLeaderFetchesTheFinalSlotsItLacksBeforeItStartsTheView) {
  Config cfg{3};
  NoPaxosReplica r(cfg, 1);  // leader of view 1
  Outbox out;
  r.receive(ordered(1, 1, 1, 20), out);  // slot 1: the request, sync point 0
  out.clear();
  Message req = message(MsgType::kViewChangeRequest, 2, 1, 1, 1);
  r.receive(req, out);
  // Replica 2's sync point is 1 (the slot is final there: a no-op), so its
  // ViewChange carries only slot 2 and after.
  Message vc = view_change(2, 1, 1, 0, {logged(2, 2, 30)});
  vc.c = 1;
  out.clear();
  r.receive(vc, out);
  EXPECT_FALSE(r.normal()) << "merged without the final slot it lacks";
  const Message* ask = find(out, MsgType::kViewChangeRequest);
  ASSERT_NE(ask, nullptr);
  EXPECT_EQ(ask->to, 2u);
  EXPECT_EQ(ask->a, 1u);
  // Replica 2 sends its log from slot 1.
  vc.entries = {logged(1, 1, 0), logged(2, 2, 30)};
  out.clear();
  r.receive(vc, out);
  ASSERT_TRUE(r.is_leader());
  EXPECT_EQ(r.final_fetches(), 1u);
  ASSERT_EQ(r.log_size(), 2u);
  EXPECT_TRUE(r.log()[0].cmds.empty());
  EXPECT_EQ(r.log()[1].cmds.at(0).client, 30u);
  EXPECT_EQ(r.sync_point(), 1u);
}

TEST(NoPaxosSnapshotRulesTest, ViewChangesComeInBoundedPartsAndTheLeaderAsksForLostOnes) {
  Config cfg{3};
  NoPaxosReplica f(cfg, 2);
  Outbox out;
  for (uint64_t n = 1; n <= 300; ++n) {
    Message m = ordered(2, 1, n, 20);
    m.cmds[0].seq = n;
    m.cmds[0].value.assign(1000, 'x');
    f.receive(m, out);
  }
  out.clear();
  Message req = message(MsgType::kViewChangeRequest, 0, 2, 1, 1);
  f.receive(req, out);
  std::vector<Message> parts;
  for (const Message& m : out)
    if (m.type == MsgType::kViewChange) parts.push_back(m);
  ASSERT_GE(parts.size(), 6u);
  uint64_t next = 1;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::byte> bytes;
    encode(parts[i], bytes);
    EXPECT_LE(bytes.size(), 48u * 1024);
    EXPECT_EQ(parts[i].to, 1u);
    EXPECT_EQ(parts[i].c, 0u);  // its sync point
    EXPECT_EQ(parts[i].flag, i + 1 < parts.size());
    ASSERT_FALSE(parts[i].entries.empty());
    EXPECT_EQ(parts[i].entries.front().slot, next);
    next = parts[i].entries.back().slot + 1;
  }
  EXPECT_EQ(next, 301u);
  // The new leader gets all but the third part; it asks for the rest.
  NoPaxosReplica leader(cfg, 1);
  Outbox lo;
  leader.receive(req, lo);  // (from 0: into view 1)
  for (size_t i = 0; i < parts.size(); ++i)
    if (i != 2) leader.receive(parts[i], lo);
  EXPECT_FALSE(leader.normal());
  lo.clear();
  leader.tick(0, lo);
  leader.tick(15, lo);  // a pull (every sync_ms), before any view timeout
  const Message* ask = nullptr;
  for (const Message& m : lo)
    if (m.type == MsgType::kViewChangeRequest && m.to == 2) ask = &m;
  ASSERT_NE(ask, nullptr);
  EXPECT_EQ(ask->a, parts[2].entries.front().slot);
  out.clear();
  f.receive(*ask, out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front().entries.front().slot, parts[2].entries.front().slot);
  for (const Message& m : out) leader.receive(m, lo);
  ASSERT_TRUE(leader.is_leader());
  EXPECT_EQ(leader.log_size(), 300u);
}

TEST(NoPaxosSnapshotRulesTest, AFollowerTakesPartInANewViewOnlyOnceItCopiedItsStartingLog) {
  Config cfg{3};
  NoPaxosReplica f(cfg, 2);
  Outbox out;
  f.receive(ordered(2, 1, 1, 20), out);
  f.receive(ordered(2, 1, 2, 21), out);
  const std::vector<Entry> before = f.log();
  out.clear();
  // View 1's leader started with 3 slots: a no-op where f has request 1.
  Message sv = message(MsgType::kStartView, 1, 2, 1, 1);
  sv.a = 1;
  sv.b = 3;
  sv.c = 0;
  sv.entries = {logged(1, 1, 0)};
  f.receive(sv, out);
  EXPECT_EQ(f.view(), 1u);
  EXPECT_FALSE(f.normal()) << "took part in view 1 with a third of its log";
  EXPECT_EQ(f.log(), before) << "changed its log before it had the new one whole";
  const Message* ask = find(out, MsgType::kRecover);
  ASSERT_NE(ask, nullptr);
  EXPECT_EQ(ask->to, 1u);
  EXPECT_EQ(ask->a, 2u);
  out.clear();
  sv.a = 2;
  sv.c = 1;
  sv.entries = {logged(2, 2, 21), logged(3, 3, 22)};
  f.receive(sv, out);
  ASSERT_TRUE(f.normal());
  ASSERT_EQ(f.log_size(), 3u);
  EXPECT_TRUE(f.log()[0].cmds.empty());
  EXPECT_EQ(f.sync_point(), 1u);
  EXPECT_EQ(f.store().applied().size(), 1u);  // the no-op, final
  const Message* rec = find(out, MsgType::kRecover);
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->flag);
  EXPECT_EQ(rec->a, 3u);
}

// A snapshot from the leader of a later view moves a follower into that
// view (to copy its log): it must not report the snapshot's slot to the
// leader of its old view as matching that leader's log, which may hold
// other entries there. From a replica that leads no view of its, it takes
// none.
TEST(NoPaxosSnapshotRulesTest, ASnapshotIsTakenOnlyFromTheLeaderOfTheFollowersViewOrALaterOne) {
  Config cfg{3};
  NoPaxosReplica f(cfg, 2);
  Outbox out;
  f.receive(ordered(2, 1, 1, 20), out);
  Store st;
  for (uint64_t n = 1; n <= 5; ++n) st.apply(ordered(0, 1, n, 30 + n).cmds[0]);
  Message chunk = message(MsgType::kSnapshotChunk, 0, 2, 1, 1);
  chunk.a = 5;
  chunk.b = 0;
  chunk.blob = st.serialize();
  chunk.c = chunk.blob.size();
  chunk.entries = {logged(5, 5, 0)};
  chunk.from = 0;  // replica 0 does not lead view 1
  out.clear();
  f.receive(chunk, out);
  EXPECT_EQ(f.snapshots_installed(), 0u);
  EXPECT_EQ(f.view(), 0u);
  chunk.from = 1;
  f.receive(chunk, out);
  ASSERT_EQ(f.snapshots_installed(), 1u);
  EXPECT_EQ(f.view(), 1u);
  EXPECT_FALSE(f.normal()) << "joined view 1 without its log";
  EXPECT_EQ(f.sync_point(), 5u);
  EXPECT_EQ(f.log_base(), 5u);
  EXPECT_EQ(f.store().digest(), st.digest());
  ASSERT_EQ(count(out, MsgType::kRecover), 1u);
  const Message* ask = find(out, MsgType::kRecover);
  EXPECT_EQ(ask->to, 1u);
  EXPECT_FALSE(ask->flag);
  EXPECT_EQ(ask->a, 6u);
  // View 1's log from slot 6 (it started with 6 slots): it takes part.
  Message sv = message(MsgType::kStartView, 1, 2, 1, 1);
  sv.a = 6;
  sv.b = 6;
  sv.c = 5;
  sv.entries = {logged(6, 6, 40)};
  f.receive(sv, out);
  ASSERT_TRUE(f.normal());
  EXPECT_EQ(f.log_size(), 6u);
  // The next request of the session goes to slot 7: the log goes on from
  // the snapshot's place in the multicast.
  f.receive(ordered(2, 1, 7, 41), out);
  EXPECT_EQ(f.log_size(), 7u);
}

}  // namespace
}  // namespace kv