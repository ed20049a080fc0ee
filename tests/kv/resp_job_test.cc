// The RESP front end of a replicated store (sluice-kv run --resp-port 0): one
// job (3 replicas, Multi-Paxos or, with SLUICE_KV_PROTOCOL=nopaxos, NOPaxos,
// and a gateway rank whose connections share 2 clients) serves the whole
// suite,
// reached by Redis's own tools (redis-cli and redis-benchmark, Debian's
// redis-tools, which `make test` installs) and by raw sockets sending
// garbage, a 1 GiB bulk length and a thousand idle connections. At the end
// SHUTDOWN stops the gateway, and the job must pass its own checks (replicas
// identical, every operation exactly once, the log a linearization) and
// porcupine must find the whole history linearizable. The transport comes
// from SLUICE_TRANSPORT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "history.h"
#include "kv_client.h"
#include "resp.h"
#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

namespace proc = sluice::proc;

using sluice::testing::ProcessResult;
using sluice::testing::run_process;

using kv::testing::protocol;

std::string history_file() {
  const char* transport = std::getenv("SLUICE_TRANSPORT");
  return ::testing::TempDir() + "kv-resp-history-" + protocol() + "-" +
         (transport ? transport : "default") + ".jsonl";
}

using kv::testing::Conn;
using kv::testing::request;

class RespJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::remove(history_file());
    job_ = new kv::testing::RespJob(
        4, {"--protocol", protocol(), "--resp-port", "0", "--clients-per-rank", "2", "--history",
            history_file(), "--enable-shutdown", "local", "--max-value-bytes", "512kb"});
    port_ = job_->port();
  }

  static void TearDownTestSuite() { delete job_; }

  void SetUp() override {
    ASSERT_NE(port_, 0) << "the job did not start a gateway:\n" << job_->output();
  }

  static std::string redis_tool(const std::string& tool) {
    std::string error;
    int status = 0;
    const auto path = proc::find_program(tool, &error, &status);
    return path ? *path : "";
  }

  static ProcessResult redis_cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {redis_tool("redis-cli"), "-p", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, {}, std::chrono::seconds(30));
  }

  // One request's reply on `c` (a PING after it marks its end).
  static std::string reply(Conn& c, const std::vector<std::string>& args) {
    return kv::testing::reply_of(c, args);
  }

  static inline kv::testing::RespJob* job_ = nullptr;
  static inline uint16_t port_ = 0;
};

TEST_F(RespJobTest, RedisCliCommandsGoThroughTheReplicatedStore) {
  ASSERT_NE(redis_tool("redis-cli"), "") << "redis-cli is missing: make test-tools installs "
                                            "redis-tools (scripts/install-deps.sh)";
  auto says = [](const std::vector<std::string>& args) {
    const ProcessResult r = redis_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::string out = r.output;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  };
  EXPECT_EQ(says({"PING"}), "PONG");
  EXPECT_EQ(says({"SET", "fruit", "apple"}), "OK");
  EXPECT_EQ(says({"GET", "fruit"}), "apple");
  EXPECT_EQ(says({"EXISTS", "fruit", "nothing", "fruit"}), "2");
  EXPECT_EQ(says({"CAS", "fruit", "pear", "plum"}), "0");
  EXPECT_EQ(says({"CAS", "fruit", "apple", "plum"}), "1");
  EXPECT_EQ(says({"GET", "fruit"}), "plum");
  EXPECT_EQ(says({"DEL", "fruit", "nothing"}), "1");
  EXPECT_EQ(says({"GET", "fruit"}), "");
  // (A blocking command is known; one that reached the log would be an
  // lmpop, which kv-porcupine refuses in this job's history.)
  EXPECT_NE(says({"BLPOP", "list"}).find("wrong number of arguments for 'blpop'"),
            std::string::npos);
}

TEST_F(RespJobTest, RedisBenchmarkRunsPipelinedAgainstIt) {
  ASSERT_NE(redis_tool("redis-benchmark"), "")
      << "redis-benchmark is missing: make test-tools installs redis-tools";
  const ProcessResult r =
      run_process({redis_tool("redis-benchmark"), "-p", std::to_string(port_), "-t", "set,get",
                   "-n", "1000", "-c", "4", "-P", "16", "-r", "100", "-q"},
                  {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SET: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GET: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("requests per second"), std::string::npos) << r.output;
}

TEST_F(RespJobTest, GarbageAndAHugeBulkLengthGetAnErrorAndTheConnectionCloses) {
  for (const std::string& bad :
       {std::string("*x\r\n"), std::string("*2\r\n$3\r\nGET\r\n$1073741824\r\n"),
        std::string("*1\r\n+OK\r\n")}) {
    Conn c(port_);
    ASSERT_TRUE(c.ok());
    c.send(bad);
    bool closed = false;
    const std::string got = c.receive("\r\n", &closed);
    EXPECT_EQ(got.rfind("-ERR Protocol error", 0), 0u) << got;
    c.receive("never", &closed, std::chrono::seconds(5));
    EXPECT_TRUE(closed) << "the connection stays open after: " << bad;
  }
  // A value past the entry limit (512 KiB and 1 KiB for the key, as this
  // job's --max-value-bytes says) is refused, and the connection goes on.
  Conn c(port_);
  c.send(request({"SET", "big", std::string(512 * 1024 + 1024, 'v')}) + request({"PING"}));
  const std::string got = c.receive("+PONG\r\n");
  EXPECT_NE(got.find("-ERR sluice-kv takes keys and values of at most 525312 bytes in all"),
            std::string::npos)
      << got.substr(0, 200);
  EXPECT_NE(got.find("+PONG\r\n"), std::string::npos) << got;
}

// A web page can make a browser send an HTTP POST to any port; its body is
// then read as commands. The first line gives it away: the connection is
// closed unanswered (and logged) before the body's SET runs.
TEST_F(RespJobTest, ACrossProtocolPostFromAWebPageIsDroppedUnanswered) {
  for (const std::string& attack :
       {std::string("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 26\r\n\r\n"
                    "SET pwned by-a-web-page\r\n"),
        std::string("GET /index.html HTTP/1.1\r\nHost: x\r\n\r\nSET pwned by-a-web-page\r\n"),
        std::string("Host: 127.0.0.1\r\nSET pwned by-a-web-page\r\n")}) {
    Conn c(port_);
    ASSERT_TRUE(c.ok());
    c.send(attack);
    bool closed = false;
    EXPECT_EQ(c.receive("never", &closed, std::chrono::seconds(10)), "") << attack;
    EXPECT_TRUE(closed) << attack;
  }
  Conn check(port_);
  check.send(request({"GET", "pwned"}));
  EXPECT_EQ(check.receive("\r\n"), "$-1\r\n") << "the body's SET must not have run";
}

// An unknown command's name is quoted back in the error, but a CR LF in it
// must not end that reply and forge another: one request, one reply.
TEST_F(RespJobTest, AnErrorQuotingTheClientCannotForgeASecondReply) {
  Conn c(port_);
  c.send("*1\r\n$18\r\nFOO\r\n+INJECTED\r\n:7\r\n" + request({"PING"}));
  const std::string got = c.receive("+PONG\r\n");
  EXPECT_EQ(got,
            "-ERR unknown command 'FOO  +INJECTED  :7', with args beginning with: \r\n+PONG\r\n");
  c.send(request({"FOO", "a\r\n+X", "b"}) + request({"PING"}));
  EXPECT_EQ(c.receive("+PONG\r\n"),
            "-ERR unknown command 'FOO', with args beginning with: 'a  +X' 'b' \r\n+PONG\r\n");
}

TEST_F(RespJobTest, AThousandIdleConnectionsDoNotStallIt) {
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 1100 && lim.rlim_max >= 1100) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  }
  ASSERT_GE(lim.rlim_cur, 1100u) << "this test needs 1100 file descriptors";
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(idle.back()->ok()) << i;
  }
  Conn busy(port_);
  busy.send(request({"SET", "while-idle", "1"}) + request({"GET", "while-idle"}));
  const std::string got = busy.receive("$1\r\n1\r\n");
  EXPECT_EQ(got, "+OK\r\n$1\r\n1\r\n");
  // Half of them send half a request and go quiet: still nothing stalls.
  for (size_t i = 0; i < idle.size(); i += 2) idle[i]->send("*2\r\n$3\r\nGET\r\n$5\r\nab");
  busy.send(request({"PING"}));
  EXPECT_EQ(busy.receive("+PONG\r\n"), "+PONG\r\n");
}

// A peer that pipelines without ever reading its replies: the gateway reads
// on, as Redis does (a pipelining client reads only once it has written
// all), until the replies waiting for it pass --client-output-buffer-limit
// (32 MiB), and then closes it, so the peer cannot send all of the 64 MiB
// of PINGs it tries (78 MiB of replies) and the gateway's memory stays
// bounded; other connections are served meanwhile.
TEST_F(RespJobTest, APeerThatNeverReadsIsClosedPastTheOutputLimitAndOthersAreServed) {
  Conn greedy(port_);
  std::string pings;
  for (int i = 0; i < 10000; ++i) pings += "PING\r\n";
  const size_t sent = greedy.flood(pings, size_t{64} << 20, std::chrono::milliseconds(500));
  EXPECT_LT(sent, size_t{64} << 20) << "the gateway kept reading a peer past its output limit";
  bool closed = false;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       !closed && std::chrono::steady_clock::now() < end;)
    greedy.receive("never", &closed, std::chrono::seconds(1));
  EXPECT_TRUE(closed) << "a peer past --client-output-buffer-limit is closed";
  std::printf("the peer that never reads sent %.1f MiB before it was closed\n",
              static_cast<double>(sent) / (1 << 20));
  Conn other(port_);
  other.send(request({"SET", "served", "yes"}) + request({"GET", "served"}));
  EXPECT_EQ(other.receive("$3\r\nyes\r\n"), "+OK\r\n$3\r\nyes\r\n");
}

// redis-py, a client we did not write, uses the store as it uses Redis
// (tests/kv/redis_py_client.py: it connects with CLIENT SETINFO, and uses
// ECHO, binary SET/GET, EXISTS/DEL, a pipeline, CLIENT, INFO and CONFIG GET).
TEST_F(RespJobTest, RedisPyUsesItAsItUsesRedis) {
  const ProcessResult r = run_process({SLUICE_KV_PYTHON, SLUICE_KV_REDIS_PY, std::to_string(port_)},
                                      {}, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("redis-py: all "), std::string::npos) << r.output;
}

// What clients send on connecting, answered by the gateway itself: HELLO
// 2 and 3 (RESP3 from then on: nulls as _, maps as %), COMMAND DOCS,
// CONFIG GET with a pattern, CLIENT SETNAME/GETNAME.
TEST_F(RespJobTest, TheConnectionCommandsAnswerAsRedisDoes) {
  Conn c(port_);
  c.send(request({"HELLO", "4"}) + request({"HELLO", "2", "SETNAME", "conn-test"}) +
         request({"CLIENT", "GETNAME"}) + request({"COMMAND", "DOCS"}) +
         request({"CONFIG", "GET", "max*clients"}) + request({"CLIENT", "SETNAME", "a b"}) +
         request({"ECHO", "e"}) + request({"PING"}));
  const std::string got = c.receive("+PONG\r\n");
  EXPECT_EQ(got.rfind("-NOPROTO unsupported protocol version\r\n*14\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("$5\r\nproto\r\n:2\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("$9\r\nconn-test\r\n*0\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("*4\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n$17\r\nmaxmemory-clients\r\n"),
            std::string::npos)
      << got;
  EXPECT_NE(got.find("-ERR Client names cannot contain spaces"), std::string::npos) << got;
  EXPECT_NE(got.find("$1\r\ne\r\n+PONG\r\n"), std::string::npos) << got;
  // RESP3: the HELLO reply is a map, a missing key's GET is _, CONFIG GET a map.
  Conn three(port_);
  three.send(request({"HELLO", "3"}) + request({"GET", "resp3:none"}) +
             request({"CONFIG", "GET", "databases"}) + request({"PING"}));
  const std::string r3 = three.receive("+PONG\r\n");
  EXPECT_EQ(r3.rfind("%7\r\n$6\r\nserver\r\n", 0), 0u) << r3;
  EXPECT_NE(r3.find("$5\r\nproto\r\n:3\r\n"), std::string::npos) << r3;
  EXPECT_NE(r3.find("*0\r\n_\r\n%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n+PONG\r\n"), std::string::npos)
      << r3;
}

// The C++ client library (kv_client.h) against the replicated store: every
// call through the log, binary-safe values, and a refused entry.
TEST_F(RespJobTest, TheClientLibraryPutsGetsDeletesAndSwapsThroughTheStore) {
  using namespace std::chrono_literals;
  kv::KvClient c("127.0.0.1", port_);
  const std::string odd("line\r\nbreak\0and nul", 20);
  auto absent = c.get("lib:key", kv::within(30s));
  ASSERT_TRUE(absent.ok()) << absent.error;
  EXPECT_FALSE(absent.value.has_value());
  ASSERT_TRUE(c.put("lib:key", odd, kv::within(30s)).ok());
  auto got = c.get("lib:key", kv::within(30s));
  ASSERT_TRUE(got.ok()) << got.error;
  EXPECT_EQ(got.value, std::optional<std::string>(odd));
  auto missed = c.cas("lib:key", "other", "new", kv::within(30s));
  ASSERT_TRUE(missed.ok()) << missed.error;
  EXPECT_FALSE(missed.value);
  auto swapped = c.cas("lib:key", odd, "new", kv::within(30s));
  ASSERT_TRUE(swapped.ok()) << swapped.error;
  EXPECT_TRUE(swapped.value);
  EXPECT_EQ(c.get("lib:key", kv::within(30s)).value, std::optional<std::string>("new"));
  EXPECT_TRUE(c.del("lib:key", kv::within(30s)).value);
  EXPECT_FALSE(c.del("lib:key", kv::within(30s)).value);
  auto big = c.put("lib:big", std::string(512 * 1024 + 1024, 'v'), kv::within(30s));
  EXPECT_EQ(big.status, kv::CallStatus::kRefused);
  EXPECT_NE(big.error.find("at most 525312 bytes"), std::string::npos) << big.error;
  EXPECT_TRUE(c.connected()) << "a refused command keeps the connection";
}

// Values up to 512 KiB (this job's --max-value-bytes) go through the
// replicated log: set and read back
// whole, and a pipeline of 16 GETs of one (8 MiB of replies, more than any
// message or segment holds: the replicas split their replies) comes back
// whole and in order, beside small commands.
TEST_F(RespJobTest, ValuesOfHalfAMebibyteGoThroughTheLog) {
  std::string value(512 * 1024, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + (i * 7919) % 26);
  Conn c(port_);
  c.send(request({"SET", "half:mib", value}) + request({"GET", "half:mib"}));
  const std::string one = kv::resp::bulk(value);
  EXPECT_EQ(c.receive(one, nullptr, std::chrono::seconds(60)), "+OK\r\n" + one);
  std::string gets, want;
  for (int i = 0; i < 16; ++i) {
    gets += request({"GET", "half:mib"}) + request({"SET", "small:" + std::to_string(i), "x"});
    want += one + "+OK\r\n";
  }
  c.send(gets);
  const std::string got = c.receive(want, nullptr, std::chrono::seconds(60));
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "16 GETs of a 512 KiB value: the replies differ";
}

// Four threads, each with its own client, add 10 to a counter by get and
// compare-and-set, retrying a swap that lost a race: the counter ends at
// exactly 40 (no lost or doubled update through the replicated log).
TEST_F(RespJobTest, ClientLibraryThreadsCountByCompareAndSetExactlyOnce) {
  using namespace std::chrono_literals;
  kv::KvClient init("127.0.0.1", port_);
  ASSERT_TRUE(init.put("lib:counter", "0", kv::within(30s)).ok());
  constexpr int kThreads = 4, kEach = 10;
  std::vector<std::string> errors(kThreads);
  std::vector<int> lost_races(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      kv::KvClient c("127.0.0.1", port_);
      for (int done = 0; done < kEach;) {
        auto v = c.get("lib:counter", kv::within(30s));
        if (!v.ok() || !v.value) {
          errors[t] = "get: " + v.error;
          return;
        }
        const std::string next = std::to_string(std::stoi(*v.value) + 1);
        auto s = c.cas("lib:counter", *v.value, next, kv::within(30s));
        if (!s.ok()) {
          errors[t] = "cas: " + s.error;
          return;
        }
        if (s.value) {
          ++done;
        } else {
          ++lost_races[t];
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  auto end = init.get("lib:counter", kv::within(30s));
  ASSERT_TRUE(end.ok()) << end.error;
  EXPECT_EQ(end.value, std::optional<std::string>(std::to_string(kThreads * kEach)));
}

// Pipelines of 16 commands on four connections at once (as redis-benchmark
// -P 16 sends them; the gateway replicates a connection's pipeline
// together, with its commands in flight side by side): each connection
// counts its own key up by compare-and-set, reading it back after every
// swap, 8 swaps per pipeline. Every swap succeeds and every read sees the
// swap just before it only if the store executes each connection's
// commands exactly once and in the order sent, and answers them in order.
TEST_F(RespJobTest, PipelinedCommandsFromSeveralConnectionsTakeEffectInOrder) {
  constexpr int kConns = 4, kRounds = 60, kSwaps = 8;
  std::vector<std::string> errors(kConns);
  std::vector<std::thread> pool;
  for (int t = 0; t < kConns; ++t) {
    pool.emplace_back([&, t] {
      Conn c(port_);
      if (!c.ok()) {
        errors[t] = "cannot connect";
        return;
      }
      const std::string key = "pipe:" + std::to_string(t);
      // A first pipeline of chained commands of every kind.
      std::string sent = request({"SET", key, "a"}) + request({"GET", key}) +
                         request({"EXISTS", key, key}) + request({"DEL", key}) +
                         request({"GET", key}) + request({"CAS", key, "", "x"}) +
                         request({"SET", key, "0"}) + request({"GET", key});
      std::string want = "+OK\r\n$1\r\na\r\n:2\r\n:1\r\n$-1\r\n:0\r\n+OK\r\n$1\r\n0\r\n";
      for (int round = 0, n = 0; round < kRounds && errors[t].empty(); ++round) {
        if (round > 0) {
          sent.clear();
          want.clear();
        }
        for (int j = 0; j < kSwaps; ++j, ++n) {
          const std::string next = std::to_string(n + 1);
          sent += request({"CAS", key, std::to_string(n), next}) + request({"GET", key});
          want.append(":1\r\n$").append(std::to_string(next.size())).append("\r\n");
          want.append(next).append("\r\n");
        }
        c.send(sent);
        const std::string got = c.receive(want);
        if (got != want) errors[t] = "round " + std::to_string(round) + ": got " + got;
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kConns; ++t) EXPECT_EQ(errors[t], "") << "connection " << t;
  // And all of it once more from a client of its own: each key at its end.
  using namespace std::chrono_literals;
  kv::KvClient check("127.0.0.1", port_);
  for (int t = 0; t < kConns; ++t) {
    EXPECT_EQ(check.get("pipe:" + std::to_string(t), kv::within(30s)).value,
              std::optional<std::string>(std::to_string(kRounds * kSwaps)));
  }
}

// Calls whose deadline passes before the store answers (here: a deadline
// already passed when the command is sent, shorter than any replication
// round trip) end in kTimeout, yet the command may still take effect: the
// client library records them as of unknown outcome. Three clients read,
// write and swap two keys, every third call with such a deadline; their
// recorded history (unknown outcomes included) must be linearizable to
// porcupine, where each timed-out operation may take effect at any time
// after its call, or never. (Left out of the history instead, the
// timed-out puts and swaps that later reads saw make it fail, as it did in
// every run tried.)
TEST_F(RespJobTest, TimedOutCallsAreOfUnknownOutcomeAndTheHistoryStaysLinearizable) {
  using namespace std::chrono_literals;
  constexpr int kClients = 3, kCalls = 60;
  std::vector<std::vector<kv::Completed>> histories(kClients);
  std::vector<int> timeouts(kClients, 0);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> pool;
  for (int t = 0; t < kClients; ++t) {
    pool.emplace_back([&, t] {
      kv::KvClient c("127.0.0.1", port_);
      c.record(&histories[t], 1000 + t);
      std::string seen;  // the last value this client read
      for (int i = 0; i < kCalls; ++i) {
        // (Four calls on a key, then four on the other: a put, a get, a
        // swap and a get or delete, so that reads see writes.)
        const std::string key = "unknown:" + std::to_string(i / 4 % 2);
        const std::string mine = std::to_string(t) + "-" + std::to_string(i);
        // Every third call: a deadline that has passed already.
        const kv::Deadline d = i % 3 == 2 ? kv::within(0s) : kv::within(30s);
        kv::CallStatus s = kv::CallStatus::kOk;
        switch (i % 4) {
          case 0:
            s = c.put(key, mine, d).status;
            break;
          case 1: {
            auto g = c.get(key, d);
            s = g.status;
            if (g.ok()) seen = g.value.value_or("");
            break;
          }
          case 2:
            s = c.cas(key, seen, mine, d).status;
            break;
          default:
            s = i % 8 == 7 ? c.del(key, d).status : c.get(key, d).status;
        }
        if (s == kv::CallStatus::kTimeout) {
          ++timeouts[t];
        } else if (s != kv::CallStatus::kOk) {
          errors[t] = "call " + std::to_string(i) + ": " + kv::to_string(s);
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  std::vector<kv::Completed> all;
  int unknown = 0, timed_out = 0;
  for (int t = 0; t < kClients; ++t) {
    EXPECT_EQ(errors[t], "") << "client " << t;
    timed_out += timeouts[t];
    for (const kv::Completed& h : histories[t]) unknown += h.unknown ? 1 : 0;
    all.insert(all.end(), histories[t].begin(), histories[t].end());
  }
  EXPECT_GT(timed_out, kClients * kCalls / 6) << "too few calls timed out to test anything";
  EXPECT_EQ(unknown, timed_out) << "each timed-out call is an operation of unknown outcome";
  EXPECT_EQ(all.size(), static_cast<size_t>(kClients * kCalls));
  const std::string file = ::testing::TempDir() + "kv-unknown-" + protocol() + ".jsonl";
  std::string why;
  ASSERT_TRUE(kv::write_history(file, all, &why)) << why;
  const ProcessResult p = run_process({SLUICE_KV_PORCUPINE, file}, {}, std::chrono::seconds(120));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(
      p.output.find("operations on 2 keys, " + std::to_string(unknown) + " of unknown outcome"),
      std::string::npos)
      << p.output;
  std::filesystem::remove(file);
}

// Expiry as Redis answers it: SET's EX, PX, EXAT, PXAT and KEEPTTL, SETEX
// and PSETEX, EXPIRE and its kin with NX, XX, GT and LT, TTL, PTTL,
// EXPIRETIME, PERSIST and GETEX, with Redis's errors; a plain SET clears a
// deadline; a time already passed removes the key; COMMAND lists them.
TEST_F(RespJobTest, TheExpiryCommandsAnswerAsRedisDoes) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto ask = [&c](const std::vector<std::string>& args) { return reply(c, args); };
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX", "100"}), "+OK\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":100\r\n");
  const std::string pttl = ask({"PTTL", "ex:k"});
  ASSERT_EQ(pttl[0], ':') << pttl;
  EXPECT_GT(std::stoll(pttl.substr(1)), 90'000) << pttl;
  EXPECT_LE(std::stoll(pttl.substr(1)), 100'000) << pttl;
  const std::string at = ask({"PEXPIRETIME", "ex:k"});
  const int64_t deadline = std::stoll(at.substr(1));
  EXPECT_EQ(ask({"EXPIRETIME", "ex:k"}), ":" + std::to_string((deadline + 500) / 1000) + "\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "w", "KEEPTTL"}), "+OK\r\n");
  EXPECT_EQ(ask({"PEXPIRETIME", "ex:k"}), at) << "KEEPTTL";
  EXPECT_EQ(ask({"SET", "ex:k", "v2"}), "+OK\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":-1\r\n") << "a plain SET clears it";
  EXPECT_EQ(ask({"TTL", "ex:none"}), ":-2\r\n");
  EXPECT_EQ(ask({"EXPIRETIME", "ex:none"}), ":-2\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX", "0"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "PX", "-5"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX", "9223372036854775807"}),
            "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX", "ten"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX", "10", "PX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "KEEPTTL", "EX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(ask({"SET", "ex:k", "v", "EX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(ask({"SETEX", "ex:s", "0", "v"}), "-ERR invalid expire time in 'setex' command\r\n");
  EXPECT_EQ(ask({"PSETEX", "ex:s", "100000", "v"}), "+OK\r\n");
  EXPECT_EQ(ask({"TTL", "ex:s"}), ":100\r\n");
  EXPECT_EQ(ask({"SETEX", "ex:s", "50", "w"}), "+OK\r\n");
  EXPECT_EQ(ask({"TTL", "ex:s"}), ":50\r\n");
  EXPECT_EQ(ask({"GET", "ex:s"}), "$1\r\nw\r\n");
  // EXPIRE's conditions (a key without a deadline counts as one later than
  // any) and errors.
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "100", "XX"}), ":0\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "100", "GT"}), ":0\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "100", "NX"}), ":1\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "200", "NX"}), ":0\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "50", "GT"}), ":0\r\n");
  EXPECT_EQ(ask({"PEXPIRE", "ex:k", "200000", "XX", "GT"}), ":1\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":200\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "300", "LT"}), ":0\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "10", "NX", "XX"}),
            "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "10", "GT", "LT"}),
            "-ERR GT and LT options at the same time are not compatible\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "10", "SOON"}), "-ERR Unsupported option SOON\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:k", "9223372036854775807"}),
            "-ERR invalid expire time in 'expire' command\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:none", "10"}), ":0\r\n");
  EXPECT_EQ(ask({"PERSIST", "ex:k"}), ":1\r\n");
  EXPECT_EQ(ask({"PERSIST", "ex:k"}), ":0\r\n");
  EXPECT_EQ(ask({"PERSIST", "ex:none"}), ":0\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":-1\r\n");
  // A time already passed removes the key.
  EXPECT_EQ(ask({"SET", "ex:gone", "x"}), "+OK\r\n");
  EXPECT_EQ(ask({"EXPIRE", "ex:gone", "-1"}), ":1\r\n");
  EXPECT_EQ(ask({"EXISTS", "ex:gone"}), ":0\r\n");
  EXPECT_EQ(ask({"SET", "ex:gone", "x"}), "+OK\r\n");
  EXPECT_EQ(ask({"PEXPIREAT", "ex:gone", "1"}), ":1\r\n");
  EXPECT_EQ(ask({"GET", "ex:gone"}), "$-1\r\n");
  EXPECT_EQ(ask({"SET", "ex:gone", "x", "EXAT", "1"}), "+OK\r\n");
  EXPECT_EQ(ask({"GET", "ex:gone"}), "$-1\r\n");
  // GETEX: the value, then the deadline as asked.
  EXPECT_EQ(ask({"GETEX", "ex:k"}), "$2\r\nv2\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:k", "EX", "70"}), "$2\r\nv2\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":70\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:k", "PERSIST"}), "$2\r\nv2\r\n");
  EXPECT_EQ(ask({"TTL", "ex:k"}), ":-1\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:none", "EX", "1"}), "$-1\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:k", "EX", "0"}), "-ERR invalid expire time in 'getex' command\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:k", "PERSIST", "EX", "1"}), "-ERR syntax error\r\n");
  EXPECT_EQ(ask({"GETEX", "ex:k", "SOON"}), "-ERR syntax error\r\n");
  // INCR and APPEND keep a deadline; GETSET and DEL do not.
  EXPECT_EQ(ask({"SET", "ex:n", "1", "EX", "100"}), "+OK\r\n");
  EXPECT_EQ(ask({"INCR", "ex:n"}), ":2\r\n");
  EXPECT_EQ(ask({"APPEND", "ex:n", "0"}), ":2\r\n");
  EXPECT_EQ(ask({"TTL", "ex:n"}), ":100\r\n");
  EXPECT_EQ(ask({"GETSET", "ex:n", "5"}), "$2\r\n20\r\n");
  EXPECT_EQ(ask({"TTL", "ex:n"}), ":-1\r\n");
  EXPECT_EQ(ask({"SETEX", "ex:n", "100", "6"}), "+OK\r\n");
  EXPECT_EQ(ask({"DEL", "ex:n"}), ":1\r\n");
  EXPECT_EQ(ask({"SET", "ex:n", "7"}), "+OK\r\n");
  EXPECT_EQ(ask({"TTL", "ex:n"}), ":-1\r\n");
  // COMMAND knows them.
  const std::string list = ask({"COMMAND", "LIST"});
  for (const char* name : {"setex", "psetex", "expire", "pexpire", "expireat", "pexpireat", "ttl",
                           "pttl", "expiretime", "pexpiretime", "persist", "getex"})
    EXPECT_NE(list.find("\r\n" + std::string(name) + "\r\n"), std::string::npos) << name;
  EXPECT_EQ(ask({"COMMAND", "COUNT"}), ":149\r\n");
  EXPECT_EQ(ask({"COMMAND", "INFO", "pexpire", "nosuch"}),
            "*2\r\n*7\r\n$7\r\npexpire\r\n:-3\r\n*1\r\n+write\r\n:1\r\n:1\r\n:1\r\n*0\r\n$-1\r\n");
}

// A key with a 200 ms deadline is gone a second later; keys nobody touches
// again are removed by the gateway's sweeps (INFO's expired_keys counts
// them) within a deadline.
TEST_F(RespJobTest, ExpiredKeysAreGoneAndSweptWithoutBeingTouched) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto expired_keys = [&c] {
    c.send(request({"INFO", "stats"}));
    const std::string got = c.receive("\r\n\r\n\r\n");
    const size_t at = got.find("expired_keys:");
    return at == std::string::npos ? -1 : std::stoll(got.substr(at + 13));
  };
  const int64_t before = expired_keys();
  ASSERT_GE(before, 0);
  c.send(request({"SET", "short", "v", "PX", "200"}) + request({"GET", "short"}));
  EXPECT_EQ(c.receive("$1\r\nv\r\n"), "+OK\r\n$1\r\nv\r\n");
  std::string sets, want;
  for (int i = 0; i < 20; ++i) {
    sets += request({"SET", "swept:" + std::to_string(i), "v", "PX", "100"});
    want += "+OK\r\n";
  }
  c.send(sets);
  EXPECT_EQ(c.receive(want), want);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // (the time that must pass)
  c.send(request({"GET", "short"}));
  EXPECT_EQ(c.receive("\r\n"), "$-1\r\n");
  // The sweeps run on their own: wait for them, with a deadline.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t now = before;
  while (now < before + 20 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = expired_keys();
  }
  EXPECT_GE(now, before + 20) << "the sweeps did not remove the 20 expired keys";
}

// The hash commands on one key each, as Redis 7 answers them (WRONGTYPE both
// ways, its errors and arities); the history they leave is checked with the
// rest by porcupine (the last test).
TEST_F(RespJobTest, TheHashCommandsAnswerAsRedisDoes) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto ask = [&c](const std::vector<std::string>& args) { return reply(c, args); };
  const std::string wrongtype =
      "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
  EXPECT_EQ(ask({"HSET", "hj:h", "b", "2", "a", "1", "b", "3"}), ":2\r\n");
  EXPECT_EQ(ask({"HMSET", "hj:h", "c", "x"}), "+OK\r\n");
  EXPECT_EQ(ask({"HGET", "hj:h", "b"}), "$1\r\n3\r\n");
  EXPECT_EQ(ask({"HGET", "hj:h", "none"}), "$-1\r\n");
  EXPECT_EQ(ask({"HMGET", "hj:h", "a", "none", "c"}), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\nx\r\n");
  EXPECT_EQ(ask({"HGETALL", "hj:h"}),
            "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n3\r\n$1\r\nc\r\n$1\r\nx\r\n");
  EXPECT_EQ(ask({"HKEYS", "hj:h"}), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
  EXPECT_EQ(ask({"HVALS", "hj:h"}), "*3\r\n$1\r\n1\r\n$1\r\n3\r\n$1\r\nx\r\n");
  EXPECT_EQ(ask({"HGETALL", "hj:none"}), "*0\r\n");
  EXPECT_EQ(ask({"HLEN", "hj:h"}), ":3\r\n");
  EXPECT_EQ(ask({"HEXISTS", "hj:h", "a"}), ":1\r\n");
  EXPECT_EQ(ask({"HEXISTS", "hj:h", "none"}), ":0\r\n");
  EXPECT_EQ(ask({"HSTRLEN", "hj:h", "c"}), ":1\r\n");
  EXPECT_EQ(ask({"HSTRLEN", "hj:none", "c"}), ":0\r\n");
  EXPECT_EQ(ask({"HSETNX", "hj:h", "a", "new"}), ":0\r\n");
  EXPECT_EQ(ask({"HSETNX", "hj:h", "d", "4"}), ":1\r\n");
  EXPECT_EQ(ask({"HINCRBY", "hj:h", "d", "-10"}), ":-6\r\n");
  EXPECT_EQ(ask({"HINCRBY", "hj:h", "c", "1"}), "-ERR hash value is not an integer\r\n");
  EXPECT_EQ(ask({"HINCRBY", "hj:h", "d", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(ask({"HSET", "hj:h", "big", "9223372036854775807"}), ":1\r\n");
  EXPECT_EQ(ask({"HINCRBY", "hj:h", "big", "1"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(ask({"HINCRBYFLOAT", "hj:h", "f", "10.5"}), "$4\r\n10.5\r\n");
  EXPECT_EQ(ask({"HINCRBYFLOAT", "hj:h", "f", "0.1"}), "$4\r\n10.6\r\n");
  EXPECT_EQ(ask({"HINCRBYFLOAT", "hj:h", "c", "1"}), "-ERR hash value is not a float\r\n");
  EXPECT_EQ(ask({"HINCRBYFLOAT", "hj:h", "f", "x"}), "-ERR value is not a valid float\r\n");
  EXPECT_EQ(ask({"HDEL", "hj:h", "a", "none", "a"}), ":1\r\n");
  EXPECT_EQ(ask({"TYPE", "hj:h"}), "+hash\r\n");
  EXPECT_EQ(ask({"EXISTS", "hj:h", "hj:none"}), ":1\r\n");
  // WRONGTYPE both ways; SETNX and MGET answer as for any present key.
  EXPECT_EQ(ask({"GET", "hj:h"}), wrongtype);
  EXPECT_EQ(ask({"INCR", "hj:h"}), wrongtype);
  EXPECT_EQ(ask({"APPEND", "hj:h", "x"}), wrongtype);
  EXPECT_EQ(ask({"STRLEN", "hj:h"}), wrongtype);
  EXPECT_EQ(ask({"GETSET", "hj:h", "x"}), wrongtype);
  EXPECT_EQ(ask({"SET", "hj:h", "x", "XX", "GET"}), wrongtype);
  EXPECT_EQ(ask({"SETNX", "hj:h", "x"}), ":0\r\n");
  EXPECT_EQ(ask({"MGET", "hj:h"}), "*1\r\n$-1\r\n");
  EXPECT_EQ(ask({"SET", "hj:s", "v"}), "+OK\r\n");
  EXPECT_EQ(ask({"HSET", "hj:s", "f", "v"}), wrongtype);
  EXPECT_EQ(ask({"HGET", "hj:s", "f"}), wrongtype);
  EXPECT_EQ(ask({"HGETALL", "hj:s"}), wrongtype);
  EXPECT_EQ(ask({"HLEN", "hj:s"}), wrongtype);
  EXPECT_EQ(ask({"HDEL", "hj:s", "f"}), wrongtype);
  EXPECT_EQ(ask({"HINCRBY", "hj:s", "f", "1"}), wrongtype);
  // SET replaces a hash; its last field's HDEL removes it.
  EXPECT_EQ(ask({"SET", "hj:h", "now a string"}), "+OK\r\n");
  EXPECT_EQ(ask({"GET", "hj:h"}), "$12\r\nnow a string\r\n");
  EXPECT_EQ(ask({"HSET", "hj:one", "f", "v"}), ":1\r\n");
  EXPECT_EQ(ask({"HDEL", "hj:one", "f"}), ":1\r\n");
  EXPECT_EQ(ask({"TYPE", "hj:one"}), "+none\r\n");
  for (const char* name : {"HSET", "HMSET", "HGET", "HMGET", "HDEL", "HLEN", "HGETALL", "HSETNX",
                           "HINCRBY", "HINCRBYFLOAT", "HSTRLEN", "HEXISTS"}) {
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(ch));
    EXPECT_EQ(ask({name}), "-ERR wrong number of arguments for '" + lower + "' command\r\n");
  }
  EXPECT_EQ(ask({"HSET", "hj:h", "f"}), "-ERR wrong number of arguments for 'hset' command\r\n");
  EXPECT_EQ(ask({"HSET", "hj:h", "f", "v", "g"}),
            "-ERR wrong number of arguments for 'hset' command\r\n");
}

// The list commands on one key each, as Redis 7 answers them (their errors,
// LPOP's and RPOP's count as Redis 6.2+; WRONGTYPE and arities:
// resp_keys_test.cc); the history they leave is checked with the rest by
// porcupine (the last test).
TEST_F(RespJobTest, TheListCommandsAnswerAsRedisDoes) {
  Conn c(port_);
  ASSERT_TRUE(c.ok());
  auto ask = [&c](const std::vector<std::string>& args) { return reply(c, args); };
  const std::string not_integer = "-ERR value is not an integer or out of range\r\n";
  EXPECT_EQ(ask({"LPUSH", "lj:l", "a", "b", "c"}), ":3\r\n");
  EXPECT_EQ(ask({"RPUSH", "lj:l", "x", ""}), ":5\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:l", "0", "-1"}),
            "*5\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nx\r\n$0\r\n\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:l", "-2", "100"}), "*2\r\n$1\r\nx\r\n$0\r\n\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:l", "3", "1"}), "*0\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:none", "0", "-1"}), "*0\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:l", "a", "1"}), not_integer);
  EXPECT_EQ(ask({"LLEN", "lj:l"}), ":5\r\n");
  EXPECT_EQ(ask({"LLEN", "lj:none"}), ":0\r\n");
  EXPECT_EQ(ask({"LINDEX", "lj:l", "-2"}), "$1\r\nx\r\n");
  EXPECT_EQ(ask({"LINDEX", "lj:l", "5"}), "$-1\r\n");
  EXPECT_EQ(ask({"LINDEX", "lj:none", "0"}), "$-1\r\n");
  EXPECT_EQ(ask({"LINDEX", "lj:l", "1.5"}), not_integer);
  EXPECT_EQ(ask({"LSET", "lj:l", "1", "B"}), "+OK\r\n");
  EXPECT_EQ(ask({"LSET", "lj:l", "5", "B"}), "-ERR index out of range\r\n");
  EXPECT_EQ(ask({"LSET", "lj:none", "0", "B"}), "-ERR no such key\r\n");
  EXPECT_EQ(ask({"LSET", "lj:l", "x", "B"}), not_integer);
  EXPECT_EQ(ask({"LPUSHX", "lj:none", "v"}), ":0\r\n");
  EXPECT_EQ(ask({"RPUSHX", "lj:l", "a", "a"}), ":7\r\n");
  EXPECT_EQ(ask({"LREM", "lj:l", "-2", "a"}), ":2\r\n");
  EXPECT_EQ(ask({"LREM", "lj:l", "0", "none"}), ":0\r\n");
  EXPECT_EQ(ask({"LREM", "lj:l", "x", "a"}), not_integer);
  EXPECT_EQ(ask({"LPOP", "lj:l"}), "$1\r\nc\r\n");
  EXPECT_EQ(ask({"RPOP", "lj:l", "2"}), "*2\r\n$0\r\n\r\n$1\r\nx\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:l", "0"}), "*0\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:l", "-1"}), "-ERR value is out of range, must be positive\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:l", "x"}), "-ERR value is out of range, must be positive\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:none"}), "$-1\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:none", "2"}), "*-1\r\n");
  EXPECT_EQ(ask({"LPOP", "lj:none", "0"}), "*-1\r\n");
  EXPECT_EQ(ask({"LTRIM", "lj:l", "1", "-1"}), "+OK\r\n");
  EXPECT_EQ(ask({"LRANGE", "lj:l", "0", "-1"}), "*1\r\n$1\r\na\r\n");
  EXPECT_EQ(ask({"LTRIM", "lj:none", "0", "1"}), "+OK\r\n");
  EXPECT_EQ(ask({"LTRIM", "lj:l", "0", "y"}), not_integer);
  EXPECT_EQ(ask({"TYPE", "lj:l"}), "+list\r\n");
  EXPECT_EQ(ask({"EXISTS", "lj:l", "lj:none"}), ":1\r\n");
  // SET replaces a list; its last element's pop removes it.
  EXPECT_EQ(ask({"SET", "lj:l", "now a string"}), "+OK\r\n");
  EXPECT_EQ(ask({"GET", "lj:l"}), "$12\r\nnow a string\r\n");
  EXPECT_EQ(ask({"RPUSH", "lj:one", "v"}), ":1\r\n");
  EXPECT_EQ(ask({"RPOP", "lj:one"}), "$1\r\nv\r\n");
  EXPECT_EQ(ask({"TYPE", "lj:one"}), "+none\r\n");
}

// Last (gtest runs a suite's tests in the order they are defined): SHUTDOWN ends the job, which
// must pass its own checks, and porcupine must find the history linearizable.
TEST_F(RespJobTest, ShutdownEndsTheJobWithItsChecksPassed) {
  Conn c(port_);
  c.send(request({"SHUTDOWN"}));
  EXPECT_EQ(c.receive("+OK\r\n"), "+OK\r\n");
  const auto status = job_->finish(std::chrono::seconds(60));
  const std::string& output = job_->output();
  ASSERT_TRUE(status.has_value()) << "the job did not end after SHUTDOWN\n" << output;
  EXPECT_EQ(status->exit_code, 0) << output;
  // (The gateway keeps no history, so the job checks counts and sums;
  // porcupine checks the history it streamed to its file.)
  EXPECT_EQ(sluice::testing::count_lines_with(
                output, "job: every operation completed exactly once; replicas identical"),
            1)
      << output;
  EXPECT_NE(output.find("possible SECURITY ATTACK"), std::string::npos)
      << "the cross-protocol request was logged\n"
      << output;
  EXPECT_NE(output.find("clients: 2 RESP gateway clients completed"), std::string::npos) << output;
  const ProcessResult p =
      run_process({SLUICE_KV_PORCUPINE, history_file()}, {}, std::chrono::seconds(120));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("kv-porcupine: linearizable"), std::string::npos) << p.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  // Several gateways write a file each (FILE.<rank>), which kv-porcupine
  // checks as one history: the same history cut in two gives the same
  // verdict over the same operations.
  std::ifstream in(history_file());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GT(lines.size(), 100u);
  const std::string a = history_file() + ".3", b = history_file() + ".4";
  {
    std::ofstream fa(a), fb(b);
    for (size_t i = 0; i < lines.size(); ++i) (i % 2 ? fb : fa) << lines[i] << '\n';
  }
  const ProcessResult split =
      run_process({SLUICE_KV_PORCUPINE, a, b}, {}, std::chrono::seconds(120));
  EXPECT_EQ(split.exit_code, 0) << split.output;
  // (A sweep's line is one operation per key it removed: the checker
  // counts every other line once, and the sweeps' keys, 20 of them at least
  // from ExpiredKeysAreGoneAndSweptWithoutBeingTouched.)
  size_t sweeps = 0;
  for (const std::string& l : lines)
    if (l.find("\"op\":\"sweep\"") != std::string::npos) ++sweeps;
  EXPECT_GT(sweeps, 0u) << "the expiry tests' keys were swept";
  const std::string verdict = "linearizable (";
  const size_t at = p.output.find(verdict);
  ASSERT_NE(at, std::string::npos) << p.output;
  const size_t ops = std::stoull(p.output.substr(at + verdict.size()));
  EXPECT_GE(ops, lines.size() - sweeps + 20) << p.output;
  EXPECT_NE(split.output.find(verdict + std::to_string(ops) + " operations"), std::string::npos)
      << split.output;
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

}  // namespace
