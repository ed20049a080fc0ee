// A registry on a thread of the test process, clients that join it, and raw
// connections that speak frames by hand: the fixture of registry_test.cc,
// registry_loss_test.cc, registry_limits_test.cc, registry_views_test.cc and
// registry_spares_test.cc.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "control/bootstrap.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "sluice/deadline.h"
#include "sluice/errors.h"

namespace sluice::control {

inline constexpr const char* kTestSecret = "test-secret";

inline Deadline in(std::chrono::milliseconds d) { return Clock::now() + d; }

class RegistryFixture : public ::testing::Test {
 protected:
  void start(uint32_t world,
             std::chrono::milliseconds heartbeat = std::chrono::milliseconds(5000)) {
    RegistryOptions o;
    o.heartbeat_timeout = heartbeat;
    start(world, o);
  }
  void start(uint32_t world, RegistryOptions o) {
    o.secret = kTestSecret;
    o.world_size = world;
    server_ = std::make_unique<RegistryServer>(o);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      thread_.join();
    }
  }
  BootstrapInfo info(uint32_t rank, uint32_t world, const std::string& secret = kTestSecret) {
    BootstrapInfo i;
    i.rank = rank;
    i.world_size = world;
    i.registry_host = "127.0.0.1";
    i.registry_port = server_->port();
    i.secret = secret;
    return i;
  }
  std::unique_ptr<RegistryClient> join(
      uint32_t rank, uint32_t world,
      std::chrono::milliseconds heartbeat = std::chrono::milliseconds(5000)) {
    ClientOptions o;
    o.heartbeat_timeout = heartbeat;
    o.connect_timeout = std::chrono::seconds(10);
    return RegistryClient::connect(info(rank, world), o);
  }

  std::unique_ptr<RegistryServer> server_;
  std::thread thread_;
};

// A plain TCP connection that speaks frames by hand.
class RawConn {
 public:
  explicit RawConn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() { close(); }
  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Half-closes: the registry reads EOF after what was sent; this end
  // still reads.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Best effort: the registry may already have closed on us.
  void send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // The next frame, or false on EOF, a bad frame or `limit` passing.
  bool read_frame(Frame* out, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const Deadline deadline = in(limit);
    for (;;) {
      ErrorCode code;
      std::string problem;
      const auto res = parser_.next(out, &code, &problem);
      if (res == FrameParser::Result::kFrame) return true;
      if (res == FrameParser::Result::kBad) return false;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      parser_.append(buf, static_cast<size_t>(n));
    }
  }
  // True once the registry closed the connection (within `limit`).
  bool closed_by_peer(std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    pollfd p{fd_, POLLIN, 0};
    char buf[256];
    const Deadline deadline = in(limit);
    while (Clock::now() < deadline) {
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
    return false;
  }
  // Reads a frame that must be ERROR and decodes it.
  ErrorMsg read_error() {
    Frame f;
    ErrorMsg e;
    EXPECT_TRUE(read_frame(&f)) << "no frame from the registry";
    EXPECT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kError));
    EXPECT_TRUE(decode(f.payload, &e)) << "undecodable ERROR payload";
    return e;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  FrameParser parser_{/*check_version=*/false};
};

inline std::string hello_frame(uint32_t rank, uint32_t world,
                               const std::string& secret = kTestSecret,
                               uint16_t version = kProtocolVersion) {
  return make_frame(MsgType::kHello, 1, encode(HelloMsg{rank, world, "rawhost", 1, secret}),
                    version);
}

// The message parse_bootstrap(env) throws (Error(kBootstrap)); "" if none.
inline std::string bootstrap_error(const std::map<std::string, std::string>& env) {
  try {
    parse_bootstrap(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBootstrap);
    return std::string(e.what());
  }
  return std::string();
}

// RegistryFixture with raw joins and a check that the registry serves.
class RegistryRawFixture : public RegistryFixture {
 protected:
  // Joins `rank` on a raw socket and reads the WELCOME.
  std::unique_ptr<RawConn> raw_join(uint32_t rank, uint32_t world) {
    auto raw = std::make_unique<RawConn>(server_->port());
    EXPECT_TRUE(raw->connected());
    raw->send(hello_frame(rank, world));
    Frame f;
    EXPECT_TRUE(raw->read_frame(&f));
    EXPECT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kWelcome));
    return raw;
  }
  // Put/get round trip through `c`: proves the registry is still serving.
  static void expect_serving(RegistryClient& c, const std::string& key) {
    c.put(key, "alive");
    EXPECT_EQ(c.get(key, in(std::chrono::seconds(5))), "alive");
  }
};

// Polls `pred` until it holds or `limit` passes.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const Deadline deadline = in(limit);
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The code of the sluice::Error `fn` throws (and its message into
// *message); a failure if it throws none.
template <class Fn>
ErrorCode code_of(Fn&& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no sluice::Error thrown";
  return ErrorCode::kInternal;
}

}  // namespace sluice::control
