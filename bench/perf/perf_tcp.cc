#include "perf_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "perf_clock.h"
#include "perf_records.h"
#include "perf_stats.h"
#include "sluice/flow.h"
#include "tool_util.h"

namespace sluice::tool::perf {
namespace {

struct TcpOptions {
  std::string listen;   // HOST:PORT (reader side)
  std::string connect;  // HOST:PORT (writer side)
  std::string sizes;
  uint64_t bytes = 0;           // per size
  uint32_t chunk_bytes = 8192;  // bytes per write (rounded down to whole records)
  std::string mode = "stream";  // or "pingpong"
  uint32_t round_trips = 2000;  // pingpong: requested per size (round_trips_for)
  uint32_t rep = 0;
  std::string out = "-";
  double timeout_seconds = 60;  // connect / accept
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what +
                           (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
}

sockaddr_in address(const std::string& text, const char* what) {
  std::string host;
  uint16_t port = 0;
  split_host_port(text, what, 0, &host, &port);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    errno = 0;
    fail(std::string(what) + " " + text + ": not an IPv4 address");
  }
  return a;
}

void nodelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    fail("setsockopt TCP_NODELAY");
}

void send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("send");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Receives exactly n bytes: blocking, or (spin) polling a non-blocking recv
// as a latency-minded application would (a blocking recv sleeps and pays a
// cross-vCPU wake-up).
void recv_all(int fd, void* data, size_t n, bool spin = false) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, spin ? MSG_DONTWAIT : MSG_WAITALL);
    if (r < 0 && (errno == EINTR || (spin && (errno == EAGAIN || errno == EWOULDBLOCK)))) continue;
    if (r == 0) {
      errno = 0;
      fail("recv: the peer closed the connection early");
    }
    if (r < 0) fail("recv");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void emit(const TcpOptions& o, const nlohmann::json& line) { emit_json_line(o.out, line); }

template <size_t B>
void read_stream(int fd, const TcpOptions& o) {
  using R = Rec<B>;
  const uint64_t n = o.bytes / B;
  const size_t per_chunk = std::max<size_t>(1, o.chunk_bytes / B);
  std::vector<R> buf(per_chunk);
  R scratch;
  uint64_t sum = 0, count = 0;
  const char go = 'g';
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  send_all(fd, &go, 1);
  while (count < n) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(per_chunk, n - count));
    recv_all(fd, buf.data(), k * B);
    for (size_t i = 0; i < k; ++i) sum += take_record<B>(&buf[i], &scratch);
    count += k;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  const char done = 'd';
  send_all(fd, &done, 1);
  double writer_cpu = 0;
  recv_all(fd, &writer_cpu, sizeof writer_cpu);
  if (sum != key_sum(0, n)) throw std::runtime_error("tcp stream: the key checksum differs");
  emit(o, {{"kind", "tcp_stream"},
           {"rep", o.rep},
           {"record_bytes", B},
           {"records", n},
           {"chunk_bytes", per_chunk * B},
           {"seconds", seconds},
           {"cpu_seconds", cpu + writer_cpu},
           {"src_cpu_seconds", writer_cpu},
           {"tgt_cpu_seconds", cpu}});
}

template <size_t B>
void write_stream(int fd, const TcpOptions& o) {
  using R = Rec<B>;
  const uint64_t n = o.bytes / B;
  const size_t per_chunk = std::max<size_t>(1, o.chunk_bytes / B);
  std::vector<R> buf(per_chunk, make_template_record<B>());
  char c = 0;
  recv_all(fd, &c, 1);
  if (c != 'g') throw std::runtime_error("tcp stream: protocol error (expected go)");
  const double cpu0 = process_cpu_seconds();
  for (uint64_t sent = 0; sent < n;) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(per_chunk, n - sent));
    for (size_t i = 0; i < k; ++i) buf[i].key = key_of(sent + i);
    send_all(fd, buf.data(), k * B);
    sent += k;
  }
  recv_all(fd, &c, 1);
  if (c != 'd') throw std::runtime_error("tcp stream: protocol error (expected done)");
  const double cpu = process_cpu_seconds() - cpu0;
  send_all(fd, &cpu, sizeof cpu);
}

// The initiator: sends one record, waits for it back, times the round trip.
template <size_t B>
void ping(int fd, const TcpOptions& o) {
  const uint32_t n = round_trips_for(o.round_trips, B);
  std::vector<unsigned char> msg(B, 7), back(B);
  std::vector<double> rtt;
  rtt.reserve(n);
  const CpuTimer t;
  for (uint32_t i = 0; i < warmup_for(n) + n; ++i) {
    const auto t0 = Clock::now();
    const uint64_t key = key_of(i);
    std::memcpy(msg.data(), &key, sizeof key);
    send_all(fd, msg.data(), B);
    recv_all(fd, back.data(), B, true);
    if (std::memcmp(back.data(), &key, sizeof key) != 0)
      throw std::runtime_error("tcp ping-pong: wrong message back");
    if (i >= warmup_for(n))
      rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  double responder_cpu = 0;
  recv_all(fd, &responder_cpu, sizeof responder_cpu);
  emit(o, {{"kind", "tcp_pingpong"},
           {"rep", o.rep},
           {"record_bytes", B},
           {"records", n},
           {"seconds", seconds},
           {"cpu_seconds", cpu + responder_cpu},
           {"src_cpu_seconds", cpu},
           {"tgt_cpu_seconds", responder_cpu},
           {"rtt_us_p50", percentile(rtt, 50)},
           {"rtt_us_p99", percentile(rtt, 99)},
           {"rtt_us_p999", percentile(rtt, 99.9)}});
}

template <size_t B>
void pong(int fd, const TcpOptions& o) {
  const uint32_t n = round_trips_for(o.round_trips, B);
  std::vector<unsigned char> msg(B);
  const CpuTimer t;
  for (uint32_t i = 0; i < warmup_for(n) + n; ++i) {
    recv_all(fd, msg.data(), B, true);
    send_all(fd, msg.data(), B);
  }
  const double cpu = t.cpu_seconds();
  send_all(fd, &cpu, sizeof cpu);
}

bool wait_readable(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(seconds * 1000));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

void run_listener(const TcpOptions& o, const std::vector<uint32_t>& sizes) {
  const sockaddr_in a = address(o.listen, "--listen");
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) fail("socket");
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    fail("bind " + o.listen);
  if (::listen(s.get(), 1) != 0) fail("listen");
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  // The parent reads this line to learn the port (the data lines go to --out).
  std::fprintf(stdout, "PORT %u\n", static_cast<unsigned>(ntohs(bound.sin_port)));
  std::fflush(stdout);
  if (!wait_readable(s.get(), o.timeout_seconds)) {
    errno = 0;
    fail("no connection within " + std::to_string(o.timeout_seconds) + " s");
  }
  Fd c(::accept4(s.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!c.valid()) fail("accept");
  nodelay(c.get());
  for (uint32_t size : sizes) {
    with_record_size(size, [&](auto b) {
      if (o.mode == "pingpong")
        ping<decltype(b)::value>(c.get(), o);
      else
        read_stream<decltype(b)::value>(c.get(), o);
    });
  }
}

void run_connector(const TcpOptions& o, const std::vector<uint32_t>& sizes) {
  const sockaddr_in a = address(o.connect, "--connect");
  const auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_seconds);
  Fd c;
  for (;;) {
    c.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!c.valid()) fail("socket");
    if (::connect(c.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) break;
    if (Clock::now() > deadline) fail("connect " + o.connect);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  nodelay(c.get());
  for (uint32_t size : sizes) {
    with_record_size(size, [&](auto b) {
      if (o.mode == "pingpong")
        pong<decltype(b)::value>(c.get(), o);
      else
        write_stream<decltype(b)::value>(c.get(), o);
    });
  }
}

}  // namespace

void add_perf_tcp_command(CLI::App& app) {
  auto o = std::make_shared<TcpOptions>();
  CLI::App* sub = app.add_subcommand("tcp", "One end of a sluice-perf kernel TCP peer (internal)");
  sub->group("");  // hidden: `sluice perf` starts it
  auto* l = sub->add_option("--listen", o->listen);
  auto* c = sub->add_option("--connect", o->connect);
  l->excludes(c);
  sub->add_option("--sizes", o->sizes)->required();
  sub->add_option("--bytes", o->bytes);
  sub->add_option("--chunk-bytes", o->chunk_bytes);
  sub->add_option("--mode", o->mode)->check(CLI::IsMember({"stream", "pingpong"}));
  sub->add_option("--round-trips", o->round_trips);
  sub->add_option("--rep", o->rep);
  sub->add_option("--out", o->out);
  sub->add_option("--timeout", o->timeout_seconds);
  sub->callback([o] {
    try {
      const std::vector<uint32_t> sizes = parse_sizes(o->sizes);
      if (o->chunk_bytes == 0 && o->mode == "stream")
        throw std::invalid_argument("--chunk-bytes must be positive");
      if (!o->listen.empty()) {
        run_listener(*o, sizes);
      } else if (!o->connect.empty()) {
        run_connector(*o, sizes);
      } else {
        throw std::invalid_argument("give --listen HOST:PORT or --connect HOST:PORT");
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice-perf tcp: FAILED: %s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::tool::perf
