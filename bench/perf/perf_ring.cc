#include "perf_ring.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "perf_clock.h"
#include "perf_records.h"
#include "perf_stats.h"

namespace sluice::tool::perf {
namespace {

inline void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The control block at the start of the mapping; slots follow at kSlotsOffset.
// Each side's hot word has a cache line of its own.
struct Shared {
  alignas(64) std::atomic<uint64_t> head;   // written by the producer
  alignas(64) std::atomic<uint64_t> tail;   // written by the consumer
  alignas(64) std::atomic<uint32_t> ready;  // children at the start line
  // Results, written by each child before it exits; read after waitpid.
  alignas(64) double seconds;
  double consumer_cpu;
  double producer_cpu;
  uint64_t consumed;
  uint64_t checksum;
  double rtt_us[3];  // ping-pong: p50, p99, p99.9
};
constexpr size_t kSlotsOffset = 4096;
static_assert(sizeof(Shared) <= kSlotsOffset);

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Both children start together so that neither's fork latency is timed.
void start_line(Shared* sh) {
  sh->ready.fetch_add(1, std::memory_order_acq_rel);
  while (sh->ready.load(std::memory_order_acquire) < 2) pause_cpu();
}

template <size_t B>
void produce(Shared* sh, unsigned char* slots, uint64_t mask, uint64_t n, uint64_t pub_mask) {
  Rec<B> r = make_template_record<B>();
  start_line(sh);
  const double cpu0 = process_cpu_seconds();
  const uint64_t capacity = mask + 1;
  uint64_t cached_tail = 0;
  for (uint64_t head = 0; head < n;) {
    if (head - cached_tail >= capacity) {
      cached_tail = sh->tail.load(std::memory_order_acquire);
      if (head - cached_tail >= capacity) {
        // Never wait with records unpublished: the consumer may be waiting on them.
        sh->head.store(head, std::memory_order_release);
        pause_cpu();
        continue;
      }
    }
    r.key = key_of(head);
    std::memcpy(slots + (head & mask) * B, &r, B);
    ++head;
    if ((head & pub_mask) == 0) sh->head.store(head, std::memory_order_release);
  }
  sh->head.store(n, std::memory_order_release);
  sh->producer_cpu = process_cpu_seconds() - cpu0;
}

template <size_t B>
void consume(Shared* sh, const unsigned char* slots, uint64_t mask, uint64_t n, uint64_t pub_mask) {
  Rec<B> scratch;
  uint64_t sum = 0;
  start_line(sh);
  const double cpu0 = process_cpu_seconds();
  const double t0 = now_seconds();
  uint64_t cached_head = 0;
  uint64_t tail = 0;
  while (tail < n) {
    if (tail == cached_head) {
      cached_head = sh->head.load(std::memory_order_acquire);
      if (tail == cached_head) {
        sh->tail.store(tail, std::memory_order_release);
        pause_cpu();
        continue;
      }
    }
    sum += take_record<B>(slots + (tail & mask) * B, &scratch);
    ++tail;
    if ((tail & pub_mask) == 0) sh->tail.store(tail, std::memory_order_release);
  }
  sh->tail.store(tail, std::memory_order_release);
  sh->seconds = now_seconds() - t0;
  sh->consumer_cpu = process_cpu_seconds() - cpu0;
  sh->consumed = tail;
  sh->checksum = sum;
}

// Why a child's wait status is a failure, or empty if it exited 0.
std::string describe_status(int status, const char* role) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  if (WIFSIGNALED(status)) {
    return std::string("the ring ") + role + " was killed by signal " +
           std::to_string(WTERMSIG(status));
  }
  return std::string("the ring ") + role + " exited with status " +
         std::to_string(WEXITSTATUS(status));
}

// Waits for both children in whatever order they end. If one fails, the other
// would spin forever on a ring nobody serves, so it is killed.
std::string reap_both(pid_t producer, pid_t consumer) {
  std::string why;
  int left = 2;
  while (left > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return why.empty() ? std::string("waitpid for the ring: ") + std::strerror(errno) : why;
    }
    if (pid != producer && pid != consumer) continue;
    --left;
    std::string w = describe_status(status, pid == producer ? "producer" : "consumer");
    if (!w.empty() && why.empty()) {
      why = w;
      if (left > 0) kill(pid == producer ? consumer : producer, SIGKILL);
    }
  }
  return why;
}

// Forks two children that run body(true) and body(false) and _exit(0), and
// waits for both. Returns why one failed, or "" if both exited 0. The
// children only spin, copy, read clocks and fill a vector, which is safe
// after fork() as this process has one thread (see the header).
std::string run_two_children(const std::function<void(bool)>& body) {
  auto spawn = [&](bool first) -> pid_t {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    body(first);
    _exit(0);
  };
  const pid_t second = spawn(false);
  if (second < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  const pid_t first = spawn(true);
  if (first < 0) {
    const int err = errno;
    kill(second, SIGKILL);
    waitpid(second, nullptr, 0);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  return reap_both(first, second);
}

// An anonymous MAP_SHARED mapping, zeroed (every page touched now, so that
// no page fault lands in a timed loop), unmapped on destruction.
class SharedMapping {
 public:
  explicit SharedMapping(size_t bytes) : bytes_(bytes) {
    mem_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem_ == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    std::memset(mem_, 0, bytes);
  }
  ~SharedMapping() { munmap(mem_, bytes_); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(mem_); }

 private:
  void* mem_;
  size_t bytes_;
};

}  // namespace

nlohmann::json run_ring(const RingOptions& o) {
  if (o.publish_every == 0 || (o.publish_every & (o.publish_every - 1)) != 0) {
    throw std::invalid_argument("publish_every must be a power of two");
  }
  // A power-of-two slot count keeps the index a mask, as a tuned ring would.
  uint64_t slots = 1;
  while (slots * 2 * o.record_bytes <= std::max<uint64_t>(kRingBytes, uint64_t{4} * o.record_bytes))
    slots *= 2;
  const SharedMapping map(kSlotsOffset + slots * o.record_bytes);
  auto* sh = new (map.get()) Shared{};
  unsigned char* ring = map.get() + kSlotsOffset;
  const uint64_t mask = slots - 1;
  const uint64_t pub_mask = o.publish_every - 1;
  std::string why = run_two_children([&](bool producer) {
    with_record_size(o.record_bytes, [&](auto b) {
      constexpr size_t B = decltype(b)::value;
      if (producer)
        produce<B>(sh, ring, mask, o.records, pub_mask);
      else
        consume<B>(sh, ring, mask, o.records, pub_mask);
    });
  });
  nlohmann::json run;
  if (why.empty()) {
    if (sh->consumed != o.records || sh->checksum != key_sum(0, o.records)) {
      why = "the ring consumer got " + std::to_string(sh->consumed) + " records of " +
            std::to_string(o.records) + " or a wrong checksum";
    }
    run = {{"records", o.records},
           {"seconds", sh->seconds},
           {"cpu_seconds", sh->consumer_cpu + sh->producer_cpu},
           {"src_cpu_seconds", sh->producer_cpu},
           {"tgt_cpu_seconds", sh->consumer_cpu}};
  }
  if (!why.empty()) throw std::runtime_error(why);
  return run;
}

namespace {

// One direction of the ping-pong: `seq` is the number of records written so
// far. The record shares seq's line when it fits beside it (at most 56 B:
// one line written, polled and read). A record of 64 B fills the line: its
// own last word is the publication (written last, with release order; the
// reader writes kTailEmpty back once it has read the record, before it
// answers, so the next record's tail shows). A larger one starts on the
// line after seq's, which the poll prefetches so that both lines travel
// together. This is the fastest layout of a count and a record known here
// (a flow's own layout does the same: docs/protocol.md), so the bound stays
// a bound.
struct Mailbox {
  alignas(64) std::atomic<uint64_t> seq;
};
constexpr size_t mailbox_record_offset(size_t record_bytes) {
  return record_bytes <= 56 ? 8 : record_bytes <= 64 ? 0 : 64;
}
constexpr bool mailbox_tail_published(size_t record_bytes) {
  return record_bytes > 56 && record_bytes <= 64;
}
constexpr uint64_t kTailEmpty = 0xA5E1D0C4B3F29687ULL;  // as a flow's (src/wire/layout.h)

inline std::atomic_ref<uint64_t> mailbox_tail(unsigned char* box, size_t record_bytes) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(box + record_bytes - 8));
}

template <size_t B>
void bounce(Shared* sh, unsigned char* out_box, unsigned char* in_box, uint32_t total,
            uint32_t warmup, bool initiator) {
  auto* out = reinterpret_cast<Mailbox*>(out_box);
  auto* in = reinterpret_cast<Mailbox*>(in_box);
  constexpr size_t kMailboxRecordOffset = mailbox_record_offset(B);
  constexpr bool kTail = mailbox_tail_published(B);
  // Writes the record and publishes it as round `i`.
  auto send = [&](const Rec<B>& rec, uint32_t i) {
    if constexpr (kTail) {
      static_assert(B == 64 && kMailboxRecordOffset == 0);
      uint64_t tail;
      std::memcpy(out_box, &rec, B - 8);
      std::memcpy(&tail, reinterpret_cast<const unsigned char*>(&rec) + B - 8, 8);
      mailbox_tail(out_box, B).store(tail, std::memory_order_release);
    } else {
      std::memcpy(out_box + kMailboxRecordOffset, &rec, B);
      // Release: the record's bytes are visible before the new count (pairs with the peer's acquire
      // below).
      out->seq.store(i + 1, std::memory_order_release);
    }
  };
  Rec<B> r = make_template_record<B>();
  Rec<B> scratch;
  std::vector<double> rtt;
  if (initiator) rtt.reserve(total);
  start_line(sh);
  const CpuTimer t;
  for (uint32_t i = 0; i < total; ++i) {
    const double t0 = initiator ? now_seconds() : 0;
    if (initiator) {
      r.key = key_of(i);
      send(r, i);
    }
    for (;;) {
      if constexpr (kTail) {
        if (mailbox_tail(in_box, B).load(std::memory_order_acquire) != kTailEmpty) break;
      } else {
        const uint64_t seq = in->seq.load(std::memory_order_acquire);
        if constexpr (kMailboxRecordOffset >= 64) __builtin_prefetch(in_box + kMailboxRecordOffset);
        if (seq >= i + 1) break;
      }
      pause_cpu();
    }
    r.key = take_record<B>(in_box + kMailboxRecordOffset, &scratch);
    // Read: the box may take the next record (the answer below orders this first).
    if constexpr (kTail) mailbox_tail(in_box, B).store(kTailEmpty, std::memory_order_relaxed);
    if (initiator) {
      if (r.key != key_of(i)) _exit(3);
      if (i >= warmup) rtt.push_back((now_seconds() - t0) * 1e6);
    } else {
      send(r, i);
    }
  }
  if (initiator) {
    sh->seconds = t.seconds();
    sh->producer_cpu = t.cpu_seconds();
    sh->rtt_us[0] = percentile(rtt, 50);
    sh->rtt_us[1] = percentile(rtt, 99);
    sh->rtt_us[2] = percentile(rtt, 99.9);
  } else {
    sh->consumer_cpu = t.cpu_seconds();
  }
}

}  // namespace

nlohmann::json run_shm_pingpong(uint32_t record_bytes, uint32_t round_trips) {
  const uint32_t warmup = warmup_for(round_trips);
  // Each box on pairs of lines of its own (the spatial prefetcher fetches pairs).
  const size_t box = (mailbox_record_offset(record_bytes) + record_bytes + 127) / 128 * 128;
  const SharedMapping map(kSlotsOffset + 2 * box);
  auto* sh = new (map.get()) Shared{};
  unsigned char* a = map.get() + kSlotsOffset;  // initiator -> responder
  unsigned char* b = a + box;                   // responder -> initiator
  new (a) Mailbox{};
  new (b) Mailbox{};
  if (mailbox_tail_published(record_bytes)) {
    mailbox_tail(a, record_bytes).store(kTailEmpty);
    mailbox_tail(b, record_bytes).store(kTailEmpty);
  }
  const std::string why = run_two_children([&](bool initiator) {
    with_record_size(record_bytes, [&](auto sz) {
      constexpr size_t B = decltype(sz)::value;
      bounce<B>(sh, initiator ? a : b, initiator ? b : a, warmup + round_trips, warmup, initiator);
    });
  });
  nlohmann::json run;
  if (why.empty()) {
    run = {{"records", round_trips},
           {"seconds", sh->seconds},
           {"cpu_seconds", sh->producer_cpu + sh->consumer_cpu},
           {"src_cpu_seconds", sh->producer_cpu},
           {"tgt_cpu_seconds", sh->consumer_cpu},
           {"rtt_us_p50", sh->rtt_us[0]},
           {"rtt_us_p99", sh->rtt_us[1]},
           {"rtt_us_p999", sh->rtt_us[2]}};
  }
  if (!why.empty()) throw std::runtime_error("shm ping-pong: " + why);
  return run;
}

nlohmann::json run_memcpy(uint32_t record_bytes, uint64_t records) {
  const uint64_t buf_bytes = std::max<uint64_t>(kRingBytes, uint64_t{4} * record_bytes);
  std::vector<unsigned char> buf(buf_bytes, 0);
  const uint64_t slots = buf_bytes / record_bytes;
  double seconds = 0, cpu = 0;
  with_record_size(record_bytes, [&](auto sz) {
    constexpr size_t B = decltype(sz)::value;
    auto r = std::make_unique<Rec<B>>();
    fill_template_record(r.get());
    const CpuTimer t;
    uint64_t slot = 0;
    for (uint64_t i = 0; i < records; ++i) {
      r->key = key_of(i);
      std::memcpy(buf.data() + slot * B, r.get(), B);
      if (++slot == slots) slot = 0;
      // Keep the stores: the compiler must assume the buffer is read.
      asm volatile("" : : "r"(buf.data()) : "memory");
    }
    seconds = t.seconds();
    cpu = t.cpu_seconds();
  });
  return {
      {"records", records}, {"seconds", seconds}, {"cpu_seconds", cpu}, {"src_cpu_seconds", cpu}};
}

}  // namespace sluice::tool::perf
