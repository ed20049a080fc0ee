// libFuzzer target: the segment and byte-record parser a target runs on
// every segment another process published (detail::segment_problem, then
// RecordBatch iteration). Input: u8 flow kind | u32 bytes_used | u32 flags |
// u32 offset and value of one rewrite made during iteration | payload.
// Whatever the bytes, a segment that passes must iterate inside its payload,
// also when a peer rewrites a length while it is iterated (ASan checks).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flow/flow_core.h"
#include "sluice/flow.h"

namespace {

struct Wide {
  uint64_t a, b;
};

sluice::FlowSpec spec_for(uint8_t kind) {
  switch (kind % 4) {
    case 0:
      return sluice::shuffle<sluice::Bytes>("f")
          .sources({{0, 0}})
          .targets({{0, 0}})
          .segment_bytes(256)
          .spec();
    case 1:
      return sluice::shuffle<Wide>("f")
          .sources({{0, 0}})
          .targets({{0, 0}})
          .segment_bytes(256)
          .spec();
    case 2:
      return sluice::replicate<sluice::Bytes>("f")
          .sources({{0, 0}})
          .targets({{0, 0}})
          .segment_bytes(256)
          .ordered()
          .spec();
    default:
      return sluice::shuffle<sluice::Bytes>("f")
          .sources({{0, 0}})
          .targets({{0, 0}})
          .segment_bytes(8)
          .spec();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* in, size_t n) {
  if (n < 17) return 0;
  const sluice::FlowSpec spec = spec_for(in[0]);
  uint32_t used, flags, at, value;
  std::memcpy(&used, in + 1, 4);
  std::memcpy(&flags, in + 5, 4);
  std::memcpy(&at, in + 9, 4);
  std::memcpy(&value, in + 13, 4);
  // The payload exactly as large as the flow's segment, on the heap, so any
  // read past it is an ASan report.
  const uint32_t payload = spec.effective_segment_bytes();
  std::vector<std::byte> seg(payload);
  std::memcpy(seg.data(), in + 17, std::min<size_t>(n - 17, payload));
  const uint32_t prefix = spec.segment_prefix_bytes();
  const std::byte* data = seg.data() + prefix;
  if (sluice::detail::segment_problem(spec, payload, used, flags, data) != nullptr) return 0;
  volatile uint64_t sink = 0;
  if (spec.record_size() != 0) {
    const auto* r = reinterpret_cast<const Wide*>(data);
    for (uint32_t i = 0; i < used / sizeof(Wide); ++i) sink = sink + r[i].a + r[i].b;
    return 0;
  }
  sluice::RecordBatch batch = sluice::detail::make_record_batch(data, used);
  size_t i = 0;
  for (auto it = batch.begin(); it != batch.end(); ++it, ++i) {
    for (std::byte b : *it) sink = sink + static_cast<uint8_t>(b);
    if (i == 0 && used >= 4) {
      // A peer rewrites four bytes while we iterate.
      std::memcpy(seg.data() + prefix + at % (used - 3), &value, 4);
    }
  }
  return 0;
}
