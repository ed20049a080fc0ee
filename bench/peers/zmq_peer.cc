// The ZeroMQ peer of `sluice perf` (started by bench/peers/run, one process
// per end):
//
//   sluice-peer-zmq pull --bind EP --sizes 8,64 --bytes B --senders S --index t --targets T
//   [--max-records M] sluice-peer-zmq push --connect EP0,EP1,.. --sizes 8,64 --bytes B --index s
//   [--max-records M] sluice-peer-zmq rep  --bind EP --sizes 8,64 --round-trips N sluice-peer-zmq
//   req  --connect EP --sizes 8,64 --round-trips N
//
// PUSH/PULL: every pusher has one PUSH socket per puller and sends record i
// (one message per record) to puller (i + s) % T, N = min(B / size, M)
// records per size; each puller expects exactly its share, copies every
// record out and sums its key, and times from its first message to its last.
// A pusher starts a size once every puller has said hello for it is not
// needed: ZeroMQ queues (high-water mark 1000) until pullers read.
// REQ/REP: one record each way, timed per round trip after a warm-up, both
// blocking in zmq_recv. Each process prints one JSON line per size with its
// own figures (bench/peers/run adds the sides up).
#include <zmq.h>

#include "peer_common.h"

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "sluice-peer-zmq: %s: %s\n", what, zmq_strerror(zmq_errno()));
  std::exit(1);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// The records every pusher sends to puller t.
uint64_t share(uint64_t n, uint32_t senders, uint32_t targets, uint32_t t) {
  uint64_t k = 0;
  for (uint32_t s = 0; s < senders; ++s)
    for (uint64_t i = 0; i < n; ++i) k += (i + s) % targets == t;
  return k;
}

// One figure line of one process: records it moved, its own time and CPU.
void report(const char* role, uint32_t bytes, uint64_t records, double seconds, double cpu,
            double p50 = -1, double p99 = -1, double p999 = -1) {
  std::printf(
      "{\"role\": \"%s\", \"record_bytes\": %u, \"records\": %llu, \"seconds\": %.9f, "
      "\"cpu_seconds\": %.6f",
      role, bytes, static_cast<unsigned long long>(records), seconds, cpu);
  if (p50 >= 0)
    std::printf(", \"rtt_us_p50\": %.4f, \"rtt_us_p99\": %.4f, \"rtt_us_p999\": %.4f", p50, p99,
                p999);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: sluice-peer-zmq push|pull|req|rep [options] (see bench/peers/zmq_peer.cc)\n");
    return 2;
  }
  const std::string role = argv[1];
  const std::vector<uint32_t> sizes = peers::parse_list(peers::arg(argc, argv, "--sizes", "64"));
  const uint64_t bytes_total =
      std::strtoull(peers::arg(argc, argv, "--bytes", "67108864").c_str(), nullptr, 10);
  const uint64_t max_records =
      std::strtoull(peers::arg(argc, argv, "--max-records", "4000000").c_str(), nullptr, 10);
  const uint32_t round_trips = static_cast<uint32_t>(
      std::strtoul(peers::arg(argc, argv, "--round-trips", "10000").c_str(), nullptr, 10));
  const uint32_t index =
      static_cast<uint32_t>(std::atoi(peers::arg(argc, argv, "--index", "0").c_str()));
  void* ctx = zmq_ctx_new();
  std::vector<void*> socks;
  const int type = role == "push"   ? ZMQ_PUSH
                   : role == "pull" ? ZMQ_PULL
                   : role == "req"  ? ZMQ_REQ
                                    : ZMQ_REP;
  if (role == "pull" || role == "rep") {
    void* s = zmq_socket(ctx, type);
    if (zmq_bind(s, peers::arg(argc, argv, "--bind", "").c_str()) != 0) die("bind");
    socks.push_back(s);
    std::printf("{\"ready\": true}\n");
    std::fflush(stdout);
  } else {
    for (const std::string& ep : split(peers::arg(argc, argv, "--connect", ""))) {
      void* s = zmq_socket(ctx, type);
      if (zmq_connect(s, ep.c_str()) != 0) die("connect");
      socks.push_back(s);
    }
    if (socks.empty()) die("no --connect endpoints");
  }
  for (uint32_t bytes : sizes) {
    std::vector<unsigned char> rec = peers::make_record(bytes), buf(bytes), scratch(bytes);
    const uint64_t n = std::max<uint64_t>(1, std::min(bytes_total / bytes, max_records));
    if (role == "push") {
      const double cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
      const size_t t = socks.size();
      for (uint64_t i = 0; i < n; ++i) {
        peers::set_key(rec.data(), peers::key_of(index * n + i));
        if (zmq_send(socks[(i + index) % t], rec.data(), bytes, 0) < 0) die("send");
      }
      report("S", bytes, n, peers::now_seconds() - t0, peers::cpu_seconds() - cpu0);
    } else if (role == "pull") {
      const uint32_t senders =
          static_cast<uint32_t>(std::atoi(peers::arg(argc, argv, "--senders", "1").c_str()));
      const uint32_t targets =
          static_cast<uint32_t>(std::atoi(peers::arg(argc, argv, "--targets", "1").c_str()));
      const uint64_t expect = share(n, senders, targets, index);
      uint64_t sum = 0;
      double cpu0 = 0, t0 = 0;
      for (uint64_t i = 0; i < expect; ++i) {
        if (zmq_recv(socks[0], buf.data(), bytes, 0) < 0) die("recv");
        if (i == 0) cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
        sum += peers::take_record(buf.data(), scratch.data(), bytes);
      }
      report("T", bytes, expect, peers::now_seconds() - t0, peers::cpu_seconds() - cpu0);
      (void)sum;
    } else {
      const uint32_t rt = peers::round_trips_for(round_trips, bytes);
      const uint32_t warmup = std::min<uint32_t>(rt / 10 + 10, 1000);
      std::vector<double> rtt;
      const double cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
      for (uint32_t i = 0; i < warmup + rt; ++i) {
        if (role == "req") {
          const double s = peers::now_seconds();
          peers::set_key(rec.data(), peers::key_of(i));
          if (zmq_send(socks[0], rec.data(), bytes, 0) < 0) die("send");
          if (zmq_recv(socks[0], buf.data(), bytes, 0) < 0) die("recv");
          if (peers::take_record(buf.data(), scratch.data(), bytes) != peers::key_of(i))
            die("wrong reply");
          if (i >= warmup) rtt.push_back((peers::now_seconds() - s) * 1e6);
        } else {
          if (zmq_recv(socks[0], buf.data(), bytes, 0) < 0) die("recv");
          peers::take_record(buf.data(), scratch.data(), bytes);
          if (zmq_send(socks[0], buf.data(), bytes, 0) < 0) die("send");
        }
      }
      if (role == "req")
        report("S", bytes, rt, peers::now_seconds() - t0, peers::cpu_seconds() - cpu0,
               peers::percentile(rtt, 50), peers::percentile(rtt, 99),
               peers::percentile(rtt, 99.9));
      else
        report("T", bytes, rt, peers::now_seconds() - t0, peers::cpu_seconds() - cpu0);
    }
  }
  // A pusher's queued messages must still go out after close (linger: wait
  // up to 60 s); nothing else has anything left to send.
  const int linger = role == "push" ? 60000 : 0;
  for (void* s : socks) {
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
  return 0;
}
