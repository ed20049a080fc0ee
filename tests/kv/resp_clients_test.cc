// Clients we did not write against the RESP front end of a replicated store
// (sluice-kv run --resp-port 0, 3 replicas, Multi-Paxos or, with
// SLUICE_KV_PROTOCOL=nopaxos, NOPaxos, and a gateway rank whose
// connections share 2 clients): redis-benchmark's default suite (but for
// streams, which sluice-kv does not have), and go-redis
// (tests/kv/go_redis, built into .tools/ by
// scripts/install-go-redis-check.sh) running its checks over RESP3 and
// RESP2. Each suite has a job of its own; at the end SHUTDOWN stops it and
// the job must pass its own checks (replicas identical, every operation
// exactly once). Neither keeps a history: MSET, RENAME and transactions are
// not operations on one key, which kv-porcupine refuses (docs/kv.md). The
// transport comes from SLUICE_TRANSPORT.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

namespace proc = sluice::proc;

using kv::testing::protocol;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

// One job per suite: `sluice-kv run --resp-port 0` with 2 clients behind
// the gateway and SHUTDOWN allowed from loopback.
class RespClientsJob : public ::testing::Test {
 protected:
  static void start_job() {
    job_ = new kv::testing::RespJob(4, {"--protocol", protocol(), "--resp-port", "0",
                                        "--clients-per-rank", "2", "--enable-shutdown", "local"});
    port_ = job_->port();
  }
  static void TearDownTestSuite() {
    delete job_;
    job_ = nullptr;
    port_ = 0;
  }
  void SetUp() override {
    ASSERT_NE(job_, nullptr);
    ASSERT_NE(port_, 0) << "the job did not start a gateway:\n" << job_->output();
  }

  static inline kv::testing::RespJob* job_ = nullptr;
  static inline uint16_t port_ = 0;
};

class RedisBenchmarkTest : public RespClientsJob {
 protected:
  static void SetUpTestSuite() { start_job(); }
};

// What `-t` names, and the name each result line of `--csv` gives it
// (redis-benchmark 7.0 runs LRANGE's LPUSH first, under a name of its own).
const std::map<std::string, std::string> kSuite = {
    {"ping_inline", "PING_INLINE"},
    {"ping_mbulk", "PING_MBULK"},
    {"set", "SET"},
    {"get", "GET"},
    {"incr", "INCR"},
    {"lpush", "LPUSH"},
    {"rpush", "RPUSH"},
    {"lpop", "LPOP"},
    {"rpop", "RPOP"},
    {"sadd", "SADD"},
    {"hset", "HSET"},
    {"spop", "SPOP"},
    {"zadd", "ZADD"},
    {"zpopmin", "ZPOPMIN"},
    {"lrange_100", "LRANGE_100 (first 100 elements)"},
    {"lrange_300", "LRANGE_300 (first 300 elements)"},
    {"mset", "MSET (10 keys)"},
};

// redis-benchmark's default suite but for streams (XADD), 8 connections
// pipelining 4 commands each: every test gives a result line with a
// positive rate, and no error appears. (Its `-e` has no effect since Redis 7.0, which says so:
// redis-benchmark prints an error reply and exits with status 1 at the first one.)
TEST_F(RedisBenchmarkTest, TheDefaultSuiteWithoutStreamsRunsWithoutErrors) {
  std::string error;
  int status = 0;
  const auto tool = proc::find_program("redis-benchmark", &error, &status);
  ASSERT_TRUE(tool.has_value()) << "redis-benchmark is missing: make test-tools installs "
                                   "redis-tools (scripts/install-deps.sh)";
  std::string tests;
  for (const auto& [name, shown] : kSuite) tests += (tests.empty() ? "" : ",") + name;
  const ProcessResult r = run_process({*tool, "-p", std::to_string(port_), "-t", tests, "-n",
                                       "2000", "-c", "8", "-P", "4", "--csv"},
                                      {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // "NAME","rps","avg_latency_ms",...; anything else but the header is an
  // error redis-benchmark printed.
  const std::regex row("^\"([^\"]+)\",\"([0-9.]+)\"(,\"[0-9.]+\")*\\s*$");
  std::map<std::string, double> rate;
  std::vector<std::string> other;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::smatch m;
    if (std::regex_match(line, m, row)) {
      rate[m[1]] = std::stod(m[2]);
    } else if (!line.empty() && line.rfind("\"test\",\"rps\"", 0) != 0) {
      other.push_back(line);
    }
  }
  for (const auto& [name, shown] : kSuite) {
    ASSERT_EQ(rate.count(shown), 1u) << "no result for " << name << ":\n" << r.output;
    EXPECT_GT(rate[shown], 0) << name << ":\n" << r.output;
  }
  EXPECT_EQ(other, std::vector<std::string>{}) << r.output;
}

TEST_F(RedisBenchmarkTest, ShutdownEndsTheJobWithItsChecksPassed) {
  kv::testing::expect_shutdown_passes_checks(*job_, port_);
}

// go-redis's checks (tests/kv/go_redis/main.go), built by
// scripts/install-go-redis-check.sh (label slow: the build takes about 35
// CPU-seconds from a clean module cache, so make test does not run it).
class GoRedisTest : public RespClientsJob {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(SLUICE_KV_GO_REDIS_CHECK)) start_job();
  }
  void SetUp() override {
    if (!std::filesystem::exists(SLUICE_KV_GO_REDIS_CHECK)) {
      GTEST_SKIP() << SLUICE_KV_GO_REDIS_CHECK
                   << " is missing: run scripts/install-go-redis-check.sh (needs Go) to build it";
    }
    RespClientsJob::SetUp();
  }
};

// go-redis uses the store as a Go program uses Redis, over RESP3 (its
// default, HELLO 3) and RESP2: every check's answer exact.
TEST_F(GoRedisTest, GoRedisRunsItsChecksOverResp3AndResp2) {
  const ProcessResult r =
      run_process({SLUICE_KV_GO_REDIS_CHECK, std::to_string(port_)}, {}, std::chrono::seconds(150));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\ngo-redis: [0-9]+ checks passed\n$")))
      << r.output;
}

TEST_F(GoRedisTest, ShutdownEndsTheJobWithItsChecksPassed) {
  kv::testing::expect_shutdown_passes_checks(*job_, port_);
}

}  // namespace
