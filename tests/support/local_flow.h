// A flow wired entirely inside one process, over plain memory: the real shm
// source and target cores, without a registry. For unit and concurrent tests.
#pragma once

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "flow/flow_core.h"
#include "sluice/flow.h"
#include "wire/layout.h"

namespace sluice::testing {

// The sequencer of an in-process ordered flow: an atomic counter.
class LocalSequencer final : public detail::Sequencer {
 public:
  explicit LocalSequencer(std::atomic<uint64_t>* counter) : counter_(counter) {}
  Status take(uint64_t count, uint64_t* first, std::string*) override {
    *first = counter_->fetch_add(count);
    return Status::kOk;
  }
  Status taken(uint64_t* count, std::string*) override {
    *count = counter_->load();
    return Status::kOk;
  }

 private:
  std::atomic<uint64_t>* counter_;
};

class LocalFlow {
 public:
  // `liveness`: the peers' (a control::PeerTable, say); null: every peer alive.
  LocalFlow(const FlowSpec& spec, const detail::Liveness* liveness = nullptr, uint32_t spin = 200) {
    spec.validate();
    ctx_.spec = spec;
    ctx_.liveness = liveness;
    ctx_.spin_iterations = spin;
    ctx_.ring_segments = spec.effective_ring_segments();
    ctx_.payload_bytes = spec.effective_segment_bytes();  // as src/cluster.cc sets it
    geo_ = detail::layout::Geometry::make(static_cast<uint32_t>(spec.targets().size()),
                                          static_cast<uint32_t>(spec.sources().size()),
                                          ctx_.ring_segments, spec.effective_segment_bytes());
    mem_ = static_cast<std::byte*>(
        std::aligned_alloc(64, detail::layout::round_up(geo_.total_bytes, 64)));
    std::memset(mem_, 0, geo_.total_bytes);
    std::vector<uint32_t> all;
    for (uint32_t t = 0; t < spec.targets().size(); ++t) all.push_back(t);
    detail::init_region(mem_, geo_, all, detail::latency_tail_offset(spec, ctx_.ring_segments));
  }
  ~LocalFlow() { std::free(mem_); }
  LocalFlow(const LocalFlow&) = delete;
  LocalFlow& operator=(const LocalFlow&) = delete;

  std::unique_ptr<detail::SourceCore> source_core(uint32_t s) {
    std::vector<detail::OutRingRef> rings;
    for (uint32_t t = 0; t < geo_.local_targets; ++t) {
      detail::OutRingRef r;
      r.ring = ring(t, s);
      r.bell = bell(t);
      rings.push_back(r);
    }
    return detail::make_source(&ctx_, s, std::move(rings), nullptr, sequencer());
  }
  std::unique_ptr<detail::TargetCore> target_core(uint32_t t) {
    std::vector<detail::InRingRef> rings;
    for (uint32_t s = 0; s < geo_.sources; ++s) {
      detail::InRingRef r;
      r.ring = ring(t, s);
      rings.push_back(r);
    }
    return detail::make_target(&ctx_, t, bell(t), std::move(rings), nullptr, sequencer());
  }
  template <class T>
  Source<T> source(uint32_t s) {
    return detail::source_from_core<T>(source_core(s));
  }
  template <class T>
  Target<T> target(uint32_t t) {
    return detail::target_from_core<T>(target_core(t));
  }

  const detail::FlowContext& context() const { return ctx_; }
  // Ordered flows: the sequencer's counter (a test may take numbers it never publishes).
  std::atomic<uint64_t>& sequence_counter() { return counter_; }

  // Ring (target t, source s), for tests that look at its bytes.
  detail::layout::RingView ring(uint32_t t, uint32_t s) {
    return detail::layout::RingView(mem_ + geo_.ring_offset(t, s), geo_);
  }

 private:
  std::unique_ptr<detail::Sequencer> sequencer() {
    if (!ctx_.spec.ordered()) return nullptr;
    return std::make_unique<LocalSequencer>(&counter_);
  }
  detail::layout::Doorbell* bell(uint32_t t) {
    return reinterpret_cast<detail::layout::Doorbell*>(mem_ + geo_.doorbell_offset(t));
  }

  detail::FlowContext ctx_;
  detail::layout::Geometry geo_;
  std::byte* mem_ = nullptr;
  std::atomic<uint64_t> counter_{0};
};

// Endpoints (0, 0..n-1).
inline std::vector<Endpoint> slots(uint32_t n, uint32_t rank = 0) {
  std::vector<Endpoint> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back({rank, i});
  return out;
}

}  // namespace sluice::testing
