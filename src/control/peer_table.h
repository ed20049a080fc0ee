// What the job knows about each rank (PeerTable), and that view pinned to
// the ranks' incarnations of one moment (PinnedLiveness): the flows'
// detail::Liveness. The registry client's control thread writes it; anyone
// reads it, the data plane on its slow path only.
//
// Thread safety: see each class.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "flow/liveness.h"

namespace sluice::control {

// What the job knows about each rank. Written by the control thread, read by
// anyone. state(r) is a relaxed-free acquire load so the data plane may poll it.
// It is the flows' detail::Liveness (flow/liveness.h), the one view of the
// control plane that src/flow has.
class PeerTable final : public detail::Liveness {
 public:
  enum State : uint32_t { kAlive = 0, kLeft = 1, kDied = 2 };
  explicit PeerTable(uint32_t world_size);
  uint32_t world_size() const { return static_cast<uint32_t>(words_.size()); }
  State state(uint32_t rank) const {
    return static_cast<State>(words_[rank].load(std::memory_order_acquire) & kStateMask);
  }
  // How many times `rank` joined the job again after it died (0: never).
  uint32_t incarnation(uint32_t rank) const {
    return static_cast<uint32_t>(words_[rank].load(std::memory_order_acquire) >> 32);
  }
  // Alive in its current incarnation, whichever that is.
  bool alive(uint32_t rank) const override { return state(rank) == kAlive; }
  bool left(uint32_t rank) const override { return state(rank) == kLeft; }
  // Alive, and still the incarnation `incarnation` (what a flow or region
  // set up with that incarnation must ask: a rank that died and rejoined is
  // a new process that knows nothing of them).
  bool alive_as(uint32_t rank, uint32_t incarnation) const {
    return words_[rank].load(std::memory_order_acquire) == (uint64_t{incarnation} << 32 | kAlive);
  }
  // Left the job as the incarnation `incarnation` (one word read, as alive_as).
  bool left_as(uint32_t rank, uint32_t incarnation) const {
    return words_[rank].load(std::memory_order_acquire) == (uint64_t{incarnation} << 32 | kLeft);
  }
  // Incarnation `incarnation` of `rank` was declared dead, or a later one
  // exists: fenced (flow/liveness.h). Set before the view that event makes
  // is published (set()), so that whoever sees that view sees this too.
  bool fenced_as(uint32_t rank, uint32_t incarnation) const {
    return fenced_below_[rank].load(std::memory_order_seq_cst) > incarnation;
  }
  bool fenced(uint32_t rank) const override { return fenced_as(rank, incarnation(rank)); }
  // True once the registry connection itself is gone: every peer is then unknown.
  bool registry_lost() const override { return registry_lost_.load(std::memory_order_acquire); }
  // A sentence for messages, e.g. "rank 3 (host1, pid 1234) died: connection closed".
  std::string describe(uint32_t rank) const override;
  // The same about incarnation `incarnation` of the rank: once a later one
  // joined, "rank 3 died: ...; it has since rejoined (incarnation 1, pid 99)".
  std::string describe_as(uint32_t rank, uint32_t incarnation) const;
  // Host name of a rank as it reported at HELLO (empty if not yet known).
  std::string host(uint32_t rank) const;
  // Liveness hints (flow/liveness.h): a rank heard lost counts as such for
  // kHeardLostFor, time enough for the registry to report a real death.
  static constexpr std::chrono::seconds kHeardLostFor{10};
  void hear_lost(uint32_t rank) const override;
  bool heard_lost(uint32_t rank) const override;

  // The membership view (sluice::View): its epoch, as the registry numbers
  // them (0: the job as launched), the ranks not lost, and every rank's
  // incarnation, read together so that they belong to one epoch.
  struct ViewState {
    uint64_t epoch = 0;
    std::vector<uint32_t> members;
    std::vector<uint32_t> incarnations;
  };
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  ViewState view() const;
  // Waits until epoch() > after or the registry is lost (true), or the
  // deadline passes (false).
  bool await_epoch(uint64_t after, std::chrono::steady_clock::time_point deadline) const;

  // Control-thread side. Within an incarnation a rank once left or died
  // stays so: set() ignores any later change of its state, and any event of
  // an older incarnation; an event of a newer incarnation replaces the state.
  // `epoch` is the view's after the event (it never goes back).
  void set(uint32_t rank, State state, const std::string& reason, uint32_t incarnation = 0,
           uint64_t epoch = 0);
  void set_info(uint32_t rank, const std::string& host, uint32_t pid);
  void set_registry_lost(const std::string& reason);

 private:
  static constexpr uint64_t kStateMask = 0xffffffffu;
  // Per rank: incarnation << 32 | state, one word so that a reader never
  // pairs the state of one incarnation with the number of another.
  std::vector<std::atomic<uint64_t>> words_;
  std::atomic<bool> registry_lost_{false};
  std::atomic<uint64_t> epoch_{0};  // written under mu_, with the states of its view
  mutable std::condition_variable_any epoch_moved_;
  // Per rank: until when (steady clock, ns) it counts as heard lost.
  mutable std::vector<std::atomic<int64_t>> heard_until_;
  // Per rank: its incarnations below this were declared dead (fenced_as).
  std::vector<std::atomic<uint32_t>> fenced_below_;
  mutable Mutex mu_;
  std::vector<std::string> reasons_ SLUICE_GUARDED_BY(mu_);  // why each rank was last lost
  // Per rank: how its earlier incarnations ended, the latest kMaxEnds, so
  // that describe_as() names the end of the incarnation asked about (not a
  // later one's).
  struct End {
    uint32_t incarnation;
    State state;  // kLeft or kDied
    std::string reason;
  };
  static constexpr size_t kMaxEnds = 16;
  std::vector<std::vector<End>> ends_ SLUICE_GUARDED_BY(mu_);
  std::vector<std::string> hosts_ SLUICE_GUARDED_BY(mu_);
  std::vector<uint32_t> pids_ SLUICE_GUARDED_BY(mu_);
  std::string registry_reason_ SLUICE_GUARDED_BY(mu_);
};

// A PeerTable seen by what was set up with the ranks' incarnations of that
// moment (a flow): a rank is alive only while it is still that incarnation.
// Handed to flows as their detail::Liveness.
class PinnedLiveness final : public detail::Liveness {
 public:
  // Pinned to the incarnations `peers` knows now, or to `incarnations` (a
  // flow declared in a membership view: the view's, which a rank that died
  // and rejoined since the view was taken no longer is).
  explicit PinnedLiveness(const PeerTable& peers,
                          const std::vector<uint32_t>* incarnations = nullptr);
  bool alive(uint32_t rank) const override { return peers_.alive_as(rank, incarnations_[rank]); }
  // Left in the pinned incarnation (a later incarnation's state is not its).
  bool left(uint32_t rank) const override { return peers_.left_as(rank, incarnations_[rank]); }
  // The incarnation of `rank` this view is pinned to.
  uint32_t incarnation(uint32_t rank) const { return incarnations_[rank]; }
  bool registry_lost() const override { return peers_.registry_lost(); }
  std::string describe(uint32_t rank) const override {
    return peers_.describe_as(rank, incarnations_[rank]);
  }
  void hear_lost(uint32_t rank) const override { peers_.hear_lost(rank); }
  bool heard_lost(uint32_t rank) const override { return peers_.heard_lost(rank); }
  bool fenced(uint32_t rank) const override { return peers_.fenced_as(rank, incarnations_[rank]); }

 private:
  const PeerTable& peers_;
  std::vector<uint32_t> incarnations_;
};

}  // namespace sluice::control
