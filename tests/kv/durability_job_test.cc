// sluice-kv run --data-dir through a crash of the whole job: a client
// writes through the RESP gateway, every rank is SIGKILLed at once from
// outside, and the job started again on the same directories must hold
// every acknowledged write (--fsync always). A SIGKILL keeps the page cache,
// so the replicas run with the test switch --test-wal-hold-unsynced: what
// their logs did not sync stays in their own memory and dies with them, as
// a power cut would lose it. The negative control (--fsync no, the same
// crash) must lose writes: the test can fail. With --fsync everysec,
// crashed once every replica synced, the replicas still agree after the
// crash, what they synced survives, the store holds what a prefix of the
// client's writes made, and porcupine finds the whole history (the writes
// after that prefix of unknown outcome) linearizable.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "history.h"
#include "resp_test_util.h"
#include "support/temp_dir.h"
#include "support/test_support.h"

namespace {

using sluice::testing::TempDir;

using kv::testing::Clock;
using kv::testing::Conn;
using kv::testing::request;
using kv::testing::RespJob;

constexpr int kBatch = 16;  // SETs per pipelined round trip
// Acknowledged writes before the crash: enough to span many rounds of
// every replica's loop, few enough for a short test.
constexpr size_t kBeforeCrash = 1500;

std::string key_of(size_t i) { return "durable:" + std::to_string(i); }
std::string value_of(size_t i) {
  return "value-" + std::to_string(i * 7919 % 100003) + "-" + std::to_string(i);
}

// An order-independent checksum of values.
uint64_t checksum(const std::vector<std::string>& values) {
  uint64_t sum = 0;
  for (const std::string& v : values) sum += std::hash<std::string>{}(v) | 1;
  return sum;
}

// How many complete lines (replies to SET or GET's header lines) `bytes` holds.
size_t lines_in(const std::string& bytes) {
  size_t n = 0;
  for (size_t at = bytes.find("\r\n"); at != std::string::npos; at = bytes.find("\r\n", at + 2))
    ++n;
  return n;
}

uint64_t now_us() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count());
}

// A pipelined round of commands: its first command's index, how many, and
// when it was sent and answered (microseconds of the steady clock).
struct Round {
  size_t first = 0;
  size_t count = 0;
  uint64_t call_us = 0;
  uint64_t return_us = 0;
};

// Write i sets key_of(i % keys) (keys 0: key_of(i)) to value_of(i), i = 0,
// 1, ..., in pipelined rounds of kBatch on one connection until the
// connection breaks or 60 s pass. The replies come in order, so the first
// `acked` writes were acknowledged. `rounds` is for after the writer ends.
struct Writer {
  size_t keys = 0;
  std::atomic<size_t> acked{0};
  std::vector<Round> rounds;

  std::string key(size_t i) const { return key_of(keys == 0 ? i : i % keys); }
  void run(uint16_t port) {
    Conn c(port);
    if (!c.ok()) return;
    const auto end = Clock::now() + std::chrono::seconds(60);
    for (size_t next = 0; Clock::now() < end; next += kBatch) {
      std::string round;
      for (size_t i = next; i < next + kBatch; ++i) round += request({"SET", key(i), value_of(i)});
      rounds.push_back({next, kBatch, now_us(), 0});
      if (!c.send(round)) return;
      std::string got;
      bool closed = false;
      while (lines_in(got) < kBatch && !closed && Clock::now() < end)
        got += c.receive("\r\n", &closed, std::chrono::seconds(5));
      rounds.back().return_us = now_us();
      size_t ok = 0;
      for (size_t at = 0; ok < kBatch && got.compare(at, 5, "+OK\r\n") == 0; at += 5) ++ok;
      acked.store(next + ok);
      if (ok < kBatch) return;
    }
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The values of keys 0 .. n-1 now (empty: absent), read with pipelined GETs
// (`rounds`, if given: the rounds they went in).
std::vector<std::string> read_back(uint16_t port, size_t n, std::vector<Round>* rounds = nullptr) {
  Conn c(port);
  std::vector<std::string> out;
  for (size_t next = 0; next < n; next += 100) {
    std::string round;
    const size_t last = std::min(n, next + 100);
    for (size_t i = next; i < last; ++i) round += request({"GET", key_of(i)});
    const uint64_t call = now_us();
    c.send(round + request({"PING"}));
    const std::string got = c.receive("+PONG\r\n");
    if (rounds != nullptr) rounds->push_back({next, last - next, call, now_us()});
    size_t at = 0;
    for (size_t i = next; i < last; ++i) {
      if (got.compare(at, 5, "$-1\r\n") == 0) {
        out.emplace_back();
        at += 5;
        continue;
      }
      const size_t eol = got.find("\r\n", at);
      if (got[at] != '$' || eol == std::string::npos) return {};  // a reply we did not expect
      const size_t len = std::stoul(got.substr(at + 1, eol - at - 1));
      out.push_back(got.substr(eol + 2, len));
      at = eol + 2 + len + 2;
    }
  }
  return out;
}

class DurabilityJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("SLUICE_TEST_KV_HOOKS", "1", 1);  // for --test-wal-hold-unsynced
    ASSERT_FALSE(dir_.path().empty());
  }

  // The job's options. `snapshot_every`: the replicas' snapshots, each of
  // which rewrites (and syncs) the log whatever --fsync says.
  std::vector<std::string> args(const std::string& fsync, int snapshot_every,
                                const std::string& protocol = "multipaxos") const {
    return {"--protocol",
            protocol,
            "--resp-port",
            "0",
            "--data-dir",
            dir_.path(),
            "--fsync",
            fsync,
            "--test-wal-hold-unsynced",
            "--snapshot-every",
            std::to_string(snapshot_every),
            "--enable-shutdown",
            "local",
            "--retry-ms",
            "300",
            "--election-timeout-ms",
            "500"};
  }

  // What replica r's log file holds.
  uint64_t log_bytes(int r) const {
    std::error_code e;
    const auto n =
        std::filesystem::file_size(dir_.path() + "/rank-" + std::to_string(r) + "/wal", e);
    return e ? 0 : n;
  }

  // Starts the job, writes until kBeforeCrash writes were acknowledged
  // (`after_sync`: and every replica's log synced once since the start,
  // which with the hook is when its file grows), then SIGKILLs every rank
  // at once while the client goes on writing. Returns how many writes
  // were acknowledged.
  size_t write_then_crash(const std::vector<std::string>& args, bool after_sync = false,
                          Writer* writer = nullptr) {
    Writer own;
    Writer& w = writer != nullptr ? *writer : own;
    RespJob job(4, args);
    EXPECT_NE(job.port(), 0) << job.output();
    if (job.port() == 0) return 0;
    // Every replica says where it keeps its data, and its pid.
    const std::regex keeps(
        "rank ([0-9]) keeps its data in \\S+ \\(run [0-9]+, --fsync \\S+, pid ([0-9]+)\\)");
    std::map<int, int> pids{{3, job.pid()}};
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (pids.size() < 4 && Clock::now() < end) {
      job.drain(std::chrono::milliseconds(50));
      const std::string& out = job.output();
      for (std::sregex_iterator m(out.begin(), out.end(), keeps), e; m != e; ++m)
        pids[std::stoi((*m)[1])] = std::stoi((*m)[2]);
    }
    EXPECT_EQ(pids.size(), 4u) << job.output();
    const std::vector<uint64_t> started = {log_bytes(0), log_bytes(1), log_bytes(2)};
    auto synced = [&] {
      for (int r = 0; r < 3; ++r)
        if (log_bytes(r) <= started[r]) return false;
      return true;
    };
    std::thread writing([&w, port = job.port()] { w.run(port); });
    while ((w.acked.load() < kBeforeCrash || (after_sync && !synced())) &&
           Clock::now() < end + std::chrono::seconds(30)) {
      job.drain(std::chrono::milliseconds(5));
    }
    EXPECT_GE(w.acked.load(), kBeforeCrash) << job.output();
    EXPECT_TRUE(!after_sync || synced()) << "a replica's log never synced\n" << job.output();
    for (const auto& [rank, pid] : pids) ::kill(pid, SIGKILL);
    writing.join();
    const auto status = job.finish(std::chrono::seconds(60));
    EXPECT_TRUE(status.has_value()) << "the job did not end after its ranks were killed\n"
                                    << job.output();
    return w.acked.load();
  }

  void expect_always_keeps_every_write(const std::string& protocol, int snapshot_every);
  void expect_no_loses_writes(const std::string& protocol);
  void expect_everysec_keeps_a_prefix(const std::string& protocol);

  TempDir dir_{"sluice-kv-durability"};
};

// Starts the job again on the same directories and reads keys 0 .. n-1.
std::vector<std::string> restart_and_read(const std::vector<std::string>& args, size_t n,
                                          std::string* output) {
  RespJob job(4, args);
  if (job.port() == 0) {
    *output = job.output();
    return {};
  }
  std::vector<std::string> values = read_back(job.port(), n);
  kv::testing::expect_shutdown_passes_checks(job, job.port());
  *output = job.output();
  return values;
}

// --fsync always: every acknowledged write is there after the crash (the
// restart reads a snapshot and the log after it: snapshots every
// `snapshot_every` slots, a few times before the crash).
void DurabilityJobTest::expect_always_keeps_every_write(const std::string& protocol,
                                                        int snapshot_every) {
  const std::vector<std::string> always = args("always", snapshot_every, protocol);
  const size_t acked = write_then_crash(always);
  ASSERT_GE(acked, kBeforeCrash);
  std::string output;
  // (Writes after the last acknowledged one may or may not be there.)
  const std::vector<std::string> values = restart_and_read(always, acked, &output);
  ASSERT_EQ(values.size(), acked) << output;
  std::vector<std::string> expected, present;
  for (size_t i = 0; i < acked; ++i) {
    expected.push_back(value_of(i));
    if (!values[i].empty()) present.push_back(values[i]);
  }
  std::printf("%s, --fsync always: %zu writes acknowledged before the crash, %zu there after it\n",
              protocol.c_str(), acked, present.size());
  EXPECT_EQ(present.size(), acked) << "acknowledged writes lost\n" << output;
  EXPECT_EQ(checksum(present), checksum(expected)) << output;
  EXPECT_EQ(sluice::testing::count_lines_with(output, "restored from disk: a snapshot of slot"), 3)
      << output;
}

// The negative control: nothing syncs the log during the run, so the crash
// (through the hook) takes what the replicas acknowledged. (No snapshots:
// they would sync the log.)
void DurabilityJobTest::expect_no_loses_writes(const std::string& protocol) {
  const std::vector<std::string> no = args("no", 0, protocol);
  const size_t acked = write_then_crash(no);
  ASSERT_GE(acked, kBeforeCrash);
  std::string output;
  const std::vector<std::string> values = restart_and_read(no, acked, &output);
  ASSERT_EQ(values.size(), acked) << output;
  size_t present = 0;
  for (const std::string& v : values) present += !v.empty();
  std::printf("%s, --fsync no: %zu writes acknowledged before the crash, %zu there after it\n",
              protocol.c_str(), acked, present);
  EXPECT_LT(present, acked) << "with --fsync no the crash lost nothing: the test cannot fail\n"
                            << output;
}

TEST_F(DurabilityJobTest, FsyncAlwaysKeepsEveryAcknowledgedWriteThroughAWholeJobCrash) {
  expect_always_keeps_every_write("multipaxos", 500);
}

TEST_F(DurabilityJobTest, FsyncNoLosesAcknowledgedWritesInTheSameCrash) {
  expect_no_loses_writes("multipaxos");
}

// The same two for NOPaxos replicas: their view, log and sync point on
// disk; the restarted job's new session makes them change view, and the
// merge keeps every write a client completed. (A slot holds a batch of the
// gateway's pipelined writes: snapshots every 20 slots.)
TEST_F(DurabilityJobTest, NoPaxosFsyncAlwaysKeepsEveryAcknowledgedWriteThroughAWholeJobCrash) {
  expect_always_keeps_every_write("nopaxos", 20);
}

TEST_F(DurabilityJobTest, NoPaxosFsyncNoLosesAcknowledgedWritesInTheSameCrash) {
  expect_no_loses_writes("nopaxos");
}

// The index of the write that set `value` (value_of); -1 for none.
long index_of(const std::string& value) {
  const size_t dash = value.rfind('-');
  return value.empty() || dash == std::string::npos ? -1 : std::stol(value.substr(dash + 1));
}

// --fsync everysec, crashed once every replica synced: the replicas agree on
// a prefix of the writes, and porcupine finds the history linearizable.
// (No snapshots: they would sync the log, and the test sees a replica's
// once-a-second sync by its log file growing.) The writes go round 500
// keys, each key written many times.
void DurabilityJobTest::expect_everysec_keeps_a_prefix(const std::string& protocol) {
  constexpr size_t kKeys = 500;
  const std::vector<std::string> everysec = args("everysec", 0, protocol);
  Writer w;
  w.keys = kKeys;
  const size_t acked = write_then_crash(everysec, true, &w);
  ASSERT_GE(acked, kBeforeCrash);
  // The job's own checks at SHUTDOWN (in the restart): the replicas
  // applied the same log to the same digest.
  std::string output;
  std::vector<Round> reads;
  std::vector<std::string> values;
  {
    RespJob job(4, everysec);
    ASSERT_NE(job.port(), 0) << job.output();
    values = read_back(job.port(), kKeys, &reads);
    kv::testing::expect_shutdown_passes_checks(job, job.port());
    output = job.output();
  }
  ASSERT_EQ(values.size(), kKeys) << output;
  // One connection's commands take effect in order, so the store holds
  // what the first `kept` writes made of it, for some `kept`: the latest
  // write below it on every key, nothing newer.
  long latest = -1;
  for (const std::string& v : values) latest = std::max(latest, index_of(v));
  const size_t kept = static_cast<size_t>(latest + 1);
  std::printf(
      "%s, --fsync everysec: %zu writes acknowledged before the crash, the first %zu there after "
      "it\n",
      protocol.c_str(), acked, kept);
  EXPECT_GT(kept, 0u) << "every replica synced some writes before the crash\n" << output;
  for (size_t k = 0; k < kKeys; ++k) {
    const long expected = kept > k ? static_cast<long>(k + (kept - 1 - k) / kKeys * kKeys) : -1;
    EXPECT_EQ(index_of(values[k]), expected) << key_of(k) << ": " << values[k];
    if (expected >= 0) {
      EXPECT_EQ(values[k], value_of(static_cast<size_t>(expected)));
    }
  }
  // Porcupine on the whole history: the writes before `kept` as
  // acknowledged, those after it (lost, as everysec may lose the last
  // second, or never answered) of unknown outcome, then the reads after
  // the restart.
  std::vector<kv::Completed> history;
  for (const Round& r : w.rounds) {
    for (size_t i = r.first; i < r.first + r.count; ++i) {
      kv::Completed c;
      c.cmd.op = kv::Op::kPut;
      c.cmd.client = 1;
      c.cmd.seq = i + 1;
      c.cmd.key = w.key(i);
      c.cmd.value = value_of(i);
      c.invoked_us = r.call_us;
      c.completed_us = r.return_us;
      c.result.ok = true;
      c.unknown = i >= kept || i >= acked;
      history.push_back(c);
    }
  }
  for (const Round& r : reads) {
    for (size_t k = r.first; k < r.first + r.count; ++k) {
      kv::Completed c;
      c.cmd.op = kv::Op::kGet;
      c.cmd.client = 2;
      c.cmd.seq = k + 1;
      c.cmd.key = key_of(k);
      c.invoked_us = r.call_us;
      c.completed_us = r.return_us;
      c.result.ok = !values[k].empty();
      c.result.value = values[k];
      history.push_back(c);
    }
  }
  const std::string file = dir_.path() + "/history.jsonl";
  std::string why;
  ASSERT_TRUE(kv::write_history(file, history, &why)) << why;
  const sluice::testing::ProcessResult p =
      sluice::testing::run_process({SLUICE_KV_PORCUPINE, file}, {}, std::chrono::seconds(120));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                p.output, "kv-porcupine: linearizable (" + std::to_string(history.size()) +
                              " operations on " + std::to_string(kKeys) + " keys"),
            1)
      << p.output;
}

TEST_F(DurabilityJobTest, FsyncEverysecLeavesReplicasThatAgreeOnAPrefixOfTheWrites) {
  expect_everysec_keeps_a_prefix("multipaxos");
}

TEST_F(DurabilityJobTest, NoPaxosFsyncEverysecLeavesReplicasThatAgreeOnAPrefixOfTheWrites) {
  expect_everysec_keeps_a_prefix("nopaxos");
}

// A damaged log, or a directory of another cluster size, stops the job
// before it serves, naming the file (and the offset), and never starts a
// replica empty in its place; the files are left as they were.
TEST_F(DurabilityJobTest, RefusesADamagedLogOrAnotherClusterSizeNamingTheFile) {
  {
    RespJob job(4, args("always", 0));
    ASSERT_NE(job.port(), 0) << job.output();
    Conn c(job.port());
    EXPECT_EQ(kv::testing::reply_of(c, {"SET", "kept", "yes"}), "+OK\r\n");
    kv::testing::expect_shutdown_passes_checks(job, job.port());
  }
  const std::string wal = dir_.path() + "/rank-1/wal";
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);  // inside the first record, with others after it
    f.put('\x55');
  }
  const std::string damaged = read_file(wal);
  auto run = [&](std::vector<std::string> extra, int ranks) {
    std::vector<std::string> all = {"run"};
    for (const std::string& a : args("always", 0)) all.push_back(a);
    all.insert(all.end(), extra.begin(), extra.end());
    return sluice::testing::run_process(sluice::testing::job_argv(ranks, 60, "sluice-kv", all),
                                        {{"SLUICE_TEST_KV_HOOKS", "1"}}, std::chrono::seconds(90));
  };
  const sluice::testing::ProcessResult r = run({}, 4);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, wal + " at offset 32: a record's checksum"),
            1)
      << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "serves RESP"), 0) << r.output;
  EXPECT_EQ(read_file(wal), damaged) << "the damaged log was changed";
  // Five replicas on a three-replica directory.
  const sluice::testing::ProcessResult five = run({"--replicas", "5"}, 6);
  EXPECT_NE(five.exit_code, 0) << five.output;
  EXPECT_GE(sluice::testing::count_lines_with(
                five.output, dir_.path() + "/rank-0/wal belongs to a cluster of 3 replicas, "
                                           "and this job has 5"),
            1)
      << five.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

}  // namespace
