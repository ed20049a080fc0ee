// Cluster: joins the job through the registry and wires flows to transports.
#include "sluice/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "common/log.h"
#include "control/bootstrap.h"
#include "control/registry_client.h"
#include "flow/layout.h"
#include "flow/shm_flow.h"
#include "transport/shm/region.h"

extern char** environ;

namespace sluice {
namespace {

// Every SLUICE_* variable sluice reads; others are warned about (typos).
const std::set<std::string>& known_variables() {
  static const std::set<std::string> names = {
      "SLUICE_RANK",         "SLUICE_WORLD_SIZE",      "SLUICE_REGISTRY",         "SLUICE_REGISTRY_PORT",
      "SLUICE_SECRET",       "SLUICE_LOG",             "SLUICE_PEER_TIMEOUT_MS",  "SLUICE_SETUP_TIMEOUT_MS",
      "SLUICE_SPIN",         "SLUICE_TRANSPORT",       "SLUICE_OFI_PROVIDER",
  };
  return names;
}

uint64_t parse_env_number(const char* name, uint64_t min, uint64_t max, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || n < min || n > max) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + v + "' is not a whole number in [" +
                                                 std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return n;
}

void warn_unknown_variables() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (entry.rfind("SLUICE_", 0) != 0) continue;
      std::string name = entry.substr(0, entry.find('='));
      if (known_variables().count(name) == 0) {
        log::warn("ignoring unknown environment variable ", name, " (known: SLUICE_RANK, SLUICE_WORLD_SIZE, ",
                  "SLUICE_REGISTRY, SLUICE_SECRET, SLUICE_LOG, SLUICE_PEER_TIMEOUT_MS, SLUICE_SETUP_TIMEOUT_MS, ",
                  "SLUICE_SPIN, SLUICE_TRANSPORT, ...)");
      }
    }
  });
}

}  // namespace

ClusterOptions ClusterOptions::from_env() {
  warn_unknown_variables();
  ClusterOptions o;
  o.peer_timeout = std::chrono::milliseconds(parse_env_number("SLUICE_PEER_TIMEOUT_MS", 100, 3600000, 5000));
  o.setup_timeout = std::chrono::milliseconds(parse_env_number("SLUICE_SETUP_TIMEOUT_MS", 100, 86400000, 60000));
  o.spin_iterations = static_cast<uint32_t>(parse_env_number("SLUICE_SPIN", 0, 1u << 30, 4000));
  if (const char* t = std::getenv("SLUICE_TRANSPORT"); t != nullptr && *t != '\0') {
    std::string v = t;
    if (v == "ofi") {
      throw Error(ErrorCode::kInvalidArgument,
                  "SLUICE_TRANSPORT=ofi: this build carries only the shm transport (one host); unset it or use shm");
    }
    if (v != "shm") throw Error(ErrorCode::kInvalidArgument, "SLUICE_TRANSPORT='" + v + "' is not one of shm, ofi");
  }
  return o;
}

std::string ClusterOptions::describe() const {
  std::ostringstream os;
  os << "rank = " << rank << "\nworld_size = " << world_size << "\nregistry = " << registry
     << "\npeer_timeout_ms = " << peer_timeout.count() << "\nsetup_timeout_ms = " << setup_timeout.count()
     << "\nspin_iterations = " << spin_iterations << "\ntransport = shm\n";
  return os.str();
}

namespace detail {

// A flow as this process holds it.
struct FlowState {
  FlowContext ctx;
  // For each target index: its position among the targets on its rank.
  std::vector<uint32_t> local_index;
  // Memory this rank owns (its targets' rings), if it hosts any target.
  SharedRegion own;
  // Regions of target ranks mapped for this rank's sources (and our own).
  std::map<uint32_t, SharedRegion> peer;
  std::map<uint32_t, layout::Geometry> geometry;
  std::vector<bool> source_open;
  std::vector<bool> target_open;

  std::byte* region_of(uint32_t rank, uint32_t me) {
    if (rank == me) return own.data();
    auto it = peer.find(rank);
    return it == peer.end() ? nullptr : it->second.data();
  }
};

class ClusterImpl {
 public:
  ClusterOptions options;
  control::BootstrapInfo boot;
  std::unique_ptr<control::RegistryClient> client;
  std::string host_id;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<FlowState>> flows;
  std::map<std::string, uint64_t> allgather_generation;

  Deadline setup_deadline() const { return Clock::now() + options.setup_timeout; }

  void declare(const FlowSpec& spec);
  void map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks);
};

void ClusterImpl::declare(const FlowSpec& spec) {
  spec.validate();
  const uint32_t me = boot.rank;
  std::set<uint32_t> participants;
  for (const Endpoint& e : spec.sources) participants.insert(e.rank);
  for (const Endpoint& e : spec.targets) participants.insert(e.rank);
  for (uint32_t r : participants) {
    if (r >= boot.world_size) {
      throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name + "' names rank " + std::to_string(r) +
                                                   " but the job has " + std::to_string(boot.world_size) + " ranks");
    }
  }
  if (participants.count(me) == 0) {
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(me) + " declares flow '" + spec.name +
                                                 "' but is none of its sources or targets");
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (flows.count(spec.name) != 0) {
      throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name + "' is already declared on this rank");
    }
    flows[spec.name] = nullptr;  // reserve the name while we talk to the registry
  }
  try {
    client->declare_flow(spec.name, spec.canonical(), {participants.begin(), participants.end()}, setup_deadline());

    auto fs = std::make_unique<FlowState>();
    fs->ctx.spec = spec;
    fs->ctx.peers = &client->peers();
    fs->ctx.spin_iterations = options.spin_iterations;
    fs->ctx.ring_segments = spec.effective_ring_segments();
    fs->ctx.payload_bytes =
        layout::Geometry::make(1, 1, fs->ctx.ring_segments, spec.effective_segment_bytes()).payload_bytes();
    for (uint32_t r = 0; r < boot.world_size; ++r) fs->ctx.hosts.push_back(client->peers().host(r));
    fs->source_open.assign(spec.sources.size(), false);
    fs->target_open.assign(spec.targets.size(), false);

    std::map<uint32_t, std::vector<uint32_t>> targets_by_rank;
    fs->local_index.resize(spec.targets.size());
    for (uint32_t t = 0; t < spec.targets.size(); ++t) {
      auto& list = targets_by_rank[spec.targets[t].rank];
      fs->local_index[t] = static_cast<uint32_t>(list.size());
      list.push_back(t);
    }
    for (const auto& [rank, list] : targets_by_rank) {
      fs->geometry[rank] = layout::Geometry::make(static_cast<uint32_t>(list.size()),
                                                  static_cast<uint32_t>(spec.sources.size()), fs->ctx.ring_segments,
                                                  spec.effective_segment_bytes());
    }
    if (auto it = targets_by_rank.find(me); it != targets_by_rank.end()) {
      const layout::Geometry& g = fs->geometry[me];
      fs->own = SharedRegion::create(spec.name, g.total_bytes);
      init_region(fs->own.data(), g, it->second);
      client->put("flow/" + spec.name + "/shm/" + std::to_string(me),
                  std::to_string(::getpid()) + " " + std::to_string(fs->own.fd()) + " " +
                      std::to_string(g.total_bytes) + " " + host_id);
      log::info("flow '", spec.name, "': ", it->second.size(), " target(s) here, ", spec.sources.size(),
                " source(s), ", g.total_bytes, " bytes of rings over shm");
    }
    bool has_source = false;
    for (const Endpoint& e : spec.sources) has_source |= e.rank == me;
    if (has_source) {
      std::vector<uint32_t> ranks;
      for (const auto& [rank, list] : targets_by_rank) ranks.push_back(rank);
      map_regions(*fs, ranks);
    }
    std::lock_guard<std::mutex> lock(mu);
    flows[spec.name] = std::move(fs);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    flows.erase(spec.name);
    throw;
  }
}

void ClusterImpl::map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks) {
  const std::string& name = fs.ctx.spec.name;
  for (uint32_t rank : target_ranks) {
    if (rank == boot.rank) continue;
    std::string desc = client->get("flow/" + name + "/shm/" + std::to_string(rank), setup_deadline(), rank);
    std::istringstream in(desc);
    long long pid = 0, fd = -1;
    unsigned long long bytes = 0;
    std::string their_host;
    if (!(in >> pid >> fd >> bytes >> their_host) || pid <= 0 || fd < 0) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            " published a malformed ring descriptor '" + desc + "'");
    }
    if (their_host != host_id) {
      throw Error(ErrorCode::kInvalidArgument,
                  "flow '" + name + "': target rank " + std::to_string(rank) + " runs on another host (" +
                      their_host.substr(0, their_host.find('/')) +
                      "); this build carries only the shm transport, so every rank of a flow must share one host");
    }
    const layout::Geometry& g = fs.geometry[rank];
    if (bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) + "'s rings have " +
                                            std::to_string(bytes) + " bytes, expected " +
                                            std::to_string(g.total_bytes));
    }
    SharedRegion region = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd), bytes);
    const auto* hdr = reinterpret_cast<const layout::RegionHeader*>(region.data());
    if (hdr->magic != layout::kRegionMagic || hdr->version != layout::kLayoutVersion ||
        hdr->local_targets != g.local_targets || hdr->sources != g.sources || hdr->ring_segments != g.ring_segments ||
        hdr->segment_stride != g.segment_stride || hdr->total_bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            "'s ring region has an unexpected header (different sluice version?)");
    }
    log::info("flow '", name, "': mapped ", bytes, " bytes of rings of rank ", rank, " (shm, pid ", pid, ")");
    fs.peer.emplace(rank, std::move(region));
  }
}

}  // namespace detail

Cluster::Cluster(std::unique_ptr<detail::ClusterImpl> impl) : impl_(std::move(impl)) {}
Cluster::Cluster(Cluster&&) noexcept = default;
Cluster& Cluster::operator=(Cluster&&) noexcept = default;
Cluster::~Cluster() = default;

Cluster Cluster::join() { return join(ClusterOptions::from_env()); }

Cluster Cluster::join(const ClusterOptions& options) {
  auto impl = std::make_unique<detail::ClusterImpl>();
  impl->options = options;
  impl->boot = control::parse_bootstrap(control::process_env(), options.rank, options.world_size, options.registry,
                                        options.secret);
  impl->options.rank = impl->boot.rank;
  impl->options.world_size = impl->boot.world_size;
  impl->options.registry = impl->boot.registry_host + ":" + std::to_string(impl->boot.registry_port);
  impl->host_id = detail::host_identity();
  log::set_tag("rank " + std::to_string(impl->boot.rank));
  control::ClientOptions co;
  co.heartbeat_timeout = options.peer_timeout;
  co.connect_timeout = options.setup_timeout;
  impl->client = control::RegistryClient::connect(impl->boot, co);
  log::info("joined as rank ", impl->boot.rank, " of ", impl->boot.world_size, " via ", impl->options.registry,
            " (bootstrap from ", impl->boot.source, ")");
  return Cluster(std::move(impl));
}

uint32_t Cluster::rank() const { return impl_->boot.rank; }
uint32_t Cluster::world_size() const { return impl_->boot.world_size; }
const ClusterOptions& Cluster::options() const { return impl_->options; }

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
      throw Error(ErrorCode::kInvalidArgument,
                  "rank " + std::to_string(r) + " does not exist: the job has " + std::to_string(world_size()));
    }
    for (uint32_t s = 0; s < slots; ++s) out.push_back({r, s});
  }
  return out;
}

void Cluster::declare(const FlowSpec& spec) { impl_->declare(spec); }

void Cluster::check_record(const FlowSpec& spec, size_t record_size) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->flows.find(spec.name);
  if (it == impl_->flows.end() || it->second == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + spec.name + "' was not declared on rank " + std::to_string(rank()) + "; call declare() first");
  }
  if (it->second->ctx.spec.record_size != record_size) {
    throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name + "' was declared with " +
                                                 std::to_string(it->second->ctx.spec.record_size) +
                                                 "-byte records but is opened with " + std::to_string(record_size));
  }
}

std::unique_ptr<detail::SourceCore> Cluster::open_source(const std::string& flow, uint32_t slot) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::FlowState& fs = *impl_->flows.at(flow);
  const FlowSpec& spec = fs.ctx.spec;
  const Endpoint me{rank(), slot};
  auto pos = std::find(spec.sources.begin(), spec.sources.end(), me);
  if (pos == spec.sources.end()) {
    throw Error(ErrorCode::kInvalidArgument, "endpoint (" + std::to_string(me.rank) + "," + std::to_string(slot) +
                                                 ") is not a source of flow '" + flow + "'");
  }
  const auto s = static_cast<uint32_t>(pos - spec.sources.begin());
  if (fs.source_open[s]) {
    throw Error(ErrorCode::kInvalidArgument, "source (" + std::to_string(me.rank) + "," + std::to_string(slot) +
                                                 ") of flow '" + flow + "' is already open");
  }
  std::vector<detail::OutRingRef> rings;
  for (uint32_t t = 0; t < spec.targets.size(); ++t) {
    const uint32_t trank = spec.targets[t].rank;
    const detail::layout::Geometry& g = fs.geometry.at(trank);
    std::byte* base = fs.region_of(trank, rank());
    const uint32_t lt = fs.local_index[t];
    detail::layout::RingView ring(base + g.ring_offset(lt, s), g.ring_segments, g.segment_stride);
    if (ring.header->magic != detail::layout::kRingMagic || ring.header->source != s || ring.header->target != t) {
      throw Error(ErrorCode::kProtocol, "flow '" + flow + "': the ring from source " + std::to_string(s) +
                                            " to target " + std::to_string(t) + " has an unexpected header");
    }
    rings.push_back({ring, reinterpret_cast<detail::layout::Doorbell*>(base + g.doorbell_offset(lt))});
  }
  fs.source_open[s] = true;
  return detail::make_shm_source(&fs.ctx, s, std::move(rings));
}

std::unique_ptr<detail::TargetCore> Cluster::open_target(const std::string& flow, uint32_t slot) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::FlowState& fs = *impl_->flows.at(flow);
  const FlowSpec& spec = fs.ctx.spec;
  const Endpoint me{rank(), slot};
  auto pos = std::find(spec.targets.begin(), spec.targets.end(), me);
  if (pos == spec.targets.end()) {
    throw Error(ErrorCode::kInvalidArgument, "endpoint (" + std::to_string(me.rank) + "," + std::to_string(slot) +
                                                 ") is not a target of flow '" + flow + "'");
  }
  const auto t = static_cast<uint32_t>(pos - spec.targets.begin());
  if (fs.target_open[t]) {
    throw Error(ErrorCode::kInvalidArgument, "target (" + std::to_string(me.rank) + "," + std::to_string(slot) +
                                                 ") of flow '" + flow + "' is already open");
  }
  const detail::layout::Geometry& g = fs.geometry.at(rank());
  const uint32_t lt = fs.local_index[t];
  std::vector<detail::InRingRef> rings;
  for (uint32_t s = 0; s < spec.sources.size(); ++s) {
    rings.push_back({detail::layout::RingView(fs.own.data() + g.ring_offset(lt, s), g.ring_segments, g.segment_stride)});
  }
  fs.target_open[t] = true;
  auto* bell = reinterpret_cast<detail::layout::Doorbell*>(fs.own.data() + g.doorbell_offset(lt));
  return detail::make_shm_target(&fs.ctx, t, bell, std::move(rings));
}

void Cluster::barrier(std::string_view name, Deadline deadline) {
  impl_->client->barrier(std::string(name), deadline);
}

std::vector<std::string> Cluster::allgather(std::string_view name, std::string_view value, Deadline deadline) {
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    gen = ++impl_->allgather_generation[std::string(name)];
  }
  const std::string prefix = "allgather/" + std::string(name) + "/" + std::to_string(gen) + "/";
  impl_->client->put(prefix + std::to_string(rank()), std::string(value));
  std::vector<std::string> out(world_size());
  for (uint32_t r = 0; r < world_size(); ++r) {
    out[r] = r == rank() ? std::string(value) : impl_->client->get(prefix + std::to_string(r), deadline, r);
  }
  return out;
}

}  // namespace sluice
