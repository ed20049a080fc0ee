#include "control/peer_table.h"

#include <chrono>

#include "common/log.h"

namespace sluice::control {

PeerTable::PeerTable(uint32_t world_size)
    : words_(world_size),
      heard_until_(world_size),
      fenced_below_(world_size),
      reasons_(world_size),
      ends_(world_size),
      hosts_(world_size),
      pids_(world_size, 0) {}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void PeerTable::hear_lost(uint32_t rank) const {
  if (rank >= world_size()) return;
  heard_until_[rank].store(steady_ns() + std::chrono::nanoseconds(kHeardLostFor).count(),
                           std::memory_order_relaxed);
}

bool PeerTable::heard_lost(uint32_t rank) const {
  return rank < world_size() && steady_ns() < heard_until_[rank].load(std::memory_order_relaxed);
}

std::string PeerTable::describe_as(uint32_t rank, uint32_t incarnation) const {
  if (rank >= world_size() || this->incarnation(rank) == incarnation) return describe(rank);
  MutexLock lock(mu_);
  std::string how = log::cat("rank ", rank, " (incarnation ", incarnation, ") is gone");
  for (const End& e : ends_[rank]) {
    if (e.incarnation != incarnation) continue;
    how = e.state == kLeft ? log::cat("rank ", rank, " left the job")
                           : log::cat("rank ", rank, " died: ", e.reason);
  }
  return log::cat(how, "; it has since rejoined (incarnation ", this->incarnation(rank), ", ",
                  hosts_[rank], ", pid ", pids_[rank], ")");
}

PinnedLiveness::PinnedLiveness(const PeerTable& peers, const std::vector<uint32_t>* incarnations)
    : peers_(peers), incarnations_(peers.world_size()) {
  for (uint32_t r = 0; r < peers.world_size(); ++r) {
    incarnations_[r] = incarnations != nullptr && r < incarnations->size() ? (*incarnations)[r]
                                                                           : peers.incarnation(r);
  }
}

std::string PeerTable::describe(uint32_t rank) const {
  if (rank >= world_size()) {
    return log::cat("rank ", rank, " (not in this job of ", world_size(), " ranks)");
  }
  MutexLock lock(mu_);
  std::string s = log::cat("rank ", rank);
  if (!hosts_[rank].empty()) s += log::cat(" (", hosts_[rank], ", pid ", pids_[rank], ")");
  switch (state(rank)) {
    case kAlive:
      if (registry_lost()) return s + " is in an unknown state: " + registry_reason_;
      return s + " is alive";
    case kLeft:
      // An elastic job's vacancy: no process has held the number (the
      // registry's reason says so).
      if (hosts_[rank].empty() && incarnation(rank) == 0 && !reasons_[rank].empty())
        return s + " is " + reasons_[rank];
      return s + " left the job";
    case kDied:
      return s + " died: " + reasons_[rank];
  }
  return s;
}

std::string PeerTable::host(uint32_t rank) const {
  if (rank >= world_size()) return "";
  MutexLock lock(mu_);
  return hosts_[rank];
}

void PeerTable::set(uint32_t rank, State state, const std::string& reason, uint32_t incarnation,
                    uint64_t epoch) {
  if (rank >= world_size()) return;
  {
    MutexLock lock(mu_);
    // Fenced first: a thread that sees the view this event makes (epoch()
    // reads no lock) refuses whatever the lost process still sends. A
    // newer incarnation means the older ones are gone too.
    const uint32_t below = state == kDied ? incarnation + 1 : incarnation;
    if (below > fenced_below_[rank].load(std::memory_order_relaxed))
      fenced_below_[rank].store(below, std::memory_order_seq_cst);
    // The states and the epoch change under mu_ together, so that view()
    // never pairs the members of one view with the number of another.
    if (epoch > epoch_.load(std::memory_order_relaxed)) {
      epoch_.store(epoch, std::memory_order_release);
      epoch_moved_.notify_all();
    }
    const uint64_t now = words_[rank].load(std::memory_order_relaxed);
    const auto now_incarnation = static_cast<uint32_t>(now >> 32);
    if (incarnation < now_incarnation) return;
    // Within an incarnation a lost rank stays lost (and keeps the first
    // reason): whatever it may still send, its peers have given up on it.
    if (incarnation == now_incarnation && (now & kStateMask) != kAlive) return;
    if (state != kAlive) {
      reasons_[rank] = reason;
      std::vector<End>& ends = ends_[rank];
      if (ends.size() == kMaxEnds) ends.erase(ends.begin());
      ends.push_back(End{incarnation, state, reason});
    }
    // Release pairs with the acquire in state(): whoever sees the new state
    // also sees the reason (which describe() reads under mu_ in any case).
    words_[rank].store(uint64_t{incarnation} << 32 | state, std::memory_order_release);
  }
}

PeerTable::ViewState PeerTable::view() const {
  ViewState v;
  MutexLock lock(mu_);
  v.epoch = epoch_.load(std::memory_order_relaxed);
  for (uint32_t r = 0; r < world_size(); ++r) {
    if (state(r) == kAlive) v.members.push_back(r);
    v.incarnations.push_back(incarnation(r));
  }
  return v;
}

bool PeerTable::await_epoch(uint64_t after, std::chrono::steady_clock::time_point deadline) const {
  MutexLock lock(mu_);
  return epoch_moved_.wait_until(lock, deadline, [&] {
    return epoch_.load(std::memory_order_relaxed) > after ||
           registry_lost_.load(std::memory_order_relaxed);
  });
}

void PeerTable::set_info(uint32_t rank, const std::string& host, uint32_t pid) {
  if (rank >= world_size()) return;
  MutexLock lock(mu_);
  hosts_[rank] = host;
  pids_[rank] = pid;
}

void PeerTable::set_registry_lost(const std::string& reason) {
  MutexLock lock(mu_);
  registry_reason_ = reason;
  // Release pairs with the acquire in registry_lost(), as in set().
  registry_lost_.store(true, std::memory_order_release);
  epoch_moved_.notify_all();
}

}  // namespace sluice::control
