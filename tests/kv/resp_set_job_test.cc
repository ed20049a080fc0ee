// Sets through the RESP front end of a replicated store (sluice-kv run
// --resp-port 0 --history FILE): one job (3 replicas, Multi-Paxos or, with
// SLUICE_KV_PROTOCOL=nopaxos, NOPaxos, and a gateway rank whose connections
// share 2 clients) serves the suite. The set commands on one key answer as
// Redis 7's do, several connections add and pop at once (every member
// popped once), and at the end SHUTDOWN stops the gateway: the job must
// pass its own checks (replicas identical, so SPOP chose alike on each) and
// porcupine must find the history, SPOP's and SRANDMEMBER's choices among
// it, linearizable. (The commands on several sets: resp_keys_test.cc, in a
// job that keeps no history.) The transport comes from SLUICE_TRANSPORT.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "resp.h"
#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

using kv::testing::Conn;
using kv::testing::protocol;
using kv::testing::reply_of;
using kv::testing::request;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

std::string set_history_file() {
  const char* transport = std::getenv("SLUICE_TRANSPORT");
  return ::testing::TempDir() + "kv-resp-set-history-" + protocol() + "-" +
         (transport ? transport : "default") + ".jsonl";
}

class RespSetJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::remove(set_history_file());
    job_ = new kv::testing::RespJob(
        4, {"--protocol", protocol(), "--resp-port", "0", "--clients-per-rank", "2", "--history",
            set_history_file(), "--enable-shutdown", "local"});
    port_ = job_->port();
  }
  static void TearDownTestSuite() { delete job_; }
  void SetUp() override {
    ASSERT_NE(port_, 0) << "the job did not start a gateway:\n" << job_->output();
  }

  static inline kv::testing::RespJob* job_ = nullptr;
  static inline uint16_t port_ = 0;
};

// The set commands on one key each, as Redis 7 answers them (the commands
// on several sets, WRONGTYPE and arities: resp_keys_test.cc).
TEST_F(RespSetJobTest, TheSetCommandsOnOneKeyAnswerAsRedisDoes) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto ask = [&c](const std::vector<std::string>& args) { return reply_of(c, args); };
  EXPECT_EQ(ask({"SADD", "sj:s", "b", "a", "b", ""}), ":3\r\n");
  EXPECT_EQ(ask({"SADD", "sj:s", "a", "c"}), ":1\r\n");
  EXPECT_EQ(ask({"SMEMBERS", "sj:s"}), "*4\r\n$0\r\n\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
  EXPECT_EQ(ask({"SMEMBERS", "sj:none"}), "*0\r\n");
  EXPECT_EQ(ask({"SCARD", "sj:s"}), ":4\r\n");
  EXPECT_EQ(ask({"SISMEMBER", "sj:s", "a"}), ":1\r\n");
  EXPECT_EQ(ask({"SMISMEMBER", "sj:s", "a", "z"}), "*2\r\n:1\r\n:0\r\n");
  EXPECT_EQ(ask({"SREM", "sj:s", "", "z"}), ":1\r\n");
  EXPECT_EQ(ask({"SINTER", "sj:s"}), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
  EXPECT_EQ(ask({"SINTERCARD", "1", "sj:s", "LIMIT", "2"}), ":2\r\n");
  EXPECT_EQ(ask({"SRANDMEMBER", "sj:s", "5"}), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
  EXPECT_EQ(ask({"SRANDMEMBER", "sj:s", "0"}), "*0\r\n");
  const std::string one = ask({"SPOP", "sj:s"});
  EXPECT_TRUE(one == "$1\r\na\r\n" || one == "$1\r\nb\r\n" || one == "$1\r\nc\r\n") << one;
  EXPECT_EQ(ask({"SCARD", "sj:s"}), ":2\r\n");
  EXPECT_EQ(ask({"SPOP", "sj:s", "0"}), "*0\r\n");
  const std::string two = ask({"SPOP", "sj:s", "5"});
  EXPECT_EQ(two.substr(0, 4), "*2\r\n") << two;
  EXPECT_EQ(ask({"TYPE", "sj:s"}), "+none\r\n") << "the key goes with its last member";
  EXPECT_EQ(ask({"SPOP", "sj:s"}), "$-1\r\n");
  EXPECT_EQ(ask({"SPOP", "sj:s", "2"}), "*0\r\n");
  EXPECT_EQ(ask({"SRANDMEMBER", "sj:s"}), "$-1\r\n");
  EXPECT_EQ(ask({"SPOP", "sj:s", "-1"}), "-ERR value is out of range, must be positive\r\n");
  EXPECT_EQ(ask({"SRANDMEMBER", "sj:s", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(ask({"SADD", "sj:t", "v"}), ":1\r\n");
  EXPECT_EQ(ask({"TYPE", "sj:t"}), "+set\r\n");
}

// Four connections add members and pop them at once, pipelined: every
// member added is popped by exactly one SPOP or still in the set, and no
// SPOP answers a member never added.
TEST_F(RespSetJobTest, SeveralConnectionsPopEachMemberOnce) {
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 4; ++i) conns.push_back(std::make_unique<Conn>(port_));
  std::set<std::string> added;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 4; ++i) {
      std::string pipeline;
      for (int k = 0; k < 4; ++k) {
        const std::string m =
            "m" + std::to_string(round) + "-" + std::to_string(i) + "-" + std::to_string(k);
        added.insert(m);
        pipeline += request({"SADD", "sj:pool", m});
      }
      pipeline += request({"SPOP", "sj:pool"}) + request({"SPOP", "sj:pool", "2"});
      conns[i]->send(pipeline + request({"PING"}));
    }
  }
  std::vector<std::string> popped;
  for (auto& c : conns) {
    // (Until its five PINGs' answers: one read may hold several.)
    std::string got;
    auto pongs = [&got] {
      size_t n = 0;
      for (size_t at = got.find("+PONG\r\n"); at != std::string::npos;
           at = got.find("+PONG\r\n", at + 1))
        ++n;
      return n;
    };
    for (int tries = 0; tries < 5 && pongs() < 5; ++tries) got += c->receive("+PONG\r\n");
    EXPECT_EQ(pongs(), 5u) << got;
    // Each bulk string in the replies is a member popped.
    for (size_t at = got.find("\r\n$"); at != std::string::npos; at = got.find("\r\n$", at + 1)) {
      const size_t len_end = got.find("\r\n", at + 3);
      const int len = std::stoi(got.substr(at + 3, len_end - at - 3));
      if (len >= 0) popped.push_back(got.substr(len_end + 2, len));
    }
  }
  const std::set<std::string> once(popped.begin(), popped.end());
  EXPECT_EQ(once.size(), popped.size()) << "a member popped twice";
  for (const std::string& m : popped) EXPECT_EQ(added.count(m), 1u) << m;
  Conn c(port_);
  std::string rest = reply_of(c, {"SCARD", "sj:pool"});
  EXPECT_EQ(rest, ":" + std::to_string(added.size() - popped.size()) + "\r\n");
  EXPECT_GT(popped.size(), 20u);
}

// Last: SHUTDOWN ends the job, which must pass its own checks, and
// porcupine must find the history, SPOPs among it, linearizable.
TEST_F(RespSetJobTest, ShutdownEndsTheJobWithItsChecksPassed) {
  kv::testing::expect_shutdown_passes_checks(*job_, port_);
  std::ifstream in(set_history_file());
  size_t pops = 0;
  for (std::string line; std::getline(in, line);)
    pops += line.find("\"op\":\"spop\"") != std::string::npos;
  EXPECT_GT(pops, 40u) << "the history holds the SPOPs";
  const ProcessResult p =
      run_process({SLUICE_KV_PORCUPINE, set_history_file()}, {}, std::chrono::seconds(120));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("kv-porcupine: linearizable"), std::string::npos) << p.output;
}

}  // namespace
