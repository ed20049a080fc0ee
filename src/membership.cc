// Membership views (sluice/membership.h): the registry's epochs as the
// Cluster hands them out, and the calls scoped to one view.
#include <string>

#include "cluster_impl.h"
#include "common/log.h"
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
