// The program system tests run under `sluice run`: one configurable shuffle
// with exactly-once verification. Each rank runs one thread per source slot
// and one per target slot. On success rank 0 prints a line starting with
// "VERIFIED"; any rank that finds a problem prints "FAILED: ..." and exits 1.
//
//   sluice-test-worker --sources 0,1 --targets 2,3 --slots 2 --tuples 100000
//       [--bytes] [--latency] [--slow-consumer-us N] [--segment-bytes B]
//       [--ring-segments S] [--mark-after N]
//       [--expect-peer-lost R] [--no-leave] [--wide-on-rank R]
//
// Fault tests: --mark-after N makes every source print "AT rank R source S
// record N" at its record N, where the test's injector kills or stops a
// rank from outside; with --expect-peer-lost R every other rank must see
// PeerLost naming R and prints "PEERLOST at_us T: <error>" (CLOCK_REALTIME
// microseconds at its report, for the test to time against the injection),
// then leaves (--no-leave: lets the Cluster's destructor end what its
// failed endpoints left).
#include <signal.h>
#include <sluice/sluice.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/job_args.h"

namespace {

struct Tuple {
  uint64_t key;
  uint64_t value;  // source index << 32 | sequence
};
struct WideTuple {  // a different record size, to provoke a spec mismatch
  uint64_t key;
  uint64_t value;
  uint64_t pad;
};

struct Args {
  std::vector<uint32_t> sources, targets;
  uint32_t slots = 1;
  uint64_t tuples = 10000;  // per source endpoint
  bool bytes = false;
  bool latency = false;
  uint32_t slow_us = 0;
  uint32_t segment_bytes = 0;
  uint32_t ring_segments = 0;
  int64_t mark_after = -1;  // each source prints "AT rank R source S record N" at record N
  bool no_leave = false;    // after a PeerLost report, end without Cluster::leave()
  int64_t expect_lost = -1;
  int64_t wide_rank = -1;
};

std::vector<uint32_t> parse_list(const std::string& s) {
  std::vector<uint32_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    out.push_back(static_cast<uint32_t>(std::stoul(item)));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  std::string sources, targets;
  sluice::testing::JobArgs(argc, argv,
                           "--sources R,R... --targets R,R... [--slots S] [--tuples N] "
                           "[--bytes] [--latency] [--slow-consumer-us N] [--segment-bytes B] "
                           "[--ring-segments S] [--mark-after N] [--expect-peer-lost R] "
                           "[--wide-on-rank R]")
      .value("--sources", &sources)
      .value("--targets", &targets)
      .value("--slots", &a.slots)
      .value("--tuples", &a.tuples)
      .flag("--bytes", &a.bytes)
      .flag("--latency", &a.latency)
      .value("--slow-consumer-us", &a.slow_us)
      .value("--segment-bytes", &a.segment_bytes)
      .value("--ring-segments", &a.ring_segments)
      .value("--mark-after", &a.mark_after)
      .flag("--no-leave", &a.no_leave)
      .value("--expect-peer-lost", &a.expect_lost)
      .value("--wide-on-rank", &a.wide_rank)
      .parse();
  a.sources = parse_list(sources);
  a.targets = parse_list(targets);
  return a;
}

uint64_t fingerprint(uint64_t key, uint64_t value) {
  return sluice::hash64(key ^ sluice::hash64(value + 0x9e3779b97f4a7c15ULL));
}

std::vector<sluice::Endpoint> endpoints(const std::vector<uint32_t>& ranks, uint32_t slots) {
  std::vector<sluice::Endpoint> out;
  for (uint32_t r : ranks)
    for (uint32_t s = 0; s < slots; ++s) out.push_back({r, s});
  return out;
}

int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Shared {
  std::mutex mu;
  std::vector<uint64_t> sent;      // per target: count, checksum
  std::vector<uint64_t> received;  // per target: count, checksum
  std::vector<std::string> errors;
  std::vector<std::string> lost;  // PeerLost messages
  uint64_t backpressured = 0;     // try_push calls that found a full ring
  void error(const std::string& e) {
    std::lock_guard<std::mutex> l(mu);
    errors.push_back(e);
  }
};

// Byte records of varying length (0..300 bytes) whose content derives from
// (key, value), so the target can re-derive and check every byte.
size_t make_record(uint64_t key, uint64_t value, std::byte* buf) {
  const size_t extra = sluice::hash64(value) % 285;
  std::memcpy(buf, &key, 8);
  std::memcpy(buf + 8, &value, 8);
  for (size_t i = 0; i < extra; ++i) buf[16 + i] = static_cast<std::byte>((key >> (i % 8)) + i);
  return 16 + extra;
}

bool check_record(std::span<const std::byte> rec, uint64_t* key, uint64_t* value) {
  if (rec.size() < 16) return false;
  std::memcpy(key, rec.data(), 8);
  std::memcpy(value, rec.data() + 8, 8);
  std::byte expect[512];
  return make_record(*key, *value, expect) == rec.size() &&
         std::memcmp(expect, rec.data(), rec.size()) == 0;
}

template <class Out>
void run_source(const Args& a, sluice::Cluster& c, Out& out, uint32_t source_index, Shared* sh,
                uint32_t ntargets) {
  std::vector<uint64_t> sent(2 * ntargets, 0);
  std::vector<uint64_t> delivered(ntargets, 0);
  uint64_t backpressured = 0;
  std::byte buf[512];
  // Source::delivered(t): never more than was sent to t, never less than
  // the last time it was asked.
  auto check_delivered = [&](const char* when) {
    for (uint32_t t = 0; t < ntargets; ++t) {
      const uint64_t d = out.delivered(t);
      if (d > sent[2 * t] || d < delivered[t]) {
        sh->error("source " + std::to_string(source_index) + " " + when + ": delivered(" +
                  std::to_string(t) + ") = " + std::to_string(d) + " with " +
                  std::to_string(sent[2 * t]) + " records sent and " +
                  std::to_string(delivered[t]) + " delivered before");
      }
      delivered[t] = d;
    }
  };
  for (uint64_t i = 0; i < a.tuples; ++i) {
    if ((i & 0xffff) == 0) check_delivered("while pushing");
    if (static_cast<int64_t>(i) == a.mark_after) {
      // Where a fault test's injector (sluice run --faults-after, or the
      // multihost test itself) kills or stops a rank; no rank is told which.
      std::printf("AT rank %u source %u record %llu\n", c.rank(), source_index,
                  static_cast<unsigned long long>(i));
      std::fflush(stdout);
    }
    const uint64_t key = sluice::hash64(i * 0x9e3779b97f4a7c15ULL + source_index);
    const uint64_t value = uint64_t{source_index} << 32 | i;
    sluice::Status s;
    uint32_t t;
    if constexpr (std::is_same_v<Out, sluice::Source<sluice::Bytes>>) {
      const size_t n = make_record(key, value, buf);
      // Route explicitly by key so the test can account per target.
      t = static_cast<uint32_t>(key % ntargets);
      s = out.try_push_to(t, std::span<const std::byte>(buf, n));
      if (s == sluice::Status::kWouldBlock) {
        ++backpressured;
        s = out.push_to(t, std::span<const std::byte>(buf, n));
      }
    } else {
      Tuple tup{key, value};
      t = out.target_of(tup);
      s = out.try_push_to(t, tup);
      if (s == sluice::Status::kWouldBlock) {
        ++backpressured;
        s = out.push_to(t, tup);
      }
    }
    if (s != sluice::Status::kOk) {
      check_delivered("after a failed push");
      if (s == sluice::Status::kPeerLost) {
        std::lock_guard<std::mutex> l(sh->mu);
        sh->lost.push_back(out.error());
      } else {
        sh->error(std::string("push: ") + sluice::to_string(s) + ": " + out.error());
      }
      return;
    }
    sent[2 * t] += 1;
    sent[2 * t + 1] += fingerprint(key, value);
  }
  sluice::Status s = out.close();
  check_delivered("after close");
  if (s == sluice::Status::kPeerLost) {
    std::lock_guard<std::mutex> l(sh->mu);
    sh->lost.push_back(out.error());
    return;
  }
  if (s != sluice::Status::kOk)
    return sh->error(std::string("close: ") + sluice::to_string(s) + ": " + out.error());
  std::lock_guard<std::mutex> l(sh->mu);
  for (size_t i = 0; i < sent.size(); ++i) sh->sent[i] += sent[i];
  sh->backpressured += backpressured;
}

template <class In>
void run_target(const Args& a, In& in, uint32_t target_index, uint32_t nsources, Shared* sh) {
  uint64_t count = 0, sum = 0;
  std::vector<int64_t> last(nsources, -1);
  std::vector<uint64_t> from(nsources, 0);  // records consumed per source
  // Target::received(s) is exactly what was consumed from s, lost or not.
  auto check_received = [&] {
    for (uint32_t src = 0; src < nsources; ++src) {
      if (in.received(src) != from[src]) {
        sh->error("target " + std::to_string(target_index) + ": received(" + std::to_string(src) +
                  ") = " + std::to_string(in.received(src)) + ", " + std::to_string(from[src]) +
                  " consumed");
      }
    }
  };
  auto take = [&](uint64_t key, uint64_t value) -> bool {
    const uint64_t src = value >> 32;
    const int64_t seq = static_cast<int64_t>(value & 0xffffffffULL);
    if (src >= nsources || seq <= last[src]) {
      sh->error("target " + std::to_string(target_index) + ": record from source " +
                std::to_string(src) + " seq " + std::to_string(seq) +
                " out of order or duplicated");
      return false;
    }
    last[src] = seq;
    ++from[src];
    ++count;
    sum += fingerprint(key, value);
    return true;
  };
  for (;;) {
    bool ok = true;
    if constexpr (std::is_same_v<In, sluice::Target<sluice::Bytes>>) {
      auto batch = in.consume();
      if (!batch) break;
      for (std::span<const std::byte> rec : *batch) {
        uint64_t k, v;
        if (!check_record(rec, &k, &v)) {
          sh->error("target " + std::to_string(target_index) + ": corrupt byte record of " +
                    std::to_string(rec.size()) + " bytes");
          return;
        }
        ok &= take(k, v);
      }
    } else {
      auto batch = in.consume();
      if (!batch) break;
      for (const Tuple& t : *batch) ok &= take(t.key, t.value);
    }
    if (!ok) return;
    if (a.slow_us) ::usleep(a.slow_us);  // a deliberately slow consumer, to force back-pressure
  }
  check_received();
  if (in.status() == sluice::Status::kPeerLost) {
    std::lock_guard<std::mutex> l(sh->mu);
    sh->lost.push_back(in.error());
    return;
  }
  if (in.status() != sluice::Status::kEndOfFlow) {
    return sh->error(std::string("consume: ") + sluice::to_string(in.status()) + ": " + in.error());
  }
  std::lock_guard<std::mutex> l(sh->mu);
  sh->received[2 * target_index] += count;
  sh->received[2 * target_index + 1] += sum;
}

template <class SpecT>
void configure(SpecT& spec, const Args& a) {
  if (a.latency) spec.optimize(sluice::Optimize::kLatency);
  if (a.segment_bytes) spec.segment_bytes(a.segment_bytes);
  if (a.ring_segments) spec.ring_segments(a.ring_segments);
}

std::string encode(const std::vector<uint64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}
std::vector<uint64_t> decode(const std::string& s) {
  std::vector<uint64_t> v(s.size() / 8);
  std::memcpy(v.data(), s.data(), v.size() * 8);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  try {
    auto c = sluice::Cluster::join();
    const auto srcs = endpoints(a.sources, a.slots);
    const auto tgts = endpoints(a.targets, a.slots);
    Shared sh;
    sh.sent.assign(2 * tgts.size(), 0);
    sh.received.assign(2 * tgts.size(), 0);
    std::vector<std::thread> threads;

    if (static_cast<int64_t>(c.rank()) == a.wide_rank) {
      auto spec =
          sluice::shuffle<WideTuple>("test").sources(srcs).targets(tgts).key(&WideTuple::key);
      configure(spec, a);
      auto flow = c.declare(spec);  // expected to throw SpecMismatch
      std::printf("FAILED: declare with a different record size succeeded\n");
      return 1;
    }
    // Fault tests: an endpoint that ended (a failure included) is destroyed
    // only once every survivor's endpoints have ended (a barrier of the
    // survivors), as a program that keeps its endpoints to the end would.
    // So a survivor's source must learn of a failed target from the target
    // itself, not from its destruction: a failed target that returned no
    // credit, held, left a survivor's source waiting on a live rank until
    // the barrier timed out (a multihost fault test run that took 100 s),
    // until a target that fails for good told its sources at once.
    std::atomic<size_t> ended{0};
    std::promise<void> release;
    const std::shared_future<void> released = release.get_future().share();
    auto hold = [&] {
      if (a.expect_lost < 0) return;
      ended.fetch_add(1);
      released.wait();
    };
    auto run = [&](auto& spec) {
      configure(spec, a);
      auto flow = c.declare(spec);  // destroyed after the threads below ended
      for (uint32_t i = 0; i < srcs.size(); ++i) {
        if (srcs[i].rank != c.rank()) continue;
        threads.emplace_back([&, i, out = c.source(spec, srcs[i].slot)]() mutable {
          run_source(a, c, out, i, &sh, static_cast<uint32_t>(tgts.size()));
          hold();
        });
      }
      for (uint32_t i = 0; i < tgts.size(); ++i) {
        if (tgts[i].rank != c.rank()) continue;
        threads.emplace_back([&, i, in = c.target(spec, tgts[i].slot)]() mutable {
          run_target(a, in, i, static_cast<uint32_t>(srcs.size()), &sh);
          hold();
        });
      }
      if (a.expect_lost >= 0) {
        while (ended.load() < threads.size())
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::vector<sluice::Endpoint> survivors;
        for (uint32_t r = 0; r < c.world_size(); ++r) {
          if (static_cast<int64_t>(r) != a.expect_lost) survivors.push_back(sluice::Endpoint{r, 0});
        }
        try {
          c.barrier("endpoints-ended", survivors, 0,
                    sluice::Deadline::clock::now() + std::chrono::seconds(60));
        } catch (const std::exception& e) {
          sh.error(std::string("the survivors' barrier failed: ") + e.what());
        }
        release.set_value();
      }
      for (auto& t : threads) t.join();
    };
    if (a.bytes) {
      auto spec =
          sluice::shuffle<sluice::Bytes>("test").sources(srcs).targets(tgts).explicit_targets();
      run(spec);
    } else {
      auto spec = sluice::shuffle<Tuple>("test").sources(srcs).targets(tgts).key(&Tuple::key);
      run(spec);
    }

    if (a.expect_lost >= 0) {
      // Fault test: this rank must have seen PeerLost naming the killed rank.
      const std::string needle = "rank " + std::to_string(a.expect_lost);
      // Other endpoints may fail second-hand (a source that gave up is
      // destroyed without close()); at least one must name the lost rank.
      const std::string* naming = nullptr;
      for (const auto& m : sh.lost) {
        if (m.find(needle) != std::string::npos) naming = &m;
      }
      const bool named = naming != nullptr;
      const int64_t detected_us = realtime_ns() / 1000;
      bool involved = false;
      for (auto r : a.sources) involved |= r == c.rank();
      for (auto r : a.targets) involved |= r == c.rank();
      if (!involved) return 0;
      if (!named || !sh.errors.empty()) {
        std::printf(
            "FAILED: expected PeerLost naming %s; lost=%zu errors=%zu%s%s\n", needle.c_str(),
            sh.lost.size(), sh.errors.size(),
            sh.lost.empty() ? "" : " first lost: ", sh.lost.empty() ? "" : sh.lost[0].c_str());
        for (auto& e : sh.errors) std::printf("  error: %s\n", e.c_str());
        return 1;
      }
      // The injector knows when the fault was; the test subtracts.
      std::printf("PEERLOST at_us %lld: %s\n", static_cast<long long>(detected_us),
                  naming->c_str());
      // What the failed endpoints left (their abort messages over ofi) ends
      // in leave(), not in the Cluster's destructor.
      if (!a.no_leave) (void)c.leave(sluice::Clock::now() + std::chrono::seconds(10));
      return 0;
    }

    if (!sh.lost.empty()) sh.errors.push_back("unexpected PeerLost: " + sh.lost[0]);
    for (auto& e : sh.errors) std::printf("FAILED: %s\n", e.c_str());
    auto sent_all = c.allgather("sent", encode(sh.sent));
    auto recv_all = c.allgather("received", encode(sh.received));
    auto ok_all = c.allgather("ok", sh.errors.empty() ? "1" : "0");
    auto bp_all = c.allgather("backpressured", std::to_string(sh.backpressured));
    if (c.leave() != sluice::Status::kOk) sh.errors.push_back("leave() did not finish cleanly");
    if (c.rank() == 0) {
      std::vector<uint64_t> sent(2 * tgts.size(), 0), recv(2 * tgts.size(), 0);
      for (auto& s : sent_all) {
        auto v = decode(s);
        for (size_t i = 0; i < v.size(); ++i) sent[i] += v[i];
      }
      for (auto& s : recv_all) {
        auto v = decode(s);
        for (size_t i = 0; i < v.size(); ++i) recv[i] += v[i];
      }
      bool ok = true;
      for (auto& s : ok_all) ok &= s == "1";
      uint64_t total = 0;
      for (size_t t = 0; t < tgts.size(); ++t) {
        total += recv[2 * t];
        if (sent[2 * t] != recv[2 * t] || sent[2 * t + 1] != recv[2 * t + 1]) {
          std::printf("FAILED: target %zu received %" PRIu64 " (sum %016" PRIx64
                      ") but was sent %" PRIu64 " (sum %016" PRIx64 ")\n",
                      t, recv[2 * t], recv[2 * t + 1], sent[2 * t], sent[2 * t + 1]);
          ok = false;
        }
      }
      const uint64_t expected = a.tuples * srcs.size();
      if (total != expected) {
        std::printf("FAILED: %" PRIu64 " records delivered, %" PRIu64 " expected\n", total,
                    expected);
        ok = false;
      }
      if (!ok) return 1;
      uint64_t bp = 0;
      for (auto& s : bp_all) bp += std::stoull(s);
      std::printf("VERIFIED %" PRIu64
                  " records, %zu sources, %zu targets, exactly once, per-source order, "
                  "backpressured %" PRIu64 " times, %.2f s\n",
                  total, srcs.size(), tgts.size(), bp,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return sh.errors.empty() ? 0 : 1;
  } catch (const sluice::Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
}
