#include "observe/endpoint_counters.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::detail::counters {
namespace {

constexpr size_t kAreaBytes = kHeaderBytes + kSlots * kSlotBytes;

struct Area {
  Mutex mu;
  bool tried = false;
  AreaHeader* header = nullptr;
  Slot* slots = nullptr;
  Slot spare{};  // what acquire() hands out when there is no area, or it is full
  // Final readings of destroyed endpoints, oldest first (at most kRetired).
  std::deque<Reading> retired SLUICE_GUARDED_BY(mu);
  // Per slot and peer, the segment count stamp_peers() last saw.
  uint64_t stamped[kSlots][kPeerDetail] SLUICE_GUARDED_BY(mu) = {};
};

// Constructed on first use and never destroyed: endpoints may outlive
// static destruction order, and the mapping dies with the process anyway.
Area& area() {
  static Area* a = new Area();
  return *a;
}

// Maps the area; false (and counting goes to the spare slot) if it cannot.
bool map_locked(Area& a) {
  if (a.tried) return a.header != nullptr;
  a.tried = true;
  const std::string name(kAreaName);
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    log::warn("counters: memfd_create failed (", std::strerror(errno),
              "): `sluice top` will not see this process");
    return false;
  }
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(kAreaBytes)) == 0) {
    ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    p = ::mmap(nullptr, kAreaBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    log::warn("counters: cannot size or map the counters area (", std::strerror(errno),
              "): `sluice top` will not see this process");
    ::close(fd);
    return false;
  }
  // The fd stays open: it is how readers find the area (/proc/<pid>/fd).
  a.header = static_cast<AreaHeader*>(p);
  a.slots = reinterpret_cast<Slot*>(static_cast<std::byte*>(p) + kHeaderBytes);
  a.header->version = kVersion;
  a.header->slots = kSlots;
  a.header->slot_bytes = kSlotBytes;
  a.header->pid = ::getpid();
  a.header->rank = -1;
  a.header->created_ns = now_ns();
  std::atomic_thread_fence(std::memory_order_release);
  a.header->magic = kMagic;
  return true;
}

void copy_text(char* dst, size_t cap, std::string_view src) {
  const size_t n = std::min(cap - 1, src.size());
  if (n != 0) std::memcpy(dst, src.data(), n);  // an empty view's data() may be null
  std::memset(dst + n, 0, cap - n);
}

bool same_endpoint(const Reading& r, std::string_view flow, Role role, uint32_t rank,
                   uint32_t slot) {
  return r.role == role && r.rank == rank && r.slot == slot && r.flow == flow;
}

}  // namespace

const char* to_string(Role r) {
  switch (r) {
    case Role::kSource:
      return "source";
    case Role::kTarget:
      return "target";
    case Role::kRegion:
      return "region";
  }
  return "?";
}

const char* to_string(State s) {
  switch (s) {
    case State::kFree:
      return "free";
    case State::kOpen:
      return "open";
    case State::kClosing:
      return "closing";
    case State::kEnded:
      return "ended";
    case State::kFailed:
      return "failed";
    case State::kAborted:
      return "aborted";
    case State::kDestroyed:
      return "destroyed";
  }
  return "?";
}

namespace {
uint64_t coarse_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

void heard_first(Slot* slot, uint32_t i) {
  slot->peer_heard_ns[i].store(coarse_now_ns(), std::memory_order_relaxed);
}

Reading read_slot(const Slot& s) {
  Reading r;
  r.state = static_cast<State>(s.state.load(std::memory_order_acquire));
  r.flow.assign(s.flow, strnlen(s.flow, sizeof(s.flow)));
  r.role = static_cast<Role>(s.role);
  r.rank = s.rank;
  r.slot = s.slot;
  r.peers = s.peers;
  r.record_size = s.record_size;
  r.opened_ns = s.opened_ns;
  if (r.state == State::kFailed) r.cause.assign(s.cause, strnlen(s.cause, sizeof(s.cause)));
  r.segments = s.segments.load(std::memory_order_relaxed);
  r.bytes = s.bytes.load(std::memory_order_relaxed);
  r.credit_waits = s.credit_waits.load(std::memory_order_relaxed);
  r.credit_wait_ns = s.credit_wait_ns.load(std::memory_order_relaxed);
  r.parks = s.parks.load(std::memory_order_relaxed);
  r.ops = s.ops.load(std::memory_order_relaxed);
  r.op_timeouts = s.op_timeouts.load(std::memory_order_relaxed);
  r.op_failures = s.op_failures.load(std::memory_order_relaxed);
  r.ring_segments = s.ring_segments;
  r.ring_fill = s.ring_fill.load(std::memory_order_relaxed);
  r.park_ns = s.park_ns.load(std::memory_order_relaxed);
  // (Since first: a wait that ends between the two loads reads as none.)
  const uint64_t since = s.waiting_since_ns.load(std::memory_order_acquire);
  const uint64_t peer = s.waiting_peer.load(std::memory_order_acquire);
  if (since != 0 && peer != 0) {
    r.waiting_peer = static_cast<uint32_t>(peer - 1);
    r.waiting_since_ns = since;
  }
  r.peer_detail = read_peers(s);
  return r;
}

std::vector<PeerReading> read_peers(const Slot& slot) {
  std::vector<PeerReading> out;
  const uint32_t n = std::min(slot.peers, kPeerDetail);
  const uint64_t ended = slot.peer_ended.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back({slot.peer_rank[i], slot.peer_slot[i],
                   slot.peer_heard_ns[i].load(std::memory_order_relaxed), ((ended >> i) & 1) != 0,
                   slot.peer_taken[i].load(std::memory_order_relaxed)});
  }
  return out;
}

uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Slot* acquire(Role role, std::string_view flow, uint32_t rank, uint32_t slot_number, uint32_t peers,
              uint32_t record_size, uint32_t ring_segments) {
  Area& a = area();
  MutexLock lock(a.mu);
  Slot* slot = &a.spare;
#ifndef SLUICE_NO_COUNTERS
  const bool counting = true;
#else
  const bool counting = false;
#endif
  if (counting && map_locked(a)) {
    for (uint32_t i = 0; i < kSlots; ++i) {
      const State s = static_cast<State>(a.slots[i].state.load(std::memory_order_relaxed));
      if (s == State::kFree || s == State::kDestroyed) {
        slot = &a.slots[i];
        break;
      }
    }
  }
  // A reader compares generations around its copy: odd while rewriting.
  slot->generation.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot->role = static_cast<uint32_t>(role);
  slot->rank = rank;
  slot->slot = slot_number;
  slot->peers = peers;
  slot->record_size = record_size;
  slot->ring_segments = ring_segments;
  slot->opened_ns = now_ns();
  copy_text(slot->flow, sizeof(slot->flow), flow);
  copy_text(slot->cause, sizeof(slot->cause), {});
  for (std::atomic<uint64_t>* c :
       {&slot->segments, &slot->bytes, &slot->credit_waits, &slot->credit_wait_ns, &slot->parks,
        &slot->ops, &slot->op_timeouts, &slot->op_failures, &slot->peer_ended, &slot->ring_fill,
        &slot->park_ns, &slot->waiting_peer, &slot->waiting_since_ns}) {
    c->store(0, std::memory_order_relaxed);
  }
  for (uint32_t i = 0; i < kPeerDetail; ++i) {
    slot->peer_rank[i] = slot->peer_slot[i] = 0;
    slot->peer_heard_ns[i].store(0, std::memory_order_relaxed);
    slot->peer_taken[i].store(0, std::memory_order_relaxed);
  }
  if (slot != &a.spare) {
    for (uint64_t& n : a.stamped[slot - a.slots]) n = 0;
  }
  slot->generation.fetch_add(1, std::memory_order_release);
  slot->state.store(static_cast<uint32_t>(State::kOpen), std::memory_order_release);
  // A new endpoint of a flow name used before: the old one's final reading
  // is superseded (Prometheus sees its counters restart).
  std::erase_if(a.retired, [&](const Reading& r) {
    return same_endpoint(r, slot->flow, role, rank, slot_number);
  });
  return slot;
}

bool is_spare(const Slot* slot) { return slot == &area().spare; }

void set_peer(Slot* slot, uint32_t i, uint32_t rank, uint32_t slot_number) {
  if (i >= kPeerDetail) return;
  Area& a = area();
  MutexLock lock(a.mu);
  slot->peer_rank[i] = rank;
  slot->peer_slot[i] = slot_number;
}

void release(Slot* slot) {
  Area& a = area();
  MutexLock lock(a.mu);
  if (slot == &a.spare) return;
  // The endpoint's thread is done with the slot: its last counters are final.
  if (a.retired.size() == kRetired) a.retired.pop_front();
  a.retired.push_back(read_slot(*slot));
  slot->state.store(static_cast<uint32_t>(State::kDestroyed), std::memory_order_release);
}

namespace {
// stamp_peers() with the area's mutex held.
void stamp_locked(Area& a) SLUICE_REQUIRES(a.mu) {
  if (a.header == nullptr) return;
  const uint64_t now = coarse_now_ns();
  for (uint32_t k = 0; k < kSlots; ++k) {
    Slot& s = a.slots[k];
    const auto state = static_cast<State>(s.state.load(std::memory_order_acquire));
    if (state == State::kFree || state == State::kDestroyed ||
        s.role != static_cast<uint32_t>(Role::kTarget)) {
      continue;
    }
    for (uint32_t i = 0; i < kPeerDetail; ++i) {
      const uint64_t taken = s.peer_taken[i].load(std::memory_order_relaxed);
      if (taken == a.stamped[k][i]) continue;
      a.stamped[k][i] = taken;
      // The first segment's own stamp stands until a later one arrives.
      if (taken > 1) s.peer_heard_ns[i].store(now, std::memory_order_relaxed);
    }
  }
}
}  // namespace

void stamp_peers() {
  Area& a = area();
  MutexLock lock(a.mu);
  stamp_locked(a);
}

std::vector<Reading> snapshot(uint32_t rank) {
  Area& a = area();
  MutexLock lock(a.mu);
  std::vector<Reading> out;
  if (a.header == nullptr) return out;
  stamp_locked(a);
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Slot& s = a.slots[i];
    const auto state = static_cast<State>(s.state.load(std::memory_order_acquire));
    if (state == State::kFree || state == State::kDestroyed || s.rank != rank) continue;
    out.push_back(read_slot(s));
  }
  for (const Reading& r : a.retired) {
    if (r.rank == rank) out.push_back(r);
  }
  return out;
}

void set_state(Slot* slot, State s, std::string_view cause) {
  // The spare slot may be shared by endpoints of several threads: not its strings.
  if (slot == &area().spare) return;
  if (s == State::kFailed) {
    // The cause is written once, before the state that announces it.
    if (slot->state.load(std::memory_order_relaxed) == static_cast<uint32_t>(State::kFailed))
      return;
    copy_text(slot->cause, sizeof(slot->cause), cause);
  }
  slot->state.store(static_cast<uint32_t>(s), std::memory_order_release);
}

void set_job(std::string_view registry, int64_t rank) {
  Area& a = area();
  MutexLock lock(a.mu);
  if (!map_locked(a)) return;
  copy_text(a.header->job, sizeof(a.header->job), registry);
  a.header->rank = rank;
}

void set_epoch(uint64_t epoch) {
  Area& a = area();
  MutexLock lock(a.mu);
  if (!map_locked(a)) return;
  a.header->epoch.store(epoch, std::memory_order_relaxed);
}

}  // namespace sluice::detail::counters
