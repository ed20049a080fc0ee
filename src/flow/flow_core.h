// The data plane of a flow: sources and targets over rings, where each ring
// is reached either through shared memory (the source writes straight into
// the target's ring) or through libfabric (the source fills a local staging
// segment and moves it by RMA write, coalescing consecutive full segments,
// or as one tagged message per segment where there is no RMA). Both kinds can
// mix in one source or target: the transport is chosen per (source, target)
// pair. The rings' layout is in layout.h.
//
// Where the memory and endpoints come from is the caller's business
// (src/cluster.cc wires real flows; tests/support/local_flow.h wires
// in-process ones).
//
// Thread safety: each core is owned by one thread (see flow.h). Cores of one
// flow share a FlowContext, which is read-only after setup.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flow/liveness.h"
#include "sluice/flow.h"
#include "transport/ofi/ofi.h"
#include "transport/ofi_ring.h"
#include "wire/layout.h"

namespace sluice::detail {

class Linger;

// How many cores of a flow exist in this process: a core counts itself from
// its construction to its destruction (OpenCore), so that the flow's owner can
// refuse to free the context under one. A copy starts at zero.
struct CoreCount {
  mutable std::atomic<uint32_t> n{0};
  CoreCount() = default;
  CoreCount(const CoreCount&) {}
  CoreCount& operator=(const CoreCount&) { return *this; }
};

// What every core of one flow in this process shares.
struct FlowContext {
  FlowSpec spec;
  // Liveness of the ranks (the registry client's PeerTable in a job); null
  // in tests that run without a registry.
  const Liveness* liveness = nullptr;
  uint32_t spin_iterations = 4000;
  uint32_t payload_bytes = 0;  // usable payload per segment
  uint32_t ring_segments = 0;
  // Host name per rank for messages (may be empty).
  std::vector<std::string> hosts;
  // The cores of this flow alive in this process (see OpenCore).
  CoreCount open_cores;
  // Where a destroyed source finishes its last transfers (the Cluster's;
  // null in tests that wire flows without one: a source is then destroyed
  // at once, giving up on what is unconfirmed).
  Linger* linger = nullptr;

  // "flow 'orders' source (1,0)" and the like, for messages.
  std::string endpoint_name(bool source, uint32_t index) const;
  // "source (1,0)": the same without the flow, for the other side of a message.
  std::string peer_name(bool source, uint32_t index) const;
};

// A core's membership in FlowContext::open_cores, for the core's lifetime.
// Relaxed: the count is only compared with zero by the flow's owner after the
// cores' threads are done with them (a REQUIRES of destroying a flow), and
// that hand-over already orders these updates before the read.
class OpenCore {
 public:
  explicit OpenCore(const FlowContext* ctx) : ctx_(ctx) {
    ctx_->open_cores.n.fetch_add(1, std::memory_order_relaxed);
  }
  ~OpenCore() { ctx_->open_cores.n.fetch_sub(1, std::memory_order_relaxed); }
  OpenCore(const OpenCore&) = delete;
  OpenCore& operator=(const OpenCore&) = delete;

 private:
  const FlowContext* ctx_;
};

// One ring a source writes to.
struct OutRingRef {
  // shm: the target's ring, mapped here. ofi: this source's staging ring for
  // that target (same geometry; only its segments are used).
  layout::RingView ring;
  layout::Doorbell* bell = nullptr;  // shm: the target endpoint's doorbell
  bool remote = false;               // ofi
  fi_addr_t peer = FI_ADDR_UNSPEC;   // ofi: the target endpoint
  uint64_t ring_addr = 0;            // ofi RMA: remote address of the ring's segment 0
  uint64_t ring_key = 0;             // ofi RMA: the target's key for its rings
};

// One ring a target reads from (always in the target's own memory).
struct InRingRef {
  layout::RingView ring;
  bool remote = false;              // ofi: segments arrive by RMA write or message
  fi_addr_t peer = FI_ADDR_UNSPEC;  // ofi: the source endpoint, for credits
  uint64_t credit_addr = 0;         // ofi RMA: remote address of the source's credit word for us
  uint64_t credit_key = 0;
};

// One completion as a core sees it: the entry, and who sent it
// (FI_ADDR_NOTAVAIL where the provider does not say, or for local ones).
struct Completion {
  fi_cq_data_entry entry{};
  fi_addr_t from = FI_ADDR_NOTAVAIL;
};

// The libfabric side of one source endpoint: its endpoint, its staging
// rings (one per target, registered) and the credit words targets write.
// Every buffer here is allocated by the endpoint (ofi::Endpoint::allocate),
// which outlives its registrations even when it is abandoned.
struct OfiSource {
  std::unique_ptr<ofi::Endpoint> ep;
  std::byte* staging = nullptr;  // num_targets rings of ring_stride bytes
  size_t staging_bytes = 0;
  ofi::Memory staging_mr;
  uint64_t* credits = nullptr;  // one word per target
  ofi::Memory credits_mr;
  // Control messages (see kTagHello, kTagAbort): one receive word per
  // target, then one word sent from.
  uint64_t* control = nullptr;
  ofi::Memory control_mr;
  ~OfiSource();
};

// The libfabric side of one target endpoint.
struct OfiTarget {
  std::unique_ptr<ofi::Endpoint> ep;
  // [source]: the segments of that source's ring (in the region), registered
  // alone so that a remote source can write nothing else; remote sources only.
  std::vector<ofi::Memory> ring_mrs;
  uint64_t* outbox = nullptr;  // one credit word per source, sent from here
  ofi::Memory outbox_mr;
  // Control messages: one receive word per source, then the word aborts
  // are sent from, then the word END confirmations are sent from.
  uint64_t* control = nullptr;
  ofi::Memory control_mr;
  // Completions read during wire-up that belong to the data path (a source
  // that finished its wire-up first may already write); the core replays them.
  std::vector<Completion> backlog;
  ~OfiTarget();
};

// Tags of the flows' control messages: kind in the top bits, an index
// below (kTagData and kTagCredit, kinds 1 and 2, are the ring transport's:
// transport/ofi_ring.h).
// An endpoint ends without the flow's guarantee: a source destroyed without
// close(), or a target destroyed before every source's END. The index is the
// sender's (its source or target index).
inline constexpr uint64_t kTagAbort = 3ULL << 60;
// The word a target sends a source on kTagAbort once every segment up to
// that source's END has arrived (kEndConfirmed | the target's index): the
// target sends nothing more to it, so the source may close its connection.
// Before, a source closing a tcp connection while credit was still coming
// in made the kernel reset it, and data not yet taken by the target (the END
// above all) was thrown away.
inline constexpr uint64_t kEndConfirmed = 1ULL << 63;
// Wire-up at declare: a source greets each ofi target and the target answers,
// so that every connection exists before the data plane needs it (over
// tcp;ofi_rxm a first write returns -FI_EAGAIN until the peer drives its
// endpoint, which a single-threaded peer blocked in its own push never does).
inline constexpr uint64_t kTagHello = 4ULL << 60;

// The sequencer of an ordered replicate flow, as one core sees it: a 64-bit
// counter that hands out sequence numbers (one per published batch).
class Sequencer {
 public:
  virtual ~Sequencer() = default;
  // Takes the next `count` sequence numbers with one fetch-and-add (count):
  // *first and the count - 1 after it are this caller's. On failure *error
  // says why.
  virtual Status take(uint64_t count, uint64_t* first, std::string* error) = 0;
  // How many numbers were taken so far.
  virtual Status taken(uint64_t* count, std::string* error) = 0;
  // While take() or taken() waits for the counter's owner, fn(arg) is
  // called between polls (RegionAccess::set_while_waiting).
  virtual void set_while_waiting(void (* /*fn*/)(void*), void* /*arg*/) {}
};

// REQUIRES: rings[t] is the ring from `source_index` to target t, for every
// target of ctx->spec; `ofi` is set iff some ring is remote; ctx outlives the
// core; `sequencer` is set iff the flow is ordered.
std::unique_ptr<SourceCore> make_source(const FlowContext* ctx, uint32_t source_index,
                                        std::vector<OutRingRef> rings,
                                        std::unique_ptr<OfiSource> ofi,
                                        std::unique_ptr<Sequencer> sequencer = nullptr);
// REQUIRES: rings[s] is the ring from source s to `target_index`; `bell` is
// its doorbell; `ofi` is set iff some ring is remote; `sequencer` is set iff
// the flow is ordered.
std::unique_ptr<TargetCore> make_target(const FlowContext* ctx, uint32_t target_index,
                                        layout::Doorbell* bell, std::vector<InRingRef> rings,
                                        std::unique_ptr<OfiTarget> ofi,
                                        std::unique_ptr<Sequencer> sequencer = nullptr);

// The ofi endpoints of one flow on this rank, with the peers they talk to.
struct OfiWiring {
  // (source index, its endpoint, [target index, target's address]) for each local source.
  struct Side {
    uint32_t index = 0;
    ofi::Endpoint* ep = nullptr;
    uint64_t* control = nullptr;  // OfiSource/OfiTarget::control
    void* control_desc = nullptr;
    std::vector<std::pair<uint32_t, fi_addr_t>> peers;
    std::vector<Completion>* backlog = nullptr;  // targets: OfiTarget::backlog
  };
  std::vector<Side> sources, targets;
  // A flow declared in a view: why it is given up (the job's view moved
  // past the flow's, and every participant gives the flow up), or "" while
  // it is not. Unset: never.
  std::function<std::string()> superseded;
};

// Establishes every ofi connection of the flow: each local source greets its
// remote targets and waits for their answers; each local target answers the
// greetings of its remote sources. Every participant runs this at declare,
// so all endpoints are driven at once. Throws Error(kTimeout) naming the
// peers that did not answer by `deadline`, PeerLostError if one is lost,
// Error(kViewChanged) once `wiring.superseded` says why.
void wire_up(const FlowContext& ctx, const OfiWiring& wiring, Deadline deadline);

// Whether the inline Latency path (flow_cores.h: push_fast, next_fast) may
// cover the flow's local rings: Latency mode, one record size, no segment
// prefix (unordered), and a power-of-two ring (slots found by a mask). The
// source and the target decide alike from this.
bool latency_fast_path(const FlowContext& ctx);

// Where a record's last word publishes it too (layout.h, "A second
// publication word"): record_size - 8 for a Latency-mode shuffle flow of one
// record size of 56 or 64 B, one record a segment, on a power-of-two ring
// of `ring_segments`; 0 for every other flow. The target's process lays its
// rings out with it (init_region); sources write such records tail last
// whatever it says (flow_cores.h, copy_record).
uint32_t latency_tail_offset(const FlowSpec& spec, uint32_t ring_segments);

// Why a published segment must not be handed out, or nullptr if it may:
// `used` payload bytes after the flow's prefix at `data` (which lies in a
// payload of `payload_bytes`, prefix included), with footer `flags`. Every
// byte of it comes from another process. A segment that passes can be
// iterated without leaving [data, data + used).
// `records`, if given: the segment's records, when it passes.
const char* segment_problem(const FlowSpec& spec, uint32_t payload_bytes, uint32_t used,
                            uint32_t flags, const std::byte* data, uint32_t* records = nullptr);

// The byte records in [data, data+bytes), well formed (a source's own
// segment, for Source::delivered).
uint32_t count_records(const std::byte* data, uint32_t bytes);

// Lays out fresh rings in `base` (zeroed memory of g.total_bytes) for the
// given local targets (their indices into spec.targets) and all sources;
// `tail_offset` (latency_tail_offset): where every slot's tail word starts
// out kTailEmpty, or 0.
void init_region(std::byte* base, const layout::Geometry& g,
                 const std::vector<uint32_t>& local_targets, uint32_t tail_offset);

}  // namespace sluice::detail
