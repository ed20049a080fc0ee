// FlowSpec: validation, defaults and the canonical text participants compare.
#include <algorithm>
#include <set>
#include <sstream>

#include "sluice/flow.h"
#include "wire/layout.h"

namespace sluice {
namespace {

constexpr uint32_t kDefaultSegmentBytes = 8192;
constexpr uint32_t kDefaultRingSegments = 16;
constexpr uint32_t kDefaultLatencyRingSegments = 64;
// An ordered Bandwidth flow over ofi: at least this much ring, at most this
// many segments (effective_ring_segments(true)).
constexpr uint64_t kOrderedOfiRingBytes = 512 * 1024;
constexpr uint32_t kOrderedOfiRingMaxSegments = 64;
constexpr uint32_t kMaxSegmentBytes = 64u << 20;
constexpr uint32_t kMaxRingSegments = 1u << 16;

[[noreturn]] void invalid(const FlowSpec& spec, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name() + "': " + what);
}

const char* route_name(Route r) {
  switch (r) {
    case Route::kHashKey:
      return "hash_key";
    case Route::kHashRecord:
      return "hash_record";
    case Route::kFunction:
      return "function";
    case Route::kExplicit:
      return "explicit";
  }
  return "?";
}

void check_endpoints(const FlowSpec& spec, const std::vector<Endpoint>& eps, const char* what) {
  if (eps.empty())
    invalid(spec, std::string("has no ") + what + "; name them with ." + what + "(...)");
  std::set<Endpoint> seen;
  for (const Endpoint& e : eps) {
    if (!seen.insert(e).second) {
      invalid(spec, std::string("lists ") + what + " endpoint (" + std::to_string(e.rank) + "," +
                        std::to_string(e.slot) + ") twice");
    }
  }
}

std::string endpoints_text(const std::vector<Endpoint>& eps) {
  std::string out;
  for (const Endpoint& e : eps) {
    if (!out.empty()) out += ' ';
    out += std::to_string(e.rank) + ":" + std::to_string(e.slot);
  }
  return out;
}

}  // namespace

uint32_t FlowSpec::effective_segment_bytes() const {
  if (segment_bytes_ != 0) return segment_bytes_;
  if (optimize_ == Optimize::kLatency && record_size_ != 0) {
    return static_cast<uint32_t>(detail::layout::round_up(record_size_, 8)) +
           segment_prefix_bytes();
  }
  return kDefaultSegmentBytes;
}

uint32_t FlowSpec::max_record_bytes() const {
  if (record_size_ != 0) return record_size_;
  const uint32_t room = (effective_segment_bytes() - segment_prefix_bytes()) & ~7u;
  return room >= detail::kRecordHeaderBytes
             ? room - static_cast<uint32_t>(detail::kRecordHeaderBytes)
             : 0;
}

uint32_t FlowSpec::effective_ring_segments() const {
  if (ring_segments_ != 0) return ring_segments_;
  return optimize_ == Optimize::kLatency ? kDefaultLatencyRingSegments : kDefaultRingSegments;
}

// An ordered flow's source numbers a run of half its ring with one remote
// fetch-and-add as it hands the run to the provider
// (ReplicateSource::number_pending): over ofi, with no ring size asked for,
// the ring holds at least 512 KiB (64 segments of the default 8 KiB, not
// 16), so that a run takes longer to send than its fetch-and-add takes to
// come back (over tcp, 1x1, 64 B records: 0.9 of unordered instead of 0.46;
// bench/results/history.md).
uint32_t FlowSpec::effective_ring_segments(bool over_ofi) const {
  const uint32_t ring = effective_ring_segments();
  if (!over_ofi || !ordered_ || ring_segments_ != 0 || optimize_ != Optimize::kBandwidth)
    return ring;
  const uint64_t segment = effective_segment_bytes();
  const uint64_t want = (kOrderedOfiRingBytes + segment - 1) / segment;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(want, ring, std::max(ring, kOrderedOfiRingMaxSegments)));
}

void FlowSpec::validate() const {
  if (name_.empty()) throw Error(ErrorCode::kInvalidArgument, "a flow needs a non-empty name");
  if (name_.size() > 200) invalid(*this, "name is longer than 200 bytes");
  for (char c : name_) {
    if (c == '\n' || c == '\0' || c == '=') invalid(*this, "name contains a newline, NUL or '='");
  }
  if (type_name_.size() > 1000) invalid(*this, "the record type tag is longer than 1000 bytes");
  for (char c : type_name_) {
    if (c == '\n' || c == '\0') invalid(*this, "the record type tag contains a newline or NUL");
  }
  check_endpoints(*this, sources_, "sources");
  check_endpoints(*this, targets_, "targets");
  const uint32_t seg = effective_segment_bytes();
  if (seg < 8 || seg > kMaxSegmentBytes) {
    invalid(*this, "segment_bytes " + std::to_string(seg) + " is outside [8, " +
                       std::to_string(kMaxSegmentBytes) + "]");
  }
  const uint32_t ring = effective_ring_segments();
  if (ring < 2 || ring > kMaxRingSegments) {
    invalid(*this, "ring_segments " + std::to_string(ring) + " is outside [2, " +
                       std::to_string(kMaxRingSegments) + "]");
  }
  if (record_size_ != 0 && record_align_ > 64)
    invalid(*this, "records aligned to more than 64 bytes are not supported");
  if (uint64_t{segment_prefix_bytes()} + (record_size_ != 0 ? record_size_ : 8) > seg) {
    invalid(*this, "a record of " + std::to_string(record_size_) +
                       " bytes does not fit a segment of " + std::to_string(seg) + " bytes" +
                       (ordered_ ? " (" + std::to_string(segment_prefix_bytes()) +
                                       " of which carry the sequence number)"
                                 : std::string()) +
                       "; raise segment_bytes");
  }
  if (type_ == FlowType::kReplicate && route_ != Route::kExplicit) {
    invalid(*this,
            "a replicate flow sends every record to every target, so it takes no key or route");
  }
  if (ordered_ && type_ != FlowType::kReplicate)
    invalid(*this, "ordered() applies to replicate flows only");
  if (!ordered_ && sequencer_rank_ != kNoRank)
    invalid(*this, "sequencer_at() applies to ordered flows only");
  if (!ordered_ && skip_full_ms_ != 0) {
    invalid(*this,
            "skip_full_targets_after() applies to ordered flows only (where a target sees each "
            "segment it missed as a gap)");
  }
  if (sequencer_rank_ != kNoRank) {
    const auto on = [this](const std::vector<Endpoint>& eps) {
      return std::any_of(eps.begin(), eps.end(),
                         [this](const Endpoint& e) { return e.rank == sequencer_rank_; });
    };
    if (!on(sources_) && !on(targets_)) {
      invalid(*this, "sequencer_at(" + std::to_string(sequencer_rank_) +
                         "): that rank has no source or target of the flow");
    }
  }
  if (sources_.size() > 0xffff || targets_.size() > 0xffff)
    invalid(*this, "more than 65535 sources or targets");
  if (route_ == Route::kHashKey) {
    if (key_size_ == 0) invalid(*this, "key has size 0");
    if (record_size_ != 0 && uint64_t{key_offset_} + key_size_ > record_size_) {
      invalid(*this, "key bytes [" + std::to_string(key_offset_) + ", " +
                         std::to_string(key_offset_ + key_size_) + ") lie outside the " +
                         std::to_string(record_size_) + "-byte record");
    }
  }
  if (route_ == Route::kFunction && !route_fn_)
    invalid(*this, "route() was given an empty function");
}

std::string FlowSpec::canonical() const {
  std::ostringstream os;
  os << "name=" << name_ << '\n'
     << "type=" << (type_ == FlowType::kReplicate ? "replicate" : "shuffle") << '\n'
     << "record_size=" << record_size_ << '\n'
     << "record_align=" << record_align_ << '\n'
     << "record_type=" << type_name_ << '\n'
     << "sources=" << endpoints_text(sources_) << '\n'
     << "targets=" << endpoints_text(targets_) << '\n'
     << "route=" << route_name(route_) << '\n'
     << "key_offset=" << key_offset_ << '\n'
     << "key_size=" << key_size_ << '\n'
     << "optimize=" << (optimize_ == Optimize::kLatency ? "latency" : "bandwidth") << '\n'
     << "segment_bytes=" << effective_segment_bytes() << '\n'
     << "ring_segments=" << effective_ring_segments() << '\n'
     << "ordered=" << (ordered_ ? 1 : 0) << '\n'
     << "gap_timeout_ms=" << (ordered_ ? effective_gap_timeout_ms() : 0) << '\n'
     << "sequencer_rank=" << (ordered_ ? effective_sequencer_rank() : 0) << '\n'
     << "skip_full_ms=" << skip_full_ms_ << '\n';
  return os.str();
}

}  // namespace sluice

namespace sluice::detail {

uint32_t SourceCore::route_slow(const void* rec, size_t n) const {
  switch (route_) {
    case Route::kHashKey:
      if (key_offset_ + key_size_ <= n) {
        return reduce(hash_bytes(static_cast<const std::byte*>(rec) + key_offset_, key_size_),
                      num_targets_);
      }
      [[fallthrough]];  // a byte record shorter than its key: hash all of it
    case Route::kHashRecord:
      return reduce(hash_bytes(rec, n), num_targets_);
    case Route::kFunction:
      return route_fn_(rec, n, num_targets_);
    case Route::kExplicit:
      break;
  }
  return num_targets_;  // no target: push() on a flow declared explicit_targets()
}

}  // namespace sluice::detail
