// What a replica keeps under --data-dir (replica_disk.h): a Multi-Paxos
// replica's ballot, log and snapshot, a NOPaxos replica's view, log, sync
// point and snapshot, come back as they were, and a directory that does not
// fit (another cluster size, another protocol, damage, another process) is
// refused with a message that names it.
#include "replica_disk.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster_sim.h"
#include "kv_test_util.h"
#include "nopaxos_test_util.h"
#include "support/temp_dir.h"

namespace kv {
namespace {

using sluice::testing::TempDir;

Command put(uint64_t seq, const std::string& key, const std::string& value) {
  Command c;
  c.op = Op::kPut;
  c.client = 10;
  c.seq = seq;
  c.key = key;
  c.value = value;
  return c;
}

// Leader 1 (ballot 4 of 3 replicas) has replica 2 accept slots from..to,
// committing up to `commit`.
Message accept(uint64_t from, uint64_t to, uint64_t commit) {
  Message m = message(MsgType::kAccept, 1, 2, 4);
  m.a = from;
  m.b = commit;
  for (uint64_t s = from; s <= to; ++s) {
    Entry e;
    e.slot = s;
    e.ballot = 4;
    e.cmd = put(s, "k" + std::to_string(s % 3), "v" + std::to_string(s));
    m.entries.push_back(e);
  }
  return m;
}

// Hands the replica's changes to the disk, as the job's loop does each round.
void persist(MultiPaxosReplica& r, ReplicaDisk& disk) {
  DurableChanges c;
  while (r.take_durable(&c)) disk.save(c);
}

DiskOptions disk_options(const std::string& dir) { return {dir, FsyncMode::kAlways, false}; }

TEST(ReplicaDiskTest, ANewDirectoryHoldsNothing) {
  TempDir dir("sluice-kv-disk");
  ReplicaDisk disk(disk_options(dir.path() + "/data"), 3, 2);
  EXPECT_EQ(disk.runs(), 0u);
  EXPECT_FALSE(disk.take_restored().has_value());
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/data/rank-2"));
}

TEST(ReplicaDiskTest, AReplicaComesBackWithItsBallotLogAndSnapshot) {
  TempDir dir("sluice-kv-disk");
  MultiPaxosOptions o;
  o.snapshot_every = 4;  // a snapshot (a rewrite) among the appends
  MultiPaxosReplica before(Config{3}, 2, o);
  Outbox out;
  {
    ReplicaDisk disk(disk_options(dir.path()), 3, 2);
    disk.begin_run(1, before.durable_state());
    before.receive(message(MsgType::kPrepare, 1, 2, 4), out);  // a promise to ballot 4
    persist(before, disk);
    before.receive(accept(1, 6, 4), out);
    persist(before, disk);
    before.receive(accept(7, 9, 5), out);
    persist(before, disk);
  }
  ASSERT_EQ(before.ballot(), 4u);
  ASSERT_EQ(before.snapshot_slot(), 4u);
  ASSERT_EQ(before.commit_index(), 5u);

  ReplicaDisk disk(disk_options(dir.path()), 3, 2);
  EXPECT_EQ(disk.runs(), 1u);
  std::optional<RestoredState> st = disk.take_restored();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->ballot, 4u);
  EXPECT_EQ(st->snapshot_slot, 4u);
  EXPECT_EQ(st->commit, 5u);
  ASSERT_EQ(st->entries.size(), 5u);  // slots 5 .. 9: after the snapshot
  EXPECT_EQ(st->entries.front().slot, 5u);
  EXPECT_EQ(st->entries.back().cmd.value, "v9");
  EXPECT_NE(disk.loaded().find("a snapshot of slot 4 and 5 log entries"), std::string::npos)
      << disk.loaded();

  MultiPaxosReplica after(Config{3}, 2, o);
  after.restore(std::move(*st));
  EXPECT_FALSE(after.is_leader());
  EXPECT_EQ(after.ballot(), 4u);
  EXPECT_EQ(after.commit_index(), 5u);
  EXPECT_EQ(after.log_size(), 9u);
  EXPECT_EQ(after.store().digest(), before.store().digest());
  EXPECT_EQ(after.store().applied_count(), 5u);
  // It still answers for what it accepted: a promise to a later ballot
  // carries slots 6 .. 9 in ballot 4.
  out.clear();
  Message prepare = message(MsgType::kPrepare, 0, 2, 6);
  prepare.a = 5;  // the candidate's commit index
  after.receive(prepare, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, MsgType::kPromise);
  ASSERT_EQ(out[0].entries.size(), 4u);
  EXPECT_EQ(out[0].entries.front().slot, 6u);
  EXPECT_EQ(out[0].entries.back().ballot, 4u);
}

TEST(ReplicaDiskTest, TheNextBallotsLeaderCampaignsAtOnceAfterARestore) {
  MultiPaxosReplica r(Config{3}, 2);
  RestoredState st;
  st.ballot = 4;  // led by replica 1; replica 2 leads ballot 5
  r.restore(std::move(st));
  Outbox out;
  r.tick(1000, out);
  size_t prepares = 0;
  for (const Message& m : out) prepares += m.type == MsgType::kPrepare && m.view == 5;
  EXPECT_EQ(prepares, 2u);
}

// A promise of ballot `view` from `from` to replica 1, in one part, with
// nothing above commit index 0.
Message promise(uint32_t from, uint64_t view) {
  Message m = message(MsgType::kPromise, from, 1, view);
  m.b = 1;
  return m;
}

TEST(ReplicaDiskTest, AfterARestartOnEverysecACandidateWaitsForEveryReplicaThatRestoredFiles) {
  // Replica 0 alone may remember slots 1 .. 10 (its disk synced them, the
  // others' did not): replica 1's phase 1 must hear from it too.
  for (const bool everysec : {false, true}) {
    MultiPaxosReplica r(Config{3}, 1);
    r.restore(RestoredState{});
    if (everysec) r.require_promises_until(10, 0b111);
    Outbox out;
    r.tick(1000, out);  // leads ballot 1: campaigns at once
    r.receive(promise(2, 1), out);
    EXPECT_EQ(r.is_leader(), !everysec) << "a majority, without replica 0";
    r.receive(promise(0, 1), out);
    EXPECT_TRUE(r.is_leader());
  }
  // A new process of replica 0 remembers nothing: it is not waited for.
  MultiPaxosReplica r(Config{3}, 1);
  r.restore(RestoredState{});
  r.require_promises_until(10, 0b111);
  r.forget_replica(0);
  Outbox out;
  r.tick(1000, out);
  r.receive(promise(2, 1), out);
  EXPECT_TRUE(r.is_leader());
}

// NOPaxos (nopaxos.h, Durability): three replicas run on the simulated
// network, losing messages (so no-ops and synchronization write over
// entries), each writing its changes after every step; each comes back
// from its files with the numbers, log, snapshot and store it had. Without
// snapshots every change is in the appended records; with them, rewrites
// come among the appends.
void expect_no_paxos_replicas_come_back(uint64_t snapshot_every) {
  SCOPED_TRACE("snapshot every " + std::to_string(snapshot_every));
  TempDir dir("sluice-kv-disk");
  ClusterOptions o = sim_options(Protocol::kNoPaxos, 3, 3, 100, 5);
  o.sim.drop_rate = 0.05;
  o.nopaxos.snapshot_every = snapshot_every;
  SimCluster c(o);
  DiskOptions d = disk_options(dir.path());
  d.nopaxos = true;
  std::vector<std::unique_ptr<ReplicaDisk>> disks;
  for (uint32_t r = 0; r < 3; ++r) {
    disks.push_back(std::make_unique<ReplicaDisk>(d, 3, r));
    DurableChanges none;
    c.np(r).take_durable(&none);
    disks[r]->begin_run(1, c.np(r).durable_state());
  }
  c.net().run(300, [&] {
    for (uint32_t r = 0; r < 3; ++r) {
      DurableChanges changes;
      while (c.np(r).take_durable(&changes)) disks[r]->save(changes);
    }
    return false;
  });
  disks.clear();
  uint64_t noops_held = 0;
  for (uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    const NoPaxosReplica& before = c.np(r);
    noops_held += noops(before);
    ASSERT_EQ(before.snapshot_slot() > 0, snapshot_every > 0);
    ReplicaDisk disk(d, 3, r);
    std::optional<RestoredState> st = disk.take_restored();
    ASSERT_TRUE(st.has_value());
    EXPECT_FALSE(st->recovering);
    if (snapshot_every > 0) {
      EXPECT_NE(disk.loaded().find("a snapshot of slot " + std::to_string(before.snapshot_slot())),
                std::string::npos)
          << disk.loaded();
    }
    NoPaxosReplica after(Config{3}, r, o.nopaxos);
    after.restore(std::move(*st));
    EXPECT_EQ(after.view(), before.view());
    EXPECT_EQ(after.session(), before.session());
    EXPECT_EQ(after.sync_point(), before.sync_point());
    EXPECT_EQ(after.snapshot_slot(), before.snapshot_slot());
    EXPECT_EQ(after.log_size(), before.log_size());
    // The entries after the snapshot, each with its place in the multicast
    // and its batch.
    const DurableChanges a = after.durable_state(), b = before.durable_state();
    EXPECT_EQ(a.entries, b.entries);
    EXPECT_EQ(a.snapshot_entry, b.snapshot_entry);
    EXPECT_EQ(a.snapshot, b.snapshot);
    EXPECT_EQ(after.store().digest(), before.store().digest());
  }
  EXPECT_GT(noops_held, 0u) << "no gap became a no-op: the test covers less than it says";
}

TEST(ReplicaDiskTest, NoPaxosReplicasComeBackWithTheirViewLogSyncPointAndSnapshot) {
  expect_no_paxos_replicas_come_back(0);
  expect_no_paxos_replicas_come_back(16);
}

// Replica `rank`'s files say it was recovering, and hold no entry.
void expect_files_say_recovering(const DiskOptions& d, uint32_t rank) {
  ReplicaDisk disk(d, 3, rank);
  std::optional<RestoredState> st = disk.take_restored();
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->recovering);
  EXPECT_TRUE(st->entries.empty());
  EXPECT_NE(disk.loaded().find("it was recovering from the others"), std::string::npos)
      << disk.loaded();
}

// A replica recovering from the others keeps nothing (what it copied so far
// is not its state): its files say so, and the job recovers it again.
TEST(ReplicaDiskTest, ANoPaxosReplicaRecoveringFromTheOthersKeepsNothing) {
  TempDir dir("sluice-kv-disk");
  DiskOptions d = disk_options(dir.path());
  d.nopaxos = true;
  NoPaxosOptions o;
  o.recover = true;
  NoPaxosReplica r(Config{3}, 1, o);
  DurableChanges taken;
  EXPECT_FALSE(r.take_durable(&taken));
  {
    ReplicaDisk disk(d, 3, 1);
    disk.begin_run(2, r.durable_state());
  }
  expect_files_say_recovering(d, 1);
}

// The same for Multi-Paxos: a replica restarted without its state writes
// over its files that it is recovering (its first take), and nothing else
// until it has recovered. Before, its files held the state it had copied
// so far, and a crash of the whole job then restored it as a follower that
// had forgotten what its earlier process accepted, whose promise could
// make a majority without a chosen value.
TEST(ReplicaDiskTest, AMultiPaxosReplicaRecoveringFromTheOthersKeepsNothing) {
  TempDir dir("sluice-kv-disk");
  MultiPaxosOptions o;
  o.recover = true;
  MultiPaxosReplica r(Config{3}, 1, o);
  ASSERT_TRUE(r.recovering());
  {
    ReplicaDisk disk(disk_options(dir.path()), 3, 1);
    DurableChanges taken;
    r.take_durable(&taken);
    disk.begin_run(2, r.durable_state());
    Outbox out;
    r.receive(accept(1, 3, 0), out);  // not taken while it recovers
    EXPECT_FALSE(r.take_durable(&taken));
  }
  expect_files_say_recovering(disk_options(dir.path()), 1);
}

// Files one protocol wrote are refused by the other, naming the protocol.
TEST(ReplicaDiskTest, RefusesADirectoryTheOtherProtocolWrote) {
  TempDir dir("sluice-kv-disk");
  {
    ReplicaDisk disk(disk_options(dir.path()), 3, 0);
    disk.begin_run(1, MultiPaxosReplica(Config{3}, 0).durable_state());
  }
  DiskOptions d = disk_options(dir.path());
  d.nopaxos = true;
  try {
    ReplicaDisk disk(d, 3, 0);
    FAIL() << "a Multi-Paxos replica's files were read as a NOPaxos replica's";
  } catch (const RecordFileError& e) {
    EXPECT_NE(std::string(e.what()).find("was written by Multi-Paxos replicas: start the job "
                                         "with --protocol multipaxos"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReplicaDiskTest, RefusesADirectoryOfALargerCluster) {
  TempDir dir("sluice-kv-disk");
  std::filesystem::create_directories(dir.path() + "/rank-3");  // empty: ignored
  std::filesystem::create_directories(dir.path() + "/rank-4");
  std::ofstream(dir.path() + "/rank-4/wal") << "a log";
  try {
    ReplicaDisk disk(disk_options(dir.path()), 3, 0);
    FAIL() << "a directory with rank-4 was taken for 3 replicas";
  } catch (const RecordFileError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more replicas than this job's 3"), std::string::npos)
        << e.what();
  }
}

TEST(ReplicaDiskTest, RefusesADirectoryOfASmallerCluster) {
  TempDir dir("sluice-kv-disk");
  {
    ReplicaDisk disk(disk_options(dir.path()), 3, 1);
    disk.begin_run(1, MultiPaxosReplica(Config{3}, 1).durable_state());
  }
  EXPECT_THROW(ReplicaDisk(disk_options(dir.path()), 5, 1), RecordFileError);
}

TEST(ReplicaDiskTest, RefusesADamagedLogNamingIt) {
  TempDir dir("sluice-kv-disk");
  MultiPaxosReplica r(Config{3}, 2);
  {
    ReplicaDisk disk(disk_options(dir.path()), 3, 2);
    disk.begin_run(1, r.durable_state());
    Outbox out;
    r.receive(accept(1, 3, 0), out);
    persist(r, disk);
    r.receive(accept(4, 6, 0), out);
    persist(r, disk);
  }
  const std::string wal = dir.path() + "/rank-2/wal";
  std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(kHeaderBytes + kRecordHeaderBytes + 2);
  f.put('\x7f');
  f.close();
  try {
    ReplicaDisk disk(disk_options(dir.path()), 3, 2);
    FAIL() << "a damaged log was read";
  } catch (const RecordFileError& e) {
    EXPECT_NE(std::string(e.what()).find(wal + " at offset " + std::to_string(kHeaderBytes)),
              std::string::npos)
        << e.what();
  }
}

TEST(ReplicaDiskTest, RefusesASecondUserOfTheSameDirectory) {
  TempDir dir("sluice-kv-disk");
  ReplicaDisk first(disk_options(dir.path()), 3, 0);
  try {
    ReplicaDisk second(disk_options(dir.path()), 3, 0);
    FAIL() << "two users of one replica's directory";
  } catch (const sluice::Error& e) {
    EXPECT_NE(std::string(e.what()).find("in use by another process"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kv
