// The RESP front end facing clients it must not trust (sluice-kv run
// --resp-port): Redis's safe defaults and the limits on every buffer a
// client can fill, each tried with a hostile client.
//
//   - A port in use ends the whole job at once with an error naming it.
//   - A job with --requirepass-file and small limits: NOAUTH before AUTH,
//     WRONGPASS, SHUTDOWN disabled by default, --maxclients, --maxmemory's
//     OOM (of strings, a hash's fields, a list's elements and a set's members; inside MULTI
//     at once while the store is full, EXEC then aborting), a bulk over
//     --proto-max-bulk-len
//     refused from its header, 200 connections each holding most of a big request (closed once all
//     clients' buffers pass --maxmemory-clients; the gateway's memory stays bounded), a client that
//     never reads (closed past
//     --client-output-buffer-limit). The job ends with SIGTERM to the
//     launcher, leaving no process and no /dev/shm object.
//   - Protected mode across network namespaces (root only; skipped with the
//     reason otherwise): a gateway bound to every interface without a
//     password refuses a client from another host (-DENIED) and serves one
//     on loopback.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multihost/netns.h"
#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

using kv::testing::Clock;
using kv::testing::Conn;
using kv::testing::request;
using kv::testing::RespJob;
using kv::testing::rss_kib;
using namespace std::chrono_literals;

// A port another process holds is a clear error, and the whole job ends at
// once with a non-zero status (not only the gateway's rank, with the
// replicas left to the launcher's grace period).
TEST(RespExposureTest, APortInUseEndsTheWholeJobWithAnErrorNamingIt) {
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(held, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(held, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const auto started = Clock::now();
  const sluice::proc::ProcessResult r = sluice::testing::run_process(
      sluice::testing::job_argv(4, 120, "sluice-kv", {"run", "--resp-port", port}), {},
      std::chrono::seconds(120));
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ::close(held);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.output.find("cannot listen on 127.0.0.1 port " + port + ": Address already in use"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("a RESP gateway could not start, so the job ends"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("grace"), std::string::npos)
      << "no rank should be left for the launcher to stop\n"
      << r.output;
  std::printf("the job ended %.1f s after it started\n", seconds);
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

constexpr const char* kPassword = "s3cret pass";

// One job for the suite: a password, and limits small enough to reach.
class RespLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    password_file_ = ::testing::TempDir() + "kv-requirepass";
    std::FILE* f = std::fopen(password_file_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "%s\n", kPassword);
    std::fclose(f);
    job_ = new RespJob(
        4, {"--resp-port", "0", "--requirepass-file", password_file_, "--maxclients", "250",
            "--maxmemory", "64kb", "--maxmemory-clients", "4mb", "--client-query-buffer-limit",
            "256kb", "--proto-max-bulk-len", "128kb", "--client-output-buffer-limit", "256kb"});
  }
  static void TearDownTestSuite() {
    delete job_;
    std::remove(password_file_.c_str());
  }
  void SetUp() override {
    ASSERT_NE(job_->port(), 0) << "the job did not start a gateway:\n" << job_->output();
  }

  // A connection that has passed AUTH.
  static std::unique_ptr<Conn> authed() {
    auto c = std::make_unique<Conn>(job_->port());
    c->send(request({"AUTH", kPassword}));
    EXPECT_EQ(c->receive("\r\n"), "+OK\r\n");
    return c;
  }

  static inline RespJob* job_ = nullptr;
  static inline std::string password_file_;
};

TEST_F(RespLimitsTest, NothingButAuthIsServedBeforeTheRightPassword) {
  Conn c(job_->port());
  c.send(request({"SET", "k", "v"}) + request({"GET", "k"}) + request({"AUTH", "wrong"}) +
         request({"AUTH", "someone", kPassword}) + request({"PING"}));
  const std::string noauth = "-NOAUTH Authentication required.\r\n";
  const std::string wrongpass =
      "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
  EXPECT_EQ(c.receive(noauth + noauth + wrongpass + wrongpass + noauth),
            noauth + noauth + wrongpass + wrongpass + noauth);
  c.send(request({"AUTH", "default", kPassword}) + request({"SET", "k", "v"}) +
         request({"GET", "k"}));
  EXPECT_EQ(c.receive("$1\r\nv\r\n"), "+OK\r\n+OK\r\n$1\r\nv\r\n");
  // A wrong password once authenticated leaves the connection as it was
  // (redis-server 7.0: WRONGPASS, and the next GET is served).
  c.send(request({"AUTH", "wrong"}) + request({"GET", "k"}));
  EXPECT_EQ(c.receive("$1\r\nv\r\n"), wrongpass + "$1\r\nv\r\n");
}

// redis-py with the password (AUTH first), and without it or with a wrong
// one (refused): tests/kv/redis_py_client.py.
TEST_F(RespLimitsTest, RedisPyAuthenticatesWithThePassword) {
  const sluice::proc::ProcessResult r = sluice::testing::run_process(
      {SLUICE_KV_PYTHON, SLUICE_KV_REDIS_PY, std::to_string(job_->port()), kPassword}, {},
      std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("redis-py: all "), std::string::npos) << r.output;
}

// HELLO can authenticate (HELLO 2 AUTH default PASS); without it, HELLO
// before AUTH is refused.
TEST_F(RespLimitsTest, HelloAuthenticatesOrIsRefusedBeforeAuth) {
  Conn c(job_->port());
  c.send(request({"HELLO", "2"}) + request({"HELLO", "2", "AUTH", "default", "wrong"}) +
         request({"HELLO", "2", "AUTH", "default", kPassword}) + request({"PING"}));
  const std::string got = c.receive("+PONG\r\n");
  EXPECT_EQ(got.rfind("-NOAUTH HELLO must be called with the client already authenticated", 0), 0u)
      << got;
  EXPECT_NE(got.find("-WRONGPASS invalid username-password pair"), std::string::npos) << got;
  EXPECT_NE(got.find("*14\r\n$6\r\nserver\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("+PONG\r\n"), std::string::npos) << got;
}

TEST_F(RespLimitsTest, ShutdownIsRefusedUnlessEnabled) {
  auto c = authed();
  c->send(request({"SHUTDOWN"}) + request({"PING"}));
  EXPECT_EQ(c->receive("+PONG\r\n"),
            "-ERR SHUTDOWN is disabled on this server (start it with --enable-shutdown local or "
            "yes)\r\n+PONG\r\n");
}

TEST_F(RespLimitsTest, WritesPastMaxmemoryGetOomAndDeletesMakeRoom) {
  auto c = authed();
  // 64 KiB holds about 230 keys of 8 + 128 bytes (and 144 of overhead each;
  // earlier tests of the suite hold some of it).
  const std::string value(128, 'm');
  std::string pipeline;
  for (int i = 0; i < 400; ++i)
    pipeline += request({"SET", "mem:" + std::to_string(1000 + i), value});
  c->send(pipeline);
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  std::string got;
  for (int replies = 0; replies < 400;) {
    const std::string more = c->receive("\r\n");
    ASSERT_FALSE(more.empty()) << "replies stopped after " << replies;
    got += more;
    replies = 0;
    for (size_t at = got.find("\r\n"); at != std::string::npos; at = got.find("\r\n", at + 2))
      ++replies;
  }
  size_t ok = 0, refused = 0;
  for (size_t at = 0; at < got.size();) {
    const size_t end = got.find("\r\n", at) + 2;
    const std::string line = got.substr(at, end - at);
    ok += line == "+OK\r\n";
    refused += line == oom;
    at = end;
  }
  EXPECT_EQ(ok + refused, 400u) << got.substr(0, 400);
  EXPECT_GT(refused, 100u);
  EXPECT_GT(ok, 150u);
  // The refused ones took no effect; a get and a delete always run, and a
  // delete makes room for a write again.
  c->send(request({"GET", "mem:1399"}) + request({"DEL", "mem:1000", "mem:1001"}) +
          request({"SET", "mem:1399", "x"}) + request({"GET", "mem:1399"}));
  EXPECT_EQ(c->receive("$1\r\nx\r\n"), "$-1\r\n:2\r\n+OK\r\n$1\r\nx\r\n");
}

// A hostile client's HSETs fill the store field by field (each field counts
// its bytes and 96 of overhead): those past --maxmemory get OOM and take no
// effect (the hash holds exactly the fields answered :1), reads and HDEL
// always run, and an HDEL makes room for an HSET again.
TEST_F(RespLimitsTest, HashWritesPastMaxmemoryGetOomAndChangeNothing) {
  auto c = authed();
  // (Room: the test before left the store full.)
  std::vector<std::string> del = {"DEL"};
  for (int i = 0; i < 60; ++i) del.push_back("mem:" + std::to_string(1000 + i));
  c->send(request(del) + request({"PING"}));
  ASSERT_NE(c->receive("+PONG\r\n").find("+PONG\r\n"), std::string::npos);
  const std::string value(128, 'h');
  std::string pipeline;
  for (int i = 0; i < 300; ++i)
    pipeline += request({"HSET", "hmem:h", "f" + std::to_string(1000 + i), value});
  c->send(pipeline + request({"PING"}));
  const std::string got = c->receive("+PONG\r\n");
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  size_t added = 0, refused = 0;
  for (size_t at = 0; at < got.size();) {
    const size_t end = got.find("\r\n", at) + 2;
    const std::string line = got.substr(at, end - at);
    added += line == ":1\r\n";
    refused += line == oom;
    at = end;
  }
  EXPECT_EQ(added + refused, 300u) << got.substr(0, 400);
  EXPECT_GT(added, 10u);
  EXPECT_GT(refused, 100u);
  c->send(request({"HLEN", "hmem:h"}) + request({"HDEL", "hmem:h", "f1000", "f1001"}) +
          request({"HSET", "hmem:h", "again", "x"}) + request({"HGET", "hmem:h", "again"}));
  EXPECT_EQ(c->receive("$1\r\nx\r\n"), ":" + std::to_string(added) + "\r\n:2\r\n:1\r\n$1\r\nx\r\n");
  c->send(request({"DEL", "hmem:h"}));
  EXPECT_EQ(c->receive("\r\n"), ":1\r\n");
}

// A hostile client's pipelined RPUSHes fill the store element by element
// (each element counts its bytes and 48 of overhead): those past --maxmemory
// get OOM and take no effect (the list holds exactly the elements of the
// pushes answered with a length, in order), reads and pops always run, and
// an LPOP makes room for a push again.
TEST_F(RespLimitsTest, ListPushesPastMaxmemoryGetOomAndChangeNothing) {
  auto c = authed();
  const std::string value(128, 'l');
  std::string pipeline;
  for (int i = 0; i < 300; ++i) pipeline += request({"RPUSH", "lmem:l", value});
  c->send(pipeline + request({"PING"}));
  const std::string got = c->receive("+PONG\r\n");
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  size_t pushed = 0, refused = 0;
  for (size_t at = 0; at < got.size();) {
    const size_t end = got.find("\r\n", at) + 2;
    const std::string line = got.substr(at, end - at);
    if (line == ":" + std::to_string(pushed + 1) + "\r\n") ++pushed;
    refused += line == oom;
    at = end;
  }
  EXPECT_EQ(pushed + refused, 300u) << got.substr(0, 400);
  EXPECT_GT(pushed, 10u);
  EXPECT_GT(refused, 100u);
  c->send(request({"LLEN", "lmem:l"}) + request({"LPOP", "lmem:l", "2"}) +
          request({"RPUSH", "lmem:l", "again"}) + request({"RPOP", "lmem:l"}));
  EXPECT_EQ(c->receive("$5\r\nagain\r\n"),
            ":" + std::to_string(pushed) + "\r\n*2\r\n$128\r\n" + value + "\r\n$128\r\n" + value +
                "\r\n:" + std::to_string(pushed - 1) + "\r\n$5\r\nagain\r\n");
  c->send(request({"DEL", "lmem:l"}));
  EXPECT_EQ(c->receive("\r\n"), ":1\r\n");
}

// A hostile client's pipelined SADDs fill the store member by member (each
// member counts its bytes and 64 of overhead): those past --maxmemory get
// OOM and take no effect (the set holds exactly the members of the SADDs
// answered :1), an SADD of a member it holds, reads and SPOP always run,
// and an SPOP makes room for an SADD again.
TEST_F(RespLimitsTest, SetAddsPastMaxmemoryGetOomAndChangeNothing) {
  auto c = authed();
  const std::string value(128, 's');
  std::string pipeline;
  for (int i = 0; i < 300; ++i)
    pipeline += request({"SADD", "smem:s", std::to_string(1000 + i) + value});
  c->send(pipeline + request({"PING"}));
  const std::string got = c->receive("+PONG\r\n");
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  size_t added = 0, refused = 0;
  std::vector<std::string> members;
  for (size_t at = 0, i = 0; at < got.size(); ++i) {
    const size_t end = got.find("\r\n", at) + 2;
    const std::string line = got.substr(at, end - at);
    if (line == ":1\r\n") {
      ++added;
      members.push_back(std::to_string(1000 + i) + value);
    }
    refused += line == oom;
    at = end;
  }
  EXPECT_EQ(added + refused, 300u) << got.substr(0, 400);
  EXPECT_GT(added, 10u);
  EXPECT_GT(refused, 100u);
  std::string all = "*" + std::to_string(members.size()) + "\r\n";
  for (const std::string& m : members) all += "$" + std::to_string(m.size()) + "\r\n" + m + "\r\n";
  c->send(request({"SMEMBERS", "smem:s"}) + request({"SADD", "smem:s", members.front()}) +
          request({"SPOP", "smem:s", "2"}) + request({"SADD", "smem:s", "again"}) +
          request({"SCARD", "smem:s"}));
  const std::string after = c->receive(":" + std::to_string(added - 1) + "\r\n");
  EXPECT_EQ(after.substr(0, all.size()), all) << "exactly the members answered :1, in byte order";
  EXPECT_EQ(after.substr(all.size(), 4), ":0\r\n");
  EXPECT_NE(after.find(":1\r\n:" + std::to_string(added - 1) + "\r\n"), std::string::npos) << after;
  c->send(request({"DEL", "smem:s"}));
  EXPECT_EQ(c->receive("\r\n"), ":1\r\n");
}

// Once the store is full (a write refused for --maxmemory), every command
// queued in MULTI but EXEC, DISCARD and QUIT gets -OOM at once (MULTI and
// WATCH too; an unknown command its own error first) and EXEC aborts, as
// redis-server 7.0 answers with its maxmemory reached; a delete makes room
// and commands are queued again, and an EXEC whose transaction the store
// then refuses whole for maxmemory is discarded saying why, as Redis's EXEC
// refused for maxmemory is.
TEST_F(RespLimitsTest, CommandsQueuedWhileTheStoreIsFullGetOomAndExecAborts) {
  auto c = authed();
  {
    // (Room first: the earlier tests filled the store to its maxmemory.)
    std::vector<std::string> del = {"DEL"};
    for (int i = 0; i < 400; ++i) del.push_back("mem:" + std::to_string(1000 + i));
    c->send(request(del));
    EXPECT_EQ(c->receive("\r\n")[0], ':');
  }
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  const std::string value(4000, 'f');
  std::string got;
  std::vector<std::string> keys = {"DEL"};
  for (int i = 0; i < 100 && got != oom; ++i) {
    keys.push_back("full:" + std::to_string(i));
    c->send(request({"SET", keys.back(), value}));
    got = c->receive("\r\n");
  }
  ASSERT_EQ(got, oom);
  ASSERT_GE(keys.size(), 5u);
  c->send(request({"MULTI"}) + request({"SET", "full:q", "v"}) + request({"GET", "full:q"}) +
          request({"NOSUCH"}) + request({"MULTI"}) + request({"WATCH", "x"}) + request({"EXEC"}) +
          request({"MULTI"}) + request({"DISCARD"}));
  EXPECT_EQ(c->receive("previous errors.\r\n+OK\r\n+OK\r\n"),
            "+OK\r\n" + oom + oom +
                "-ERR unknown command 'NOSUCH', with args beginning with: \r\n" + oom + oom +
                "-EXECABORT Transaction discarded because of previous errors.\r\n" +
                "+OK\r\n+OK\r\n");
  // (Each step waits for the one before: the gateway learns how full the
  // store is from what the log answers.)
  c->send(request({"DEL", keys[1], keys[2], keys[3]}));
  EXPECT_EQ(c->receive("\r\n"), ":3\r\n");
  c->send(request({"MULTI"}) + request({"SET", "full:q", "v"}) +
          request({"SET", "full:big", std::string(20000, 'b')}) + request({"EXEC"}) +
          request({"EXISTS", "full:q"}));
  EXPECT_EQ(c->receive("\r\n:0\r\n"),
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of: OOM "
            "command not allowed when used memory > 'maxmemory'.\r\n:0\r\n");
  c->send(request(keys));
  EXPECT_NE(c->receive("\r\n")[0], '-');
}

TEST_F(RespLimitsTest, ABulkOverTheLimitIsRefusedFromItsHeader) {
  auto c = authed();
  c->send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000\r\n");
  bool closed = false;
  const std::string got = c->receive("\r\n", &closed);
  EXPECT_EQ(got,
            "-ERR Protocol error: invalid bulk length: 200000 bytes is over the limit of "
            "131072\r\n");
  c->receive("never", &closed, 5s);
  EXPECT_TRUE(closed);
}

TEST_F(RespLimitsTest, MaxclientsRefusesTheConnectionsPastIt) {
  // One at a time, each answered (NOAUTH is an answer) before the next, until
  // one is refused; the earlier tests' connections may take a moment to go.
  std::vector<std::unique_ptr<Conn>> conns;
  std::string refusal;
  bool closed = false;
  while (conns.size() < 260 && refusal.empty()) {
    conns.push_back(std::make_unique<Conn>(job_->port()));
    ASSERT_TRUE(conns.back()->ok()) << conns.size();
    conns.back()->send(request({"PING"}));
    const std::string got = conns.back()->receive("\r\n", &closed);
    if (got != "-NOAUTH Authentication required.\r\n") refusal = got;
  }
  EXPECT_EQ(refusal, "-ERR max number of clients reached\r\n");
  EXPECT_GE(conns.size(), 246u);
  EXPECT_LE(conns.size(), 251u) << "--maxclients 250";
  conns.back()->receive("never", &closed, 5s);
  EXPECT_TRUE(closed) << "a refused client is closed";
  conns.clear();
  // Once they are gone, new clients are served again.
  for (int tries = 0; tries < 50; ++tries) {
    Conn again(job_->port());
    again.send(request({"AUTH", kPassword}));
    if (again.receive("\r\n") == "+OK\r\n") return;
    std::this_thread::sleep_for(100ms);
  }
  ADD_FAILURE() << "no connection was served after the others closed";
}

// 200 clients each send most of a 250 KiB request and stop: 50 MB of input
// against a gateway that keeps at most 4 MB for all clients. Those with the
// most buffered are closed, the gateway's memory stays bounded, and a
// well-behaved client is served meanwhile.
TEST_F(RespLimitsTest, ClientsHoldingBigUnfinishedRequestsAreEvictedAndMemoryStaysBounded) {
  ASSERT_NE(job_->pid(), 0);
  const uint64_t before = rss_kib(job_->pid());
  // (Two bulks of 120000, under the 128 KiB argument limit; the request
  // stays under the 256 KiB query limit, so only the total can stop it.)
  const std::string partial = "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$120000\r\n" +
                              std::string(120000, 'y') + "\r\n$120000\r\n" +
                              std::string(119000, 'z');
  std::vector<std::unique_ptr<Conn>> hostile;
  for (int i = 0; i < 200; ++i) {
    hostile.push_back(std::make_unique<Conn>(job_->port()));
    hostile.back()->send(request({"AUTH", kPassword}));
    hostile.back()->send(partial);
  }
  std::this_thread::sleep_for(1s);
  const uint64_t during = rss_kib(job_->pid());
  auto c = authed();
  c->send(request({"SET", "evict:ok", "1"}) + request({"GET", "evict:ok"}));
  EXPECT_EQ(c->receive("$1\r\n1\r\n"), "+OK\r\n$1\r\n1\r\n");
  size_t closed_count = 0;
  for (auto& h : hostile) {
    bool closed = false;
    h->receive("never", &closed, 50ms);
    closed_count += closed;
  }
  EXPECT_GT(closed_count, 150u) << "4 MB holds about 17 of these clients' buffers";
#if !defined(SLUICE_SANITIZED)
  // (Not under the sanitizers: AddressSanitizer keeps freed memory in its
  // quarantine, so a sanitized gateway's RSS grows with what it freed.)
  EXPECT_LT(during, before + 16 * 1024)
      << "the gateway grew from " << before << " to " << during << " KiB";
#endif
  std::printf("gateway RSS %llu KiB before, %llu KiB with 200 hostile clients (%zu closed)\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(during),
              closed_count);
}

// A client that pipelines without ever reading: once its unsent replies
// pass the output limit it is closed; others are served.
TEST_F(RespLimitsTest, AClientThatNeverReadsIsClosedPastTheOutputLimit) {
  {
    // (Room first: an earlier test filled the store to its maxmemory.)
    auto setup = authed();
    std::vector<std::string> del = {"DEL"};
    for (int i = 0; i < 400; ++i) del.push_back("mem:" + std::to_string(1000 + i));
    setup->send(request(del) + request({"SET", "out:big", std::string(200, 'o')}));
    const std::string got = setup->receive("+OK\r\n");
    EXPECT_NE(got.find("+OK\r\n"), std::string::npos) << got;
  }
  auto greedy = authed();
  std::string gets;
  for (int i = 0; i < 2000; ++i) gets += request({"GET", "out:big"});
  const size_t sent = greedy->flood(gets, size_t{256} << 20, 2s);
  EXPECT_LT(sent, size_t{128} << 20) << "the gateway kept reading a peer that never reads";
  bool closed = false;
  for (auto end = Clock::now() + 20s; !closed && Clock::now() < end;)
    greedy->receive("never", &closed, 1s);
  EXPECT_TRUE(closed) << "a client past --client-output-buffer-limit is closed";
  auto other = authed();
  other->send(request({"PING"}));
  EXPECT_EQ(other->receive("\r\n"), "+PONG\r\n");
}

// Last: SIGTERM to the launcher ends the job (SHUTDOWN is disabled), with
// nothing left behind.
TEST_F(RespLimitsTest, SigtermEndsTheJobWithNothingLeftBehind) {
  ::kill(job_->process().pid(), SIGTERM);  // (the launcher alone, as a user's kill would)
  const auto status = job_->finish(60s);
  ASSERT_TRUE(status.has_value()) << "the job did not end after SIGTERM\n" << job_->output();
  // (What the gateway logged of the hostile clients, for the test's log.)
  std::istringstream lines(job_->output());
  for (std::string line; std::getline(lines, line);)
    if (line.find("resp: ") != std::string::npos) std::printf("%s\n", line.c_str());
  EXPECT_NE(job_->output().find("closed the client with the most buffered"), std::string::npos)
      << job_->output();
  EXPECT_NE(job_->output().find("--client-output-buffer-limit"), std::string::npos)
      << job_->output();
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Without a password, a gateway bound to every interface serves loopback
// clients only (Redis's protected mode); a client on another host gets
// -DENIED. With a password it serves that client once it AUTHs.
TEST(RespProtectedModeTest, AClientFromAnotherHostIsDeniedWithoutAPassword) {
  std::string why;
  if (!sluice::testing::TestHosts::can_create(&why))
    GTEST_SKIP() << "needs network namespaces (root and iproute2): " << why;
  sluice::testing::TestHosts hosts(2);
  std::string redis_cli, error;
  int status = 0;
  if (auto p = sluice::proc::find_program("redis-cli", &error, &status)) redis_cli = *p;
  ASSERT_FALSE(redis_cli.empty()) << "redis-cli is missing: make test-tools installs redis-tools";
  for (const bool with_password : {false, true}) {
    std::vector<std::string> args = {"--resp-port",       "0",    "--resp-bind", "0.0.0.0",
                                     "--enable-shutdown", "local"};
    if (with_password) args.insert(args.end(), {"--requirepass", kPassword});
    RespJob job(4, args, {}, hosts.in_host(0, {}));
    ASSERT_NE(job.port(), 0) << job.output();
    EXPECT_NE(job.output().find("listens on every interface"), std::string::npos) << job.output();
    const std::string port = std::to_string(job.port());
    std::vector<std::string> remote = {redis_cli, "-h", hosts.ip(0), "-p", port};
    if (with_password) remote.insert(remote.end(), {"-a", kPassword, "--no-auth-warning"});
    remote.push_back("PING");
    const sluice::proc::ProcessResult far = hosts.run(1, remote, 30s);
    if (with_password) {
      EXPECT_NE(far.output.find("PONG"), std::string::npos) << far.output;
    } else {
      EXPECT_NE(far.output.find("DENIED"), std::string::npos) << far.output;
      EXPECT_EQ(far.output.find("PONG"), std::string::npos) << far.output;
    }
    std::vector<std::string> local = {redis_cli, "-p", port};
    if (with_password) local.insert(local.end(), {"-a", kPassword, "--no-auth-warning"});
    std::vector<std::string> ping = local;
    ping.push_back("PING");
    const sluice::proc::ProcessResult near = hosts.run(0, ping, 30s);
    EXPECT_NE(near.output.find("PONG"), std::string::npos) << near.output;
    local.push_back("SHUTDOWN");
    hosts.run(0, local, 30s);
    const auto end = job.finish(60s);
    ASSERT_TRUE(end.has_value()) << job.output();
    EXPECT_EQ(end->exit_code, 0) << job.output();
    if (!with_password) {
      EXPECT_NE(job.output().find("protected mode"), std::string::npos) << job.output();
    }
  }
}

}  // namespace
