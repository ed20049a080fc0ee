// apps/kv/sim.h: a deterministic simulated network for the protocol Nodes.
//
// Messages are delivered after a seeded random delay; each can be dropped at
// random (drop_rate) or by a test's filter. Links are FIFO by default (the
// ordered multicast NOPaxos assumes, and what sluice flows give per source);
// with fifo = false messages on one link may overtake each other. Nodes can
// be crashed (they neither receive nor tick) and, for a stop-like fault,
// paused and resumed. The same seed gives the same run, event for event.
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <vector>

#include "message.h"

namespace kv {

struct SimOptions {
  uint64_t seed = 1;
  double drop_rate = 0.0;  // probability that any one message is lost
  uint64_t min_delay_ms = 1;
  uint64_t max_delay_ms = 3;
  bool fifo = true;
};

class SimNetwork {
 public:
  explicit SimNetwork(SimOptions options);

  // Adds a node under `id`; the network does not own it.
  void add(uint32_t id, Node* node);
  // Replaces the node under `id` (e.g. a new sequencer after a failure).
  void replace(uint32_t id, Node* node) { nodes_[id] = node; }
  void crash(uint32_t id) { down_.insert(id); }
  void restore(uint32_t id) { down_.erase(id); }
  bool is_down(uint32_t id) const { return down_.count(id) > 0; }
  // Drops every message in flight from or to `id`: they went with a process
  // that restarted (on flows, with the epoch's flows).
  void purge(uint32_t id);

  // Lets node `id` act outside a message or tick (a test forcing an
  // election, say): `f` appends to the outbox, which is then sent.
  void act(uint32_t id, const std::function<void(Outbox&)>& f) {
    if (down_.count(id)) return;
    Outbox out;
    f(out);
    post(out);
  }

  // A test's filter: return false to drop the message.
  using Filter = std::function<bool(const Message&)>;
  void set_filter(Filter f) { filter_ = std::move(f); }
  // Changes the random drop rate from now on.
  void set_drop_rate(double r) { options_.drop_rate = r; }

  // Runs until `until()` is true or `deadline_ms` of simulated time passes;
  // returns whether `until()` became true. Every node ticks once per
  // simulated millisecond.
  bool run(uint64_t deadline_ms, const std::function<bool()>& until);
  // Runs for `ms` more simulated milliseconds.
  void run_for(uint64_t ms);

  uint64_t now() const { return now_; }
  uint64_t delivered() const { return delivered_; }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Pending {
    uint64_t at;
    uint64_t order;
    Message m;
    bool operator>(const Pending& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  void post(Outbox& out);
  void step();

  SimOptions options_;
  std::mt19937_64 rng_;
  std::map<uint32_t, Node*> nodes_;
  std::set<uint32_t> down_;
  Filter filter_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> queue_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> link_last_;
  uint64_t now_ = 0;
  uint64_t order_ = 0;
  uint64_t delivered_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace kv
