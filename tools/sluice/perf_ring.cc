#include "perf_ring.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "perf_records.h"

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
};
constexpr size_t kSlotsOffset = 4096;
static_assert(sizeof(Shared) <= kSlotsOffset);

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double cpu_seconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
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
  const double cpu0 = cpu_seconds();
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
  sh->producer_cpu = cpu_seconds() - cpu0;
}

template <size_t B>
void consume(Shared* sh, const unsigned char* slots, uint64_t mask, uint64_t n, uint64_t pub_mask) {
  Rec<B> scratch;
  uint64_t sum = 0;
  start_line(sh);
  const double cpu0 = cpu_seconds();
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
  sh->consumer_cpu = cpu_seconds() - cpu0;
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

}  // namespace

Run run_ring(const RingOptions& o) {
  if (o.publish_every == 0 || (o.publish_every & (o.publish_every - 1)) != 0) {
    throw std::invalid_argument("publish_every must be a power of two");
  }
  // A power-of-two slot count keeps the index a mask, as a tuned ring would.
  uint64_t slots = 1;
  while (slots * 2 * o.record_bytes <= kRingBytes) slots *= 2;
  const size_t map_bytes = kSlotsOffset + slots * o.record_bytes;
  void* mem = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    throw std::runtime_error(std::string("mmap of the ring: ") + std::strerror(errno));
  // Touch every page now so that no page fault lands in the timed loop.
  std::memset(mem, 0, map_bytes);
  auto* sh = new (mem) Shared{};
  unsigned char* ring = static_cast<unsigned char*>(mem) + kSlotsOffset;
  const uint64_t mask = slots - 1;
  const uint64_t pub_mask = o.publish_every - 1;

  auto spawn = [&](bool producer) -> pid_t {
    pid_t pid = fork();
    if (pid != 0) return pid;
    // The child only spins, copies and reads clocks (no allocation, no
    // locks), which is safe after fork() whatever the parent's state.
    with_record_size(o.record_bytes, [&](auto b) {
      constexpr size_t B = decltype(b)::value;
      if (producer)
        produce<B>(sh, ring, mask, o.records, pub_mask);
      else
        consume<B>(sh, ring, mask, o.records, pub_mask);
    });
    _exit(0);
  };
  const pid_t consumer = spawn(false);
  if (consumer < 0) {
    munmap(mem, map_bytes);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  const pid_t producer = spawn(true);
  if (producer < 0) {
    const int err = errno;
    kill(consumer, SIGKILL);
    waitpid(consumer, nullptr, 0);
    munmap(mem, map_bytes);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  std::string why = reap_both(producer, consumer);
  Run run;
  if (why.empty()) {
    if (sh->consumed != o.records || sh->checksum != key_sum(0, o.records)) {
      why = "the ring consumer got " + std::to_string(sh->consumed) + " records of " +
            std::to_string(o.records) + " or a wrong checksum";
    }
    run.records = static_cast<double>(o.records);
    run.seconds = sh->seconds;
    run.cpu_seconds = sh->consumer_cpu + sh->producer_cpu;
  }
  munmap(mem, map_bytes);
  if (!why.empty()) throw std::runtime_error(why);
  return run;
}

}  // namespace sluice::tool::perf
