// The ofi message ring transport (see ofi_ring.h), for providers without
// RMA: every segment is one tagged send into a receive the target posted
// for a slot of its ring, and credit is an 8-byte tagged message into a
// receive the source posted. An unordered provider may fill the posted
// slots in any order; the target reads the footer's seq to know which
// segment landed where.
#include "transport/ofi_ring.h"

namespace sluice::detail {
namespace {

class OfiMsgRing final : public OfiRing {
 public:
  using OfiRing::OfiRing;

  bool by_message() const override { return true; }

  // A message lands in one segment-sized receive.
  uint32_t max_segments_per_send(uint32_t, uint32_t) const override { return 1; }

  ssize_t send_segments(const std::byte* data, uint32_t count, void* desc, const RemoteRing& to,
                        uint32_t source, uint32_t, void* ctx) override {
    return ep_.tsend(data, size_t{count} * to.segment_stride, desc, to.peer, kTagData | source,
                     ctx);
  }

  ssize_t send_credit(const uint64_t* word, void* desc, const RemoteCredit& to, uint32_t target,
                      void* ctx) override {
    return ep_.tsend(word, sizeof(uint64_t), desc, to.peer, kTagCredit | target, ctx);
  }

  ssize_t post_credit_receive(uint64_t* word, void* desc, uint32_t target, void* ctx) override {
    return ep_.trecv(word, sizeof(uint64_t), desc, kTagCredit | target, ctx);
  }

  ssize_t post_segment_receive(std::byte* slot, size_t bytes, void* desc, uint32_t source,
                               void* ctx) override {
    return ep_.trecv(slot, bytes, desc, kTagData | source, ctx);
  }
};

}  // namespace

std::unique_ptr<OfiRing> make_ofi_msg_ring(ofi::Endpoint& ep) {
  return std::make_unique<OfiMsgRing>(ep);
}

}  // namespace sluice::detail
