// ClusterImpl's flows: declaring a flow (agreeing on it through the
// registry, sizing and mapping its rings, preparing its ofi endpoints) and
// destroying it; the ordered flows' sequencers.
#include <signal.h>

#include <cerrno>

#include "cluster_impl.h"
#include "common/mutex.h"
#include "common/test_hooks.h"
#include "flow/completion.h"
#include "flow/failure_state.h"
#include "transport/shm_ring.h"

namespace sluice::detail {

const std::string& ClusterImpl::host_of(uint32_t rank) {
  if (rank == boot.rank) return host_id;
  {
    MutexLock lock(mu);
    if (auto it = host_ids.find(rank); it != host_ids.end()) return it->second;
  }
  std::string id = client->get("host/" + std::to_string(rank), setup_deadline(), rank);
  MutexLock lock(mu);
  return host_ids.emplace(rank, std::move(id)).first->second;
}

Transport ClusterImpl::transport_between(uint32_t a, uint32_t b, const std::string& what) {
  const bool same_host = host_of(a) == host_of(b);
  if (!same_host && options.transport == Transport::kShm) {
    throw Error(ErrorCode::kInvalidArgument, what + ": ranks " + std::to_string(a) + " and " +
                                                 std::to_string(b) +
                                                 " are on different hosts, but transport = shm "
                                                 "(SLUICE_TRANSPORT=shm) allows only one host; "
                                                 "use auto or ofi");
  }
  return options.transport == Transport::kOfi || !same_host ? Transport::kOfi : Transport::kShm;
}

void FlowState::abort_unopened(uint32_t me) {
  const FlowSpec& spec = ctx.spec;
  const size_t nt = spec.targets().size();
  if (local_index.size() != nt || pair_remote.size() != spec.sources().size() * nt) return;
  const uint32_t cause = first_lost_rank(&ctx);
  for (uint32_t t = 0; t < nt; ++t) {
    const uint32_t trank = spec.targets()[t].rank;
    auto g = geometry.find(trank);
    std::byte* base = region_of(trank, me);
    if (g == geometry.end() || base == nullptr) continue;
    for (uint32_t s = 0; s < spec.sources().size(); ++s) {
      if (remote(s, t)) continue;
      const layout::RingView ring(base + g->second.ring_offset(local_index[t], s), g->second);
      if (trank == me && t < target_open.size() && !target_open[t]) {
        shm_ring::abort_target(ring, cause);
      }
      if (spec.sources()[s].rank == me && s < source_open.size() && !source_open[s]) {
        auto* bell =
            reinterpret_cast<layout::Doorbell*>(base + g->second.doorbell_offset(local_index[t]));
        shm_ring::abort_source(ring, bell, cause);
      }
    }
  }
}

void FlowState::abort_unopened_ofi() {
  // The endpoints made for the ends never opened (a core takes its
  // endpoint when it opens) send their peers abort messages.
  const FlowSpec& spec = ctx.spec;
  const size_t nt = spec.targets().size();
  const auto ns = static_cast<uint32_t>(spec.sources().size());
  const uint32_t cause = first_lost_rank(&ctx);
  for (auto& [t, ot] : ofi_targets) {
    if (ot == nullptr || ot->ep == nullptr || t >= target_open.size() || target_open[t]) continue;
    std::vector<fi_addr_t> peers;
    if (auto in = remote_in.find(t); in != remote_in.end()) {
      for (const InRingRef& r : in->second) peers.push_back(r.peer);
    }
    send_aborts_unopened(*ot->ep, ot->control, ot->control_mr.desc, ns, t, cause, peers);
  }
  for (auto& [s, os] : ofi_sources) {
    if (os == nullptr || os->ep == nullptr || s >= source_open.size() || source_open[s]) continue;
    std::vector<fi_addr_t> peers;
    if (auto out = remote_out.find(s); out != remote_out.end()) {
      for (const OutRingRef& r : out->second) peers.push_back(r.peer);
    }
    send_aborts_unopened(*os->ep, os->control, os->control_mr.desc, static_cast<uint32_t>(nt), s,
                         cause, peers);
  }
}

void ClusterImpl::declare(const FlowSpec& spec, uint64_t epoch,
                          const std::vector<uint32_t>* incarnations) {
  spec.validate();
  const uint32_t me = boot.rank;
  std::set<uint32_t> participants;
  for (const Endpoint& e : spec.sources()) participants.insert(e.rank);
  for (const Endpoint& e : spec.targets()) participants.insert(e.rank);
  for (uint32_t r : participants) {
    if (r >= boot.world_size) {
      throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name() + "' names rank " +
                                                   std::to_string(r) + " but the job has " +
                                                   std::to_string(boot.world_size) + " ranks");
    }
  }
  if (participants.count(me) == 0) {
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(me) + " declares flow '" +
                                                 spec.name() +
                                                 "' but is none of its sources or targets");
  }
  {
    // A declaration of the name this rank destroyed is let go of in the
    // background (DeclaredFlow's destructor): wait for that to finish.
    const Deadline until = setup_deadline();
    MutexLock lock(mu);
    while (retiring.count(spec.name()) != 0 && Clock::now() < until) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
    }
    if (retiring.count(spec.name()) != 0) {
      throw Error(ErrorCode::kTimeout, "flow '" + spec.name() +
                                           "' cannot be declared again yet: its previous "
                                           "declaration is still being destroyed on this rank");
    }
    if (flows.count(spec.name()) != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "flow '" + spec.name() + "' is already declared on this rank");
    }
    flows[spec.name()] = nullptr;  // reserve the name while we talk to the registry
  }
  bool agreed = false;
  try {
    // The transport setting decides each pair's transport on both sides:
    // participants must agree on it as on the spec itself.
    client->declare_flow(spec.name(),
                         spec.canonical() + "transport=" + to_string(options.transport) + "\n",
                         {participants.begin(), participants.end()}, setup_deadline(), epoch);
    agreed = true;

    auto fs = std::make_unique<FlowState>();
    // Should the set-up fail from here on, the ends it made here tell their
    // peers (who may have finished theirs) that they will never open.
    struct GiveUp {
      FlowState* fs;
      uint32_t me;
      ~GiveUp() {
        if (fs == nullptr) return;
        fs->abort_unopened(me);
        fs->abort_unopened_ofi();
      }
    } give_up{fs.get(), me};
    fs->ctx.spec = spec;
    fs->epoch = epoch;
    // Pinned to the view's incarnations where the flow was declared in one:
    // a participant that died and rejoined (a spare takes a place within
    // milliseconds) since is not the process the flow was declared with, and
    // waits for its keys must fail at once, not for the set-up timeout.
    fs->liveness = std::make_unique<control::PinnedLiveness>(client->peers(), incarnations);
    fs->ctx.liveness = fs->liveness.get();
    fs->ctx.linger = &linger;
    // What a segment holds is segment_bytes, whatever padding the stride has:
    // one record limit (FlowSpec::max_record_bytes), stated and enforced.
    fs->ctx.payload_bytes = spec.effective_segment_bytes();
    for (uint32_t r = 0; r < boot.world_size; ++r) fs->ctx.hosts.push_back(client->peers().host(r));
    fs->source_open.assign(spec.sources().size(), false);
    fs->target_open.assign(spec.targets().size(), false);

    // The transport of every (source, target) pair: shm within a host, ofi
    // across hosts, or as options.transport pins it.
    uint32_t ranks_here = 0;
    for (uint32_t r : participants) ranks_here += host_of(r) == host_id;
    const size_t nt = spec.targets().size();
    fs->pair_remote.assign(spec.sources().size() * nt, false);
    for (uint32_t s = 0; s < spec.sources().size(); ++s) {
      for (uint32_t t = 0; t < nt; ++t) {
        const uint32_t sr = spec.sources()[s].rank, tr = spec.targets()[t].rank;
        if (sr != me && tr != me) continue;
        fs->pair_remote[size_t{s} * nt + t] =
            transport_between(sr, tr, "flow '" + spec.name() + "'") == Transport::kOfi;
      }
    }
    // An ordered flow over ofi gets a longer ring by default (FlowSpec).
    // Every rank decides alike: the hosts and the transport setting are the job's.
    bool over_ofi = false;
    for (const Endpoint& src : spec.sources()) {
      for (const Endpoint& dst : spec.targets()) {
        over_ofi |=
            transport_between(src.rank, dst.rank, "flow '" + spec.name() + "'") == Transport::kOfi;
      }
    }
    fs->ctx.ring_segments = spec.effective_ring_segments(over_ofi);
    fs->ring_geometry =
        layout::Geometry::make(1, 1, fs->ctx.ring_segments, spec.effective_segment_bytes());
    // Spinning only pays when every busy thread has a CPU of its own. A
    // Bandwidth flow leaves one CPU over for everything else (control
    // threads, the kernel); a Latency flow asked for the shortest round
    // trip, and a consumer that yields or parks on a miss adds a system
    // call to every one: it spins as long as each busy thread has a CPU.
    const uint64_t cpus = std::max(1u, std::thread::hardware_concurrency());
    const uint64_t busy = uint64_t{ranks_here} * options.threads_per_rank;
    const bool spin = spec.optimize() == Optimize::kLatency ? busy <= cpus : busy < cpus;
    fs->ctx.spin_iterations = options.spin_iterations >= 0
                                  ? static_cast<uint32_t>(options.spin_iterations)
                              : spin ? 4000u
                                     : 0u;

    std::map<uint32_t, std::vector<uint32_t>> targets_by_rank;
    fs->local_index.resize(nt);
    for (uint32_t t = 0; t < nt; ++t) {
      auto& list = targets_by_rank[spec.targets()[t].rank];
      fs->local_index[t] = static_cast<uint32_t>(list.size());
      list.push_back(t);
    }
    for (const auto& [rank, list] : targets_by_rank) {
      const layout::Geometry g = layout::Geometry::make(
          static_cast<uint32_t>(list.size()), static_cast<uint32_t>(spec.sources().size()),
          fs->ctx.ring_segments, spec.effective_segment_bytes());
      if (g.total_bytes == layout::Geometry::kTooLarge) {
        throw Error(ErrorCode::kInvalidArgument,
                    "flow '" + spec.name() + "': the rings of rank " + std::to_string(rank) + " (" +
                        std::to_string(list.size()) + " targets x " +
                        std::to_string(spec.sources().size()) + " sources x " +
                        std::to_string(fs->ctx.ring_segments) + " segments of " +
                        std::to_string(spec.effective_segment_bytes()) +
                        " bytes) exceed 2^64 bytes; lower ring_segments or segment_bytes");
      }
      fs->geometry[rank] = g;
    }
    if (auto it = targets_by_rank.find(me); it != targets_by_rank.end()) {
      const layout::Geometry& g = fs->geometry[me];
      fs->own = SharedRegion::create(spec.name(), g.total_bytes);
      init_region(fs->own.data(), g, it->second, latency_tail_offset(spec, fs->ctx.ring_segments));
      client->put("flow/" + spec.name() + "/shm/" + std::to_string(me),
                  std::to_string(::getpid()) + " " + std::to_string(fs->own.fd()) + " " +
                      std::to_string(g.total_bytes) + " " + std::to_string(fs->own.nonce()) + " " +
                      host_id);
      log::info("flow '", spec.name(), "': ", it->second.size(), " target(s) here, ",
                spec.sources().size(), " source(s), ", g.total_bytes, " bytes of rings");
    }
    // Sources map the regions of the target ranks they reach over shm.
    std::set<uint32_t> shm_ranks;
    for (uint32_t s = 0; s < spec.sources().size(); ++s) {
      if (spec.sources()[s].rank != me) continue;
      for (uint32_t t = 0; t < nt; ++t) {
        if (!fs->remote(s, t)) shm_ranks.insert(spec.targets()[t].rank);
      }
    }
    if (const uint64_t ms = detail::test_hooks::map_delay_ms(me, spec.name()); ms != 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    map_regions(*fs, {shm_ranks.begin(), shm_ranks.end()});
    setup_ofi(*fs);
    if (spec.ordered() && spec.effective_sequencer_rank() == me) {
      fs->sequencer = std::make_unique<RegionOwner>("flow:" + spec.name() + ":sequencer", 64,
                                                    regions_use_ofi(), ofi_config, host_id);
      // Fenced as exposed regions are: a lost source's process that still
      // runs takes no number once this rank is in the view without it.
      fs->sequencer->on_destroy([this, o = fs->sequencer.get()] { fences->remove(o); });
      fences->add(fs->sequencer.get());
      client->put("flow/" + spec.name() + "/sequencer", fs->sequencer->descriptor());
    }
    give_up.fs = nullptr;
    MutexLock lock(mu);
    flows[spec.name()] = std::move(fs);
  } catch (...) {
    if (agreed) {
      // Withdraw at once, so that the other participants' destroy() need not
      // wait for a rank that will never hold the flow.
      try {
        client->undeclare_flow(spec.name(), Clock::now() + std::chrono::milliseconds(1));
      } catch (const Error&) {  // a timeout, as expected: the withdrawal counts
      }
    }
    MutexLock lock(mu);
    flows.erase(spec.name());
    throw;
  }
}

std::unique_ptr<FlowState> ClusterImpl::take_flow(const std::string& name, bool lingering_ok) {
  MutexLock lock(mu);
  auto it = flows.find(name);
  SLUICE_CHECK(it != flows.end() && it->second != nullptr,
               "flow '" + name + "' has a handle but no state");
  const FlowContext* ctx = &it->second->ctx;
  uint32_t open = ctx->open_cores.n.load(std::memory_order_relaxed);
  if (lingering_ok) {
    // Sources the Linger finishes are no user's any more. A task it has
    // just finished may still count as pending after its core is gone
    // (the Linger destroys finished tasks before it lets go of them): read
    // again until the two agree, briefly, without the lock.
    for (int tries = 0;; ++tries) {
      const size_t pending = linger.pending(ctx);
      open = ctx->open_cores.n.load(std::memory_order_relaxed);
      if (open >= pending || tries == 1000) {
        open = open >= pending ? open - static_cast<uint32_t>(pending) : 0;
        break;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
    }
  }
  if (open != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + name + "' cannot be destroyed on rank " + std::to_string(boot.rank) +
                    ": " + std::to_string(open) +
                    " of its sources/targets are still open here; destroy them first");
  }
  it->second->abort_unopened(boot.rank);
  // A declaration in a view no longer stands for its spec's name.
  if (const size_t at = name.rfind('@'); at != std::string::npos) {
    auto alias = in_view.find(name.substr(0, at));
    if (alias != in_view.end() && alias->second == name) in_view.erase(alias);
  }
  // The name stays reserved (null) until the registry has let go of it.
  return std::move(it->second);
}

void ClusterImpl::destroy_flow(const std::string& name, std::unique_ptr<FlowState> fs,
                               Deadline deadline) {
  // Collective: this rank's memory goes only once no participant can touch
  // it, and the registry erases the flow's keys before anyone returns.
  std::exception_ptr failure;
  fs->abort_unopened_ofi();
  try {
    client->undeclare_flow(name, deadline);
  } catch (...) {
    failure = std::current_exception();
  }
  fs.reset();
  {
    MutexLock lock(mu);
    flows.erase(name);
  }
  log::info("flow '", name, "' destroyed", failure ? " (not confirmed by every participant)" : "");
  if (failure) std::rethrow_exception(failure);
}

namespace {

// A flow whose DeclaredFlow was destroyed: once its lingering sources are
// done, it withdraws from the registry without waiting, and is freed when
// every participant has withdrawn (or is lost), as DeclaredFlow::destroy()
// would have waited for; or at its deadline, or when the Cluster ends.
class FlowRetirement final : public Linger::Task {
 public:
  FlowRetirement(ClusterImpl* impl, std::string name, std::unique_ptr<FlowState> fs)
      : impl_(impl),
        name_(std::move(name)),
        fs_(std::move(fs)),
        key_(&fs_->ctx),
        deadline_(impl->setup_deadline()),
        reply_(std::make_shared<Reply>()) {}

  ~FlowRetirement() override {
    fs_.reset();
    MutexLock lock(impl_->mu);
    impl_->flows.erase(name_);
    impl_->retiring.erase(name_);
  }

  bool step(std::chrono::milliseconds slice) override {
    if (fs_->ctx.open_cores.n.load(std::memory_order_relaxed) != 0) {
      std::this_thread::sleep_for(slice);  // its sources' last transfers (their own tasks)
      return false;
    }
    if (!sent_) {
      sent_ = true;
      fs_->abort_unopened_ofi();  // here, not in the destructor that retired it
      try {
        auto reply = reply_;
        impl_->client->undeclare_flow_async(name_, deadline_, [reply](std::string error) {
          reply->error = std::move(error);
          reply->done.store(true, std::memory_order_release);
        });
      } catch (const std::exception& e) {
        log::warn("flow '", name_, "': ", e.what());
        return true;
      }
    }
    if (!reply_->done.load(std::memory_order_acquire)) {
      // A rank that leaves the job lets go of the flow with its WITHDRAW
      // (the registry counts it done); waiting for every other participant
      // to let go too would hold leave() until they leave. Not the owner of
      // an ordered flow's sequencer: the others' sources take numbers there
      // and their targets read it at their end (numbers a lost or skipping
      // source took are gaps), so its leave() waits for them (at most to
      // the deadline).
      if (impl_->left.load(std::memory_order_acquire) && fs_->sequencer == nullptr) {
        log::info("flow '", name_, "': withdrawn by this rank, which leaves the job");
        return true;
      }
      std::this_thread::sleep_for(slice);
      return false;
    }
    if (reply_->error.empty()) {
      log::info("flow '", name_, "' destroyed");
    } else {
      log::warn("flow '", name_, "': ", reply_->error);
    }
    return true;
  }
  Deadline deadline() const override { return deadline_; }
  std::string describe() const override {
    return "flow '" + name_ + "': its withdrawal from the job";
  }
  void give_up(const std::string& why) override {
    log::warn("flow '", name_, "' freed before every participant confirmed it is done with it (",
              why, ")");
  }
  const void* key() const override { return key_; }

 private:
  struct Reply {
    std::atomic<bool> done{false};
    std::string error;  // written before done
  };
  ClusterImpl* impl_;
  std::string name_;
  std::unique_ptr<FlowState> fs_;
  const void* key_;
  Deadline deadline_;
  std::shared_ptr<Reply> reply_;  // shared with the registry client's callback
  bool sent_ = false;
};

}  // namespace

void ClusterImpl::retire_flow(const std::string& name) {
  auto fs = take_flow(name, /*lingering_ok=*/true);  // throws if the user has cores open
  if (left.load()) {
    // The registry let go of every flow of this rank when it left.
    fs.reset();
    MutexLock lock(mu);
    flows.erase(name);
    return;
  }
  {
    MutexLock lock(mu);
    retiring.insert(name);
  }
  linger.add(std::make_unique<FlowRetirement>(this, name, std::move(fs)));
}

namespace {
constexpr std::chrono::seconds kLeaveReserve{1};
}  // namespace

Status ClusterImpl::leave(Deadline deadline) {
  bool clean = linger.drain(deadline);
  if (!clean) {
    log::warn(
        "leave(): the last transfers of destroyed sources, or the withdrawal of destroyed "
        "flows, were not finished by the deadline");
  }
  linger.close();
  // LEAVE itself takes milliseconds: a drain that used the whole deadline
  // still leaves a second for the registry to confirm it.
  if (!client->leave(clean ? deadline : std::max(deadline, Clock::now() + kLeaveReserve))) {
    clean = false;
    log::warn("leave(): the registry did not confirm by the deadline that this rank left");
  }
  return clean ? Status::kOk : Status::kTimeout;
}

void ClusterImpl::map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks) {
  // A rank that cannot be mapped fails the declaration, but the others are
  // still mapped, as far as they can be at once: a failed declaration
  // aborts this rank's sources towards every target it mapped (GiveUp in
  // declare), and a target rank that finished its own declaration waits
  // for them until then (a flow in a view gives up this way when the view
  // moves on, while the others may have finished theirs).
  const std::string& name = fs.ctx.spec.name();
  // One target rank's rings; `best_effort`: without waiting for a rank
  // whose rings are gone to be declared lost.
  auto map_region = [&](uint32_t rank, bool best_effort) {
    std::string desc =
        client->get("flow/" + name + "/shm/" + std::to_string(rank),
                    best_effort ? std::min(setup_deadline(), Clock::now() + options.peer_timeout)
                                : setup_deadline(),
                    rank, fs.liveness->incarnation(rank));
    std::istringstream in(desc);
    long long pid = 0, fd = -1;
    unsigned long long bytes = 0, nonce = 0;
    std::string their_host;
    if (!(in >> pid >> fd >> bytes >> nonce >> their_host) || pid <= 0 || fd < 0) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            " published a malformed ring descriptor '" + desc +
                                            "'");
    }
    const layout::Geometry& g = fs.geometry[rank];
    if (bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            "'s rings have " + std::to_string(bytes) +
                                            " bytes, expected " + std::to_string(g.total_bytes));
    }
    SharedRegion region;
    try {
      region = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd), bytes, nonce);
    } catch (const Error&) {
      // The usual causes: that rank has exited (it may have failed in its
      // own declare), or, for a flow declared in a view, it gave the flow up
      // because the view moved on (a participant was lost) and destroyed its
      // rings. Say so as a lost peer: at once if the process that published
      // the rings is gone (the rank may already be back as a new
      // incarnation, which the registry counts alive), else once the
      // registry confirms it; and as a view change at once when there is a
      // newer view than the flow's, whose every participant gives it up
      // (waiting out the peer timeout then only delayed the flow's next
      // declaration: 5 s by default). Best effort (another rank failed
      // already): no waiting at all.
      if (best_effort) throw;
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        throw PeerLostError(rank, "flow '" + name + "': rank " + std::to_string(rank) +
                                      "'s process " + std::to_string(pid) +
                                      ", which published its rings, has exited before this "
                                      "rank could map them");
      }
      const detail::Liveness& peers = *fs.ctx.liveness;
      for (const auto until = Clock::now() + options.peer_timeout; Clock::now() < until;) {
        if (peers.registry_lost() || !peers.alive(rank)) {
          throw PeerLostError(rank, "flow '" + name + "': " + peers.describe(rank) +
                                        " before this rank could map its rings");
        }
        // Another participant lost: the usual reason that rank gave up.
        // (Not first_lost_rank: it counts ranks only heard lost, and a
        // PeerLost for a rank the registry keeps would wait for a view that
        // never comes.)
        for (const auto* side : {&fs.ctx.spec.sources(), &fs.ctx.spec.targets()}) {
          for (const Endpoint& e : *side) {
            if (!peers.alive(e.rank)) {
              throw PeerLostError(e.rank, "flow '" + name + "': " + peers.describe(e.rank) +
                                              " while the flow was set up (rank " +
                                              std::to_string(rank) + " gave it up)");
            }
          }
        }
        if (fs.epoch != control::kUnscopedEpoch && client->peers().epoch() > fs.epoch) {
          throw Error(ErrorCode::kViewChanged,
                      "flow '" + name + "': the job's view moved past view " +
                          std::to_string(fs.epoch) + " before this rank could map rank " +
                          std::to_string(rank) + "'s rings (it gave the flow up)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      throw;
    }
    const auto* hdr = reinterpret_cast<const layout::RegionHeader*>(region.data());
    if (hdr->magic != layout::kRegionMagic || hdr->version != layout::kLayoutVersion ||
        hdr->local_targets != g.local_targets || hdr->sources != g.sources ||
        hdr->ring_segments != g.ring_segments || hdr->segment_stride != g.segment_stride ||
        hdr->payload_bytes != g.payload_bytes() || hdr->total_bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol,
                  "flow '" + name + "': rank " + std::to_string(rank) +
                      "'s ring region has an unexpected header (different sluice version?)");
    }
    log::info("flow '", name, "': rank ", rank, " is on this host: shm (mapped ", bytes,
              " bytes of pid ", pid, ")");
    fs.peer.emplace(rank, std::move(region));
  };
  std::exception_ptr first;
  for (uint32_t rank : target_ranks) {
    if (rank == boot.rank) continue;
    try {
      map_region(rank, first != nullptr);
    } catch (...) {
      if (first == nullptr) first = std::current_exception();
    }
  }
  if (first != nullptr) std::rethrow_exception(first);
}

// Creates this rank's ofi endpoints for the flow, publishes their addresses
// and keys, and reads those of the peers they talk to.
void ClusterImpl::setup_ofi(FlowState& fs) {
  const FlowSpec& spec = fs.ctx.spec;
  const uint32_t me = boot.rank;
  const size_t ns = spec.sources().size(), nt = spec.targets().size();
  const layout::Geometry& rg = fs.ring_geometry;
  const std::string prefix = "flow/" + spec.name() + "/ofi/";
  auto any_remote = [&](bool as_source, uint32_t index) {
    for (uint32_t o = 0; o < (as_source ? nt : ns); ++o) {
      if (as_source ? fs.remote(index, o) : fs.remote(o, index)) return true;
    }
    return false;
  };
  for (uint32_t t = 0; t < nt; ++t) {
    if (spec.targets()[t].rank != me || !any_remote(false, t)) continue;
    auto ot = std::make_unique<OfiTarget>();
    ot->ep = std::make_unique<ofi::Endpoint>(ofi_config);
    const layout::Geometry& g = fs.geometry[me];
    // Each remote source may write only the segments of its own ring: one
    // registration (and key) per source, ring headers never exposed.
    ot->ring_mrs.resize(ns);
    for (uint32_t s = 0; s < ns; ++s) {
      if (!fs.remote(s, t)) continue;
      std::byte* segments =
          fs.own.data() + g.ring_offset(fs.local_index[t], s) + sizeof(layout::RingHeader);
      ot->ring_mrs[s] = ot->ep->register_memory(
          segments, size_t{g.ring_segments} * g.segment_stride, FI_REMOTE_WRITE | FI_RECV);
    }
    // Registered buffers belong to the endpoint: an abandoned one keeps them
    // (a NIC may still write into them), a closed one frees them after.
    ot->outbox = ot->ep->allocate_array<uint64_t>(ns);
    ot->outbox_mr = ot->ep->register_memory(ot->outbox, ns * sizeof(uint64_t), FI_WRITE | FI_SEND);
    ot->control = ot->ep->allocate_array<uint64_t>(ns + 2);
    ot->control_mr =
        ot->ep->register_memory(ot->control, (ns + 2) * sizeof(uint64_t), FI_SEND | FI_RECV);
    for (uint32_t s = 0; s < ns; ++s) {
      if (!fs.remote(s, t)) continue;
      client->put(prefix + "t/" + std::to_string(t) + "/" + std::to_string(s),
                  to_hex(ot->ep->address()) + " " + (ot->ep->rma() ? "rma" : "msg") + " " +
                      std::to_string(ot->ring_mrs[s].key) + " " +
                      std::to_string(ot->ring_mrs[s].base));
    }
    log::info("flow '", spec.name(), "' target ", t, ": ofi endpoint on ", ot->ep->provider_name(),
              " via ", ofi_config.node.empty() ? "any interface" : ofi_config.node, ", ",
              ot->ep->rma() ? "RMA" : "messages");
    fs.ofi_targets[t] = std::move(ot);
  }
  for (uint32_t s = 0; s < ns; ++s) {
    if (spec.sources()[s].rank != me || !any_remote(true, s)) continue;
    auto os = std::make_unique<OfiSource>();
    os->ep = std::make_unique<ofi::Endpoint>(ofi_config);
    os->staging_bytes = nt * rg.ring_stride;
    os->staging = os->ep->allocate(os->staging_bytes);
    os->staging_mr = os->ep->register_memory(os->staging, os->staging_bytes, FI_WRITE | FI_SEND);
    os->credits = os->ep->allocate_array<uint64_t>(nt);
    os->credits_mr =
        os->ep->register_memory(os->credits, nt * sizeof(uint64_t), FI_REMOTE_WRITE | FI_RECV);
    os->control = os->ep->allocate_array<uint64_t>(nt + 1);
    os->control_mr =
        os->ep->register_memory(os->control, (nt + 1) * sizeof(uint64_t), FI_SEND | FI_RECV);
    client->put(prefix + "s/" + std::to_string(s),
                to_hex(os->ep->address()) + " " + (os->ep->rma() ? "rma" : "msg") + " " +
                    std::to_string(os->credits_mr.key) + " " + std::to_string(os->credits_mr.base));
    log::info("flow '", spec.name(), "' source ", s, ": ofi endpoint on ", os->ep->provider_name(),
              ", ", os->ep->rma() ? "RMA" : "messages");
    fs.ofi_sources[s] = std::move(os);
  }
  // A descriptor: hex address, data path, key, base. Everything in it comes
  // from a peer, so it is checked before use.
  auto fetch = [&](const std::string& key, const std::string& path, uint32_t owner,
                   ofi::Endpoint& ep, fi_addr_t* peer, uint64_t* mr_key, uint64_t* base) {
    // From the owner's process the flow is pinned to: if it died and its
    // rank rejoined, the new process will never put this key.
    const std::string desc =
        client->get(prefix + key, setup_deadline(), owner, fs.liveness->incarnation(owner));
    std::istringstream in(desc);
    std::string hex, mode, addr;
    unsigned long long k = 0, b = 0;
    if (!(in >> hex >> mode >> k >> b) || !from_hex(hex, &addr) || addr.empty()) {
      throw Error(ErrorCode::kProtocol, "flow '" + spec.name() + "': rank " +
                                            std::to_string(owner) +
                                            " published a malformed ofi descriptor for " + key);
    }
    if (mode != (ep.rma() ? "rma" : "msg")) {
      throw Error(ErrorCode::kInvalidArgument,
                  "flow '" + spec.name() + "': rank " + std::to_string(owner) +
                      " moves segments by " + (mode == "rma" ? "RMA" : "messages") + " but rank " +
                      std::to_string(me) + " by " + (ep.rma() ? "RMA" : "messages") +
                      "; give every rank the same SLUICE_OFI_RMA and provider");
    }
    *peer = ep.insert(addr);
    *mr_key = k;
    *base = b;
    // The path this pair of endpoints takes, once per pair (SLUICE_LOG=info).
    if (log::level() >= log::Level::kInfo) {
      const std::string host = client->peers().host(owner);
      log::info("flow '", spec.name(), "' ", path, " (rank ", owner,
                host.empty() ? "" : " on " + host, "): ofi ", ep.provider_name(), ", ",
                ep.rma() ? "RMA" : "messages", ", peer at ", ep.address_text(addr));
    }
  };
  for (auto& [s, os] : fs.ofi_sources) {
    std::vector<OutRingRef>& outs = fs.remote_out[s];
    outs.resize(nt);
    for (uint32_t t = 0; t < nt; ++t) {
      if (!fs.remote(s, t)) continue;
      OutRingRef& r = outs[t];
      r.remote = true;
      r.ring = layout::RingView(os->staging + t * rg.ring_stride, rg);
      uint64_t base = 0;
      fetch("t/" + std::to_string(t) + "/" + std::to_string(s),
            "source " + std::to_string(s) + " -> target " + std::to_string(t),
            spec.targets()[t].rank, *os->ep, &r.peer, &r.ring_key, &base);
      r.ring_addr = base;  // segment 0 of our ring: all the target registered for us
    }
  }
  for (auto& [t, ot] : fs.ofi_targets) {
    std::vector<InRingRef>& ins = fs.remote_in[t];
    ins.resize(ns);
    for (uint32_t s = 0; s < ns; ++s) {
      if (!fs.remote(s, t)) continue;
      InRingRef& r = ins[s];
      r.remote = true;
      uint64_t base = 0;
      fetch("s/" + std::to_string(s),
            "target " + std::to_string(t) + " <- source " + std::to_string(s),
            spec.sources()[s].rank, *ot->ep, &r.peer, &r.credit_key, &base);
      r.credit_addr = base + t * sizeof(uint64_t);
    }
  }
  // Every connection now, while every participant is in declare().
  OfiWiring wiring;
  for (auto& [s, os] : fs.ofi_sources) {
    OfiWiring::Side side{s, os->ep.get(), os->control, os->control_mr.desc, {}, nullptr};
    for (uint32_t t = 0; t < nt; ++t) {
      if (fs.remote(s, t)) side.peers.emplace_back(t, fs.remote_out[s][t].peer);
    }
    wiring.sources.push_back(std::move(side));
  }
  for (auto& [t, ot] : fs.ofi_targets) {
    OfiWiring::Side side{t, ot->ep.get(), ot->control, ot->control_mr.desc, {}, &ot->backlog};
    for (uint32_t s = 0; s < ns; ++s) {
      if (fs.remote(s, t)) side.peers.emplace_back(s, fs.remote_in[t][s].peer);
    }
    wiring.targets.push_back(std::move(side));
  }
  if (fs.epoch != control::kUnscopedEpoch) {
    wiring.superseded = [this, &fs]() -> std::string {
      if (client->peers().epoch() <= fs.epoch) return {};
      return "flow '" + fs.ctx.spec.name() + "': the job's view moved past view " +
             std::to_string(fs.epoch) + " while its ofi connections were set up (its other " +
             "participants give it up)";
    };
  }
  wire_up(fs.ctx, wiring, setup_deadline());
}

namespace {

// Polls of the sequencer's answer before its waiter yields between polls.
constexpr uint32_t kSequencerSpinPolls = 100;

// An ordered flow's sequencer as one core uses it: its own handle to the
// counter region.
class RegionSequencer final : public Sequencer {
 public:
  RegionSequencer(std::unique_ptr<RegionAccess> counter, const control::PeerTable* peers,
                  uint32_t owner)
      : counter_(std::move(counter)),
        peers_(peers),
        owner_(owner),
        incarnation_(peers->incarnation(owner)) {
    // The answer comes from the owner's service thread, which on a busy
    // host needs a core that a spinning source would hold: after about a
    // round trip's worth of polls, yield between them (2x2 ordered over
    // tcp, 64 KiB: 0.75 -> 0.91 of unordered against 2000 polls;
    // bench/results/history.md).
    counter_->set_spin_polls(kSequencerSpinPolls);
  }
  Status take(uint64_t count, uint64_t* first, std::string* error) override {
    return op(count, first, error);
  }
  Status taken(uint64_t* count, std::string* error) override { return op(0, count, error); }
  void set_while_waiting(void (*fn)(void*), void* arg) override {
    counter_->set_while_waiting(fn, arg);
  }

 private:
  Status op(uint64_t delta, uint64_t* out, std::string* error) {
    // The same on every transport: a lost owner ends the sequencer. (Over
    // shm its memory would outlive it in our mapping; over ofi it goes.)
    if (peers_->registry_lost() || !peers_->alive_as(owner_, incarnation_)) {
      *error = "the sequencer's owner is gone: " + peers_->describe_as(owner_, incarnation_);
      return Status::kPeerLost;
    }
    Status s = counter_->fetch_add(0, delta, out, kForever);
    if (s != Status::kOk) *error = counter_->error();
    return s;
  }
  std::unique_ptr<RegionAccess> counter_;
  const control::PeerTable* peers_;
  uint32_t owner_;
  uint32_t incarnation_;  // the owner's when the sequencer was opened
};

}  // namespace

std::unique_ptr<Sequencer> open_sequencer(ClusterImpl& impl, const FlowSpec& spec) {
  if (!spec.ordered()) return nullptr;
  const uint32_t owner = spec.effective_sequencer_rank();
  return std::make_unique<RegionSequencer>(
      impl.open_region("flow/" + spec.name() + "/sequencer", "flow:" + spec.name() + ":sequencer",
                       owner, impl.setup_deadline()),
      &impl.client->peers(), owner);
}

}  // namespace sluice::detail
