// The registry's metrics endpoint against hostile and clumsy clients, in
// process over real TCP on 127.0.0.1: malformed COUNTERS reports from a
// joined rank are logged, counted and ignored (the rank stays in the job
// and its earlier report stays served); garbage, oversized heads, requests
// sent a byte at a time, other paths and methods, and a crowd of idle
// connections get their HTTP answer or are closed, and the next scrape is
// served as before. Every wait has a deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <random>
#include <thread>

#include "control/bootstrap.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "exposition_parser.h"
#include "http_client.h"
#include "sluice/deadline.h"

namespace sluice::metrics_test {
namespace {

using namespace std::chrono_literals;
using namespace control;
using std::chrono::milliseconds;

constexpr const char* kSecret = "metrics-test-secret";

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// A rank on a raw socket: HELLO, then frames by hand.
class RawRank {
 public:
  RawRank(uint16_t port, uint32_t rank, uint32_t world) : fd_(connect_to(port)) {
    send(make_frame(MsgType::kHello, 1, encode(HelloMsg{rank, world, "rawhost", 42, kSecret})));
    Frame f;
    EXPECT_TRUE(read_frame(&f));
    EXPECT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kWelcome));
  }
  ~RawRank() { ::close(fd_); }
  void send(const std::string& bytes) {
    EXPECT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  bool read_frame(Frame* out) {
    const Deadline deadline = Clock::now() + 5s;
    for (;;) {
      ErrorCode code;
      std::string problem;
      const auto res = parser_.next(out, &code, &problem);
      if (res == FrameParser::Result::kFrame) return true;
      if (res == FrameParser::Result::kBad || Clock::now() >= deadline) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      parser_.append(buf, static_cast<size_t>(n));
    }
  }
  // The registry still answers a HEARTBEAT on this connection: the rank is in.
  bool heartbeat_answered() {
    send(make_frame(MsgType::kHeartbeat, 0, ""));
    Frame f;
    while (read_frame(&f)) {
      if (f.header.type == static_cast<uint16_t>(MsgType::kHeartbeat)) return true;
      if (f.header.type == static_cast<uint16_t>(MsgType::kError)) return false;
    }
    return false;
  }

 private:
  int fd_;
  FrameParser parser_{/*check_version=*/false};
};

class RegistryMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegistryOptions o;
    o.secret = kSecret;
    o.world_size = 2;
    o.metrics = true;
    o.heartbeat_timeout = 20s;  // the raw rank sends heartbeats only when asked
    server_ = std::make_unique<RegistryServer>(o);
    thread_ = std::thread([this] { server_->run(); });
    port_ = static_cast<uint16_t>(std::stoul(server_->metrics_address().substr(10)));
    ASSERT_EQ(server_->metrics_address(), "127.0.0.1:" + std::to_string(port_));
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  Exposition scrape() {
    const HttpResponse r = http_get("127.0.0.1", port_, "/metrics");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    return parse_exposition(r.body);
  }
  HttpResponse raw_http(const std::vector<std::string>& pieces, milliseconds pause = 0ms) {
    return parse_response(exchange("127.0.0.1", port_, pieces, pause));
  }

  std::unique_ptr<RegistryServer> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

CountersMsg one_source(uint64_t records) {
  CountersMsg m;
  EndpointCounters e;
  e.flow = "orders";
  e.role = 1;
  e.rank = 0;
  e.peers = 2;
  e.record_size = 8;
  e.state = 1;
  e.bytes = records * 8;
  e.segments = 3;
  m.endpoints.push_back(e);
  return m;
}

TEST_F(RegistryMetricsTest, MalformedCountersReportsAreCountedAndIgnoredAndTheRankStays) {
  RawRank rank0(server_->port(), 0, 2);
  rank0.send(make_frame(MsgType::kCounters, 0, encode(one_source(1000))));
  ASSERT_TRUE(rank0.heartbeat_answered());
  Exposition x = scrape();
  EXPECT_EQ(x.value("sluice_records_pushed_total", {{"rank", "0"}, {"flow", "orders"}}), 1000);

  const std::string good = encode(one_source(5));
  std::string bad_role = good;
  bad_role[16] = 9;
  const std::vector<std::string> malformed = {
      "",                                           // no header
      std::string("\x03\x00", 2) + good.substr(2),  // another format
      good.substr(0, 5) + "\xff" + good.substr(6),  // a count beyond the payload
      bad_role,                                     // role 9
      good.substr(0, good.size() - 1),              // cut short
      good + "junk",                                // trailing bytes
  };
  for (const std::string& payload : malformed) {
    rank0.send(make_frame(MsgType::kCounters, 0, payload));
    ASSERT_TRUE(rank0.heartbeat_answered()) << "the rank was dropped for a bad report";
  }
  x = scrape();
  EXPECT_EQ(x.value("sluice_counters_reports_rejected_total", {}),
            static_cast<double>(malformed.size()));
  EXPECT_EQ(x.value("sluice_counters_reports_total", {}), 1);
  // The last good report is still what is served; the rank is alive.
  EXPECT_EQ(x.value("sluice_records_pushed_total", {{"rank", "0"}, {"flow", "orders"}}), 1000);
  EXPECT_EQ(x.value("sluice_rank_state", {{"rank", "0"}, {"state", "alive"}}), 1);
  EXPECT_EQ(x.value("sluice_rank_state", {{"rank", "1"}, {"state", "absent"}}), 1);
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "alive"}}), 1);

  // A later good report replaces the old one.
  rank0.send(make_frame(MsgType::kCounters, 0, encode(one_source(2500))));
  ASSERT_TRUE(rank0.heartbeat_answered());
  EXPECT_EQ(scrape().value("sluice_records_pushed_total", {{"flow", "orders"}}), 2500);
}

TEST_F(RegistryMetricsTest, GarbageAndClumsyHttpClientsGetAnswersAndTheNextScrapeWorks) {
  // Binary garbage with no end of head: 400 once it passes 8 KiB.
  std::mt19937 rng(17);
  std::string garbage(20000, '\0');
  for (char& c : garbage) c = static_cast<char>(rng() & 0xff);
  for (size_t i = 0; i + 1 < garbage.size(); ++i) {
    if (garbage[i] == '\n' && (garbage[i + 1] == '\n' || garbage[i + 1] == '\r')) garbage[i] = 'x';
  }
  EXPECT_EQ(raw_http({garbage}).status, 400);
  // Garbage that ends like a head is not an HTTP request either.
  EXPECT_EQ(raw_http({"\x16\x03\x01 hello there\r\n\r\n"}).status, 400);
  EXPECT_EQ(raw_http({"GET /metrics\r\n\r\n"}).status, 400);  // HTTP/0.9
  // A request a byte at a time, as a slow network might deliver it.
  const std::string request = "GET /metrics?x=1 HTTP/1.1\r\nHost: here\r\n\r\n";
  std::vector<std::string> bytes;
  for (char c : request) bytes.emplace_back(1, c);
  const HttpResponse slow = raw_http(bytes, 2ms);
  EXPECT_EQ(slow.status, 200);
  EXPECT_NO_THROW(parse_exposition(slow.body));
  EXPECT_EQ(raw_http({"GET / HTTP/1.1\r\n\r\n"}).status, 404);
  EXPECT_EQ(raw_http({"GET /metricsx HTTP/1.0\n\n"}).status, 404);
  const HttpResponse post = raw_http({"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"});
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers.at("allow"), "GET, HEAD");
  // HEAD: the GET's headers, no body (so Content-Length does not match it).
  const std::string head = exchange("127.0.0.1", port_, {"HEAD /metrics HTTP/1.1\r\n\r\n"});
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
  // A head longer than 8 KiB.
  EXPECT_EQ(raw_http({"GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n"}).status,
            400);
  // Clients that connect and go away, mid-request or at once.
  for (int i = 0; i < 5; ++i) {
    const int fd = connect_to(port_);
    if (i % 2 == 0) (void)!::send(fd, "GET /met", 8, MSG_NOSIGNAL);
    ::close(fd);
  }
  // More idle connections than it keeps: the oldest are closed, and a
  // scrape still gets through.
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(connect_to(port_));
  const Exposition x = scrape();
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "absent"}}), 2);
  for (int fd : idle) ::close(fd);
  // And the registry still serves ranks.
  RawRank rank1(server_->port(), 1, 2);
  EXPECT_TRUE(rank1.heartbeat_answered());
  EXPECT_EQ(scrape().value("sluice_rank_state", {{"rank", "1"}, {"state", "alive"}}), 1);
}

TEST_F(RegistryMetricsTest, ARealClientReportsWithItsHeartbeats) {
  BootstrapInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.registry_host = "127.0.0.1";
  info.registry_port = server_->port();
  info.secret = kSecret;
  ClientOptions o;
  o.heartbeat_timeout = 500ms;  // a heartbeat (and a report) every 100 ms
  o.connect_timeout = 10s;
  auto client = RegistryClient::connect(info, o);
  // This process has no flows: its reports are empty, but they arrive.
  const Deadline until = Clock::now() + 10s;
  double reports = 0;
  while (Clock::now() < until && reports < 3) {
    reports = scrape().value("sluice_counters_reports_total", {});
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GE(reports, 3);
  const Exposition x = scrape();
  EXPECT_EQ(x.value("sluice_rank_endpoints", {{"rank", "1"}}), 0);
  EXPECT_EQ(x.value("sluice_counters_reports_rejected_total", {}), 0);
  EXPECT_EQ(x.value("sluice_rank_state", {{"rank", "1"}, {"state", "alive"}}), 1);
  client.reset();  // LEAVE, after a last report
  const Deadline left_by = Clock::now() + 10s;
  while (Clock::now() < left_by &&
         scrape().value("sluice_rank_state", {{"rank", "1"}, {"state", "left"}}) != 1) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(scrape().value("sluice_rank_state", {{"rank", "1"}, {"state", "left"}}), 1);
}

// A spare waiting for a rank's place is counted; once it took one (rank 1's
// connection closed: it died), it is a rank and no longer a spare.
TEST_F(RegistryMetricsTest, SparesWaitingAreCountedUntilOneTakesADiedRanksPlace) {
  const auto client_of = [this](uint32_t rank, bool spare) {
    BootstrapInfo info;
    info.rank = spare ? 0xFFFFFFFFu : rank;
    info.spare = spare;
    info.world_size = 2;
    info.registry_host = "127.0.0.1";
    info.registry_port = server_->port();
    info.secret = kSecret;
    ClientOptions o;
    o.connect_timeout = 10s;
    return RegistryClient::connect(info, o);
  };
  auto r0 = client_of(0, false);
  auto r1 = std::make_unique<RawRank>(server_->port(), 1, 2);
  EXPECT_EQ(scrape().value("sluice_spares_waiting", {}), 0);
  auto spare = std::async(std::launch::async, [&] { return client_of(0, true); });
  const auto waiting = [&](double n) {
    const Deadline until = Clock::now() + 10s;
    while (Clock::now() < until && scrape().value("sluice_spares_waiting", {}) != n)
      std::this_thread::sleep_for(20ms);
    return scrape().value("sluice_spares_waiting", {}) == n;
  };
  EXPECT_TRUE(waiting(1));
  r1.reset();  // rank 1's process dies
  ASSERT_EQ(spare.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(spare.get()->rank(), 1u);
  EXPECT_TRUE(waiting(0));
  EXPECT_EQ(scrape().value("sluice_membership_view_changes_total", {{"cause", "rejoined"}}), 1);
}

// A registry bound to every address names the job by the address its
// ranks reached it at (as they and `sluice top` name it), not "0.0.0.0".
TEST(RegistryJobLabelTest, AWildcardBindNamesTheJobByTheAddressTheRanksUsed) {
  RegistryOptions o;
  o.secret = kSecret;
  o.world_size = 1;
  o.bind_host = "0.0.0.0";
  o.metrics = true;
  o.heartbeat_timeout = 20s;
  RegistryServer server(o);
  std::thread thread([&] { server.run(); });
  const auto port = static_cast<uint16_t>(std::stoul(server.metrics_address().substr(10)));
  const auto job_of = [&] {
    const Exposition x = parse_exposition(http_get("127.0.0.1", port, "/metrics").body);
    return x.find("sluice_ranks").at(0).labels.at("job");
  };
  // Before any rank joined: the host's name and the port.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(job_of(), std::string(host) + ":" + std::to_string(server.port()));
  {
    RawRank rank0(server.port(), 0, 1);  // connects to 127.0.0.1
    ASSERT_TRUE(rank0.heartbeat_answered());
    EXPECT_EQ(job_of(), "127.0.0.1:" + std::to_string(server.port()));
  }
  server.stop();
  thread.join();
}

}  // namespace
}  // namespace sluice::metrics_test
