// tests/kv/resp_test_util.h: what the tests of the RESP front end share: a
// raw connection with deadlines, a request as redis-cli sends it, and a
// `sluice-kv run --resp-port 0` job whose gateway's address, port and pid
// are read from what it prints.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "resp.h"
#include "support/test_support.h"

namespace kv::testing {

using Clock = std::chrono::steady_clock;

// A connection to a gateway on `host` (an IPv4 address); every call has a
// deadline.
class Conn {
 public:
  explicit Conn(uint16_t port, const char* host = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, host, &a.sin_addr);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool ok() const { return ok_; }
  // Sends `chunk` again and again without reading, until the gateway stops
  // taking bytes (nothing goes out for `quiet`) or `cap` bytes went out.
  // Returns how many went out.
  size_t flood(const std::string& chunk, size_t cap, std::chrono::milliseconds quiet) {
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    size_t sent = 0;
    auto last = Clock::now();
    while (sent < cap && Clock::now() - last < quiet) {
      const ssize_t n = ::send(fd_, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        last = Clock::now();
      } else {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
    }
    return sent;
  }
  // Sends all of `bytes`; false if the connection broke first.
  bool send(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  // What arrives within `wait` (stops early once `until` has arrived);
  // *closed: the gateway closed the connection.
  std::string receive(const std::string& until, bool* closed = nullptr,
                      std::chrono::milliseconds wait = std::chrono::seconds(20)) {
    std::string got;
    const auto end = Clock::now() + wait;
    if (closed) *closed = false;
    while (Clock::now() < end && got.find(until) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// A request as redis-cli sends it: an array of bulk strings.
inline std::string request(const std::vector<std::string>& args) {
  return resp::array(std::vector<std::string_view>(args.begin(), args.end()));
}

// One request's reply on `c` (a PING after it marks its end).
inline std::string reply_of(Conn& c, const std::vector<std::string>& args) {
  c.send(request(args) + request({"PING"}));
  std::string got = c.receive("+PONG\r\n");
  const size_t at = got.rfind("+PONG\r\n");
  return at == std::string::npos ? "(no reply) " + got : got.substr(0, at);
}

inline const std::string kWrongTypeReply =
    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

// The protocol behind the gateway: SLUICE_KV_PROTOCOL, multipaxos by default.
inline std::string protocol() {
  const char* p = std::getenv("SLUICE_KV_PROTOCOL");
  return p ? p : "multipaxos";
}

// The resident set of process `pid` in KiB (VmRSS), 0 if unknown.
inline uint64_t rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

// A job (`sluice run -n ranks -- sluice-kv run ...args`, run by `wrap`'s
// command where given, ended by the launcher after timeout_s) with one
// gateway rank, started by the constructor, which waits (up to 60 s) for the
// gateway's line; its output is read as the test goes (drain).
class RespJob {
 public:
  RespJob(int ranks, const std::vector<std::string>& args,
          const std::vector<std::string>& launcher_args = {},
          const std::vector<std::string>& wrap = {}, int timeout_s = 300) {
    namespace proc = sluice::proc;
    proc::SpawnOptions o;
    std::vector<std::string> all = {"run"};
    all.insert(all.end(), args.begin(), args.end());
    o.argv = sluice::testing::job_argv(ranks, timeout_s, "sluice-kv", all, launcher_args);
    o.argv.insert(o.argv.begin(), wrap.begin(), wrap.end());
    o.out = proc::Output::kPipe;
    o.err = proc::Output::kToStdout;
    job_ = std::make_unique<proc::Process>(proc::Process::spawn(o));
    const std::regex served("serves RESP on (\\S+) port ([0-9]+) \\(pid ([0-9]+)\\)");
    const auto end = Clock::now() + std::chrono::seconds(60);
    std::smatch m;
    while (Clock::now() < end && !std::regex_search(output_, m, served)) {
      if (!drain(std::chrono::milliseconds(100))) break;
    }
    if (std::regex_search(output_, m, served)) {
      port_ = static_cast<uint16_t>(std::stoi(m[2]));
      pid_ = std::stoi(m[3]);
    }
  }

  uint16_t port() const { return port_; }  // 0: no gateway started
  int pid() const { return pid_; }         // the gateway rank's process
  sluice::proc::Process& process() { return *job_; }
  const std::string& output() const { return output_; }

  // Reads what the job printed meanwhile; false once its output ended.
  bool drain(std::chrono::milliseconds wait) {
    pollfd p{job_->out().get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return true;
    char buf[4096];
    const ssize_t n = ::read(job_->out().get(), buf, sizeof(buf));
    if (n <= 0) return false;
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }
  // Reads its output until it ends, then waits for it (up to `limit`).
  std::optional<sluice::proc::ExitStatus> finish(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end && drain(std::chrono::milliseconds(200))) {
    }
    return job_->wait_until(end);
  }

 private:
  std::unique_ptr<sluice::proc::Process> job_;
  std::string output_;
  uint16_t port_ = 0;
  int pid_ = 0;
};

// SHUTDOWN on `port` ends `job`, which passes its own checks (exit 0;
// every operation exactly once, replicas identical) and leaves no /dev/shm
// object.
inline void expect_shutdown_passes_checks(RespJob& job, uint16_t port) {
  Conn c(port);
  c.send(request({"SHUTDOWN"}));
  EXPECT_EQ(c.receive("+OK\r\n"), "+OK\r\n");
  const auto status = job.finish(std::chrono::seconds(60));
  const std::string& output = job.output();
  ASSERT_TRUE(status.has_value()) << "the job did not end after SHUTDOWN\n" << output;
  EXPECT_EQ(status->exit_code, 0) << output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                output, "job: every operation completed exactly once; replicas identical"),
            1)
      << output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

}  // namespace kv::testing
