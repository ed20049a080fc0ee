#include "liveness.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace sluice::nam {

ShuffleSpec<uint64_t> alive_spec(const Cluster& cluster, uint32_t memory_servers) {
  std::vector<uint32_t> servers, compute;
  for (uint32_t r = 0; r < cluster.world_size(); ++r)
    (r < memory_servers ? servers : compute).push_back(r);
  ShuffleSpec<uint64_t> spec("nam-alive");
  spec.sources(cluster.ranks(servers)).targets(cluster.ranks(compute));
  return spec;
}

AliveSource::AliveSource(Cluster& cluster, uint32_t memory_servers)
    : spec_(alive_spec(cluster, memory_servers)),
      flow_(cluster.declare(spec_)),
      source_(cluster.source(spec_, 0)) {}

void AliveSource::close() {
  // A compute rank that died cannot take the end of the flow: not an error
  // of this memory server.
  (void)source_.close(Clock::now() + std::chrono::seconds(10));
}

ServerWatch::ServerWatch(Cluster& cluster, uint32_t memory_servers)
    : spec_(alive_spec(cluster, memory_servers)), flow_(cluster.declare(spec_)) {
  Target<uint64_t> target = cluster.target(spec_, 0);
  thread_ = std::thread([this, target = std::move(target)]() mutable {
    Worker w;
    const auto id = w.add(std::move(target), [](std::span<const uint64_t>) {});
    Status s = Status::kTimeout;
    while (s == Status::kTimeout && !stop_.load())
      s = w.run(Clock::now() + std::chrono::milliseconds(100));
    if (s == Status::kEndOfFlow || s == Status::kTimeout) return;
    std::lock_guard<std::mutex> lock(mu_);
    why_ = std::string(to_string(s)) + ": " + w.error(id);
    const auto peer = w.lost_peer(id);
    lost_.store(peer ? static_cast<int64_t>(peer->rank) : 0);
  });
}

ServerWatch::~ServerWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string ServerWatch::why() const {
  std::lock_guard<std::mutex> lock(mu_);
  return why_;
}

std::vector<uint32_t> meet_survivors(Cluster& cluster, const std::string& name,
                                     const std::vector<uint32_t>& candidates) {
  std::set<uint32_t> lost;
  for (;;) {
    std::vector<uint32_t> members;
    std::string without;
    for (uint32_t r : candidates) {
      if (r == cluster.rank() || (lost.count(r) == 0 && cluster.alive(r))) {
        members.push_back(r);
      } else {
        without += (without.empty() ? "-without-" : "-") + std::to_string(r);
      }
    }
    // A barrier's name serves one member set for the whole job: each set
    // gets its own.
    try {
      cluster.barrier(name + without, cluster.ranks(members), 0);
      return members;
    } catch (const PeerLostError& e) {
      if (e.rank() == cluster.rank() || lost.count(e.rank()) != 0 ||
          std::find(members.begin(), members.end(), e.rank()) == members.end())
        throw;
      lost.insert(e.rank());
    }
  }
}

}  // namespace sluice::nam
