// Sets and sorted sets through the RESP front end of a replicated store
// (sluice-kv run --resp-port 0 --history FILE): one job (3 replicas,
// Multi-Paxos or, with SLUICE_KV_PROTOCOL=nopaxos, NOPaxos, and a gateway
// rank whose connections share 2 clients) serves the suite. The set and
// sorted-set commands on one key answer as Redis 7's do, several
// connections add and pop at once (every member popped once; a sorted
// set's increments all counted), and at the end SHUTDOWN stops the
// gateway: the job must pass its own checks (replicas identical, so SPOP
// chose alike on each) and porcupine must find the history, SPOP's and
// SRANDMEMBER's choices and the sorted sets' commands among it,
// linearizable. (The commands on several keys: resp_keys_test.cc, in a job
// that keeps no history.) The transport comes from SLUICE_TRANSPORT.
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

// The bulk strings (not nulls) among a connection's replies, in order:
// each one after a CRLF (the array headers before them end in one).
std::vector<std::string> bulk_strings(const std::string& replies) {
  std::vector<std::string> out;
  for (size_t at = replies.find("\r\n$"); at != std::string::npos;
       at = replies.find("\r\n$", at + 1)) {
    const size_t len_end = replies.find("\r\n", at + 3);
    const int len = std::stoi(replies.substr(at + 3, len_end - at - 3));
    if (len >= 0) out.push_back(replies.substr(len_end + 2, len));
  }
  return out;
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
    for (std::string& m : bulk_strings(got)) popped.push_back(std::move(m));
  }
  const std::set<std::string> once(popped.begin(), popped.end());
  EXPECT_EQ(once.size(), popped.size()) << "a member popped twice";
  for (const std::string& m : popped) EXPECT_EQ(added.count(m), 1u) << m;
  Conn c(port_);
  std::string rest = reply_of(c, {"SCARD", "sj:pool"});
  EXPECT_EQ(rest, ":" + std::to_string(added.size() - popped.size()) + "\r\n");
  EXPECT_GT(popped.size(), 20u);
}

// The sorted-set commands on one key, as Redis 7 answers them (the rest,
// against redis-server itself: redis_zset_diff.py in resp_keys_test.cc).
TEST_F(RespSetJobTest, TheSortedSetCommandsOnOneKeyAnswerAsRedisDoes) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto ask = [&c](const std::vector<std::string>& args) { return reply_of(c, args); };
  EXPECT_EQ(ask({"ZADD", "sj:z", "2", "b", "1", "a", "3", "c"}), ":3\r\n");
  EXPECT_EQ(ask({"ZADD", "sj:z", "GT", "CH", "0", "a", "5", "b"}), ":1\r\n");
  EXPECT_EQ(ask({"ZINCRBY", "sj:z", "0.5", "a"}), "$3\r\n1.5\r\n");
  EXPECT_EQ(ask({"ZRANGE", "sj:z", "0", "-1", "WITHSCORES"}),
            "*6\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n5\r\n");
  EXPECT_EQ(ask({"ZRANGEBYSCORE", "sj:z", "(1.5", "+inf", "LIMIT", "1", "1"}), "*1\r\n$1\r\nb\r\n");
  EXPECT_EQ(ask({"ZREVRANK", "sj:z", "a"}), ":2\r\n");
  EXPECT_EQ(ask({"ZCOUNT", "sj:z", "-inf", "(5"}), ":2\r\n");
  EXPECT_EQ(ask({"ZMSCORE", "sj:z", "c", "none"}), "*2\r\n$1\r\n3\r\n$-1\r\n");
  EXPECT_EQ(ask({"ZPOPMAX", "sj:z"}), "*2\r\n$1\r\nb\r\n$1\r\n5\r\n");
  EXPECT_EQ(ask({"ZREMRANGEBYRANK", "sj:z", "0", "0"}), ":1\r\n");
  EXPECT_EQ(ask({"ZRANDMEMBER", "sj:z", "-2"}), "*2\r\n$1\r\nc\r\n$1\r\nc\r\n");
  EXPECT_EQ(ask({"ZREM", "sj:z", "c", "none"}), ":1\r\n");
  EXPECT_EQ(ask({"TYPE", "sj:z"}), "+none\r\n") << "the key goes with its last member";
  EXPECT_EQ(ask({"ZCARD", "sj:z"}), ":0\r\n");
}

// Four connections increment one member and add and pop others at once,
// pipelined, a round at a time: the member's score is the sum of every
// increment, every member added is popped by exactly one ZPOPMIN or still
// in the set. (Rounds, not one long pipeline as the sets' test sends: a
// ZPOPMIN's answer must be the lowest member, and porcupine's search over
// which of a hundred concurrent ZADDs came before each pop is exponential;
// a round's 20 operations are not.)
TEST_F(RespSetJobTest, SeveralConnectionsIncrementAndPopSortedMembersOnce) {
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 4; ++i) conns.push_back(std::make_unique<Conn>(port_));
  std::set<std::string> added;
  std::vector<std::string> popped;
  int increments = 0;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 4; ++i) {
      std::string pipeline;
      for (int k = 0; k < 3; ++k) {
        const std::string m =
            "z" + std::to_string(round) + "-" + std::to_string(i) + "-" + std::to_string(k);
        added.insert(m);
        pipeline += request({"ZADD", "sj:zpool", std::to_string(round * 10 + k), m});
        pipeline += request({"ZINCRBY", "sj:zsum", "1", "total"});
        ++increments;
      }
      pipeline += request({"ZPOPMIN", "sj:zpool"}) + request({"ZPOPMIN", "sj:zpool", "2"});
      conns[i]->send(pipeline + request({"PING"}));
    }
    for (auto& c : conns) {
      std::string got = c->receive("+PONG\r\n");
      ASSERT_NE(got.find("+PONG\r\n"), std::string::npos) << got;
      // Each bulk string that names a member ("z...") is one popped (the
      // scores and ZINCRBY's answers are numbers).
      for (std::string& m : bulk_strings(got))
        if (!m.empty() && m[0] == 'z') popped.push_back(std::move(m));
    }
  }
  const std::set<std::string> once(popped.begin(), popped.end());
  EXPECT_EQ(once.size(), popped.size()) << "a member popped twice";
  for (const std::string& m : popped) EXPECT_EQ(added.count(m), 1u) << m;
  Conn c(port_);
  EXPECT_EQ(reply_of(c, {"ZCARD", "sj:zpool"}),
            ":" + std::to_string(added.size() - popped.size()) + "\r\n");
  const std::string sum = std::to_string(increments);
  EXPECT_EQ(reply_of(c, {"ZSCORE", "sj:zsum", "total"}),
            "$" + std::to_string(sum.size()) + "\r\n" + sum + "\r\n");
  EXPECT_GT(popped.size(), 40u);
}

// Last: SHUTDOWN ends the job, which must pass its own checks, and
// porcupine must find the history, SPOPs among it, linearizable.
TEST_F(RespSetJobTest, ShutdownEndsTheJobWithItsChecksPassed) {
  kv::testing::expect_shutdown_passes_checks(*job_, port_);
  std::ifstream in(set_history_file());
  size_t pops = 0, zpops = 0;
  for (std::string line; std::getline(in, line);) {
    pops += line.find("\"op\":\"spop\"") != std::string::npos;
    zpops += line.find("\"op\":\"zpop\"") != std::string::npos;
  }
  EXPECT_GT(pops, 40u) << "the history holds the SPOPs";
  EXPECT_GT(zpops, 40u) << "the history holds the ZPOPMINs";
  const ProcessResult p =
      run_process({SLUICE_KV_PORCUPINE, set_history_file()}, {}, std::chrono::seconds(120));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("kv-porcupine: linearizable"), std::string::npos) << p.output;
}

}  // namespace
