// A standalone registry (as a multi-host job would use) serves a real job
// while other connections throw garbage, oversized frames and a wrong secret
// at it: each of those gets an ERROR frame, and the job still completes with
// every record verified.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <map>
#include <regex>
#include <thread>

#include "control/protocol.h"
#include "sluice/cluster.h"
#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;

// A `sluice registry` child process; killed (SIGTERM) on destruction.
class StandaloneRegistry {
 public:
  explicit StandaloneRegistry(const std::string& secret, int world = 2, int peer_timeout_ms = 0) {
    std::map<std::string, std::string> set;
    if (peer_timeout_ms > 0) set["SLUICE_PEER_TIMEOUT_MS"] = std::to_string(peer_timeout_ms);
    // The secret goes through the environment, never argv.
    set["SLUICE_SECRET"] = secret;
    proc::SpawnOptions o;
    o.argv = {bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", std::to_string(world)};
    o.env = proc::environment_with(set, {"SLUICE_PEER_TIMEOUT_MS"});
    o.stdin_null = false;
    o.out = proc::Output::kPipe;
    o.new_process_group = false;
    process_ = proc::Process::spawn(o);
    const int out = process_.out().get();
    // First line: SLUICE_REGISTRY=host:port. Bounded wait.
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd pf{out, POLLIN, 0};
      if (::poll(&pf, 1, 100) <= 0) continue;
      char c;
      if (::read(out, &c, 1) != 1) break;
      line += c;
    }
    std::smatch m;
    if (std::regex_search(line, m, std::regex("SLUICE_REGISTRY=([0-9.]+):([0-9]+)"))) {
      address_ = m[1].str() + ":" + m[2].str();
      port_ = static_cast<uint16_t>(std::stoi(m[2]));
    }
  }
  ~StandaloneRegistry() {
    ::kill(pid(), SIGCONT);  // in case a test stopped it
    process_.stop(std::chrono::seconds(30));
  }
  const std::string& address() const { return address_; }
  uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }

 private:
  proc::Process process_;
  std::string address_;
  uint16_t port_ = 0;
};

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Sends `bytes`, then reads until the registry closes the connection (5 s
// limit) and returns the ERROR frame's text, or "" if none came.
std::string send_and_read_error(uint16_t port, const std::string& bytes) {
  int fd = connect_to(port);
  (void)!::write(fd, bytes.data(), bytes.size());
  control::FrameParser parser(false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string text;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    parser.append(buf, static_cast<size_t>(n));
    control::Frame f;
    ErrorCode code;
    std::string problem;
    if (parser.next(&f, &code, &problem) == control::FrameParser::Result::kFrame &&
        f.header.type == static_cast<uint16_t>(control::MsgType::kError)) {
      control::ErrorMsg e;
      if (control::decode(f.payload, &e)) text = std::string(to_string(e.code)) + ": " + e.text;
      break;
    }
  }
  ::close(fd);
  return text;
}

TEST(RegistryFaultTest, GarbageAndWrongSecretGetErrorsWhileAJobCompletes) {
  StandaloneRegistry registry("s3cret-for-this-test");
  ASSERT_FALSE(registry.address().empty()) << "sluice registry did not print its address";

  // The job: two ranks started by hand, as a cluster manager would.
  std::vector<std::future<testing::ProcessResult>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      return testing::run_process({bin("sluice-test-worker"), "--sources", "0,1", "--targets",
                                   "0,1", "--tuples", "2000000", "--slow-consumer-us", "20"},
                                  {{"SLUICE_RANK", std::to_string(r)},
                                   {"SLUICE_WORLD_SIZE", "2"},
                                   {"SLUICE_REGISTRY", registry.address()},
                                   {"SLUICE_SECRET", "s3cret-for-this-test"}},
                                  std::chrono::seconds(120));
    }));
  }

  // Meanwhile, hostile and broken clients.
  EXPECT_NE(
      send_and_read_error(registry.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n").find("Protocol"),
      std::string::npos);
  std::string huge = control::make_frame(control::MsgType::kHello, 1, "");
  huge[control::kLengthOffset + 3] = 0x7f;  // a length far over the limit
  EXPECT_NE(send_and_read_error(registry.port(), huge).find("Protocol"), std::string::npos);
  control::HelloMsg hello;
  hello.rank = 0;
  hello.world_size = 2;
  hello.host = "intruder";
  hello.secret = "wrong";
  std::string wrong = send_and_read_error(
      registry.port(), control::make_frame(control::MsgType::kHello, 1, control::encode(hello)));
  EXPECT_NE(wrong.find("Auth"), std::string::npos) << wrong;
  std::string old_version =
      control::make_frame(control::MsgType::kHello, 1, control::encode(hello), 99);
  std::string skew = send_and_read_error(registry.port(), old_version);
  EXPECT_NE(skew.find("99"), std::string::npos) << skew;
  EXPECT_NE(skew.find(std::to_string(kProtocolVersion)), std::string::npos) << skew;
  for (int i = 0; i < 50; ++i) {
    std::string noise(64 + i, static_cast<char>(i * 37));
    send_and_read_error(registry.port(), noise);
  }

  for (auto& f : ranks) {
    auto r = f.get();
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  }
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A registry that stops (SIGSTOP: its process exists, its sockets stay open,
// the kernel still acknowledges data) must not leave a client waiting
// forever: the client hears no heartbeat reply and reports the registry
// lost within about the peer timeout, failing even a wait without deadline.
TEST(RegistryFaultTest, StoppedRegistryIsReportedLostWithinThePeerTimeout) {
  constexpr auto kPeerTimeout = std::chrono::milliseconds(1000);
  StandaloneRegistry registry("stopped-registry-secret", 2, static_cast<int>(kPeerTimeout.count()));
  ASSERT_FALSE(registry.address().empty()) << "sluice registry did not print its address";
  ClusterOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.registry = registry.address();
  o.secret = "stopped-registry-secret";
  o.peer_timeout = kPeerTimeout;
  o.setup_timeout = std::chrono::seconds(20);
  auto cluster = std::make_unique<Cluster>(Cluster::join(o));
  // Rank 1 never joins: this barrier can only end by the registry's loss.
  std::promise<std::string> outcome;
  std::chrono::steady_clock::time_point stopped_at;
  std::thread waiter([&] {
    try {
      cluster->barrier("never", kForever);
      outcome.set_value("barrier returned");
    } catch (const Error& e) {
      outcome.set_value(std::string(to_string(e.code())) + ": " + e.what());
    }
  });
  ASSERT_EQ(::kill(registry.pid(), SIGSTOP), 0);
  stopped_at = std::chrono::steady_clock::now();
  auto result = outcome.get_future();
  const bool ended = result.wait_for(kPeerTimeout * 5) == std::future_status::ready;
  const auto took = std::chrono::steady_clock::now() - stopped_at;
  // Bounded either way: resuming and ending the registry closes the
  // connection, which ends a wait the client did not end itself.
  ::kill(registry.pid(), SIGCONT);
  ::kill(registry.pid(), SIGKILL);
  waiter.join();
  ASSERT_TRUE(ended) << "the client still waited " << kPeerTimeout.count() * 5
                     << " ms after the registry stopped";
  const std::string text = result.get();
  EXPECT_NE(text.find("Registry"), std::string::npos) << text;
  EXPECT_NE(text.find("lost the registry at " + registry.address()), std::string::npos) << text;
  EXPECT_NE(text.find("heartbeat reply"), std::string::npos) << text;
  EXPECT_LT(took, kPeerTimeout * 3) << text;
  // Later setup calls fail at once, and leaving does not hang.
  const auto before = std::chrono::steady_clock::now();
  EXPECT_THROW(cluster->barrier("after", kForever), Error);
  cluster.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(3));
}

}  // namespace
}  // namespace sluice
