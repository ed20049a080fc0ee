// The ofi RMA ring transport (see ofi_ring.h): segments and credit are
// written into the peer's registered memory with remote CQ data, which is
// how the peer learns of them (never from the bytes: a NIC may place them
// in any order).
#include <rdma/fi_errno.h>

#include <algorithm>

#include "transport/ofi_ring.h"

namespace sluice::detail {
namespace {

// Full segments for one target are moved by one RMA write of up to this many
// bytes: the cost of a transfer over tcp is mostly per operation (system
// calls, the provider's acknowledgement), not per byte.
constexpr uint32_t kCoalesceBytes = 256 * 1024;

class OfiRmaRing final : public OfiRing {
 public:
  using OfiRing::OfiRing;

  bool by_message() const override { return false; }

  // Several segments per write need the count in the completion data, which
  // only 8-byte CQ data has room for; at most half the ring, so that credit
  // can come back while the rest is in flight.
  uint32_t max_segments_per_send(uint32_t stride, uint32_t ring_segments) const override {
    if (ep_.cq_data_size() < 8) return 1;
    return std::clamp<uint32_t>(kCoalesceBytes / stride, 1,
                                std::max<uint32_t>(1, ring_segments / 2));
  }

  ssize_t send_segments(const std::byte* data, uint32_t count, void* desc, const RemoteRing& to,
                        uint32_t source, uint32_t slot, void* ctx) override {
    return ep_.write_data(data, size_t{count} * to.segment_stride, desc,
                          segment_cq_data(source, slot, count), to.peer,
                          to.addr + uint64_t{slot} * to.segment_stride, to.key, ctx);
  }

  // The CQ data names the target; the source reads the word itself.
  ssize_t send_credit(const uint64_t* word, void* desc, const RemoteCredit& to, uint32_t target,
                      void* ctx) override {
    return ep_.write_data(word, sizeof(uint64_t), desc, target, to.peer, to.addr, to.key, ctx);
  }

  ssize_t post_credit_receive(uint64_t*, void*, uint32_t, void*) override { return -FI_EOPNOTSUPP; }
  ssize_t post_segment_receive(std::byte*, size_t, void*, uint32_t, void*) override {
    return -FI_EOPNOTSUPP;
  }
};

}  // namespace

std::unique_ptr<OfiRing> make_ofi_rma_ring(ofi::Endpoint& ep) {
  return std::make_unique<OfiRmaRing>(ep);
}

}  // namespace sluice::detail
