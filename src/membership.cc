// Membership views (sluice/membership.h): the registry's epochs as the
// Cluster hands them out, and the calls scoped to one view.
#include <algorithm>
#include <string>

#include "cluster_impl.h"
#include "common/log.h"
#include "control/protocol.h"
#include "sluice/cluster.h"
#include "sluice/errors.h"

namespace sluice {

View Cluster::view() const {
  control::PeerTable::ViewState v = impl_->client->peers().view();
  return View{v.epoch, std::move(v.members), std::move(v.incarnations)};
}

uint64_t Cluster::epoch() const { return impl_->client->peers().epoch(); }

Result<View> Cluster::await_view(uint64_t after_epoch, Deadline deadline) const {
  control::PeerTable& peers = impl_->client->peers();
  if (!peers.await_epoch(after_epoch, deadline)) return Status::kTimeout;
  if (peers.epoch() <= after_epoch) {
    throw Error(ErrorCode::kRegistry, log::cat("waiting for a view after epoch ", after_epoch,
                                               ": the registry is lost, no view can follow"));
  }
  return view();
}

Result<DeclaredFlow> Cluster::declare(const View& view, const FlowSpec& spec) {
  const uint32_t me = rank();
  if (!view.contains(me)) {
    throw Error(ErrorCode::kInvalidArgument,
                log::cat("flow '", spec.name(), "': rank ", me, " is not a member of view ",
                         view.epoch, " (members ", control::rank_list_text(view.members), ")"));
  }
  FlowSpec scoped = spec;
  detail::FlowSpecAccess::name(scoped) = log::cat(spec.name(), "@", view.epoch);
  auto keep_members = [&](std::vector<Endpoint>& endpoints, const char* what) {
    std::erase_if(endpoints, [&](const Endpoint& e) { return !view.contains(e.rank); });
    if (endpoints.empty()) {
      throw Error(ErrorCode::kPeerLost,
                  log::cat("flow '", spec.name(), "': none of its ", what, " is a member of view ",
                           view.epoch, " (members ", control::rank_list_text(view.members), ")"));
    }
  };
  keep_members(detail::FlowSpecAccess::sources(scoped), "sources");
  keep_members(detail::FlowSpecAccess::targets(scoped), "targets");
  try {
    impl_->declare(scoped, view.epoch, &view.incarnations);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kViewChanged) return Status::kViewChanged;
    // A participant lost while the flow was set up (kPeerLost: the registry
    // moves the view past it, at once for a closed connection, within the
    // peer timeout for a silent rank), or one that gave the flow up for a
    // new view after it published its memory (kResource: its region is
    // gone; the new view is on its way here).
    if (e.code() != ErrorCode::kPeerLost && e.code() != ErrorCode::kResource) throw;
    const Deadline until = e.code() == ErrorCode::kPeerLost
                               ? impl_->setup_deadline()
                               : Clock::now() + impl_->options.peer_timeout;
    if (!impl_->client->peers().await_epoch(view.epoch, until)) throw;
    return Status::kViewChanged;
  }
  {
    MutexLock lock(impl_->mu);
    impl_->in_view[spec.name()] = scoped.name();
  }
  return DeclaredFlow(impl_, scoped.name());
}

KeyGroups::KeyGroups(uint32_t groups, std::vector<uint32_t> owners)
    : groups_(groups), owners_(std::move(owners)) {
  if (groups_ == 0) throw Error(ErrorCode::kInvalidArgument, "KeyGroups: no key groups");
  if (owners_.empty()) throw Error(ErrorCode::kInvalidArgument, "KeyGroups: no owners");
  std::vector<uint32_t> sorted = owners_;
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
    throw Error(ErrorCode::kInvalidArgument,
                log::cat("KeyGroups: owner rank ", *dup, " appears more than once"));
  }
}

namespace {

// A group's preference for an owner (rendezvous hashing): splitmix64's
// finaliser over both, the same on every rank and every platform.
uint64_t preference(uint32_t group, uint32_t owner) {
  uint64_t z = (uint64_t{group} << 32 | owner) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<uint32_t> KeyGroups::assign(const View& view) const {
  std::vector<uint32_t> present;
  for (uint32_t o : owners_)
    if (view.contains(o)) present.push_back(o);
  if (present.empty()) {
    throw Error(ErrorCode::kPeerLost,
                log::cat("KeyGroups: none of the owners ", control::rank_list_text(owners_),
                         " is a member of view ", view.epoch));
  }
  std::vector<uint32_t> out(groups_);
  for (uint32_t g = 0; g < groups_; ++g) {
    const uint32_t h = home(g);
    if (view.contains(h)) {
      out[g] = h;
      continue;
    }
    uint32_t best = present[0];
    for (uint32_t o : present)
      if (preference(g, o) > preference(g, best)) best = o;
    out[g] = best;
  }
  return out;
}

namespace {

// One GATHER under a name of its kind (allgather/, barrier/, agree/), so
// that the three kinds of call never meet each other's counts.
Result<Gathered> gather_in(detail::ClusterImpl& impl, const View& view, const std::string& name,
                           std::string_view value, Deadline deadline) {
  control::GatheredMsg m;
  try {
    m = impl.client->gather(name, view.epoch, std::string(value), deadline);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kViewChanged) return Status::kViewChanged;
    throw;
  }
  return Gathered{m.epoch, std::move(m.ranks), std::move(m.values)};
}

}  // namespace

Result<Gathered> Cluster::allgather(const View& view, std::string_view name, std::string_view value,
                                    Deadline deadline) {
  return gather_in(*impl_, view, log::cat("allgather/", name), value, deadline);
}

Status Cluster::barrier(const View& view, std::string_view name, Deadline deadline) {
  return gather_in(*impl_, view, log::cat("barrier/", name), "", deadline).status();
}

Gathered Cluster::agree(std::string_view name, std::string_view value, Deadline deadline) {
  // A gather in one view completes for all its members or fails for all of
  // them (the registry orders the two): retried view after view, the first
  // that completes is the one every survivor returns.
  const std::string gather_name = log::cat("agree/", name);
  for (;;) {
    const View v = view();
    Result<Gathered> r = gather_in(*impl_, v, gather_name, value, deadline);
    if (r) return std::move(*r);
    // The registry sends the new view before the failure, so view() has it
    // already; waiting for it is only a guard against spinning.
    if (!await_view(v.epoch, deadline)) {
      throw Error(ErrorCode::kTimeout, log::cat("agree '", name, "': no view after epoch ", v.epoch,
                                                " by the deadline"));
    }
  }
}

}  // namespace sluice
