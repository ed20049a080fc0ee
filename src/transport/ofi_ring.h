// The ofi ring transports: how a flow's segments and credit cross one
// libfabric endpoint. A source fills a staging segment in its own
// registered memory; one transfer moves it (with its footer) into the same
// slot of the target's ring, and the target returns the count of segments
// it finished with. Two ways, chosen once per endpoint (make_ofi_ring):
//
// - RMA (ofi_rma_ring.cc): fi_writedata into the target's registered ring,
//   with remote CQ data naming the source and slot (segment_cq_data);
//   credit is written into the source's credit word the same way. Nothing
//   is posted in advance; several consecutive segments may go in one write.
// - Messages (ofi_msg_ring.cc), where the provider has no RMA: tagged sends
//   (kTagData | source, kTagCredit | target) into receives the peer posted,
//   one per ring slot for segments and one per target for credit.
//
// The cores (src/flow/flow_source*.cc, flow_target*.cc) own the protocol:
// which segment goes when, credit accounting, ordering by the footer's seq.
// A transfer costs one virtual call here, per segment or per run of
// segments, never per record.
//
// Thread safety: an OfiRing belongs to the thread that owns its endpoint.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/ofi/ofi.h"

namespace sluice::detail {

// Tags of the message path: kind in the top bits, an index below. (The
// flows' control messages use kinds 3 and 4, see flow/flow_core.h.)
inline constexpr uint64_t kTagData = 1ULL << 60;
inline constexpr uint64_t kTagCredit = 2ULL << 60;

// Remote CQ data of a segment write: source index and first ring slot, 16
// bits each, so that 4-byte immediates (verbs, efa) suffice for single
// segments; bits 32..47 carry (segments in the write - 1), used only where
// the provider's CQ data has 8 bytes.
inline uint64_t segment_cq_data(uint32_t source, uint32_t slot, uint32_t count = 1) {
  return uint64_t{count - 1} << 32 | uint64_t{source} << 16 | slot;
}

// Where the segments of one (source, target) ring go: the target endpoint
// and, for RMA, the remote address of the ring's segment 0 and its key.
struct RemoteRing {
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t addr = 0;
  uint64_t key = 0;
  uint32_t segment_stride = 0;
};

// Where a target's credit for one source goes: the source endpoint and,
// for RMA, the remote address and key of its credit word for us.
struct RemoteCredit {
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t addr = 0;
  uint64_t key = 0;
};

// Every call posts one operation and returns 0, -FI_EAGAIN when the provider
// is out of resources (the caller drives its completion queue and retries),
// or another negative fi_errno. `ctx` comes back with the completion.
class OfiRing {
 public:
  explicit OfiRing(ofi::Endpoint& ep) : ep_(ep) {}
  virtual ~OfiRing() = default;
  OfiRing(const OfiRing&) = delete;
  OfiRing& operator=(const OfiRing&) = delete;

  // True for the message path: segments land in posted receives (the
  // footer's seq says which segment landed where) and credit arrives as a
  // message; false for RMA (both announced by remote CQ data).
  virtual bool by_message() const = 0;

  // Source: the most consecutive segments of `stride` bytes one
  // send_segments() may move, in a ring of `ring_segments`.
  virtual uint32_t max_segments_per_send(uint32_t stride, uint32_t ring_segments) const = 0;

  // Source `source`: moves `count` consecutive segments starting at staging
  // `data` (registered under `desc`) into ring slots [slot, slot + count)
  // of `to`. REQUIRES: count <= max_segments_per_send().
  virtual ssize_t send_segments(const std::byte* data, uint32_t count, void* desc,
                                const RemoteRing& to, uint32_t source, uint32_t slot,
                                void* ctx) = 0;

  // Target `target`: sends the credit word `word` (registered under `desc`).
  virtual ssize_t send_credit(const uint64_t* word, void* desc, const RemoteCredit& to,
                              uint32_t target, void* ctx) = 0;

  // Message path only. Source: posts the receive of target `target`'s next
  // credit into `word`. Target: posts the receive of source `source`'s next
  // segment into the ring slot `slot` of `bytes`.
  virtual ssize_t post_credit_receive(uint64_t* word, void* desc, uint32_t target, void* ctx) = 0;
  virtual ssize_t post_segment_receive(std::byte* slot, size_t bytes, void* desc, uint32_t source,
                                       void* ctx) = 0;

 protected:
  ofi::Endpoint& ep_;
};

// The RMA transport where `ep` has RMA (ofi::Endpoint::rma()), else the
// message transport. `ep` must outlive the result.
std::unique_ptr<OfiRing> make_ofi_ring(ofi::Endpoint& ep);
// Each transport on its own (ofi_rma_ring.cc, ofi_msg_ring.cc).
std::unique_ptr<OfiRing> make_ofi_rma_ring(ofi::Endpoint& ep);
std::unique_ptr<OfiRing> make_ofi_msg_ring(ofi::Endpoint& ep);

}  // namespace sluice::detail
