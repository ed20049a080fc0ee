// Cluster: joins the job through the registry; membership, flows' and
// regions' handles, barriers. Declaring a flow and wiring it to the
// transports is ClusterImpl's (cluster_flows.cc).
#include "sluice/cluster.h"

#include "cluster_impl.h"
#include "common/mutex.h"
#include "common/test_hooks.h"

namespace sluice {

Cluster::Cluster(std::shared_ptr<detail::ClusterImpl> impl) : impl_(std::move(impl)) {}
Cluster::Cluster(Cluster&&) noexcept = default;
Cluster& Cluster::operator=(Cluster&&) noexcept = default;
Cluster::~Cluster() {
  detail::test_hooks::DestructorScope scope;
  impl_.reset();
}

Status Cluster::leave(Deadline deadline) {
  if (impl_->left.exchange(true)) return Status::kClosed;
  return impl_->leave(deadline);
}

Cluster Cluster::join() { return join(ClusterOptions::from_env()); }

Cluster Cluster::join(const ClusterOptions& options) {
  options.validate();
  log::set_level(options.log_level);
  auto impl = std::make_shared<detail::ClusterImpl>();
  impl->options = options;
  impl->boot = control::parse_bootstrap(control::process_env(), options.rank, options.world_size,
                                        options.registry, options.secret);
  impl->options.rank = impl->boot.rank;
  impl->options.world_size = impl->boot.world_size;
  impl->options.registry =
      impl->boot.registry_host + ":" + std::to_string(impl->boot.registry_port);
  impl->options.secret = impl->boot.secret;
  impl->host_id = detail::host_identity();
  if (impl->boot.spare) {
    log::set_tag("spare");
    log::info("waiting as a spare of the job at ", impl->options.registry, " until one of its ",
              impl->boot.world_size, " ranks dies");
  } else if (impl->boot.join) {
    log::set_tag("joiner");
    log::info("joining the running job at ", impl->options.registry, " in a free rank number");
  } else {
    log::set_tag("rank " + std::to_string(impl->boot.rank));
  }
  control::ClientOptions co;
  co.heartbeat_timeout = options.peer_timeout;
  co.fence_lost_ranks = options.fence_lost_ranks;
  co.connect_timeout = options.setup_timeout;
  // `sluice top` shows the view each process is in.
  co.on_epoch = [](uint64_t epoch) { detail::counters::set_epoch(epoch); };
  // A lost rank's clients of this rank's regions are refused before any
  // thread here sees the view without it (a process on another host that
  // the job gave up on may still be running).
  co.on_lost = [fences = impl->fences](uint32_t rank, uint32_t incarnation) {
    fences->fence(rank, incarnation);
  };
  detail::counters::set_epoch(0);  // a new job's; WELCOME may move it (a rejoin)
  // `sluice top` lists a spare under its job while it waits.
  if (impl->boot.spare)
    detail::counters::set_job(impl->options.registry, detail::counters::kSpareRank);
  impl->client = control::RegistryClient::connect(impl->boot, co);
  if (impl->boot.rankless()) {
    // The registry gave this spare a died rank's place (this joiner a free
    // number): from here on it is that rank's next incarnation, as a
    // restarted process would be.
    impl->boot.rank = impl->client->rank();
    impl->options.rank = impl->boot.rank;
    log::set_tag("rank " + std::to_string(impl->boot.rank));
  }
  // Peers compare host identities to choose shm or ofi per pair.
  impl->client->put("host/" + std::to_string(impl->boot.rank), impl->host_id);
  // Data goes out through the interface that reaches the registry, unless
  // the job pinned a provider that chooses its own.
  impl->ofi_config = detail::ofi::config_from_options(impl->options, impl->client->local_address());
  // `sluice top` groups this process's endpoints by job and rank.
  detail::counters::set_job(impl->options.registry, impl->boot.rank);
  control::signal_report::install();
  log::info("joined as rank ", impl->boot.rank, " of ", impl->boot.world_size, " via ",
            impl->options.registry, " (bootstrap from ", impl->boot.source, ")");
  if (log::level() >= log::Level::kInfo) {
    // One line, so that ranks' logs interleave readably.
    std::string settings;
    std::istringstream lines(impl->options.describe());
    for (std::string line; std::getline(lines, line);)
      settings += (settings.empty() ? "" : "; ") + line;
    log::info("settings: ", settings);
  }
  return Cluster(std::move(impl));
}

uint32_t Cluster::rank() const { return impl_->boot.rank; }
uint32_t Cluster::world_size() const { return impl_->boot.world_size; }
const ClusterOptions& Cluster::options() const { return impl_->options; }

bool Cluster::alive(uint32_t rank) const {
  if (rank >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument, "alive(" + std::to_string(rank) +
                                                 "): no such rank; the job has " +
                                                 std::to_string(world_size()));
  }
  const control::PeerTable& peers = impl_->client->peers();
  return !peers.registry_lost() && peers.alive(rank);
}

bool Cluster::left(uint32_t rank) const {
  if (rank >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument, "left(" + std::to_string(rank) +
                                                 "): no such rank; the job has " +
                                                 std::to_string(world_size()));
  }
  return impl_->client->peers().state(rank) == control::PeerTable::kLeft;
}

uint32_t Cluster::incarnation(uint32_t rank) const {
  if (rank >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument, "incarnation(" + std::to_string(rank) +
                                                 "): no such rank; the job has " +
                                                 std::to_string(world_size()));
  }
  return impl_->client->peers().incarnation(rank);
}

std::vector<uint32_t> Cluster::live_ranks() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < world_size(); ++r) {
    if (alive(r)) out.push_back(r);
  }
  return out;
}

Transport Cluster::transport_to(uint32_t rank) const {
  if (rank >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument, "transport_to(" + std::to_string(rank) +
                                                 "): no such rank; the job has " +
                                                 std::to_string(world_size()));
  }
  return impl_->transport_between(this->rank(), rank, "transport_to(" + std::to_string(rank) + ")");
}

std::vector<Endpoint> Cluster::all_ranks(uint32_t slots) const {
  std::vector<Endpoint> out;
  for (uint32_t r = 0; r < world_size(); ++r) {
    for (uint32_t s = 0; s < slots; ++s) out.push_back({r, s});
  }
  return out;
}

std::vector<Endpoint> Cluster::ranks(std::vector<uint32_t> ranks, uint32_t slots) const {
  std::vector<Endpoint> out;
  for (uint32_t r : ranks) {
    if (r >= world_size()) {
      throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(r) +
                                                   " does not exist: the job has " +
                                                   std::to_string(world_size()));
    }
    for (uint32_t s = 0; s < slots; ++s) out.push_back({r, s});
  }
  return out;
}

DeclaredFlow Cluster::declare(const FlowSpec& spec) {
  impl_->declare(spec);
  return DeclaredFlow(impl_, spec.name());
}

DeclaredFlow::DeclaredFlow(DeclaredFlow&& other) noexcept
    : cluster_(std::move(other.cluster_)),
      name_(std::exchange(other.name_, {})),
      last_(std::exchange(other.last_, Status::kOk)),
      error_(std::move(other.error_)),
      lost_(std::exchange(other.lost_, std::nullopt)) {}

DeclaredFlow& DeclaredFlow::operator=(DeclaredFlow&& other) noexcept {
  if (this != &other) {
    release();
    cluster_ = std::move(other.cluster_);
    name_ = std::exchange(other.name_, {});
    last_ = std::exchange(other.last_, Status::kOk);
    error_ = std::move(other.error_);
    lost_ = std::exchange(other.lost_, std::nullopt);
  }
  return *this;
}

DeclaredFlow::~DeclaredFlow() { release(); }

void DeclaredFlow::release() noexcept {
  if (name_.empty()) return;
  detail::test_hooks::DestructorScope scope;
  try {
    if (auto impl = cluster_.lock(); impl != nullptr) impl->retire_flow(name_);
  } catch (const std::exception& e) {
    log::error("flow '", name_, "': ", e.what(),
               "; it stays declared on this rank until the Cluster ends");
  }
  name_.clear();
  cluster_.reset();
}

const std::string& DeclaredFlow::error() const { return detail::error_text(last_, error_); }

Status DeclaredFlow::destroy(Deadline deadline) {
  error_.clear();
  lost_.reset();
  try {
    destroy_or_throw(deadline);
    return last_ = Status::kOk;
  } catch (const PeerLostError& e) {
    error_ = e.what();
    lost_ = LostPeer{e.rank(), {}};
    return last_ = Status::kPeerLost;
  } catch (const Error& e) {
    error_ = e.what();
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
        return last_ = Status::kInvalid;
      case ErrorCode::kTimeout:
        return last_ = Status::kTimeout;
      case ErrorCode::kPeerLost:
        return last_ = Status::kPeerLost;
      default:
        throw;  // a protocol error or a bug: not an outcome a caller handles
    }
  }
}

void DeclaredFlow::destroy_or_throw(Deadline deadline) {
  if (name_.empty()) return;
  auto impl = cluster_.lock();
  if (impl == nullptr) {  // the Cluster freed the flow already
    name_.clear();
    return;
  }
  // Its sources destroyed right after close() finish their last transfers first.
  const void* key = nullptr;
  {
    MutexLock lock(impl->mu);
    if (auto it = impl->flows.find(name_); it != impl->flows.end() && it->second != nullptr)
      key = &it->second->ctx;
  }
  if (key != nullptr) (void)impl->linger.drain(key, deadline);
  auto fs = impl->take_flow(name_);  // throws, leaving the handle as it was, if cores are open
  const std::string name = std::exchange(name_, {});
  cluster_.reset();
  impl->destroy_flow(name, std::move(fs), deadline);
}

void Cluster::check_record(const FlowSpec& spec, size_t record_size) const {
  const std::string held = impl_->resolve(spec.name());
  MutexLock lock(impl_->mu);
  auto it = impl_->flows.find(held);
  if (it == impl_->flows.end() || it->second == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name() +
                                                 "' was not declared on rank " +
                                                 std::to_string(rank()) + "; call declare() first");
  }
  if (it->second->ctx.spec.type() != spec.type()) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + spec.name() + "' was declared as a " +
                    (spec.type() == FlowType::kReplicate ? "shuffle" : "replicate") +
                    " flow but is opened as a " +
                    (spec.type() == FlowType::kReplicate ? "replicate" : "shuffle") + " one");
  }
  if (it->second->ctx.spec.record_size() != record_size) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + spec.name() + "' was declared with " +
                    std::to_string(it->second->ctx.spec.record_size()) +
                    "-byte records but is opened with " + std::to_string(record_size));
  }
}

// The spec of a declared flow (declare() checked it exists).
static FlowSpec declared_spec(detail::ClusterImpl& impl, const std::string& flow) {
  MutexLock lock(impl.mu);
  return impl.flows.at(flow)->ctx.spec;
}

std::unique_ptr<detail::SourceCore> Cluster::open_source(const std::string& name, uint32_t slot) {
  const std::string flow = impl_->resolve(name);
  auto sequencer = detail::open_sequencer(*impl_, declared_spec(*impl_, flow));
  MutexLock lock(impl_->mu);
  detail::FlowState& fs = *impl_->flows.at(flow);
  const FlowSpec& spec = fs.ctx.spec;
  const Endpoint me{rank(), slot};
  auto pos = std::find(spec.sources().begin(), spec.sources().end(), me);
  if (pos == spec.sources().end()) {
    throw Error(ErrorCode::kInvalidArgument, "endpoint (" + std::to_string(me.rank) + "," +
                                                 std::to_string(slot) +
                                                 ") is not a source of flow '" + flow + "'");
  }
  const auto s = static_cast<uint32_t>(pos - spec.sources().begin());
  if (fs.source_open[s]) {
    throw Error(ErrorCode::kInvalidArgument, "source (" + std::to_string(me.rank) + "," +
                                                 std::to_string(slot) + ") of flow '" + flow +
                                                 "' is already open");
  }
  std::vector<detail::OutRingRef> rings(spec.targets().size());
  for (uint32_t t = 0; t < spec.targets().size(); ++t) {
    if (fs.remote(s, t)) {
      rings[t] = fs.remote_out.at(s)[t];
      continue;
    }
    const uint32_t trank = spec.targets()[t].rank;
    const detail::layout::Geometry& g = fs.geometry.at(trank);
    std::byte* base = fs.region_of(trank, rank());
    const uint32_t lt = fs.local_index[t];
    detail::layout::RingView ring(base + g.ring_offset(lt, s), g);
    if (ring.header->magic != detail::layout::kRingMagic || ring.header->source != s ||
        ring.header->target != t) {
      throw Error(ErrorCode::kProtocol, "flow '" + flow + "': the ring from source " +
                                            std::to_string(s) + " to target " + std::to_string(t) +
                                            " has an unexpected header");
    }
    rings[t].ring = ring;
    rings[t].bell = reinterpret_cast<detail::layout::Doorbell*>(base + g.doorbell_offset(lt));
  }
  std::unique_ptr<detail::OfiSource> ofi;
  if (auto it = fs.ofi_sources.find(s); it != fs.ofi_sources.end()) ofi = std::move(it->second);
  fs.source_open[s] = true;
  return detail::make_source(&fs.ctx, s, std::move(rings), std::move(ofi), std::move(sequencer));
}

std::unique_ptr<detail::TargetCore> Cluster::open_target(const std::string& name, uint32_t slot) {
  const std::string flow = impl_->resolve(name);
  auto sequencer = detail::open_sequencer(*impl_, declared_spec(*impl_, flow));
  MutexLock lock(impl_->mu);
  detail::FlowState& fs = *impl_->flows.at(flow);
  const FlowSpec& spec = fs.ctx.spec;
  const Endpoint me{rank(), slot};
  auto pos = std::find(spec.targets().begin(), spec.targets().end(), me);
  if (pos == spec.targets().end()) {
    throw Error(ErrorCode::kInvalidArgument, "endpoint (" + std::to_string(me.rank) + "," +
                                                 std::to_string(slot) +
                                                 ") is not a target of flow '" + flow + "'");
  }
  const auto t = static_cast<uint32_t>(pos - spec.targets().begin());
  if (fs.target_open[t]) {
    throw Error(ErrorCode::kInvalidArgument, "target (" + std::to_string(me.rank) + "," +
                                                 std::to_string(slot) + ") of flow '" + flow +
                                                 "' is already open");
  }
  const detail::layout::Geometry& g = fs.geometry.at(rank());
  const uint32_t lt = fs.local_index[t];
  std::vector<detail::InRingRef> rings(spec.sources().size());
  for (uint32_t s = 0; s < spec.sources().size(); ++s) {
    if (fs.remote(s, t)) rings[s] = fs.remote_in.at(t)[s];
    rings[s].ring = detail::layout::RingView(fs.own.data() + g.ring_offset(lt, s), g);
  }
  std::unique_ptr<detail::OfiTarget> ofi;
  if (auto it = fs.ofi_targets.find(t); it != fs.ofi_targets.end()) ofi = std::move(it->second);
  fs.target_open[t] = true;
  auto* bell = reinterpret_cast<detail::layout::Doorbell*>(fs.own.data() + g.doorbell_offset(lt));
  return detail::make_target(&fs.ctx, t, bell, std::move(rings), std::move(ofi),
                             std::move(sequencer));
}

static void check_region_name(std::string_view name) {
  if (name.empty() || name.size() > 200) {
    throw Error(ErrorCode::kInvalidArgument,
                "a region name must have 1 to 200 bytes, not " + std::to_string(name.size()));
  }
  for (char c : name) {
    if (c <= ' ' || c == '/' || c == ':' || c == 127) {
      throw Error(ErrorCode::kInvalidArgument,
                  "region name '" + std::string(name) +
                      "' contains a space, control character, '/' or ':'");
    }
  }
}

MemoryRegion Cluster::expose(std::string_view name, size_t bytes) {
  check_region_name(name);
  if (bytes == 0 || bytes > (size_t{1} << 40)) {
    throw Error(ErrorCode::kInvalidArgument, "region '" + std::string(name) + "': size " +
                                                 std::to_string(bytes) +
                                                 " is outside [1, 2^40] bytes");
  }
  {
    MutexLock lock(impl_->mu);
    if (!impl_->exposed.insert(std::string(name)).second) {
      throw Error(ErrorCode::kInvalidArgument, "region '" + std::string(name) +
                                                   "' is already exposed on rank " +
                                                   std::to_string(rank()));
    }
  }
  try {
    auto owner = std::make_unique<detail::RegionOwner>(
        std::string(name), bytes, impl_->regions_use_ofi(), impl_->ofi_config, impl_->host_id);
    const std::string key = "region/" + std::string(name) + "/" + std::to_string(rank());
    impl_->client->put(key, owner->descriptor());
    // The Cluster may be gone by then (the handle's contract says it must
    // not be, but a weak reference costs nothing here).
    owner->on_destroy([weak = std::weak_ptr<detail::ClusterImpl>(impl_), fences = impl_->fences,
                       key, name = std::string(name), o = owner.get()] {
      fences->remove(o);
      auto impl = weak.lock();
      if (impl == nullptr) return;
      try {
        // Not waited for (a destructor runs this), and ordered before
        // any later exposure of the name, whose put follows it.
        impl->client->put_async(key, detail::kRegionDestroyed);
      } catch (const Error& e) {
        log::warn("region '", name, "': could not withdraw it from the registry: ", e.what());
      }
      MutexLock lock(impl->mu);
      impl->exposed.erase(name);
    });
    impl_->fences->add(owner.get());
    return MemoryRegion(std::move(owner));
  } catch (...) {
    MutexLock lock(impl_->mu);
    impl_->exposed.erase(std::string(name));
    throw;
  }
}

RemoteRegion Cluster::open_region(std::string_view name, uint32_t owner, Deadline deadline) {
  check_region_name(name);
  if (owner >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "region '" + std::string(name) + "': rank " + std::to_string(owner) +
                    " does not exist (the job has " + std::to_string(world_size()) + " ranks)");
  }
  std::unique_ptr<detail::RegionAccess> access =
      impl_->open_region("region/" + std::string(name) + "/" + std::to_string(owner),
                         std::string(name), owner, deadline);
  access->count_as(impl_->boot.rank);
  access->linger = &impl_->linger;  // its goodbye to the owner, when it ends
  return RemoteRegion(std::move(access));
}

void Cluster::barrier(std::string_view name, Deadline deadline) {
  impl_->client->barrier(std::string(name), deadline);
}

void Cluster::barrier(std::string_view name, const std::vector<Endpoint>& members, uint32_t slot,
                      Deadline deadline) {
  if (members.empty())
    throw Error(ErrorCode::kInvalidArgument, "barrier '" + std::string(name) + "' has no members");
  std::vector<uint64_t> ids;
  ids.reserve(members.size());
  for (const Endpoint& e : members) ids.push_back(uint64_t{e.rank} << 32 | e.slot);
  impl_->client->barrier(std::string(name), ids, uint64_t{rank()} << 32 | slot, deadline);
}

std::vector<std::string> Cluster::allgather(std::string_view name, std::string_view value,
                                            Deadline deadline) {
  // The registry numbers the calls: a barrier gives every rank of one meeting
  // the same generation, whichever threads of each rank make the calls and
  // in whatever order; a call that fails in it does not count. (A counter of
  // our own could not know which of two concurrent calls the other ranks
  // match, nor take back the number of a call that timed out.)
  const uint64_t gen = impl_->client->barrier("sluice:allgather/" + std::string(name), deadline);
  const std::string prefix = "allgather/" + std::string(name) + "/" + std::to_string(gen) + "/";
  impl_->client->put(prefix + std::to_string(rank()), std::string(value));
  std::vector<std::string> out(world_size());
  for (uint32_t r = 0; r < world_size(); ++r) {
    out[r] = r == rank() ? std::string(value)
                         : impl_->client->get(prefix + std::to_string(r), deadline, r);
  }
  return out;
}

}  // namespace sluice
