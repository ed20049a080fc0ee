// Per-endpoint counters that another process on the host can read while the
// job runs (`sluice top`), like Aeron's counters file: every flow source and
// target of this process owns one slot of a small shared-memory area, and
// writes its counters there as plain single-writer words.
//
// The area is one memfd per process, named "sluice-counters", mapped for the
// process's lifetime: a reader finds it through /proc/<pid>/fd (the link
// reads "/memfd:sluice-counters (deleted)") and maps it read-only. Being a
// memfd, it disappears with the process, whatever kills it: nothing is left
// in /dev/shm.
//
// Cost: the data path touches only its own slot's counter line, and only
// per segment (publish, consume) or on the slow path (credit waits, parks,
// state changes), never per record; each update is a relaxed load and store
// by the one thread that owns the endpoint.
//
// Regions count too: each RemoteRegion handle (memory.h) has a slot of role
// kRegion (the region's name as its flow, the owner as its one peer), and
// an ordered replicate source counts the numbers it takes from the flow's
// sequencer; both in the `ops` words of the counters line.
//
// Layout (version 4; every offset fixed, all little-endian words):
//   0     AreaHeader    (256 bytes)
//   256   Slot[kSlots]  (kSlotBytes each)
// A slot whose state is kFree is unused; one in kDestroyed belonged to an
// endpoint that is gone and may be reused. A reader copies a slot and
// trusts its strings only once its `generation` is equal before and after
// the copy (a slot is reused seldom, and only at endpoint creation).
//
// The same counters also leave the process: the registry client copies
// them (snapshot()) on its heartbeat timer and sends them to the registry,
// which serves them to Prometheus (src/control/metrics.h). An endpoint that
// is destroyed leaves its final counters behind (release() keeps the last
// kRetired of them), so a job's totals reach the registry even when its
// endpoints live shorter than one heartbeat.
//
// Thread safety: acquire(), set_peer(), release() and snapshot() take a mutex (endpoint
// creation and destruction, and the heartbeat timer only); a slot's counters
// are written by its endpoint's thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::detail::counters {

inline constexpr uint64_t kMagic = 0x535245544E554F43ULL;  // "COUNTERS" little-endian
inline constexpr uint32_t kVersion = 5;
inline constexpr uint32_t kSlots = 512;
inline constexpr size_t kHeaderBytes = 256;
inline constexpr size_t kSlotBytes = 832;
// How many of an endpoint's peers it describes one by one (who they are;
// for a target, when each was last heard from and whether it ended).
inline constexpr uint32_t kPeerDetail = 16;
// The memfd's name, as /proc/<pid>/fd shows it after "/memfd:".
inline constexpr std::string_view kAreaName = "sluice-counters";

// kRegion: a RemoteRegion handle (rank: the rank that opened it; slot: its
// handle number in this process; peer 0: the region's owner).
enum class Role : uint32_t { kSource = 1, kTarget = 2, kRegion = 3 };

enum class State : uint32_t {
  kFree = 0,       // never used
  kOpen = 1,       // pushing or consuming
  kClosing = 2,    // close() called, END not yet confirmed
  kEnded = 3,      // closed with every record delivered / end of flow seen
  kFailed = 4,     // failed for good (cause says why)
  kAborted = 5,    // the source aborted
  kDestroyed = 6,  // the endpoint is gone; the slot may be reused
};

const char* to_string(Role r);
const char* to_string(State s);

struct AreaHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_bytes;
  int32_t pid;
  int64_t rank;                 // the rank of the process's (latest) Cluster, -1 before join,
                                // kSpareRank while it waits as a spare of the job
  uint64_t created_ns;          // CLOCK_REALTIME
  char job[64];                 // the job's registry address, "" before join
  std::atomic<uint64_t> epoch;  // the membership view's epoch the process is in
  char pad[kHeaderBytes - 112];
};
static_assert(sizeof(AreaHeader) == kHeaderBytes);

// One endpoint. The first line is written at creation and on state changes;
// the counters line on the data path; nothing else shares either line.
struct alignas(64) Slot {
  // --- Identity and state (line 0 and on).
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> generation;  // bumped when the slot is (re)assigned
  uint32_t role;                     // Role
  uint32_t rank;                     // the rank this endpoint belongs to
  uint32_t slot;                     // the endpoint is (rank, slot)
  uint32_t peers;                    // targets of a source, sources of a target
  uint32_t record_size;              // 0: byte records
  uint32_t ring_segments;            // segments per ring (a flow endpoint's)
  uint64_t opened_ns;                // CLOCK_REALTIME
  char flow[88];
  char cause[192];  // why it failed, once state is kFailed
  // --- Counters (their own line).
  alignas(64)
      std::atomic<uint64_t> segments;    // published (source, per target ring) or consumed (target)
  std::atomic<uint64_t> bytes;           // record bytes in those segments
  std::atomic<uint64_t> credit_waits;    // times a source waited for credit
  std::atomic<uint64_t> credit_wait_ns;  // time spent in those waits
  std::atomic<uint64_t> parks;           // times the endpoint's thread slept in the kernel
  // Operations that are not segments: a region handle's reads, writes and
  // atomics (its `bytes` are those read and written); an ordered replicate
  // source's sequence numbers taken. Each also counted once more, by how
  // it ended, if it timed out or failed otherwise.
  std::atomic<uint64_t> ops;
  std::atomic<uint64_t> op_timeouts;
  std::atomic<uint64_t> op_failures;
  // --- Peers: the first kPeerDetail sources of a target (targets of a
  // source), identity written once after acquire(); for a target, per
  // segment: how many segments each source delivered, and which have
  // ended (the endpoint's thread). When each last delivered is stamped off
  // the data path: at its first segment, then by the control thread at
  // every heartbeat where its count moved (stamp_peers), so it is exact to
  // within a heartbeat interval and costs the data path no clock read.
  alignas(64) uint32_t peer_rank[kPeerDetail];
  uint32_t peer_slot[kPeerDetail];
  std::atomic<uint64_t> peer_heard_ns[kPeerDetail];  // CLOCK_REALTIME_COARSE; 0: never
  std::atomic<uint64_t> peer_ended;                  // bit i: peer i's END arrived
  // A source's ring fill: segments of ring_segments published and not yet
  // consumed, as it last learnt when it looked for credit (the slow path,
  // at most once per ring_segments segments per target).
  std::atomic<uint64_t> ring_fill;
  std::atomic<uint64_t> park_ns;  // time the endpoint's thread spent parked (slow path)
  // A source waiting for credit now: the target it waits for (index + 1;
  // 0: not waiting) and since when (CLOCK_REALTIME), set on the slow path
  // when the wait begins and cleared when it ends, so that a hang report
  // names the target whose ring is full.
  std::atomic<uint64_t> waiting_peer;
  std::atomic<uint64_t> waiting_since_ns;
  std::atomic<uint64_t> pad2[3];
  alignas(64) std::atomic<uint64_t> peer_taken[kPeerDetail];  // segments from peer i
};
static_assert(sizeof(Slot) == kSlotBytes);

// Adds n to a counter this thread alone writes: no read-modify-write.
// (Built with -DSLUICE_COUNTERS=OFF: nothing, to measure what counting costs.)
inline void add(std::atomic<uint64_t>& c, uint64_t n) {
#ifndef SLUICE_NO_COUNTERS
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#else
  (void)c;
  (void)n;
#endif
}

// A slot for a new endpoint, in state kOpen, with its identity written.
// Never null: if the area cannot be made (or is full), a process-private
// slot nobody reads, so that counting never fails a flow.
Slot* acquire(Role role, std::string_view flow, uint32_t rank, uint32_t slot_number, uint32_t peers,
              uint32_t record_size, uint32_t ring_segments = 0);
// True for the process-private spare slot acquire() hands out without an
// area (or with a full one, or counters built out): several endpoints may
// share it, so what it says of peers is not this endpoint's.
bool is_spare(const Slot* slot);
// The endpoint is gone: its slot is marked kDestroyed (reusable).
void release(Slot* slot);
// Sets the state; for kFailed also the cause (truncated to fit).
void set_state(Slot* slot, State s, std::string_view cause = {});
// Names peer i (the first kPeerDetail only), right after acquire(). Under
// the area's mutex, as the identity acquire() writes: snapshot() reads it
// from the control thread.
void set_peer(Slot* slot, uint32_t i, uint32_t rank, uint32_t slot_number);
// A target heard from source i (a segment arrived): per segment, one add
// to its count (the first also stamps the time); `ended` if it was its END.
void heard_first(Slot* slot, uint32_t i);
// (`n` segments at once: the Latency fast path counts them afterwards.)
inline void heard(Slot* slot, uint32_t i, bool ended, uint64_t n = 1) {
#ifndef SLUICE_NO_COUNTERS
  if (i >= kPeerDetail) return;
  const uint64_t taken = slot->peer_taken[i].load(std::memory_order_relaxed);
  slot->peer_taken[i].store(taken + n, std::memory_order_relaxed);
  if (taken == 0) [[unlikely]]
    heard_first(slot, i);
  if (ended) [[unlikely]] {
    slot->peer_ended.store(slot->peer_ended.load(std::memory_order_relaxed) | (uint64_t{1} << i),
                           std::memory_order_relaxed);
  }
#else
  (void)slot;
  (void)i;
  (void)ended;
  (void)n;
#endif
}
// Stamps, for every live slot of this process, the peers whose segment
// count moved since the last call with the current coarse time. Called by
// snapshot(), which the control thread calls at every heartbeat.
void stamp_peers();

// Counts one park of the endpoint's thread and, when it ends, its time:
// { counters::Park p(slot); ...sleep... }. Parking is the slow path (the
// thread is about to sleep), so the two clock reads cost nothing that
// matters.
class Park {
 public:
  explicit Park(Slot* slot) : slot_(slot), start_(std::chrono::steady_clock::now()) {
    add(slot_->parks, 1);
  }
  ~Park() {
    add(slot_->park_ns, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::steady_clock::now() - start_)
                                                  .count()));
  }
  Park(const Park&) = delete;
  Park& operator=(const Park&) = delete;

 private:
  Slot* slot_;
  std::chrono::steady_clock::time_point start_;
};

// One operation that is not a segment (see Slot::ops), by the slot's one
// writer: `bytes` moved, and whether it timed out or failed otherwise.
enum class Outcome { kDone, kTimedOut, kFailed };
inline void op(Slot* slot, uint64_t bytes, Outcome outcome) {
  add(slot->ops, 1);
  if (bytes != 0) add(slot->bytes, bytes);
  if (outcome == Outcome::kTimedOut) add(slot->op_timeouts, 1);
  if (outcome == Outcome::kFailed) add(slot->op_failures, 1);
}

// AreaHeader::rank of a process that waits as a spare of its job (sluice
// run --spares) until it takes a lost rank's place.
inline constexpr int64_t kSpareRank = -2;

// Records the job and rank of this process (Cluster::join; kSpareRank
// while a spare waits).
void set_job(std::string_view registry, int64_t rank);

// Records the membership view's epoch the process's Cluster is in (0 at
// join; RegistryClient's on_epoch after every change).
void set_epoch(uint64_t epoch);

// One peer of an endpoint, as its slot describes it.
struct PeerReading {
  uint32_t rank = 0, slot = 0;
  uint64_t heard_ns = 0;  // a target's last segment from it, to within a heartbeat (0: never)
  bool ended = false;     // a target got its END
  uint64_t taken = 0;     // segments a target took from it
};
// One endpoint's identity and counters, copied out of its slot.
struct Reading {
  std::string flow;
  Role role = Role::kSource;
  uint32_t rank = 0, slot = 0, peers = 0, record_size = 0;
  State state = State::kOpen;
  std::string cause;  // set once state is kFailed
  uint64_t opened_ns = 0, segments = 0, bytes = 0, credit_waits = 0, credit_wait_ns = 0, parks = 0;
  uint64_t ops = 0, op_timeouts = 0, op_failures = 0;
  uint32_t ring_segments = 0;
  uint64_t ring_fill = 0;
  uint64_t park_ns = 0;
  // A source waiting for credit: the index of the target it waits for
  // (peers of a source are its targets), and since when (0: not waiting).
  uint32_t waiting_peer = 0;
  uint64_t waiting_since_ns = 0;
  std::vector<PeerReading> peer_detail;  // read_peers() of the slot
};
// Copies a slot's identity and counters. Its identity (flow, role, rank,
// peers, ...) is stable only while the area's mutex is held (in this
// process: snapshot, release) or between two equal, even reads of its
// generation (a reader in another process: `sluice top`); the counters and
// the state are atomics, and the cause is written before the kFailed state
// that announces it.
Reading read_slot(const Slot& s);
// The described peers of a slot (at most kPeerDetail, at most slot.peers).
std::vector<PeerReading> read_peers(const Slot& slot);
// How many destroyed endpoints' final readings a process keeps.
inline constexpr size_t kRetired = 256;

// This process's endpoints of `rank` (a process may host ranks of several
// jobs' Clusters; each reports its own), after stamp_peers(): every live one, then the final
// readings of destroyed ones (the latest kRetired, minus those whose flow,
// role and endpoint a live one has taken over). Empty without an area.
std::vector<Reading> snapshot(uint32_t rank);

// CLOCK_REALTIME in nanoseconds.
uint64_t now_ns();

}  // namespace sluice::detail::counters
