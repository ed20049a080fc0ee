// A replicated store behind several RESP gateways (sluice-kv run
// --resp-port 0 on 3 replicas and 3 gateway ranks, sluice run --keep-going;
// Multi-Paxos, or NOPaxos with SLUICE_KV_PROTOCOL=nopaxos): a gateway
// killed from outside (SIGKILL by this test; no rank is told) takes only
// its own connections with it. A client that reconnects to another gateway
// reads every write the dead one acknowledged, the job goes on, and
// SHUTDOWN through any gateway ends the whole job, the gateways still alive
// included, with its checks passed (the dead gateway's operations named
// and left out of the exactly-once count).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

using kv::testing::Conn;
using kv::testing::protocol;
using kv::testing::reply_of;
using kv::testing::request;

struct Gateway {
  uint16_t port = 0;
  int pid = 0;
};

// The gateways the job said it serves, by rank (the latest line of each
// rank: a gateway started again says so again), once `count` ranks have one
// whose pid is not in `gone` (or 60 s passed).
std::map<uint32_t, Gateway> gateways_of(kv::testing::RespJob& job, size_t count,
                                        const std::vector<int>& gone = {}) {
  std::map<uint32_t, Gateway> gateways;
  const std::regex served("rank ([0-9]+) serves RESP on \\S+ port ([0-9]+) \\(pid ([0-9]+)\\)");
  const auto end = kv::testing::Clock::now() + std::chrono::seconds(60);
  auto ready = [&] {
    size_t n = 0;
    for (const auto& [rank, g] : gateways)
      n += std::find(gone.begin(), gone.end(), g.pid) == gone.end();
    return n >= count;
  };
  while (!ready() && kv::testing::Clock::now() < end) {
    job.drain(std::chrono::milliseconds(100));
    const std::string& out = job.output();
    for (auto it = std::sregex_iterator(out.begin(), out.end(), served);
         it != std::sregex_iterator(); ++it) {
      gateways[static_cast<uint32_t>(std::stoul((*it)[1]))] = {
          static_cast<uint16_t>(std::stoi((*it)[2])), std::stoi((*it)[3])};
    }
  }
  return gateways;
}

// `keys` SETs key<i> = value<i> pipelined through `port`, each acknowledged.
void write_keys(uint16_t port, int keys) {
  Conn c(port);
  ASSERT_TRUE(c.ok());
  std::string pipeline, want;
  for (int i = 0; i < keys; ++i) {
    pipeline += request({"SET", "key" + std::to_string(i), "value" + std::to_string(i)});
    want += "+OK\r\n";
  }
  ASSERT_TRUE(c.send(pipeline + request({"PING"})));
  EXPECT_EQ(c.receive(want + "+PONG\r\n"), want + "+PONG\r\n");
}

// Every key<i> read through `c` holds value<i>.
void expect_keys(Conn& c, int keys) {
  std::string pipeline, want;
  for (int i = 0; i < keys; ++i) {
    const std::string v = "value" + std::to_string(i);
    pipeline += request({"GET", "key" + std::to_string(i)});
    want += "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  ASSERT_TRUE(c.send(pipeline + request({"PING"})));
  EXPECT_EQ(c.receive(want + "+PONG\r\n"), want + "+PONG\r\n");
}

// The job's end after SHUTDOWN: its checks passed, `said` among its lines,
// `clients` gateway clients reporting.
void expect_checks_pass(kv::testing::RespJob& job, const std::string& said, int clients) {
  const auto status = job.finish(std::chrono::seconds(60));
  const std::string& output = job.output();
  ASSERT_TRUE(status.has_value()) << "the job did not end after SHUTDOWN\n" << output;
  EXPECT_NE(output.find(said), std::string::npos) << output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                output, "clients: " + std::to_string(clients) + " RESP gateway clients completed"),
            1)
      << output;
  EXPECT_EQ(sluice::testing::count_lines_with(output, "replicas agree: yes"), 1) << output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                output, "job: every operation completed exactly once; replicas identical"),
            1)
      << output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// (The variable is this test's, not the job's: sluice warns of an unknown
// SLUICE_ variable.)
std::string take_protocol() {
  static const std::string p = protocol();
  ::unsetenv("SLUICE_KV_PROTOCOL");
  return p;
}

TEST(RespGatewaysTest, AKilledGatewaysWritesAreReadThroughAnotherAndShutdownEndsTheWholeJob) {
  kv::testing::RespJob job(
      6, {"--protocol", take_protocol(), "--resp-port", "0", "--enable-shutdown", "local"},
      {"--keep-going"});
  const std::map<uint32_t, Gateway> gateways = gateways_of(job, 3);
  ASSERT_EQ(gateways.size(), 3u) << "three gateways did not start:\n" << job.output();
  const Gateway doomed = gateways.at(3), reader = gateways.at(4), other = gateways.at(5);
  // 200 writes through the first gateway, each acknowledged; then it dies,
  // unannounced.
  constexpr int kKeys = 200;
  write_keys(doomed.port, kKeys);
  ASSERT_EQ(::kill(doomed.pid, SIGKILL), 0);

  // Another gateway serves every acknowledged write; the third one writes
  // and the second reads it.
  Conn r(reader.port);
  ASSERT_TRUE(r.ok());
  expect_keys(r, kKeys);
  Conn w(other.port);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(reply_of(w, {"SET", "after", "the-loss"}), "+OK\r\n");
  EXPECT_EQ(reply_of(r, {"GET", "after"}), "$8\r\nthe-loss\r\n");

  // SHUTDOWN through one gateway ends the job: the other live one stops
  // too (its connection is closed), and the checks pass.
  r.send(request({"SHUTDOWN"}));
  EXPECT_EQ(r.receive("+OK\r\n"), "+OK\r\n");
  bool closed = false;
  w.receive("never", &closed, std::chrono::seconds(30));
  EXPECT_TRUE(closed) << "the third gateway still served after SHUTDOWN";
  expect_checks_pass(job,
                     "gateway rank 3, incarnation 0: lost; the " + std::to_string(kKeys) +
                         " operations its clients had take effect are not counted",
                     2);
}

// Under `sluice run --restarts`, a gateway killed from outside comes back as
// a new process: it serves again (on a port of its own) as a new client,
// reads what its former process acknowledged, and the job's checks leave
// that process's operations out, as a lost gateway's.
TEST(RespGatewaysTest, AGatewayStartedAgainServesTheWritesItsFormerProcessAcknowledged) {
  kv::testing::RespJob job(
      5, {"--protocol", take_protocol(), "--resp-port", "0", "--enable-shutdown", "local"},
      {"--keep-going", "--restarts", "1"});
  std::map<uint32_t, Gateway> gateways = gateways_of(job, 2);
  ASSERT_EQ(gateways.size(), 2u) << "two gateways did not start:\n" << job.output();
  const Gateway first = gateways.at(3), other = gateways.at(4);
  constexpr int kKeys = 100;
  write_keys(first.port, kKeys);
  ASSERT_EQ(::kill(first.pid, SIGKILL), 0);

  gateways = gateways_of(job, 2, {first.pid});
  ASSERT_NE(gateways.at(3).pid, first.pid) << "rank 3 was not started again:\n" << job.output();
  Conn again(gateways.at(3).port);
  ASSERT_TRUE(again.ok());
  expect_keys(again, kKeys);
  EXPECT_EQ(reply_of(again, {"SET", "after", "the-restart"}), "+OK\r\n");
  Conn o(other.port);
  EXPECT_EQ(reply_of(o, {"GET", "after"}), "$11\r\nthe-restart\r\n");

  again.send(request({"SHUTDOWN"}));
  EXPECT_EQ(again.receive("+OK\r\n"), "+OK\r\n");
  expect_checks_pass(job,
                     "gateway rank 3, incarnation 0: started again since; the " +
                         std::to_string(kKeys) +
                         " operations its clients had take effect are not counted",
                     2);
  EXPECT_NE(job.output().find("rank 3: a restarted gateway (incarnation 1): serving again"),
            std::string::npos);
}

}  // namespace
