// stream/key_groups.h: which worker owns a key, through key groups (as
// Flink's max parallelism): a key's hash picks one of G groups, G fixed
// for the life of a job (--key-groups, in its checkpoints' fingerprint);
// worker w of W owns the contiguous range of groups g with g * W / G == w.
// A checkpoint keeps each worker's state sorted by group with an index
// (checkpoint.h), so a job restored on another number of workers reads,
// from each old snapshot, only the groups it owns now: each state entry is
// read by one worker, not by all of them.
//
// (Not the library's sluice::KeyGroups, membership.h: that one gives a lost
// owner's groups to the survivors by rendezvous hashing, homes spread
// modulo the owners; this one deals contiguous ranges out to however many
// workers a run has, so that a worker's groups are one piece of each
// snapshot.)
//
// Thread safety: a value; const after construction.
#pragma once

#include <sluice/hash.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::stream {

class KeyGroupRanges {
 public:
  static constexpr uint32_t kDefault = 128;  // Flink's default max parallelism
  static constexpr uint32_t kMax = 1u << 15;

  // Throws std::invalid_argument if `groups` is 0 or above kMax, or fewer
  // than `workers` (a worker would own no group: the job cannot grow past
  // its key groups).
  KeyGroupRanges(uint32_t groups, uint32_t workers) : groups_(groups), workers_(workers) {
    if (groups == 0 || groups > kMax) {
      throw std::invalid_argument("--key-groups " + std::to_string(groups) +
                                  " is out of range: 1 .. " + std::to_string(kMax));
    }
    if (workers == 0 || workers > groups) {
      throw std::invalid_argument(
          "the job has " + std::to_string(workers) + " workers and " + std::to_string(groups) +
          " key groups (--key-groups, fixed when the job first started): a job cannot have "
          "more workers than key groups");
    }
    owner_.resize(groups);
    for (uint32_t g = 0; g < groups; ++g) owner_[g] = owner_of_group(g, groups, workers);
  }

  uint32_t groups() const { return groups_; }
  uint32_t workers() const { return workers_; }

  static uint32_t group_of(uint64_t hash, uint32_t groups) { return reduce_hash(hash, groups); }
  uint32_t group_of(uint64_t hash) const { return group_of(hash, groups_); }
  // The worker that owns the key of `hash` (sluice::hash64(key)).
  uint32_t owner(uint64_t hash) const { return owner_[group_of(hash)]; }

  // Worker w's groups: [first(w), end(w)).
  uint32_t first(uint32_t w) const { return ceil_div(uint64_t{w} * groups_, workers_); }
  uint32_t end(uint32_t w) const { return ceil_div(uint64_t{w + 1} * groups_, workers_); }

  static uint32_t owner_of_group(uint32_t g, uint32_t groups, uint32_t workers) {
    return static_cast<uint32_t>(uint64_t{g} * workers / groups);
  }

 private:
  static uint32_t ceil_div(uint64_t a, uint64_t b) {
    return static_cast<uint32_t>((a + b - 1) / b);
  }

  uint32_t groups_, workers_;
  std::vector<uint32_t> owner_;  // per group
};

}  // namespace sluice::stream
