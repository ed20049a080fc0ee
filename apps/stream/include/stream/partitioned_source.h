// Generated input dealt out by partitions, so that a job reading it can be
// restored on another number of workers (a rescaled savepoint, sluice-stream
// --elastic), as one reading a Kafka topic can: the input is split into a
// fixed number P of partitions, partition p being what worker p of P would
// generate, and worker w of W reads the partitions p with p % W == w, each
// with a watermark of its own (the engine's lanes, as KafkaSource's).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "stream/checkpoint.h"

namespace sluice::stream {

// Worker `worker` of `workers` reading partitions worker, worker + workers,
// ... (below `partitions`) of the input `make(p, partitions)` makes, in
// turns of at most kTurn records a partition, so that they advance
// together. A partition that ended is idle (its watermark holds nobody
// back); the position is how many records each partition gave.
template <class Rec, class Source>
class PartitionedSource {
 public:
  static constexpr size_t kTurn = 4096;

  template <class Make>
  PartitionedSource(const Make& make, uint32_t worker, uint32_t workers, uint32_t partitions) {
    for (uint32_t p = worker; p < partitions; p += workers) {
      parts_.push_back(Part{p, make(p, partitions)});
    }
  }

  // The next at most `max` records of one partition, in place; its lane in
  // batch_lanes(). Empty once every partition has ended.
  std::span<const Rec> view(size_t max) {
    lanes_.clear();
    for (size_t tried = 0; tried < parts_.size(); ++tried) {
      const size_t i = next_lane_;
      next_lane_ = (next_lane_ + 1) % parts_.size();
      Part& part = parts_[i];
      if (part.ended) continue;
      const std::span<const Rec> got = part.source.view(std::min(max, kTurn));
      if (got.empty()) {
        part.ended = true;
        continue;
      }
      part.read += got.size();
      lanes_.assign(got.size(), static_cast<uint32_t>(i));
      return got;
    }
    return {};
  }
  size_t operator()(std::span<Rec> out) {
    const std::span<const Rec> got = view(out.size());
    std::copy(got.begin(), got.end(), out.begin());
    return got.size();
  }
  bool done() const {
    for (const Part& part : parts_) {
      if (!part.ended) return false;
    }
    return true;
  }

  // The partitions this worker reads, as the engine's lanes (lane i is
  // partition worker + i * workers), the lane of each record the last call
  // returned, and which lanes are idle (ended).
  int lanes() const { return static_cast<int>(parts_.size()); }
  std::span<const uint32_t> batch_lanes() const { return lanes_; }
  void idle_lanes(std::vector<char>& idle) const {
    idle.resize(parts_.size());
    for (size_t i = 0; i < parts_.size(); ++i) idle[i] = parts_[i].ended ? 1 : 0;
  }

  // "partition:records-read,..." (a checkpoint's input position, in
  // KafkaSource's form, so that a rescaled restore deals it out alike);
  // seek() moves each partition named that far from its start.
  std::string position() const {
    std::map<int32_t, int64_t> read;
    for (const Part& part : parts_)
      read.emplace(static_cast<int32_t>(part.partition), static_cast<int64_t>(part.read));
    return detail::format_offsets(read);
  }
  void seek(const std::string& position) {
    for (const auto& [p, offset] : detail::parse_offsets(position)) {
      for (Part& part : parts_) {
        if (static_cast<int64_t>(part.partition) != p) continue;
        const auto want = static_cast<uint64_t>(offset);
        if (want < part.read) {
          throw std::runtime_error("partition " + std::to_string(p) + " has given " +
                                   std::to_string(part.read) + " records, past the position " +
                                   std::to_string(want) + " to seek to");
        }
        while (part.read < want) {
          const std::span<const Rec> got =
              part.source.view(static_cast<size_t>(std::min<uint64_t>(want - part.read, 1 << 16)));
          if (got.empty()) {
            throw std::runtime_error("partition " + std::to_string(p) + " ends at " +
                                     std::to_string(part.read) + " records, before the position " +
                                     std::to_string(want) + " to seek to");
          }
          part.read += got.size();
        }
      }
    }
  }

 private:
  struct Part {
    uint32_t partition;
    Source source;
    uint64_t read = 0;  // records given
    bool ended = false;
  };
  std::vector<Part> parts_;
  std::vector<uint32_t> lanes_;  // the last batch's lane, a record each
  size_t next_lane_ = 0;
};

// A factory of PartitionedSource over `make`'s sources (a generated input's
// factory, workloads.h, nexmark.h), `partitions` of them.
template <class Rec, class Make>
auto partitioned(Make make, uint32_t partitions) {
  using Source = decltype(make(uint32_t{0}, uint32_t{1}));
  return [make = std::move(make), partitions](uint32_t worker, uint32_t workers) {
    return PartitionedSource<Rec, Source>(make, worker, workers, partitions);
  };
}

}  // namespace sluice::stream
