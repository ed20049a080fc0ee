// The client library (apps/kv/kv_client.h) without a store: the RESP reply
// parser, and what each call returns against stand-in servers on loopback
// (one that answers as the gateway would, one that never answers, one that
// hangs up, one that sends garbage) and against a port where nothing
// listens. The library against the real replicated store is in
// resp_job_test.cc.
#include "kv_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "resp.h"

namespace kv {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

TEST(RespReplyTest, EveryKindParsesWholeAndWaitsForMoreWhenCut) {
  const std::string bytes =
      "+OK\r\n-ERR no\r\n:-42\r\n$5\r\na\r\nb\0\r\n$-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:7\r\n"s;
  std::vector<resp::Reply> got;
  size_t at = 0;
  while (at < bytes.size()) {
    resp::Reply r;
    size_t used = 0;
    std::string error;
    // Every proper prefix of the next reply is incomplete.
    for (size_t cut = at; cut < bytes.size(); ++cut) {
      resp::Reply partial;
      size_t u = 0;
      const resp::Parsed p =
          resp::parse_reply(std::string_view(bytes).substr(at, cut - at), &partial, &u, &error);
      if (p == resp::Parsed::kRequest) break;
      ASSERT_EQ(p, resp::Parsed::kIncomplete) << "at " << at << " cut " << cut << ": " << error;
    }
    ASSERT_EQ(resp::parse_reply(std::string_view(bytes).substr(at), &r, &used, &error),
              resp::Parsed::kRequest)
        << error;
    got.push_back(r);
    at += used;
  }
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].kind, resp::Reply::Kind::kSimple);
  EXPECT_EQ(got[0].text, "OK");
  EXPECT_EQ(got[1].kind, resp::Reply::Kind::kError);
  EXPECT_EQ(got[1].text, "ERR no");
  EXPECT_EQ(got[2].integer, -42);
  EXPECT_EQ(got[3].kind, resp::Reply::Kind::kBulk);
  EXPECT_EQ(got[3].text, std::string("a\r\nb\0", 5));
  EXPECT_EQ(got[4].kind, resp::Reply::Kind::kNull);
  ASSERT_EQ(got[5].items.size(), 2u);
  EXPECT_EQ(got[5].items[0].text, "x");
  ASSERT_EQ(got[5].items[1].items.size(), 1u);
  EXPECT_EQ(got[5].items[1].items[0].integer, 7);
}

TEST(RespReplyTest, GarbageIsAnError) {
  for (const std::string& bad :
       {std::string("?x\r\n"), std::string(":12a\r\n"), std::string("$-2\r\n"),
        std::string("$2\r\nabcd\r\n"), std::string("$99999999999\r\n"),
        std::string("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n")}) {
    resp::Reply r;
    size_t used = 0;
    std::string error;
    EXPECT_EQ(resp::parse_reply(bad, &r, &used, &error), resp::Parsed::kError) << bad;
    EXPECT_NE(error.find("Protocol error"), std::string::npos) << error;
  }
}

// A loopback server on its own thread: accepts one connection at a time and
// hands each to `serve` (which may answer, stay silent or hang up).
class StandIn {
 public:
  explicit StandIn(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        serve_(c);
        ::close(c);
      }
    });
  }
  ~StandIn() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  std::function<void(int)> serve_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Reads one request's bytes (whatever arrives within 2 s).
std::string read_some(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 2000) <= 0) return "";
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(KvClientTest, EachCallSendsItsCommandAndReadsItsReply) {
  std::vector<std::string> seen;
  StandIn server([&](int fd) {
    // The answers of GET (absent, then a value), SET, DEL, CAS, in order.
    for (const char* answer : {"$-1\r\n", "$3\r\nv\r\n\r\n", "+OK\r\n", ":1\r\n", ":0\r\n",
                               "-ERR sluice-kv takes keys and values of at most 256 bytes\r\n"}) {
      std::string req = read_some(fd);
      if (req.empty()) return;
      seen.push_back(req);
      ::send(fd, answer, std::strlen(answer), MSG_NOSIGNAL);
    }
  });
  KvClient kv("127.0.0.1", server.port());
  auto absent = kv.get("k", within(5s));
  ASSERT_TRUE(absent.ok()) << absent.error;
  EXPECT_FALSE(absent.value.has_value());
  auto got = kv.get("k", within(5s));
  ASSERT_TRUE(got.ok()) << got.error;
  EXPECT_EQ(got.value, std::optional<std::string>("v\r\n"));
  EXPECT_TRUE(kv.put("k", "v", within(5s)).value);
  EXPECT_TRUE(kv.del("k", within(5s)).value);
  auto cas = kv.cas("k", "a", "b", within(5s));
  ASSERT_TRUE(cas.ok());
  EXPECT_FALSE(cas.value);
  auto refused = kv.put("k", std::string(300, 'x'), within(5s));
  EXPECT_EQ(refused.status, CallStatus::kRefused);
  EXPECT_NE(refused.error.find("at most 256 bytes"), std::string::npos) << refused.error;
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[0], "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
  EXPECT_EQ(seen[4], "*4\r\n$3\r\nCAS\r\n$1\r\nk\r\n$1\r\na\r\n$1\r\nb\r\n");
}

TEST(KvClientTest, ASilentServerGivesTimeoutAndTheNextCallConnectsAgain) {
  std::atomic<int> connections{0};
  StandIn server([&](int fd) {
    // The first connection never gets an answer; the second does.
    if (connections++ == 0) {
      read_some(fd);
      while (read_some(fd) != "") {
      }
      return;
    }
    read_some(fd);
    ::send(fd, "+OK\r\n", 5, MSG_NOSIGNAL);
    read_some(fd);
  });
  KvClient kv("127.0.0.1", server.port());
  auto late = kv.put("k", "v", within(300ms));
  EXPECT_EQ(late.status, CallStatus::kTimeout) << late.error;
  EXPECT_NE(late.error.find("no answer from 127.0.0.1:"), std::string::npos) << late.error;
  EXPECT_FALSE(kv.connected()) << "a connection that may still carry a late answer is dropped";
  auto again = kv.put("k", "v", within(10s));
  EXPECT_TRUE(again.ok()) << again.error;
  EXPECT_EQ(connections.load(), 2);
}

TEST(KvClientTest, AHangUpOrGarbageIsDisconnectedAndNamed) {
  StandIn hangs_up([](int fd) { read_some(fd); });
  KvClient a("127.0.0.1", hangs_up.port());
  auto r = a.get("k", within(5s));
  EXPECT_EQ(r.status, CallStatus::kDisconnected);
  EXPECT_NE(r.error.find("closed the connection"), std::string::npos) << r.error;

  StandIn garbage([](int fd) {
    read_some(fd);
    ::send(fd, "hello\r\n", 7, MSG_NOSIGNAL);
    read_some(fd);
  });
  KvClient b("127.0.0.1", garbage.port());
  r = b.get("k", within(5s));
  EXPECT_EQ(r.status, CallStatus::kDisconnected);
  EXPECT_NE(r.error.find("sent garbage: Protocol error"), std::string::npos) << r.error;

  // A port where nothing listens (bound, then closed).
  uint16_t port = 0;
  {
    StandIn gone([](int) {});
    port = gone.port();
  }
  KvClient c("127.0.0.1", port);
  r = c.get("k", within(5s));
  EXPECT_EQ(r.status, CallStatus::kDisconnected);
  EXPECT_NE(r.error.find("cannot connect to 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.error;
}

}  // namespace
}  // namespace kv
