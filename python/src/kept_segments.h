// python/src/kept_segments.h: the segments a Python target keeps in its
// rings (Target::keep) for arrays that read them without a copy, and their
// release from whichever thread drops the last array.
#pragma once

#include <sluice/sluice.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice::python {

class KeptSegments {
 public:
  // Why the target cannot consume more: every one of the `ring` segments of
  // some source's ring is kept (its source cannot send until one comes
  // back), named with `held_by` ("arrays", "record batches"); else "".
  std::string ring_full(uint32_t ring, const std::vector<Endpoint>& sources,
                        const std::string& held_by) {
    if (occupied_.empty()) occupied_.resize(sources.size());
    for (size_t s = 0; s < occupied_.size(); ++s) {
      if (occupied_[s].size() < ring) continue;
      return "consume(): all " + std::to_string(ring) + " segments of the ring from source " +
             std::to_string(s) + " (rank " + std::to_string(sources[s].rank) + ") are held by " +
             held_by +
             " still alive, so it cannot send more: copy the batches you keep, drop them, or "
             "declare the flow with more ring_segments";
    }
    return "";
  }
  // Segment `id` of source `source` was kept (the target's thread).
  void kept(uint32_t source, uint64_t id) { occupied_[source].emplace_back(id, false); }
  // Gives segment `id` back, from any thread: release_queued() releases it.
  void release_later(uint64_t id) {
    std::lock_guard<std::mutex> lock(released_mu_);
    released_.push_back(id);
  }
  // Calls release(id) for each segment given back since the last call (the
  // target's thread).
  template <class Release>
  void release_queued(Release&& release) {
    std::vector<uint64_t> ids;
    {
      std::lock_guard<std::mutex> lock(released_mu_);
      ids.swap(released_);
    }
    for (uint64_t id : ids) {
      release(id);
      for (auto& ring : occupied_) {
        auto it =
            std::find_if(ring.begin(), ring.end(), [id](const auto& k) { return k.first == id; });
        if (it == ring.end()) continue;
        it->second = true;
        while (!ring.empty() && ring.front().second) ring.pop_front();
        break;
      }
    }
  }
  // Arrays over kept segments alive (counted in and out as they come and go).
  void pin() { pins_.fetch_add(1); }
  void unpin() { pins_.fetch_sub(1); }
  bool pinned() const { return pins_.load() != 0; }

 private:
  std::mutex released_mu_;
  std::vector<uint64_t> released_;  // guarded by released_mu_
  // Per source, the kept segments in ring order: (id, released). A ring's
  // segments free up in ring order, so these are the ring's segments this
  // target occupies; the front is popped once released.
  std::vector<std::deque<std::pair<uint64_t, bool>>> occupied_;
  std::atomic<int> pins_{0};
};

}  // namespace sluice::python
