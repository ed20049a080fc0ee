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

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>

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

TEST(RespGatewaysTest, AKilledGatewaysWritesAreReadThroughAnotherAndShutdownEndsTheWholeJob) {
  // (The variable is this test's, not the job's: sluice warns of an
  // unknown SLUICE_ variable.)
  const std::string proto = protocol();
  ::unsetenv("SLUICE_KV_PROTOCOL");
  kv::testing::RespJob job(
      6, {"--protocol", proto, "--resp-port", "0", "--enable-shutdown", "local"}, {"--keep-going"});
  // Every gateway's line: rank, port, pid.
  std::map<uint32_t, Gateway> gateways;
  const std::regex served("rank ([0-9]+) serves RESP on \\S+ port ([0-9]+) \\(pid ([0-9]+)\\)");
  const auto end = kv::testing::Clock::now() + std::chrono::seconds(60);
  while (gateways.size() < 3 && kv::testing::Clock::now() < end) {
    job.drain(std::chrono::milliseconds(100));
    const std::string& out = job.output();
    for (auto it = std::sregex_iterator(out.begin(), out.end(), served);
         it != std::sregex_iterator(); ++it) {
      gateways[static_cast<uint32_t>(std::stoul((*it)[1]))] = {
          static_cast<uint16_t>(std::stoi((*it)[2])), std::stoi((*it)[3])};
    }
  }
  ASSERT_EQ(gateways.size(), 3u) << "three gateways did not start:\n" << job.output();
  const Gateway doomed = gateways.at(3), reader = gateways.at(4), other = gateways.at(5);

  // 200 writes through the first gateway, each acknowledged.
  constexpr int kKeys = 200;
  {
    Conn c(doomed.port);
    ASSERT_TRUE(c.ok());
    std::string pipeline;
    for (int i = 0; i < kKeys; ++i)
      pipeline += request({"SET", "key" + std::to_string(i), "value" + std::to_string(i)});
    ASSERT_TRUE(c.send(pipeline + request({"PING"})));
    std::string want;
    for (int i = 0; i < kKeys; ++i) want += "+OK\r\n";
    EXPECT_EQ(c.receive(want + "+PONG\r\n"), want + "+PONG\r\n");
  }
  // The gateway dies, unannounced.
  ASSERT_EQ(::kill(doomed.pid, SIGKILL), 0);

  // Another gateway serves every acknowledged write.
  Conn r(reader.port);
  ASSERT_TRUE(r.ok());
  std::string pipeline, want;
  for (int i = 0; i < kKeys; ++i) {
    const std::string v = "value" + std::to_string(i);
    pipeline += request({"GET", "key" + std::to_string(i)});
    want += "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  ASSERT_TRUE(r.send(pipeline + request({"PING"})));
  EXPECT_EQ(r.receive(want + "+PONG\r\n"), want + "+PONG\r\n");
  // The third one writes and reads.
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
  const auto status = job.finish(std::chrono::seconds(60));
  const std::string& output = job.output();
  ASSERT_TRUE(status.has_value()) << "the job did not end after SHUTDOWN\n" << output;
  EXPECT_NE(output.find("gateway rank 3: lost; the " + std::to_string(kKeys) +
                        " operations its clients had take effect are not counted"),
            std::string::npos)
      << output;
  EXPECT_EQ(sluice::testing::count_lines_with(output, "clients: 2 RESP gateway clients completed"),
            1)
      << output;
  EXPECT_EQ(sluice::testing::count_lines_with(output, "replicas agree: yes"), 1) << output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                output, "job: every operation completed exactly once; replicas identical"),
            1)
      << output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

}  // namespace
