// What every core of a flow shares (names for messages, the segment check,
// the region layout) and the factories that pick a core's class by flow
// kind. The source and target halves live in flow_source*.cc and
// flow_target*.cc.
#include "flow/flow_core.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "flow/flow_source.h"
#include "flow/flow_target.h"

namespace sluice::detail {

using layout::Footer;
using layout::RingView;

std::string FlowContext::endpoint_name(bool source, uint32_t index) const {
  return "flow '" + spec.name() + "' " + peer_name(source, index);
}

std::string FlowContext::peer_name(bool source, uint32_t index) const {
  const Endpoint& e = source ? spec.sources()[index] : spec.targets()[index];
  return std::string(source ? "source" : "target") + " (" + std::to_string(e.rank) + "," +
         std::to_string(e.slot) + ")";
}

// One class per flow kind: a replicate flow's source fans out (and numbers
// its segments when ordered); an ordered flow's target merges by sequence
// number. Combiner flows are shuffle flows of partials.
std::unique_ptr<SourceCore> make_source(const FlowContext* ctx, uint32_t source_index,
                                        std::vector<OutRingRef> rings,
                                        std::unique_ptr<OfiSource> ofi,
                                        std::unique_ptr<Sequencer> sequencer) {
  SLUICE_CHECK((sequencer != nullptr) == ctx->spec.ordered());
  if (ctx->spec.type() == FlowType::kReplicate) {
    return std::make_unique<ReplicateSource>(ctx, source_index, std::move(rings), std::move(ofi),
                                             std::move(sequencer));
  }
  return std::make_unique<ShuffleSource>(ctx, source_index, std::move(rings), std::move(ofi));
}

std::unique_ptr<TargetCore> make_target(const FlowContext* ctx, uint32_t target_index,
                                        layout::Doorbell* bell, std::vector<InRingRef> rings,
                                        std::unique_ptr<OfiTarget> ofi,
                                        std::unique_ptr<Sequencer> sequencer) {
  SLUICE_CHECK((sequencer != nullptr) == ctx->spec.ordered());
  if (ctx->spec.ordered()) {
    return std::make_unique<OrderedTarget>(ctx, target_index, bell, std::move(rings),
                                           std::move(ofi), std::move(sequencer));
  }
  return std::make_unique<UnorderedTarget>(ctx, target_index, bell, std::move(rings),
                                           std::move(ofi));
}

// The buffers belong to the endpoint (ofi::Endpoint::allocate): it frees
// them after closing, or keeps them if it was abandoned.
OfiSource::~OfiSource() = default;
OfiTarget::~OfiTarget() = default;

void init_region(std::byte* base, const layout::Geometry& g,
                 const std::vector<uint32_t>& local_targets, uint32_t tail_offset) {
  SLUICE_CHECK(local_targets.size() == g.local_targets);
  SLUICE_CHECK(tail_offset % 8 == 0 && (tail_offset == 0 || tail_offset + 8 <= g.payload_bytes()));
  auto* rh = reinterpret_cast<layout::RegionHeader*>(base);
  rh->magic = layout::kRegionMagic;
  rh->version = layout::kLayoutVersion;
  rh->local_targets = g.local_targets;
  rh->sources = g.sources;
  rh->ring_segments = g.ring_segments;
  rh->segment_stride = g.segment_stride;
  rh->payload_bytes = g.payload_bytes();
  rh->ring_stride = g.ring_stride;
  rh->rings_offset = g.rings_offset;
  rh->total_bytes = g.total_bytes;
  for (uint32_t lt = 0; lt < g.local_targets; ++lt) {
    new (base + g.doorbell_offset(lt)) layout::Doorbell{};
    for (uint32_t s = 0; s < g.sources; ++s) {
      auto* h = new (base + g.ring_offset(lt, s)) layout::RingHeader{};
      h->magic = layout::kRingMagic;
      h->source = s;
      h->target = local_targets[lt];
      h->ring_segments = g.ring_segments;
      h->segment_stride = g.segment_stride;
      RingView ring(base + g.ring_offset(lt, s), g);
      for (uint32_t k = 0; k < g.ring_segments; ++k) {
        new (ring.footer(k)) Footer{};
        if (tail_offset != 0) empty_tail(ring.payload(k), tail_offset);
      }
    }
  }
}

bool latency_fast_path(const FlowContext& ctx) {
  const FlowSpec& spec = ctx.spec;
  const uint32_t S = ctx.ring_segments;
  return spec.optimize() == Optimize::kLatency && spec.record_size() != 0 &&
         spec.segment_prefix_bytes() == 0 && S != 0 && (S & (S - 1)) == 0;
}

uint32_t latency_tail_offset(const FlowSpec& spec, uint32_t ring_segments) {
  const uint32_t n = spec.record_size();
  if (spec.type() != FlowType::kShuffle || spec.optimize() != Optimize::kLatency ||
      !tail_published(n) || spec.effective_segment_bytes() != n ||
      spec.segment_prefix_bytes() != 0 || ring_segments == 0 ||
      (ring_segments & (ring_segments - 1)) != 0) {
    return 0;
  }
  return n - 8;
}

namespace {
// The byte records in [data, data+bytes), or -1 if a length does not fit
// what is left (validate_records, count_records).
int64_t walk_records(const std::byte* data, uint32_t bytes) {
  uint32_t off = 0;
  int64_t n = 0;
  while (off < bytes) {
    if (bytes - off < kRecordHeaderBytes) return -1;
    uint32_t len;
    std::memcpy(&len, data + off, sizeof(len));
    if (len > bytes - off - kRecordHeaderBytes) return -1;
    const size_t stride = record_stride(len);
    if (stride > bytes - off) return -1;
    off += static_cast<uint32_t>(stride);
    ++n;
  }
  return n;
}
}  // namespace

const char* segment_problem(const FlowSpec& spec, uint32_t payload_bytes, uint32_t used,
                            uint32_t flags, const std::byte* data, uint32_t* records) {
  const uint32_t room = payload_bytes - std::min(payload_bytes, spec.segment_prefix_bytes());
  if (!(flags & layout::kConsumable)) return "flags lack CONSUMABLE";
  if (used > room) return "bytes_used exceeds the segment payload";
  const uint32_t size = spec.record_size();
  if (size != 0 && used % size != 0) return "bytes_used is not a whole number of records";
  const int64_t n = size != 0 ? used / size : walk_records(data, used);
  if (n < 0) return "a record length overruns the segment";
  if (records != nullptr) *records = static_cast<uint32_t>(n);
  return nullptr;
}

bool validate_records(const std::byte* data, uint32_t bytes) {
  return walk_records(data, bytes) >= 0;
}

uint32_t count_records(const std::byte* data, uint32_t bytes) {
  return static_cast<uint32_t>(std::max<int64_t>(0, walk_records(data, bytes)));
}

}  // namespace sluice::detail
