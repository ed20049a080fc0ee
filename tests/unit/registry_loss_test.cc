// The registry and its client over real TCP on 127.0.0.1, when a rank is
// lost: a connection closed without LEAVE, a silent rank, a registry that
// stops or stalls, a dead rank's next incarnation, and the client's table
// of peers. Every wait has a deadline; nothing sleeps to "let things
// happen".
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

class RegistryLossTest : public RegistryRawFixture {};

TEST_F(RegistryLossTest, ConnectionClosedWithoutLeaveIsReportedDied) {
  start(2);
  auto c0 = join(0, 2);
  auto raw = raw_join(1, 2);
  EXPECT_TRUE(eventually([&] { return !c0->peers().host(1).empty(); }));
  raw->close();
  ASSERT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
  const std::string d = c0->peers().describe(1);
  EXPECT_NE(d.find("rank 1 (rawhost, pid 1) died: connection closed"), std::string::npos) << d;
  // Every later barrier fails at once, naming the dead rank.
  try {
    c0->barrier("after", in(10s));
    ADD_FAILURE() << "barrier completed without rank 1";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 1u);
  }
}

// A rank's last requests, LEAVE and its half-close arrive in one read (a
// Cluster whose last region handle is destroyed just before it leaves: its
// withdrawal PUT goes out with LEAVE). Every request before LEAVE is
// answered before the registry closes: the EOF read with them no longer
// ends the connection before the replies are sent (it did, and the rank
// logged "putting key 'region/...': lost the registry" about one job in
// two under load).
TEST_F(RegistryLossTest, RequestsSentWithLeaveAreAnsweredBeforeTheClose) {
  // Each round a rank of its own (a rank that left cannot join again).
  constexpr uint32_t kRounds = 20;
  start(kRounds + 1);
  auto c0 = join(0, kRounds + 1);
  for (uint32_t rank = 1; rank <= kRounds; ++rank) {
    RawConn raw(server_->port());
    raw.send(hello_frame(rank, kRounds + 1));
    Frame f;
    ASSERT_TRUE(raw.read_frame(&f)) << "rank " << rank;
    ASSERT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kWelcome)) << "rank " << rank;
    raw.send(make_frame(MsgType::kPut, 7, encode(PutMsg{"k7", "v"})) +
             make_frame(MsgType::kPut, 8, encode(PutMsg{"k8", "v"})) +
             make_frame(MsgType::kLeave, 0, ""));
    raw.shutdown_write();
    std::set<uint32_t> answered;
    while (raw.read_frame(&f)) {
      if (f.header.type == static_cast<uint16_t>(MsgType::kOk))
        answered.insert(f.header.request_id);
    }
    EXPECT_EQ(answered, (std::set<uint32_t>{7, 8})) << "rank " << rank;
  }
  expect_serving(*c0, "k");
}

TEST_F(RegistryLossTest, PendingBarrierFailsWhenARankLeaves) {
  start(3);
  auto c0 = join(0, 3);
  auto c1 = join(1, 3);
  auto c2 = join(2, 3);
  std::thread leaver([&] { c2.reset(); });
  std::string msg;
  EXPECT_EQ(code_of([&] { c0->barrier("b", in(10s)); }, &msg), ErrorCode::kPeerLost);
  EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
  leaver.join();
  EXPECT_TRUE(eventually([&] { return c1->peers().state(2) == PeerTable::kLeft; }));
}

TEST_F(RegistryLossTest, SilentRankIsReportedDiedAfterHeartbeatTimeout) {
  start(3, 300ms);
  auto c0 = join(0, 3, 300ms);
  auto raw = raw_join(1, 3);  // says HELLO, then nothing
  auto c2 = join(2, 3, 300ms);
  ASSERT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
  EXPECT_NE(c0->peers().describe(1).find("no heartbeat for 300 ms"), std::string::npos)
      << c0->peers().describe(1);
  EXPECT_TRUE(raw->closed_by_peer());
  // The real clients heart-beat on their own and stay alive well past it.
  const Deadline later = in(900ms);
  EXPECT_FALSE(eventually([&] { return c2->peers().state(0) != PeerTable::kAlive; }, 900ms));
  EXPECT_GE(Clock::now(), later);
  expect_serving(*c0, "hb");
}

TEST_F(RegistryLossTest, RegistryShutdownFailsPendingCallsAndMarksItLost) {
  start(2);
  auto c0 = join(0, 2);
  std::string msg;
  std::thread stopper([&] {
    server_->stop();
    thread_.join();
  });
  EXPECT_EQ(code_of([&] { c0->get("never", in(10s)); }, &msg), ErrorCode::kRegistry);
  stopper.join();
  server_.reset();
  EXPECT_NE(msg.find("lost the registry at 127.0.0.1:"), std::string::npos) << msg;
  EXPECT_TRUE(eventually([&] { return c0->peers().registry_lost(); }));
  // The destructor must not hang with the registry gone.
  c0.reset();
}

// A rank declared died (here: silent past the heartbeat timeout, as a
// SIGSTOPped process is) cannot come back on its old connection: the
// registry closed it. A new process may join as the rank's next
// incarnation, which its peers see (alive again, incarnation 1), while what
// was pinned to incarnation 0 stays lost. A rank that left cannot rejoin.
TEST_F(RegistryLossTest, ADeadRankRejoinsAsItsNextIncarnationButOneThatLeftCannot) {
  start(2, 300ms);
  auto c0 = join(0, 2, 300ms);
  auto zombie = raw_join(1, 2);  // says HELLO, then nothing, as if stopped
  ASSERT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
  EXPECT_TRUE(zombie->closed_by_peer());
  const PinnedLiveness pinned(c0->peers());  // what a flow declared now would see
  auto c1 = join(1, 2, 300ms);
  EXPECT_EQ(c1->peers().incarnation(1), 1u) << "the new process learns its incarnation";
  EXPECT_EQ(c1->peers().state(1), PeerTable::kAlive);
  ASSERT_TRUE(eventually([&] { return c0->peers().incarnation(1) == 1; }));
  EXPECT_EQ(c0->peers().state(1), PeerTable::kAlive);
  EXPECT_TRUE(c0->peers().alive_as(1, 1));
  EXPECT_FALSE(c0->peers().alive_as(1, 0));
  EXPECT_FALSE(pinned.alive(1)) << "incarnation 0 stays lost";
  EXPECT_NE(pinned.describe(1).find("rank 1 died: no heartbeat for 300 ms; it has since rejoined "
                                    "(incarnation 1"),
            std::string::npos)
      << pinned.describe(1);
  expect_serving(*c1, "k1");
  // A rank that left cleanly cannot come back.
  std::string msg;
  c0.reset();
  EXPECT_EQ(code_of([&] { join(0, 2, 300ms); }, &msg), ErrorCode::kRegistry);
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("left the job"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot rejoin"), std::string::npos) << msg;
}

// A flow whose participant died before it declared, and came back as a new
// incarnation: the declaration in progress was for the process that died,
// which the new one knows nothing of, so a participant that declares it
// only now (after the rejoin) fails at once with PeerLost naming the death,
// as those waiting at the death did. (Before, it waited for the new
// incarnation, which never declares the old flow, until its deadline.)
TEST_F(RegistryLossTest, AFlowsParticipantThatDiedAndRejoinedFailsLaterDeclarersAtOnce) {
  start(3, 300ms);
  auto c0 = join(0, 3, 300ms);
  auto c2 = join(2, 3, 300ms);
  auto zombie = raw_join(1, 3);  // says HELLO, then nothing, as if stopped
  auto first = std::async(std::launch::async, [&] {
    std::string msg;
    const ErrorCode code = code_of(
        [&] {
          c0->declare_flow("q", "a=1\n", {0, 1, 2}, in(20s));
        },
        &msg);
    return std::make_pair(code, msg);
  });
  ASSERT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
  const auto [first_code, first_msg] = first.get();
  EXPECT_EQ(first_code, ErrorCode::kPeerLost) << first_msg;
  auto c1 = join(1, 3, 300ms);
  ASSERT_TRUE(eventually([&] { return c2->peers().incarnation(1) == 1; }));
  std::string msg;
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(code_of(
                [&] {
                  c2->declare_flow("q", "a=1\n", {0, 1, 2}, in(20s));
                },
                &msg),
            ErrorCode::kPeerLost)
      << msg;
  EXPECT_LT(Clock::now() - t0, 10s) << "it waited for the new incarnation";
  EXPECT_NE(msg.find("flow 'q' cannot be declared by every participant: rank 1"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("it has since rejoined (incarnation 1"), std::string::npos) << msg;
}

// A key awaited from one incarnation of its owner (what a flow's set-up
// asks) fails once that process died and the rank rejoined: the new process
// will never put it. Waiting before the rejoin, or asking after it, alike.
TEST_F(RegistryLossTest, AGetPinnedToAnIncarnationFailsOnceTheOwnerRejoined) {
  start(2, 300ms);
  auto c0 = join(0, 2, 300ms);
  auto zombie = raw_join(1, 2);  // says HELLO, then nothing, as if stopped
  auto waiting = std::async(std::launch::async, [&] {
    std::string msg;
    const ErrorCode code = code_of([&] { c0->get("k/pinned", in(20s), 1, 0); }, &msg);
    return std::make_pair(code, msg);
  });
  ASSERT_TRUE(eventually([&] { return c0->peers().state(1) == PeerTable::kDied; }));
  // A plain GET of its key fails at the death already; the pinned one too.
  const auto [code, msg] = waiting.get();
  EXPECT_EQ(code, ErrorCode::kPeerLost) << msg;
  auto c1 = join(1, 2, 300ms);
  ASSERT_TRUE(eventually([&] { return c0->peers().incarnation(1) == 1; }));
  std::string after;
  EXPECT_EQ(code_of([&] { c0->get("k/pinned", in(5s), 1, 0); }, &after), ErrorCode::kPeerLost);
  EXPECT_NE(after.find("was incarnation 0, which died; it has since rejoined as incarnation 1"),
            std::string::npos)
      << after;
  // Awaited from the new incarnation, the key arrives.
  auto from_new = std::async(std::launch::async, [&] { return c0->get("k/new", in(10s), 1, 1); });
  c1->put("k/new", "v");
  EXPECT_EQ(from_new.get(), "v");
}

// The client side: within an incarnation, once told a rank is lost, a later
// "alive" for it changes nothing; an event of a newer incarnation does, and
// one of an older incarnation is ignored.
TEST(PeerTableTest, LostIsStickyWithinAnIncarnation) {
  PeerTable t(2);
  t.set(1, PeerTable::kDied, "connection closed");
  t.set(1, PeerTable::kAlive, "");
  EXPECT_EQ(t.state(1), PeerTable::kDied);
  EXPECT_NE(t.describe(1).find("died: connection closed"), std::string::npos) << t.describe(1);
  t.set(1, PeerTable::kAlive, "", 1);
  EXPECT_EQ(t.state(1), PeerTable::kAlive);
  EXPECT_EQ(t.incarnation(1), 1u);
  t.set(1, PeerTable::kDied, "late news of incarnation 0", 0);
  EXPECT_EQ(t.state(1), PeerTable::kAlive);
  EXPECT_NE(
      t.describe_as(1, 0).find("died: connection closed; it has since rejoined (incarnation 1"),
      std::string::npos)
      << t.describe_as(1, 0);
  // Incarnation 1 leaves: incarnation 0 is still described by its own end
  // (it used to take the latest reason, "died: left the job").
  t.set(1, PeerTable::kLeft, "left the job", 1);
  EXPECT_NE(t.describe_as(1, 0).find(
                "rank 1 died: connection closed; it has since rejoined (incarnation 1"),
            std::string::npos)
      << t.describe_as(1, 0);
  EXPECT_NE(t.describe_as(1, 1).find("rank 1 left the job"), std::string::npos)
      << t.describe_as(1, 1);
}

// Fencing as a flow sees it (flow/liveness.h): an incarnation declared dead
// is fenced, and stays so once a later one joins (which is not); a rank
// that left is not (what it sent before it left is delivered); the fence
// is in place by the time the event's view is published.
TEST(PeerTableTest, ADeadIncarnationIsFencedALeftOneIsNot) {
  PeerTable t(3);
  EXPECT_FALSE(t.fenced(1));
  t.set(2, PeerTable::kLeft, "left the job", 0, 1);
  EXPECT_FALSE(t.fenced(2));
  EXPECT_FALSE(t.fenced_as(2, 0));
  t.set(1, PeerTable::kDied, "no heartbeat", 0, 2);
  EXPECT_EQ(t.epoch(), 2u);
  EXPECT_TRUE(t.fenced(1));
  const PinnedLiveness old_flow(t);  // pinned to incarnation 0 of rank 1
  t.set(1, PeerTable::kAlive, "", 1, 3);
  EXPECT_FALSE(t.fenced(1));  // incarnation 1
  EXPECT_TRUE(t.fenced_as(1, 0));
  EXPECT_FALSE(t.fenced_as(1, 1));
  EXPECT_TRUE(old_flow.fenced(1));
  EXPECT_FALSE(PinnedLiveness(t).fenced(1));
  // An incarnation that joins as a spare (no death heard before) fences
  // the ones below it too.
  t.set(0, PeerTable::kAlive, "", 2, 4);
  EXPECT_TRUE(t.fenced_as(0, 1));
  EXPECT_FALSE(t.fenced(0));
}

// A registry that welcomes a rank and then falls silent (hung, stopped, or
// cut off by the network) while the rank waits without a deadline: the rank
// hears no heartbeat reply and reports the registry lost within its timeout.
// A registry that answers HELLO with WELCOME (announcing `heartbeat_ms`, 0:
// none) and then neither reads nor writes until close(): a registry that
// stopped. `receive_buffer` > 0 shrinks its socket's receive buffer, so that
// the client's unsent bytes pile up sooner.
class StuckRegistry {
 public:
  // `then`: frames sent right after WELCOME (the connection then stays open
  // until close(), as before).
  explicit StuckRegistry(uint32_t heartbeat_ms, int receive_buffer = 0, std::string then = "") {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0)
      ::setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, heartbeat_ms, then] {
      const int fd = ::accept(listener_, nullptr, nullptr);
      FrameParser parser;
      Frame f;
      ErrorCode code;
      std::string problem;
      char buf[4096];
      while (parser.next(&f, &code, &problem) != FrameParser::Result::kFrame) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        parser.append(buf, static_cast<size_t>(n));
      }
      const std::string welcome =
          make_frame(MsgType::kWelcome, f.header.request_id, encode(WelcomeMsg{heartbeat_ms, {}}));
      (void)!::send(fd, welcome.data(), welcome.size(), MSG_NOSIGNAL);
      if (!then.empty()) (void)!::send(fd, then.data(), then.size(), MSG_NOSIGNAL);
      done_.get_future().wait();
      ::close(fd);
    });
  }
  ~StuckRegistry() { close(); }
  // Closes the connection (the client then sees the registry gone).
  void close() {
    if (!thread_.joinable()) return;
    done_.set_value();
    thread_.join();
    ::close(listener_);
  }
  std::unique_ptr<RegistryClient> join(ClientOptions o) {
    BootstrapInfo i;
    i.rank = 0;
    i.world_size = 1;
    i.registry_host = "127.0.0.1";
    i.registry_port = port_;
    i.secret = kTestSecret;
    o.connect_timeout = 5s;
    return RegistryClient::connect(i, o);
  }

 private:
  int listener_ = -1;
  uint16_t port_ = 0;
  std::promise<void> done_;
  std::thread thread_;
};

TEST(RegistryLivenessTest, SilentRegistryIsReportedLostAndEndsWaitsWithoutDeadline) {
  StuckRegistry fake(300);
  ClientOptions o;
  o.heartbeat_timeout = 5000ms;  // the registry's 300 ms is the smaller one
  auto c = fake.join(o);
  const Deadline started = Clock::now();
  std::string msg;
  EXPECT_EQ(code_of([&] { c->get("never", kForever); }, &msg), ErrorCode::kRegistry);
  EXPECT_LT(Clock::now() - started, 2s) << msg;
  EXPECT_NE(msg.find("not even a heartbeat reply"), std::string::npos) << msg;
  EXPECT_TRUE(c->peers().registry_lost());
  EXPECT_EQ(code_of([&] { c->barrier("b", kForever); }), ErrorCode::kRegistry) << "lost stays lost";
  c.reset();
}

// A rank the registry declared lost (stopped past the heartbeat timeout,
// then resumed) is told so before its connection closes, and says that, not
// that the registry went away (the registry still runs). Both halves: the
// registry sends the stopped rank the reason, and a client that hears it
// fails with it.
TEST_F(RegistryLossTest, ARankDeclaredLostIsToldWhyBeforeItsConnectionCloses) {
  start(2, 300ms);
  auto c0 = join(0, 2, 300ms);
  auto stopped = raw_join(1, 2);  // says HELLO, then nothing, as a stopped process
  Frame f;
  bool told = false;
  while (stopped->read_frame(&f, 5000ms)) {
    if (f.header.type != static_cast<uint16_t>(MsgType::kError)) continue;
    ErrorMsg e;
    ASSERT_TRUE(decode(f.payload, &e));
    EXPECT_EQ(f.header.request_id, 0u);
    EXPECT_EQ(e.code, ErrorCode::kPeerLost);
    EXPECT_NE(e.text.find("declared this rank (1) lost: no heartbeat for 300 ms"),
              std::string::npos)
        << e.text;
    told = true;
    break;
  }
  EXPECT_TRUE(told) << "no ERROR before the close";
  EXPECT_TRUE(stopped->closed_by_peer());
}

TEST(RegistryLivenessTest, AClientDeclaredLostSaysSoInsteadOfBlamingTheRegistry) {
  StuckRegistry fake(0, 0,
                     make_frame(MsgType::kError, 0,
                                encode(ErrorMsg{ErrorCode::kPeerLost, 0,
                                                "the registry declared this rank (0) lost: no "
                                                "heartbeat for 300 ms"})));
  ClientOptions o;
  o.heartbeat_timeout = 60000ms;
  auto c = fake.join(o);
  std::this_thread::sleep_for(200ms);  // (the ERROR is read before the close)
  fake.close();
  std::string msg;
  EXPECT_EQ(code_of([&] { c->get("never", kForever); }, &msg), ErrorCode::kRegistry);
  EXPECT_NE(msg.find("the registry declared this rank (0) lost: no heartbeat for 300 ms"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("the registry process exited"), std::string::npos) << msg;
  c.reset();
}

// The client's queue of unsent requests is bounded: calls against a registry
// that stopped reading fail with an error naming the limit once their bytes
// would pass it, instead of growing the queue without end. (It used to grow
// until the heartbeat timeout, however many calls were made.)
TEST(RegistryLivenessTest, UnsentRequestsBeyondTheLimitFailNamingItInsteadOfQueueing) {
  StuckRegistry fake(0, 4096);
  ClientOptions o;
  o.heartbeat_timeout = 60000ms;  // not lost for silence during the test
  o.max_queued_bytes = 1 << 20;
  auto c = fake.join(o);
  // 48 x 512 KiB = 24 MiB: far more than the 1 MiB limit plus what the
  // kernel's socket buffers take in.
  constexpr int kCalls = 48;
  const std::string value(512 * 1024, 'v');
  std::atomic<int> refused{0};
  std::atomic<int> lost{0};
  std::mutex mu;
  std::string refusal;
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      std::string msg;
      const ErrorCode code = code_of([&] { c->put("key" + std::to_string(i), value); }, &msg);
      if (code == ErrorCode::kResource) {
        std::lock_guard<std::mutex> lock(mu);
        refusal = msg;
        ++refused;
      } else if (code == ErrorCode::kRegistry) {
        ++lost;
      }
    });
  }
  // Every call either queued (and waits for its reply) or was refused at once.
  EXPECT_TRUE(eventually([&] { return refused.load() > 0; }, 10000ms));
  fake.close();  // the waiting calls now fail: the registry is gone
  for (auto& t : callers) t.join();
  EXPECT_EQ(refused.load() + lost.load(), kCalls);
  EXPECT_NE(refusal.find("limit of 1048576 bytes"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("max_queued_bytes"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("putting key 'key"), std::string::npos) << refusal;
  c.reset();
}

}  // namespace
}  // namespace sluice::control
