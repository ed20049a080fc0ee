#include "sim.h"

#include <algorithm>

namespace kv {

SimNetwork::SimNetwork(SimOptions options) : options_(options), rng_(options.seed) {}

void SimNetwork::add(uint32_t id, Node* node) { nodes_[id] = node; }

void SimNetwork::post(Outbox& out) {
  for (Message& m : out) {
    bool lose = down_.count(m.from) || (filter_ && !filter_(m));
    if (!lose && options_.drop_rate > 0) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      lose = u(rng_) < options_.drop_rate;
    }
    if (lose) {
      ++dropped_;
      continue;
    }
    std::uniform_int_distribution<uint64_t> d(options_.min_delay_ms, options_.max_delay_ms);
    uint64_t at = now_ + d(rng_);
    if (options_.fifo) {
      // Never before the previous message on the same link.
      uint64_t& last = link_last_[{m.from, m.to}];
      at = std::max(at, last);
      last = at;
    }
    queue_.push(Pending{at, order_++, std::move(m)});
  }
  out.clear();
}

void SimNetwork::purge(uint32_t id) {
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> kept;
  while (!queue_.empty()) {
    if (queue_.top().m.from == id || queue_.top().m.to == id) {
      ++dropped_;
    } else {
      kept.push(queue_.top());
    }
    queue_.pop();
  }
  queue_.swap(kept);
}

void SimNetwork::step() {
  Outbox out;
  while (!queue_.empty() && queue_.top().at <= now_) {
    Pending p = queue_.top();
    queue_.pop();
    auto it = nodes_.find(p.m.to);
    if (it == nodes_.end() || down_.count(p.m.to)) {
      ++dropped_;
      continue;
    }
    ++delivered_;
    it->second->receive(p.m, out);
    post(out);
  }
  for (auto& [id, node] : nodes_) {
    if (down_.count(id)) continue;
    node->tick(now_, out);
    post(out);
  }
  ++now_;
}

bool SimNetwork::run(uint64_t deadline_ms, const std::function<bool()>& until) {
  uint64_t end = now_ + deadline_ms;
  while (now_ < end) {
    if (until()) return true;
    step();
  }
  return until();
}

void SimNetwork::run_for(uint64_t ms) {
  uint64_t end = now_ + ms;
  while (now_ < end) step();
}

}  // namespace kv
