// Cluster: joins the job through the registry and wires flows to transports.
#include "sluice/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/hex.h"
#include "common/log.h"
#include "control/bootstrap.h"
#include "control/registry_client.h"
#include "control/signal_report.h"
#include "flow/endpoint_counters.h"
#include "flow/flow_core.h"
#include "flow/layout.h"
#include "memory/region.h"
#include "transport/ofi/ofi.h"
#include "transport/shm/region.h"

namespace sluice {

namespace detail {

// What a destroyed region's registry entry says instead of its descriptor:
// openers fail at once rather than wait for an owner that is done with it.
// Its fd numbers and keys are gone from the registry; the few bytes stay
// until the name is exposed again.
constexpr const char* kRegionDestroyed = "destroyed";

// The ring of an ordered Bandwidth flow with a target on another host,
// unless the spec sets ring_segments (see declare()): at least this many
// bytes of segments (so runs of half of it), 16 to 64 segments.
constexpr uint64_t kOrderedRemoteRingBytes = 512 * 1024;
constexpr uint32_t kOrderedRemoteRingMaxSegments = 64;

uint32_t ordered_remote_ring_segments(uint32_t segment_bytes, uint32_t otherwise) {
  const uint64_t want = (kOrderedRemoteRingBytes + segment_bytes - 1) / segment_bytes;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(want, otherwise, std::max(otherwise, kOrderedRemoteRingMaxSegments)));
}

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
  std::map<uint32_t, std::vector<OutRingRef>> remote_out;  // [source][target]: filled for remote targets
  std::map<uint32_t, std::vector<InRingRef>> remote_in;    // [target][source]: filled for remote sources
  // Ordered flows, on the first target's rank: the sequencer's counter.
  std::unique_ptr<RegionOwner> sequencer;
  // The peers as the flow sees them: each rank's incarnation at declare
  // (ctx.liveness). A rank that died is lost to the flow even once it rejoins.
  std::unique_ptr<control::PinnedLiveness> liveness;
  std::vector<bool> source_open;
  std::vector<bool> target_open;

  bool remote(uint32_t s, uint32_t t) const { return pair_remote[size_t{s} * ctx.spec.targets.size() + t]; }
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
  ofi::Config ofi_config;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<FlowState>> flows;
  std::map<uint32_t, std::string> host_ids;  // cache of other ranks' host identities
  std::set<std::string> exposed;             // names of regions this rank exposed
  int regions_over_ofi = -1;                 // -1: not yet decided

  // Regions go over ofi for every rank unless every rank shares this host.
  bool regions_use_ofi() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (regions_over_ofi >= 0) return regions_over_ofi == 1;
    }
    bool ofi = options.transport == Transport::kOfi;
    for (uint32_t r = 0; r < boot.world_size && !ofi; ++r) ofi = host_of(r) != host_id;
    std::lock_guard<std::mutex> lock(mu);
    regions_over_ofi = ofi ? 1 : 0;
    return ofi;
  }
  std::unique_ptr<RegionAccess> open_region(const std::string& key, const std::string& name, uint32_t owner,
                                            Deadline deadline) {
    const std::string desc = client->get(key, deadline, owner);
    if (desc == kRegionDestroyed) {
      throw Error(ErrorCode::kInvalidArgument, "region '" + name + "' of rank " + std::to_string(owner) +
                                                   " was destroyed by its owner; it can be opened again once the "
                                                   "owner exposes it anew");
    }
    return RegionAccess::open(name, owner, desc, host_id, ofi_config, &client->peers());
  }

  Deadline setup_deadline() const { return Clock::now() + options.setup_timeout; }

  void declare(const FlowSpec& spec);
  // DeclaredFlow::destroy() in two steps: take the flow's state (throws if
  // cores of it are open; nothing changes then), then withdraw it from the
  // registry, free it and release the name.
  std::unique_ptr<FlowState> take_flow(const std::string& name);
  void destroy_flow(const std::string& name, std::unique_ptr<FlowState> fs, Deadline deadline);
  const std::string& host_of(uint32_t rank);
  // The transport between ranks a and b (kShm or kOfi); `what` names the
  // caller's object in the error when transport is kShm across hosts.
  Transport transport_between(uint32_t a, uint32_t b, const std::string& what);
  void map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks);
  void setup_ofi(FlowState& fs);
};

const std::string& ClusterImpl::host_of(uint32_t rank) {
  if (rank == boot.rank) return host_id;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = host_ids.find(rank); it != host_ids.end()) return it->second;
  }
  std::string id = client->get("host/" + std::to_string(rank), setup_deadline(), rank);
  std::lock_guard<std::mutex> lock(mu);
  return host_ids.emplace(rank, std::move(id)).first->second;
}

Transport ClusterImpl::transport_between(uint32_t a, uint32_t b, const std::string& what) {
  const bool same_host = host_of(a) == host_of(b);
  if (!same_host && options.transport == Transport::kShm) {
    throw Error(ErrorCode::kInvalidArgument,
                what + ": ranks " + std::to_string(a) + " and " + std::to_string(b) +
                    " are on different hosts, but transport = shm (SLUICE_TRANSPORT=shm) allows only one host; "
                    "use auto or ofi");
  }
  return options.transport == Transport::kOfi || !same_host ? Transport::kOfi : Transport::kShm;
}

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
  bool agreed = false;
  try {
    // The transport setting decides each pair's transport on both sides:
    // participants must agree on it as on the spec itself.
    client->declare_flow(spec.name, spec.canonical() + "transport=" + to_string(options.transport) + "\n",
                         {participants.begin(), participants.end()}, setup_deadline());
    agreed = true;

    auto fs = std::make_unique<FlowState>();
    fs->ctx.spec = spec;
    fs->liveness = std::make_unique<control::PinnedLiveness>(client->peers());
    fs->ctx.liveness = fs->liveness.get();
    // What a segment holds is segment_bytes, whatever padding the stride has:
    // one record limit (FlowSpec::max_record_bytes), stated and enforced.
    fs->ctx.payload_bytes = spec.effective_segment_bytes();
    for (uint32_t r = 0; r < boot.world_size; ++r) fs->ctx.hosts.push_back(client->peers().host(r));
    fs->source_open.assign(spec.sources.size(), false);
    fs->target_open.assign(spec.targets.size(), false);

    // The transport of every (source, target) pair: shm within a host, ofi
    // across hosts, or as options.transport pins it.
    uint32_t ranks_here = 0;
    for (uint32_t r : participants) ranks_here += host_of(r) == host_id;
    const size_t nt = spec.targets.size();
    fs->pair_remote.assign(spec.sources.size() * nt, false);
    for (uint32_t s = 0; s < spec.sources.size(); ++s) {
      for (uint32_t t = 0; t < nt; ++t) {
        const uint32_t sr = spec.sources[s].rank, tr = spec.targets[t].rank;
        if (sr != me && tr != me) continue;
        fs->pair_remote[size_t{s} * nt + t] = transport_between(sr, tr, "flow '" + spec.name + "'") == Transport::kOfi;
      }
    }
    // An ordered flow's source numbers a run of half its ring with one
    // remote fetch-and-add as it hands the run to the provider
    // (ReplicateSource::number_pending): with a target on another host, and
    // no ring size asked for, the ring holds at least 512 KiB (64 segments of
    // the default 8 KiB, not 16), so that a run takes longer to send than
    // its fetch-and-add takes to come back (over tcp, 1x1, 64 B records: 0.9
    // of unordered instead of 0.46; docs/benchmarks.md). Every rank decides
    // alike: the hosts and the transport setting are the job's.
    fs->ctx.ring_segments = spec.effective_ring_segments();
    if (spec.ordered && spec.ring_segments == 0 && spec.optimize == Optimize::kBandwidth) {
      bool any_remote = false;
      for (const Endpoint& src : spec.sources) {
        for (const Endpoint& dst : spec.targets) {
          any_remote |= transport_between(src.rank, dst.rank, "flow '" + spec.name + "'") == Transport::kOfi;
        }
      }
      if (any_remote) {
        fs->ctx.ring_segments =
            ordered_remote_ring_segments(spec.effective_segment_bytes(), fs->ctx.ring_segments);
      }
    }
    fs->ring_geometry = layout::Geometry::make(1, 1, fs->ctx.ring_segments, spec.effective_segment_bytes());
    // Spinning only pays when every busy thread has a CPU of its own. A
    // Bandwidth flow leaves one CPU over for everything else (control
    // threads, the kernel); a Latency flow asked for the shortest round
    // trip, and a consumer that yields or parks on a miss adds a system
    // call to every one: it spins as long as each busy thread has a CPU.
    const uint64_t cpus = std::max(1u, std::thread::hardware_concurrency());
    const uint64_t busy = uint64_t{ranks_here} * options.threads_per_rank;
    const bool spin = spec.optimize == Optimize::kLatency ? busy <= cpus : busy < cpus;
    fs->ctx.spin_iterations = options.spin_iterations >= 0
                                  ? static_cast<uint32_t>(options.spin_iterations)
                              : spin ? 4000u
                                     : 0u;

    std::map<uint32_t, std::vector<uint32_t>> targets_by_rank;
    fs->local_index.resize(nt);
    for (uint32_t t = 0; t < nt; ++t) {
      auto& list = targets_by_rank[spec.targets[t].rank];
      fs->local_index[t] = static_cast<uint32_t>(list.size());
      list.push_back(t);
    }
    for (const auto& [rank, list] : targets_by_rank) {
      const layout::Geometry g = layout::Geometry::make(static_cast<uint32_t>(list.size()),
                                                        static_cast<uint32_t>(spec.sources.size()),
                                                        fs->ctx.ring_segments, spec.effective_segment_bytes());
      if (g.total_bytes == layout::Geometry::kTooLarge) {
        throw Error(ErrorCode::kInvalidArgument,
                    "flow '" + spec.name + "': the rings of rank " + std::to_string(rank) + " (" +
                        std::to_string(list.size()) + " targets x " + std::to_string(spec.sources.size()) +
                        " sources x " + std::to_string(fs->ctx.ring_segments) + " segments of " +
                        std::to_string(spec.effective_segment_bytes()) +
                        " bytes) exceed 2^64 bytes; lower ring_segments or segment_bytes");
      }
      fs->geometry[rank] = g;
    }
    if (auto it = targets_by_rank.find(me); it != targets_by_rank.end()) {
      const layout::Geometry& g = fs->geometry[me];
      fs->own = SharedRegion::create(spec.name, g.total_bytes);
      init_region(fs->own.data(), g, it->second);
      client->put("flow/" + spec.name + "/shm/" + std::to_string(me),
                  std::to_string(::getpid()) + " " + std::to_string(fs->own.fd()) + " " +
                      std::to_string(g.total_bytes) + " " + std::to_string(fs->own.nonce()) + " " + host_id);
      log::info("flow '", spec.name, "': ", it->second.size(), " target(s) here, ", spec.sources.size(),
                " source(s), ", g.total_bytes, " bytes of rings");
    }
    // Sources map the regions of the target ranks they reach over shm.
    std::set<uint32_t> shm_ranks;
    for (uint32_t s = 0; s < spec.sources.size(); ++s) {
      if (spec.sources[s].rank != me) continue;
      for (uint32_t t = 0; t < nt; ++t) {
        if (!fs->remote(s, t)) shm_ranks.insert(spec.targets[t].rank);
      }
    }
    map_regions(*fs, {shm_ranks.begin(), shm_ranks.end()});
    setup_ofi(*fs);
    if (spec.ordered && spec.targets[0].rank == me) {
      fs->sequencer = std::make_unique<RegionOwner>("flow:" + spec.name + ":sequencer", 64, regions_use_ofi(),
                                                    ofi_config, host_id);
      client->put("flow/" + spec.name + "/sequencer", fs->sequencer->descriptor());
    }
    std::lock_guard<std::mutex> lock(mu);
    flows[spec.name] = std::move(fs);
  } catch (...) {
    if (agreed) {
      // Withdraw at once, so that the other participants' destroy() need not
      // wait for a rank that will never hold the flow.
      try {
        client->undeclare_flow(spec.name, Clock::now() + std::chrono::milliseconds(1));
      } catch (const Error&) {  // a timeout, as expected: the withdrawal counts
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    flows.erase(spec.name);
    throw;
  }
}

std::unique_ptr<FlowState> ClusterImpl::take_flow(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = flows.find(name);
  SLUICE_CHECK(it != flows.end() && it->second != nullptr, "flow '" + name + "' has a handle but no state");
  if (const uint32_t open = it->second->ctx.open_cores.n.load(std::memory_order_relaxed); open != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + name + "' cannot be destroyed on rank " + std::to_string(boot.rank) + ": " +
                    std::to_string(open) + " of its sources/targets are still open here; destroy them first");
  }
  // The name stays reserved (null) until the registry has let go of it.
  return std::move(it->second);
}

void ClusterImpl::destroy_flow(const std::string& name, std::unique_ptr<FlowState> fs, Deadline deadline) {
  // Collective: this rank's memory goes only once no participant can touch
  // it, and the registry erases the flow's keys before anyone returns.
  std::exception_ptr failure;
  try {
    client->undeclare_flow(name, deadline);
  } catch (...) {
    failure = std::current_exception();
  }
  fs.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    flows.erase(name);
  }
  log::info("flow '", name, "' destroyed", failure ? " (not confirmed by every participant)" : "");
  if (failure) std::rethrow_exception(failure);
}

void ClusterImpl::map_regions(FlowState& fs, const std::vector<uint32_t>& target_ranks) {
  const std::string& name = fs.ctx.spec.name;
  for (uint32_t rank : target_ranks) {
    if (rank == boot.rank) continue;
    std::string desc = client->get("flow/" + name + "/shm/" + std::to_string(rank), setup_deadline(), rank);
    std::istringstream in(desc);
    long long pid = 0, fd = -1;
    unsigned long long bytes = 0, nonce = 0;
    std::string their_host;
    if (!(in >> pid >> fd >> bytes >> nonce >> their_host) || pid <= 0 || fd < 0) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            " published a malformed ring descriptor '" + desc + "'");
    }
    const layout::Geometry& g = fs.geometry[rank];
    if (bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) + "'s rings have " +
                                            std::to_string(bytes) + " bytes, expected " +
                                            std::to_string(g.total_bytes));
    }
    SharedRegion region;
    try {
      region = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd), bytes, nonce);
    } catch (const Error&) {
      // The usual cause: that rank has exited (it may have failed in its own
      // declare). Say so as a lost peer once the registry confirms it.
      const detail::Liveness& peers = *fs.ctx.liveness;
      for (const auto until = Clock::now() + options.peer_timeout; Clock::now() < until;) {
        if (peers.registry_lost() || !peers.alive(rank)) {
          throw PeerLostError(rank, "flow '" + name + "': " + peers.describe(rank) +
                                        " before this rank could map its rings");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      throw;
    }
    const auto* hdr = reinterpret_cast<const layout::RegionHeader*>(region.data());
    if (hdr->magic != layout::kRegionMagic || hdr->version != layout::kLayoutVersion ||
        hdr->local_targets != g.local_targets || hdr->sources != g.sources || hdr->ring_segments != g.ring_segments ||
        hdr->segment_stride != g.segment_stride || hdr->total_bytes != g.total_bytes) {
      throw Error(ErrorCode::kProtocol, "flow '" + name + "': rank " + std::to_string(rank) +
                                            "'s ring region has an unexpected header (different sluice version?)");
    }
    log::info("flow '", name, "': rank ", rank, " is on this host: shm (mapped ", bytes, " bytes of pid ", pid, ")");
    fs.peer.emplace(rank, std::move(region));
  }
}

// Creates this rank's ofi endpoints for the flow, publishes their addresses
// and keys, and reads those of the peers they talk to.
void ClusterImpl::setup_ofi(FlowState& fs) {
  const FlowSpec& spec = fs.ctx.spec;
  const uint32_t me = boot.rank;
  const size_t ns = spec.sources.size(), nt = spec.targets.size();
  const layout::Geometry& rg = fs.ring_geometry;
  const std::string prefix = "flow/" + spec.name + "/ofi/";
  auto any_remote = [&](bool as_source, uint32_t index) {
    for (uint32_t o = 0; o < (as_source ? nt : ns); ++o) {
      if (as_source ? fs.remote(index, o) : fs.remote(o, index)) return true;
    }
    return false;
  };
  for (uint32_t t = 0; t < nt; ++t) {
    if (spec.targets[t].rank != me || !any_remote(false, t)) continue;
    auto ot = std::make_unique<OfiTarget>();
    ot->ep = std::make_unique<ofi::Endpoint>(ofi_config);
    const layout::Geometry& g = fs.geometry[me];
    // Each remote source may write only the segments of its own ring: one
    // registration (and key) per source, ring headers never exposed.
    ot->ring_mrs.resize(ns);
    for (uint32_t s = 0; s < ns; ++s) {
      if (!fs.remote(s, t)) continue;
      std::byte* segments = fs.own.data() + g.ring_offset(fs.local_index[t], s) + sizeof(layout::RingHeader);
      ot->ring_mrs[s] = ot->ep->register_memory(segments, size_t{g.ring_segments} * g.segment_stride,
                                                FI_REMOTE_WRITE | FI_RECV);
    }
    // Registered buffers belong to the endpoint: an abandoned one keeps them
    // (a NIC may still write into them), a closed one frees them after.
    ot->outbox = ot->ep->allocate_array<uint64_t>(ns);
    ot->outbox_mr = ot->ep->register_memory(ot->outbox, ns * sizeof(uint64_t), FI_WRITE | FI_SEND);
    ot->control = ot->ep->allocate_array<uint64_t>(ns + 2);
    ot->control_mr = ot->ep->register_memory(ot->control, (ns + 2) * sizeof(uint64_t), FI_SEND | FI_RECV);
    for (uint32_t s = 0; s < ns; ++s) {
      if (!fs.remote(s, t)) continue;
      client->put(prefix + "t/" + std::to_string(t) + "/" + std::to_string(s),
                  to_hex(ot->ep->address()) + " " + (ot->ep->rma() ? "rma" : "msg") + " " +
                      std::to_string(ot->ring_mrs[s].key) + " " + std::to_string(ot->ring_mrs[s].base));
    }
    log::info("flow '", spec.name, "' target ", t, ": ofi endpoint on ", ot->ep->provider_name(), " via ",
              ofi_config.node.empty() ? "any interface" : ofi_config.node, ", ", ot->ep->rma() ? "RMA" : "messages");
    fs.ofi_targets[t] = std::move(ot);
  }
  for (uint32_t s = 0; s < ns; ++s) {
    if (spec.sources[s].rank != me || !any_remote(true, s)) continue;
    auto os = std::make_unique<OfiSource>();
    os->ep = std::make_unique<ofi::Endpoint>(ofi_config);
    os->staging_bytes = nt * rg.ring_stride;
    os->staging = os->ep->allocate(os->staging_bytes);
    os->staging_mr = os->ep->register_memory(os->staging, os->staging_bytes, FI_WRITE | FI_SEND);
    os->credits = os->ep->allocate_array<uint64_t>(nt);
    os->credits_mr = os->ep->register_memory(os->credits, nt * sizeof(uint64_t), FI_REMOTE_WRITE | FI_RECV);
    os->control = os->ep->allocate_array<uint64_t>(nt + 1);
    os->control_mr = os->ep->register_memory(os->control, (nt + 1) * sizeof(uint64_t), FI_SEND | FI_RECV);
    client->put(prefix + "s/" + std::to_string(s), to_hex(os->ep->address()) + " " + (os->ep->rma() ? "rma" : "msg") +
                                                       " " + std::to_string(os->credits_mr.key) + " " +
                                                       std::to_string(os->credits_mr.base));
    log::info("flow '", spec.name, "' source ", s, ": ofi endpoint on ", os->ep->provider_name(), ", ",
              os->ep->rma() ? "RMA" : "messages");
    fs.ofi_sources[s] = std::move(os);
  }
  // A descriptor: hex address, data path, key, base. Everything in it comes
  // from a peer, so it is checked before use.
  auto fetch = [&](const std::string& key, const std::string& path, uint32_t owner,
                   ofi::Endpoint& ep, fi_addr_t* peer, uint64_t* mr_key, uint64_t* base) {
    const std::string desc = client->get(prefix + key, setup_deadline(), owner);
    std::istringstream in(desc);
    std::string hex, mode, addr;
    unsigned long long k = 0, b = 0;
    if (!(in >> hex >> mode >> k >> b) || !from_hex(hex, &addr) || addr.empty()) {
      throw Error(ErrorCode::kProtocol, "flow '" + spec.name + "': rank " + std::to_string(owner) +
                                            " published a malformed ofi descriptor for " + key);
    }
    if (mode != (ep.rma() ? "rma" : "msg")) {
      throw Error(ErrorCode::kInvalidArgument,
                  "flow '" + spec.name + "': rank " + std::to_string(owner) + " moves segments by " +
                      (mode == "rma" ? "RMA" : "messages") + " but rank " + std::to_string(me) + " by " +
                      (ep.rma() ? "RMA" : "messages") + "; give every rank the same SLUICE_OFI_RMA and provider");
    }
    *peer = ep.insert(addr);
    *mr_key = k;
    *base = b;
    // The path this pair of endpoints takes, once per pair (SLUICE_LOG=info).
    if (log::level() >= log::Level::kInfo) {
      const std::string host = client->peers().host(owner);
      log::info("flow '", spec.name, "' ", path, " (rank ", owner,
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
      r.ring = layout::RingView(os->staging + t * rg.ring_stride, rg.ring_segments, rg.segment_stride);
      uint64_t base = 0;
      fetch("t/" + std::to_string(t) + "/" + std::to_string(s),
            "source " + std::to_string(s) + " -> target " + std::to_string(t), spec.targets[t].rank,
            *os->ep, &r.peer, &r.ring_key, &base);
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
            "target " + std::to_string(t) + " <- source " + std::to_string(s), spec.sources[s].rank,
            *ot->ep, &r.peer, &r.credit_key, &base);
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
  wire_up(fs.ctx, wiring, setup_deadline());
}

namespace {

// An ordered flow's sequencer as one core uses it: its own handle to the
// counter region.
class RegionSequencer final : public Sequencer {
 public:
  RegionSequencer(std::unique_ptr<RegionAccess> counter, const control::PeerTable* peers,
                  uint32_t owner)
      : counter_(std::move(counter)),
        peers_(peers),
        owner_(owner),
        incarnation_(peers->incarnation(owner)) {}
  Status take(uint64_t count, uint64_t* first, std::string* error) override {
    return op(count, first, error);
  }
  Status taken(uint64_t* count, std::string* error) override { return op(0, count, error); }

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
  if (!spec.ordered) return nullptr;
  const uint32_t owner = spec.targets[0].rank;
  return std::make_unique<RegionSequencer>(impl.open_region("flow/" + spec.name + "/sequencer",
                                                            "flow:" + spec.name + ":sequencer", owner,
                                                            impl.setup_deadline()),
                                           &impl.client->peers(), owner);
}

}  // namespace detail

Cluster::Cluster(std::shared_ptr<detail::ClusterImpl> impl) : impl_(std::move(impl)) {}
Cluster::Cluster(Cluster&&) noexcept = default;
Cluster& Cluster::operator=(Cluster&&) noexcept = default;
Cluster::~Cluster() = default;

Cluster Cluster::join() { return join(ClusterOptions::from_env()); }

Cluster Cluster::join(const ClusterOptions& options) {
  options.validate();
  log::set_level(options.log_level);
  auto impl = std::make_shared<detail::ClusterImpl>();
  impl->options = options;
  impl->boot = control::parse_bootstrap(control::process_env(), options.rank, options.world_size, options.registry,
                                        options.secret);
  impl->options.rank = impl->boot.rank;
  impl->options.world_size = impl->boot.world_size;
  impl->options.registry = impl->boot.registry_host + ":" + std::to_string(impl->boot.registry_port);
  impl->options.secret = impl->boot.secret;
  impl->host_id = detail::host_identity();
  log::set_tag("rank " + std::to_string(impl->boot.rank));
  control::ClientOptions co;
  co.heartbeat_timeout = options.peer_timeout;
  co.connect_timeout = options.setup_timeout;
  impl->client = control::RegistryClient::connect(impl->boot, co);
  // Peers compare host identities to choose shm or ofi per pair.
  impl->client->put("host/" + std::to_string(impl->boot.rank), impl->host_id);
  // Data goes out through the interface that reaches the registry, unless
  // the job pinned a provider that chooses its own.
  impl->ofi_config = detail::ofi::config_from_options(impl->options, impl->client->local_address());
  // `sluice top` groups this process's endpoints by job and rank.
  detail::counters::set_job(impl->options.registry, impl->boot.rank);
  control::signal_report::install();
  log::info("joined as rank ", impl->boot.rank, " of ", impl->boot.world_size, " via ", impl->options.registry,
            " (bootstrap from ", impl->boot.source, ")");
  if (log::level() >= log::Level::kInfo) {
    // One line, so that ranks' logs interleave readably.
    std::string settings;
    std::istringstream lines(impl->options.describe());
    for (std::string line; std::getline(lines, line);) settings += (settings.empty() ? "" : "; ") + line;
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
    throw Error(ErrorCode::kInvalidArgument,
                "transport_to(" + std::to_string(rank) + "): no such rank; the job has " + std::to_string(world_size()));
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
      throw Error(ErrorCode::kInvalidArgument,
                  "rank " + std::to_string(r) + " does not exist: the job has " + std::to_string(world_size()));
    }
    for (uint32_t s = 0; s < slots; ++s) out.push_back({r, s});
  }
  return out;
}

DeclaredFlow Cluster::declare(const FlowSpec& spec) {
  impl_->declare(spec);
  return DeclaredFlow(impl_, spec.name);
}

DeclaredFlow::DeclaredFlow(DeclaredFlow&& other) noexcept
    : cluster_(std::move(other.cluster_)), name_(std::exchange(other.name_, {})) {}

DeclaredFlow& DeclaredFlow::operator=(DeclaredFlow&& other) noexcept {
  if (this != &other) {
    release();
    cluster_ = std::move(other.cluster_);
    name_ = std::exchange(other.name_, {});
  }
  return *this;
}

DeclaredFlow::~DeclaredFlow() { release(); }

void DeclaredFlow::release() noexcept {
  if (name_.empty()) return;
  const std::string name = name_;
  try {
    auto impl = cluster_.lock();
    destroy(impl != nullptr ? impl->setup_deadline() : Clock::now());
  } catch (const std::exception& e) {
    log::error("flow '", name, "': ", e.what(),
               name_.empty() ? "" : "; it stays declared on this rank until the Cluster ends");
  }
  name_.clear();
  cluster_.reset();
}

void DeclaredFlow::destroy(Deadline deadline) {
  if (name_.empty()) return;
  auto impl = cluster_.lock();
  if (impl == nullptr) {  // the Cluster freed the flow already
    name_.clear();
    return;
  }
  auto fs = impl->take_flow(name_);  // throws, leaving the handle as it was, if cores are open
  const std::string name = std::exchange(name_, {});
  cluster_.reset();
  impl->destroy_flow(name, std::move(fs), deadline);
}

void Cluster::check_record(const FlowSpec& spec, size_t record_size) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->flows.find(spec.name);
  if (it == impl_->flows.end() || it->second == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + spec.name + "' was not declared on rank " + std::to_string(rank()) + "; call declare() first");
  }
  if (it->second->ctx.spec.type != spec.type) {
    throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name + "' was declared as a " +
                                                 (spec.type == FlowType::kReplicate ? "shuffle" : "replicate") +
                                                 " flow but is opened as a " +
                                                 (spec.type == FlowType::kReplicate ? "replicate" : "shuffle") + " one");
  }
  if (it->second->ctx.spec.record_size != record_size) {
    throw Error(ErrorCode::kInvalidArgument, "flow '" + spec.name + "' was declared with " +
                                                 std::to_string(it->second->ctx.spec.record_size) +
                                                 "-byte records but is opened with " + std::to_string(record_size));
  }
}

// The spec of a declared flow (declare() checked it exists).
static FlowSpec declared_spec(detail::ClusterImpl& impl, const std::string& flow) {
  std::lock_guard<std::mutex> lock(impl.mu);
  return impl.flows.at(flow)->ctx.spec;
}

std::unique_ptr<detail::SourceCore> Cluster::open_source(const std::string& flow, uint32_t slot) {
  auto sequencer = detail::open_sequencer(*impl_, declared_spec(*impl_, flow));
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
  std::vector<detail::OutRingRef> rings(spec.targets.size());
  for (uint32_t t = 0; t < spec.targets.size(); ++t) {
    if (fs.remote(s, t)) {
      rings[t] = fs.remote_out.at(s)[t];
      continue;
    }
    const uint32_t trank = spec.targets[t].rank;
    const detail::layout::Geometry& g = fs.geometry.at(trank);
    std::byte* base = fs.region_of(trank, rank());
    const uint32_t lt = fs.local_index[t];
    detail::layout::RingView ring(base + g.ring_offset(lt, s), g.ring_segments, g.segment_stride);
    if (ring.header->magic != detail::layout::kRingMagic || ring.header->source != s || ring.header->target != t) {
      throw Error(ErrorCode::kProtocol, "flow '" + flow + "': the ring from source " + std::to_string(s) +
                                            " to target " + std::to_string(t) + " has an unexpected header");
    }
    rings[t].ring = ring;
    rings[t].bell = reinterpret_cast<detail::layout::Doorbell*>(base + g.doorbell_offset(lt));
  }
  std::unique_ptr<detail::OfiSource> ofi;
  if (auto it = fs.ofi_sources.find(s); it != fs.ofi_sources.end()) ofi = std::move(it->second);
  fs.source_open[s] = true;
  return detail::make_source(&fs.ctx, s, std::move(rings), std::move(ofi), std::move(sequencer));
}

std::unique_ptr<detail::TargetCore> Cluster::open_target(const std::string& flow, uint32_t slot) {
  auto sequencer = detail::open_sequencer(*impl_, declared_spec(*impl_, flow));
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
  std::vector<detail::InRingRef> rings(spec.sources.size());
  for (uint32_t s = 0; s < spec.sources.size(); ++s) {
    if (fs.remote(s, t)) rings[s] = fs.remote_in.at(t)[s];
    rings[s].ring = detail::layout::RingView(fs.own.data() + g.ring_offset(lt, s), g.ring_segments, g.segment_stride);
  }
  std::unique_ptr<detail::OfiTarget> ofi;
  if (auto it = fs.ofi_targets.find(t); it != fs.ofi_targets.end()) ofi = std::move(it->second);
  fs.target_open[t] = true;
  auto* bell = reinterpret_cast<detail::layout::Doorbell*>(fs.own.data() + g.doorbell_offset(lt));
  return detail::make_target(&fs.ctx, t, bell, std::move(rings), std::move(ofi), std::move(sequencer));
}

static void check_region_name(std::string_view name) {
  if (name.empty() || name.size() > 200) {
    throw Error(ErrorCode::kInvalidArgument, "a region name must have 1 to 200 bytes, not " + std::to_string(name.size()));
  }
  for (char c : name) {
    if (c <= ' ' || c == '/' || c == ':' || c == 127) {
      throw Error(ErrorCode::kInvalidArgument, "region name '" + std::string(name) +
                                                   "' contains a space, control character, '/' or ':'");
    }
  }
}

MemoryRegion Cluster::expose(std::string_view name, size_t bytes) {
  check_region_name(name);
  if (bytes == 0 || bytes > (size_t{1} << 40)) {
    throw Error(ErrorCode::kInvalidArgument, "region '" + std::string(name) + "': size " + std::to_string(bytes) +
                                                 " is outside [1, 2^40] bytes");
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->exposed.insert(std::string(name)).second) {
      throw Error(ErrorCode::kInvalidArgument, "region '" + std::string(name) + "' is already exposed on rank " +
                                                   std::to_string(rank()));
    }
  }
  try {
    auto owner = std::make_unique<detail::RegionOwner>(std::string(name), bytes, impl_->regions_use_ofi(),
                                                       impl_->ofi_config, impl_->host_id);
    const std::string key = "region/" + std::string(name) + "/" + std::to_string(rank());
    impl_->client->put(key, owner->descriptor());
    // The Cluster may be gone by then (the handle's contract says it must
    // not be, but a weak reference costs nothing here).
    owner->on_destroy([weak = std::weak_ptr<detail::ClusterImpl>(impl_), key, name = std::string(name)] {
      auto impl = weak.lock();
      if (impl == nullptr) return;
      try {
        impl->client->put(key, detail::kRegionDestroyed);
      } catch (const Error& e) {
        log::warn("region '", name, "': could not withdraw it from the registry: ", e.what());
      }
      std::lock_guard<std::mutex> lock(impl->mu);
      impl->exposed.erase(name);
    });
    return MemoryRegion(std::move(owner));
  } catch (...) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->exposed.erase(std::string(name));
    throw;
  }
}

RemoteRegion Cluster::open_region(std::string_view name, uint32_t owner, Deadline deadline) {
  check_region_name(name);
  if (owner >= world_size()) {
    throw Error(ErrorCode::kInvalidArgument, "region '" + std::string(name) + "': rank " + std::to_string(owner) +
                                                 " does not exist (the job has " + std::to_string(world_size()) +
                                                 " ranks)");
  }
  std::unique_ptr<detail::RegionAccess> access =
      impl_->open_region("region/" + std::string(name) + "/" + std::to_string(owner),
                         std::string(name), owner, deadline);
  access->count_as(impl_->boot.rank);
  return RemoteRegion(std::move(access));
}

void Cluster::barrier(std::string_view name, Deadline deadline) {
  impl_->client->barrier(std::string(name), deadline);
}

void Cluster::barrier(std::string_view name, const std::vector<Endpoint>& members, uint32_t slot, Deadline deadline) {
  if (members.empty()) throw Error(ErrorCode::kInvalidArgument, "barrier '" + std::string(name) + "' has no members");
  std::vector<uint64_t> ids;
  ids.reserve(members.size());
  for (const Endpoint& e : members) ids.push_back(uint64_t{e.rank} << 32 | e.slot);
  impl_->client->barrier(std::string(name), ids, uint64_t{rank()} << 32 | slot, deadline);
}

std::vector<std::string> Cluster::allgather(std::string_view name, std::string_view value, Deadline deadline) {
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
    out[r] = r == rank() ? std::string(value) : impl_->client->get(prefix + std::to_string(r), deadline, r);
  }
  return out;
}

}  // namespace sluice
