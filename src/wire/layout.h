// The shared-memory layout of a flow's rings: the one place that defines it.
// docs/protocol.md draws the same picture for readers.
//
// Every target rank of a flow owns one region (a memfd mapping) holding one
// ring per (source endpoint, local target endpoint) pair, plus one doorbell
// per local target endpoint. Sources map the region read-write and write
// records straight into the ring's segments; the target reads them in place.
//
// Region (offsets in bytes, all lines 64 B):
//
//   0            RegionHeader      magic, version, geometry (below)
//   64           Doorbell[L]       one line per local target endpoint
//   round_up(64 + 64*L, 128)
//                Ring[L][NS]       ring (lt, s) at rings_offset + (lt*NS + s) * ring_stride
//
// Ring (ring_stride = 256 + S * segment_stride):
//
//   0    line 0, written by the target:  u64 consumed | u32 credit_seq | u32 target_aborted | pad
//   64   line 1, written by the source:  u32 source_waiting | u32 source_aborted | pad
//   128  line 2, constant after setup:   u64 magic | u32 source | u32 target | u32 S | u32 stride
//   192  line 3, padding
//   256  Segment[S]
//
// Segment (segment_stride = round_up(payload + 16, 128)):
//
//   0                   payload: records, packed from offset 0
//   P                   footer:  u32 bytes_used | u32 flags | u64 seq
//
// P (payload_bytes) is 48 when the payload and the footer fit one line
// (payload <= 48: a small record of a Latency-mode flow, published and
// detected on the one line the target polls; the second line of the pair
// is padding), else stride - 16.
//
// Publication (the invariant that matters): the source writes the payload,
// then bytes_used and flags, then stores seq = k + 1 for the ring's k-th
// segment (k counts from 0) with release order. The target acquire-loads seq
// and only then reads bytes_used, flags and the payload. seq is therefore
// the publication word; a slot being reused carries the older k + 1 - S, so
// no footer needs clearing.
//
// A second publication word, in the record's own line (layout version 5):
// on a Latency-mode shuffle flow of one record size of 56 or 64 B, one
// record a segment (latency_tail_offset() in flow_core.h), a record and
// its footer are two lines, and the record's last 8 bytes (at
// tail = record_size - 8) publish it too. The target's process writes
// kTailEmpty there in every slot when it lays out the region, and the
// target writes it back into a segment's tail when it releases the
// segment, before the credit that lets the slot be reused. A source
// writes the record's first tail bytes, then its last word with release
// order, then the footer and seq as above. So a target that acquire-loads
// a tail other than kTailEmpty has the whole record, one line pulled from
// the source's cache instead of two, without reading the footer; a record
// whose last word is kTailEmpty is found by seq alone. END and empty
// segments leave the tail alone and are found by seq. seq is still written
// for every segment, so a target that does not look at tails (one with a
// source on another host) reads the ring as before.
//
// Credits: the target counts segments it has finished with in `consumed` and
// publishes it with a release store, at least every S/2 segments and always
// before it parks. The source may fill segment k only while k < consumed + S
// (acquire load), so it never overwrites a segment the target still reads.
//
// Waiting: doorbell.seq and ring.credit_seq are futex words (shared, not
// private futexes). A waiter sets its `waiting` word, issues a seq_cst fence,
// reads the futex word, re-checks its condition and only then sleeps; a
// publisher stores its data, issues a seq_cst fence and wakes only if
// `waiting` is set. One of the two fences always sees the other side's store,
// so no wake-up is lost (and waits are sliced, so a bug could only delay).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sluice::detail::layout {

inline constexpr uint64_t kRegionMagic = 0x474552454349554CULL;  // "LUICEREG" little-endian
inline constexpr uint64_t kRingMagic = 0x474E495245434955ULL;    // "UICERING"
inline constexpr uint32_t kLayoutVersion = 5;
inline constexpr size_t kLine = 64;
// Segments and ring headers start on 128-byte boundaries, and strides are
// multiples of 128: x86 cores fetch lines in aligned pairs (the spatial
// prefetcher), and a pair must not hold the footer of one segment and the
// payload of the next, or a target reading one segment pulls in the line
// its source is about to write.
inline constexpr size_t kPair = 2 * kLine;
inline constexpr size_t kFooterBytes = 16;

// The tail publication word's value while a slot holds no unread record
// (see above): arbitrary, so that a record ending in it is rare.
inline constexpr uint64_t kTailEmpty = 0xA5E1D0C4B3F29687ULL;

// Footer flags.
inline constexpr uint32_t kConsumable = 1u << 0;  // always set on a published segment
inline constexpr uint32_t kEnd = 1u << 1;         // the source's last segment on this ring

struct alignas(kLine) RegionHeader {
  uint64_t magic;           // kRegionMagic
  uint32_t version;         // kLayoutVersion
  uint32_t local_targets;   // L
  uint32_t sources;         // NS
  uint32_t ring_segments;   // S
  uint32_t segment_stride;  // bytes per segment, payload + footer, multiple of 64
  uint32_t payload_bytes;   // where the footer starts in a segment (Geometry::payload_bytes)
  uint64_t ring_stride;     // bytes per ring
  uint64_t rings_offset;    // offset of ring (0, 0)
  uint64_t total_bytes;     // size of the region
};
static_assert(sizeof(RegionHeader) == kLine);

struct alignas(kLine) Doorbell {
  std::atomic<uint32_t> seq;      // futex word: bumped when a waiting target must wake
  std::atomic<uint32_t> waiting;  // 1 while the target is (about to be) parked
};
static_assert(sizeof(Doorbell) == kLine);

struct RingHeader {
  // Line 0: target -> source.
  alignas(kLine) std::atomic<uint64_t> consumed;  // segments the target released
  std::atomic<uint32_t> credit_seq;               // futex word for a source out of credit
  // Non-zero once the target failed for good, or was destroyed, before
  // this source's END: the source reports the target lost instead of waiting for credit that
  // cannot come. The value says why, as far as the target's process knew
  // (abort_word): 1, or 2 + the rank of the flow it had lost.
  std::atomic<uint32_t> target_aborted;
  // Line 1: source -> target.
  alignas(kLine) std::atomic<uint32_t> source_waiting;  // 1 while the source is parked for credit
  // Non-zero once the source was aborted or destroyed without close():
  // the target reports the flow incomplete instead of waiting for an END that will
  // never come. The value as in target_aborted.
  std::atomic<uint32_t> source_aborted;
  // Line 2: constant after setup, checked by the source when it attaches.
  alignas(kLine) uint64_t magic;  // kRingMagic
  uint32_t source;                // index into the flow's sources
  uint32_t target;                // index into the flow's targets
  uint32_t ring_segments;
  uint32_t segment_stride;
  // Line 3: padding, so that segment 0 starts on a pair (kPair).
  alignas(kLine) uint8_t pad[kLine];
};
static_assert(sizeof(RingHeader) == 4 * kLine);
static_assert(offsetof(RingHeader, consumed) == 0);
static_assert(offsetof(RingHeader, target_aborted) == 12);
static_assert(offsetof(RingHeader, source_waiting) == kLine);
static_assert(offsetof(RingHeader, magic) == 2 * kLine);

struct Footer {
  uint32_t bytes_used;        // payload bytes holding records
  uint32_t flags;             // kConsumable | kEnd
  std::atomic<uint64_t> seq;  // publication word: k + 1 for the ring's k-th segment
};
static_assert(sizeof(Footer) == kFooterBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "cross-process atomics must be lock-free");

inline constexpr size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The value of an abort word (RingHeader::target_aborted, source_aborted):
// 1 if the end that aborted knew of no lost rank, else 2 + the rank of the
// flow its process had lost (the likely cause: an end is mostly aborted
// because its thread failed when a rank was lost). abort_cause() reverses
// it; kNoCause: none known.
inline constexpr uint32_t kNoCause = UINT32_MAX;
inline constexpr uint32_t abort_word(uint32_t cause_rank) {
  return cause_rank >= kNoCause - 2 ? 1u : cause_rank + 2;
}
inline constexpr uint32_t abort_cause(uint32_t word) { return word >= 2 ? word - 2 : kNoCause; }

// The footer's offset in a segment of `stride` bytes holding at least
// `payload` bytes of records: in the first line when both fit there.
inline constexpr uint32_t footer_offset_for(uint64_t payload, uint32_t stride) {
  return payload + kFooterBytes <= kLine ? static_cast<uint32_t>(kLine - kFooterBytes)
                                         : stride - static_cast<uint32_t>(kFooterBytes);
}

// Geometry of a region, computed alike by the target that creates it and
// the sources that check it.
struct Geometry {
  uint32_t local_targets = 0;
  uint32_t sources = 0;
  uint32_t ring_segments = 0;
  uint32_t segment_stride = 0;
  uint32_t footer_offset = 0;  // payload_bytes()
  uint64_t ring_stride = 0;
  uint64_t rings_offset = 0;
  uint64_t total_bytes = 0;

  // total_bytes is kTooLarge when the sizes overflow 64 bits (or a stride
  // 32 bits): callers refuse such a flow rather than map a wrapped size.
  static constexpr uint64_t kTooLarge = ~uint64_t{0};
  static Geometry make(uint32_t local_targets, uint32_t sources, uint32_t ring_segments,
                       uint32_t payload_bytes) {
    Geometry g;
    g.local_targets = local_targets;
    g.sources = sources;
    g.ring_segments = ring_segments;
    const uint64_t stride = round_up(uint64_t{payload_bytes} + kFooterBytes, kPair);
    if (stride > UINT32_MAX) {
      g.total_bytes = kTooLarge;
      return g;
    }
    g.segment_stride = static_cast<uint32_t>(stride);
    g.footer_offset = footer_offset_for(payload_bytes, g.segment_stride);
    g.rings_offset =
        round_up(sizeof(RegionHeader) + uint64_t{local_targets} * sizeof(Doorbell), kPair);
    uint64_t ring = 0, rings = 0, total = 0;
    if (__builtin_mul_overflow(uint64_t{ring_segments}, stride, &ring) ||
        __builtin_add_overflow(ring, uint64_t{sizeof(RingHeader)}, &g.ring_stride) ||
        __builtin_mul_overflow(uint64_t{local_targets} * sources, g.ring_stride, &rings) ||
        __builtin_add_overflow(rings, g.rings_offset, &total)) {
      g.total_bytes = kTooLarge;
      return g;
    }
    g.total_bytes = total;
    return g;
  }
  // Where the footer starts: the payload's room (at least what was asked).
  uint32_t payload_bytes() const { return footer_offset; }
  uint64_t doorbell_offset(uint32_t lt) const {
    return sizeof(RegionHeader) + uint64_t{lt} * sizeof(Doorbell);
  }
  uint64_t ring_offset(uint32_t lt, uint32_t s) const {
    return rings_offset + (uint64_t{lt} * sources + s) * ring_stride;
  }
};

// A view of one ring inside a mapped region.
struct RingView {
  RingHeader* header = nullptr;
  std::byte* segments = nullptr;
  uint32_t ring_segments = 0;
  uint32_t segment_stride = 0;
  uint32_t footer_offset = 0;

  RingView() = default;
  // A ring of the region of geometry `g` (or of a one-ring staging area
  // laid out alike) at `ring_base`.
  RingView(std::byte* ring_base, const Geometry& g)
      : header(reinterpret_cast<RingHeader*>(ring_base)),
        segments(ring_base + sizeof(RingHeader)),
        ring_segments(g.ring_segments),
        segment_stride(g.segment_stride),
        footer_offset(g.footer_offset) {}

  uint32_t payload_bytes() const { return footer_offset; }
  std::byte* payload(uint64_t k) const { return segments + (k % ring_segments) * segment_stride; }
  Footer* footer(uint64_t k) const {
    return reinterpret_cast<Footer*>(payload(k) + payload_bytes());
  }
};

}  // namespace sluice::detail::layout
