// The Cluster's state (ClusterImpl) and a flow's as this process holds it
// (FlowState): shared by cluster.cc (the public Cluster API: joining,
// membership, regions, barriers) and cluster_flows.cc (declaring flows and
// wiring them to the shm and ofi transports).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/test_hooks.h"
#include "control/bootstrap.h"
#include "control/registry_client.h"
#include "control/signal_report.h"
#include "flow/flow_core.h"
#include "flow/linger.h"
#include "memory/region.h"
#include "observe/endpoint_counters.h"
#include "sluice/cluster.h"
#include "transport/ofi/ofi.h"
#include "transport/shm/region.h"
#include "wire/layout.h"

namespace sluice::detail {

// What a destroyed region's registry entry says instead of its descriptor:
// openers fail at once rather than wait for an owner that is done with it.
// Its fd numbers and keys are gone from the registry; the few bytes stay
// until the name is exposed again.
inline constexpr const char* kRegionDestroyed = "destroyed";

// A flow as this process holds it.
struct FlowState {
  FlowContext ctx;
  layout::Geometry ring_geometry;  // stride and ring size (the same for every rank)
  // For each target index: its position among the targets on its rank.
  std::vector<uint32_t> local_index;
  // pair_remote[s * targets + t]: source s reaches target t over ofi.
  std::vector<bool> pair_remote;
  // Memory this rank owns (its targets' rings), if it hosts any target.
  SharedRegion own;
  // Regions of target ranks mapped for this rank's sources over shm.
  std::map<uint32_t, SharedRegion> peer;
  std::map<uint32_t, layout::Geometry> geometry;
  // ofi: endpoints prepared at declare, handed to the core at open.
  std::map<uint32_t, std::unique_ptr<OfiSource>> ofi_sources;
  std::map<uint32_t, std::unique_ptr<OfiTarget>> ofi_targets;
  std::map<uint32_t, std::vector<OutRingRef>>
      remote_out;  // [source][target]: filled for remote targets
  std::map<uint32_t, std::vector<InRingRef>>
      remote_in;  // [target][source]: filled for remote sources
  // Ordered flows, on the rank that owns it (FlowSpec::
  // effective_sequencer_rank): the sequencer's counter.
  std::unique_ptr<RegionOwner> sequencer;
  // The peers as the flow sees them: each rank's incarnation at declare
  // (ctx.liveness). A rank that died is lost to the flow even once it rejoins.
  std::unique_ptr<control::PinnedLiveness> liveness;
  // The view the flow was declared in (control::kUnscopedEpoch: none). Once
  // the job's view has moved past it, every participant gives the flow up.
  uint64_t epoch = control::kUnscopedEpoch;
  std::vector<bool> source_open;
  std::vector<bool> target_open;

  bool remote(uint32_t s, uint32_t t) const {
    return pair_remote[size_t{s} * ctx.spec.targets().size() + t];
  }
  // The flow is given up on this rank (its set-up failed after the
  // participants agreed, or its DeclaredFlow goes): every end of it here
  // that was never opened tells its peers it is gone (over shm the abort
  // words a destroyed source or target writes, over ofi its abort
  // messages), so that no peer waits for credit from a target, or an END
  // from a source, that will never be.
  // The shm part (abort words: never waits) and the ofi part (drives each
  // endpoint for at most kAbortFlush so that its messages leave: not from a
  // destructor; the retirement of a destroyed handle runs it on the Linger).
  void abort_unopened(uint32_t me);
  void abort_unopened_ofi();
  std::byte* region_of(uint32_t rank, uint32_t me) {
    if (rank == me) return own.data();
    auto it = peer.find(rank);
    return it == peer.end() ? nullptr : it->second.data();
  }
};

// The regions a rank exposed and its ordered flows' sequencers, fenced
// against a rank reported lost (the registry client's on_lost, on its
// control thread) before the view moves on. Its own object, held by the
// callback as well as by the ClusterImpl: the control thread never holds the
// ClusterImpl, whose last owner's destructor would otherwise run there and
// join the control thread from itself. Its own lock: a fence may wait for a
// region's service (up to a second).
class RegionFences {
 public:
  void add(RegionOwner* o) {
    MutexLock lock(mu_);
    owners_.push_back(o);
  }
  void remove(RegionOwner* o) {  // before it goes (RegionOwner::on_destroy)
    MutexLock lock(mu_);
    std::erase(owners_, o);
  }
  void fence(uint32_t rank, uint32_t incarnation) {
    test_hooks::delay_fence();
    MutexLock lock(mu_);
    // Every region asks its service first, then all are waited for: each
    // service applies it within its slice, side by side.
    std::vector<uint64_t> tickets;
    tickets.reserve(owners_.size());
    for (RegionOwner* o : owners_) tickets.push_back(o->ask_fence(rank, incarnation));
    const auto give_up = Clock::now() + std::chrono::seconds(1);
    for (size_t i = 0; i < owners_.size(); ++i) owners_[i]->await_fence(tickets[i], give_up);
  }

 private:
  Mutex mu_;
  std::vector<RegionOwner*> owners_ SLUICE_GUARDED_BY(mu_);
};

class ClusterImpl {
 public:
  ClusterOptions options;
  control::BootstrapInfo boot;
  std::unique_ptr<control::RegistryClient> client;
  std::string host_id;
  ofi::Config ofi_config;
  // (Before `flows`, so destroyed after them: a sequencer leaves the list
  // as it goes.)
  std::shared_ptr<RegionFences> fences = std::make_shared<RegionFences>();
  Mutex mu;
  std::map<std::string, std::unique_ptr<FlowState>> flows SLUICE_GUARDED_BY(mu);
  // Cache of other ranks' host identities.
  std::map<uint32_t, std::string> host_ids SLUICE_GUARDED_BY(mu);
  std::set<std::string> exposed SLUICE_GUARDED_BY(mu);  // names of regions this rank exposed
  int regions_over_ofi SLUICE_GUARDED_BY(mu) = -1;      // -1: not yet decided
  // Flows whose DeclaredFlow was destroyed, not yet let go of (FlowRetirement).
  std::set<std::string> retiring SLUICE_GUARDED_BY(mu);
  // Flows declared in a view (Cluster::declare(view, spec)) are declared as
  // "name@epoch"; sources and targets are opened by the spec's own name,
  // which stands for its latest declaration in a view.
  std::map<std::string, std::string> in_view SLUICE_GUARDED_BY(mu);
  std::atomic<bool> left{false};  // leave() was called

  // Regions go over ofi for every rank unless every rank shares this host.
  // A rank that left (an elastic job's vacancy among them: a number no
  // process has held) opens no region: it is not waited for. A process that
  // joins later from another host cannot open a region exposed over shared
  // memory only (RegionAccess::open says so); SLUICE_TRANSPORT=ofi avoids it.
  bool regions_use_ofi() {
    {
      MutexLock lock(mu);
      if (regions_over_ofi >= 0) return regions_over_ofi == 1;
    }
    bool ofi = options.transport == Transport::kOfi;
    for (uint32_t r = 0; r < boot.world_size && !ofi; ++r) {
      if (r != boot.rank && client->peers().state(r) == control::PeerTable::kLeft) continue;
      ofi = host_of(r) != host_id;
    }
    MutexLock lock(mu);
    regions_over_ofi = ofi ? 1 : 0;
    return ofi;
  }
  std::unique_ptr<RegionAccess> open_region(const std::string& key, const std::string& name,
                                            uint32_t owner, Deadline deadline) {
    const std::string desc = client->get(key, deadline, owner);
    if (desc == kRegionDestroyed) {
      // An owner that is gone (died, or left after a failure) took its
      // regions with it: that is a lost peer, not a caller's mistake.
      if (!client->peers().alive(owner)) {
        throw PeerLostError(owner,
                            "region '" + name + "' of rank " + std::to_string(owner) +
                                " is gone with its owner: " + client->peers().describe(owner));
      }
      throw Error(ErrorCode::kInvalidArgument,
                  "region '" + name + "' of rank " + std::to_string(owner) +
                      " was destroyed by its owner; it can be opened again once the "
                      "owner exposes it anew");
    }
    const uint32_t me = client->rank();
    return RegionAccess::open(name, owner, desc, host_id, ofi_config, &client->peers(),
                              uint64_t{client->peers().incarnation(me)} << 32 | (me + 1));
  }

  Deadline setup_deadline() const { return Clock::now() + options.setup_timeout; }

  // With an `epoch`, the registry agrees on the flow only within that view
  // (Error(kViewChanged) otherwise).
  // `incarnations`: the view's, for a flow declared in a view (the flow is
  // pinned to them), else null (the incarnations known now).
  void declare(const FlowSpec& spec, uint64_t epoch = control::kUnscopedEpoch,
               const std::vector<uint32_t>* incarnations = nullptr);
  // The name a flow declared as `name` is held under: `name` itself, or its
  // latest declaration in a view.
  std::string resolve(const std::string& name) {
    MutexLock lock(mu);
    if (flows.count(name) != 0) return name;
    auto it = in_view.find(name);
    return it == in_view.end() ? name : it->second;
  }
  // DeclaredFlow::destroy() in two steps: take the flow's state (throws if
  // cores of it are open, but for sources lingering on `linger` where
  // `lingering_ok`; nothing changes then), then withdraw it from the
  // registry, free it and release the name.
  std::unique_ptr<FlowState> take_flow(const std::string& name, bool lingering_ok = false);
  void destroy_flow(const std::string& name, std::unique_ptr<FlowState> fs, Deadline deadline);
  // DeclaredFlow's destructor: take_flow, then let `linger` withdraw and
  // free it. Never waits.
  void retire_flow(const std::string& name);
  // Cluster::leave().
  Status leave(Deadline deadline);
  const std::string& host_of(uint32_t rank);
  // The transport between ranks a and b (kShm or kOfi); `what` names the
  // caller's object in the error when transport is kShm across hosts.
  Transport transport_between(uint32_t a, uint32_t b, const std::string& what);
  void map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks);
  void setup_ofi(FlowState& fs);

  // Last, so destroyed first: what it still holds refers to the flows and
  // the registry client above.
  Linger linger;
};

// An ordered flow's sequencer as one core uses it (nullptr for an unordered
// flow): its own handle to the counter region on the first target's rank.
std::unique_ptr<Sequencer> open_sequencer(ClusterImpl& impl, const FlowSpec& spec);

}  // namespace sluice::detail
