// The registry's limits and hostile input over real TCP on 127.0.0.1:
// connections that never say HELLO, a slow reader's queue, and garbage,
// oversized, foreign-version, premature, malformed and byte-flipped frames
// on raw sockets; the registry keeps serving the others throughout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/test_hooks.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "registry_fixture.h"
#include "sluice/cluster.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

class RegistryLimitsTest : public RegistryRawFixture {};

// Connections that never say HELLO are capped: past the limit the oldest are
// closed at once (not after the HELLO timeout), and a real rank still joins.
TEST_F(RegistryLimitsTest, ConnectionsWithoutHelloAreCappedOldestFirst) {
  RegistryOptions o;
  o.heartbeat_timeout = 60s;  // far beyond this test: only the cap closes them
  o.max_unauthenticated = 4;
  start(1, o);
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(std::make_unique<RawConn>(server_->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  EXPECT_TRUE(idle[0]->closed_by_peer(3000ms));
  EXPECT_TRUE(idle[1]->closed_by_peer(3000ms));
  auto c0 = join(0, 1);  // evicts the oldest idle connection left, idle[2]
  EXPECT_TRUE(idle[2]->closed_by_peer(3000ms));
  EXPECT_FALSE(idle[5]->closed_by_peer(200ms));
  expect_serving(*c0, "k");
}

// A rank that stops reading while the registry answers many of its requests
// at once: its queue overflows in the middle of the loop that answers them
// (here: the waiters of a key, answered by a PUT). The registry must drop
// that rank only after the loop, report it died, and keep serving.
TEST_F(RegistryLimitsTest, SlowReaderOverflowingItsQueueIsReportedDiedAndOthersAreStillServed) {
  RegistryOptions o;
  o.max_queued_bytes = 2u << 20;
  start(2, o);
  auto slow = raw_join(0, 2);
  auto c1 = join(1, 2);
  // Longer than any small-string buffer, so a use after free touches the heap.
  const std::string key = "slow-reader/a-key-much-longer-than-the-small-string-buffer";
  constexpr int kGets = 8;
  for (int i = 0; i < kGets; ++i) {
    slow->send(make_frame(MsgType::kGet, 10 + i, encode(GetMsg{key, -1, 0})));
  }
  // Frames of one connection are handled in order: once this PUT is
  // answered, every GET above waits in the registry.
  slow->send(make_frame(MsgType::kPut, 99, encode(PutMsg{"marker", "m"})));
  Frame f;
  do {
    ASSERT_TRUE(slow->read_frame(&f)) << "no answer to the PUT";
  } while (f.header.request_id != 99);  // skips rank 1's PEER_EVENT
  // From here on the raw connection never reads. Each answer is ~1 MiB, so
  // the third one overflows its 2 MiB queue.
  c1->put(key, std::string(kMaxPayload - 1024, 'x'));
  ASSERT_TRUE(eventually([&] { return c1->peers().state(0) == PeerTable::kDied; }));
  const std::string d = c1->peers().describe(0);
  EXPECT_NE(d.find("not reading registry messages"), std::string::npos) << d;
  expect_serving(*c1, "after-slow-reader");
}

class HostileInputTest : public RegistryRawFixture {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kError);  // one warning per rejected connection is expected
  }
  void TearDown() override {
    RegistryRawFixture::TearDown();
    log::set_level(saved_);
  }
  log::Level saved_ = log::Level::kWarn;
};

TEST_F(HostileInputTest, GarbageGetsAnErrorFrameAndOthersAreStillServed) {
  start(2);
  auto c0 = join(0, 2);
  RawConn raw(server_->port());
  raw.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const ErrorMsg e = raw.read_error();
  EXPECT_EQ(e.code, ErrorCode::kProtocol);
  EXPECT_NE(e.text.find("bad magic"), std::string::npos) << e.text;
  EXPECT_TRUE(raw.closed_by_peer());
  expect_serving(*c0, "k");
}

TEST_F(HostileInputTest, OversizedFrameGetsAnErrorFrame) {
  start(2);
  auto c0 = join(0, 2);
  RawConn raw(server_->port());
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kHello);
  h.length = 64u << 20;
  uint8_t b[kHeaderSize];
  encode_header(h, b);
  raw.send(std::string(reinterpret_cast<char*>(b), sizeof b));
  const ErrorMsg e = raw.read_error();
  EXPECT_EQ(e.code, ErrorCode::kProtocol);
  EXPECT_NE(e.text.find("exceeds the limit"), std::string::npos) << e.text;
  expect_serving(*c0, "k");
}

TEST_F(HostileInputTest, OtherProtocolVersionGetsAnErrorNamingBothVersions) {
  start(2);
  auto c0 = join(0, 2);
  RawConn raw(server_->port());
  raw.send(hello_frame(1, 2, kTestSecret, kProtocolVersion + 1));
  const ErrorMsg e = raw.read_error();
  EXPECT_EQ(e.code, ErrorCode::kProtocol);
  EXPECT_NE(e.text.find("client speaks version " + std::to_string(kProtocolVersion + 1)),
            std::string::npos)
      << e.text;
  EXPECT_NE(e.text.find("registry speaks version " + std::to_string(kProtocolVersion)),
            std::string::npos)
      << e.text;
  expect_serving(*c0, "k");
}

TEST_F(HostileInputTest, RequestsBeforeHelloAreRefused) {
  start(2);
  RawConn raw(server_->port());
  raw.send(make_frame(MsgType::kPut, 5, encode(PutMsg{"k", "v"})));
  const ErrorMsg e = raw.read_error();
  EXPECT_NE(e.text.find("first message must be HELLO, got PUT"), std::string::npos) << e.text;
  EXPECT_TRUE(raw.closed_by_peer());
}

TEST_F(HostileInputTest, MalformedPayloadAfterHelloIsRefusedAndTheRankDies) {
  start(2);
  auto c0 = join(0, 2);
  auto raw = raw_join(1, 2);
  raw->send(make_frame(MsgType::kBarrier, 7, "\xff\xff\xff\xff"));
  const ErrorMsg e = raw->read_error();
  EXPECT_NE(e.text.find("malformed BARRIER"), std::string::npos) << e.text;
  EXPECT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
}

TEST_F(HostileInputTest, ByteFlippedFramesNeverStopTheRegistry) {
  start(4);
  auto c0 = join(0, 4);
  const std::vector<std::string> requests = {
      make_frame(MsgType::kPut, 2, encode(PutMsg{"key", "value"})),
      make_frame(MsgType::kGet, 3, encode(GetMsg{"key", 0, 50})),
      make_frame(MsgType::kGet, 3, encode(GetMsg{"other", 2, 0})),
      make_frame(MsgType::kDeclare, 4, encode(DeclareMsg{"f", "a=1\nb=2\n", {0, 1, 2, 3}, 0})),
      make_frame(MsgType::kBarrier, 5, encode(BarrierMsg{"b", 0})),
      make_frame(MsgType::kHeartbeat, 0, ""),
      make_frame(MsgType::kLeave, 0, ""),
  };
  std::mt19937 rng(20240611);
  for (int i = 0; i < 3000; ++i) {
    const uint32_t rank = 1 + rng() % 3;
    std::string bytes = hello_frame(rank, 4) + requests[rng() % requests.size()] +
                        requests[rng() % requests.size()];
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    RawConn raw(server_->port());
    ASSERT_TRUE(raw.connected()) << "iteration " << i;
    raw.send(bytes);
    raw.close();
    if (i % 500 == 499) expect_serving(*c0, "check" + std::to_string(i));
  }
  expect_serving(*c0, "final");
  EXPECT_EQ(c0->peers().state(0), PeerTable::kAlive);
}

}  // namespace
}  // namespace sluice::control
