/// @file
/// sluice/membership.h: membership views of a job, and what the calls scoped
/// to one view return (Cluster::view, Cluster::allgather(view, ...),
/// Cluster::agree).
///
/// The registry numbers the job's membership in epochs. Epoch 0 is the job as
/// launched: every rank. Each loss (a rank died, or stopped heart-beating),
/// each departure (leave()) and each rejoin (a restarted rank's new
/// incarnation) makes the next epoch, whose view is every rank not lost.
/// Every rank learns every view, in the same order; a call scoped to a view
/// either completes for all of its members alike or fails for all of them
/// with Status::kViewChanged (MPI ULFM's revoke), never with a silently
/// smaller result. See docs/guide.md, "Membership views".
///
/// Thread safety: plain values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {

/// One membership view of the job.
struct View {
  /// 0 for the job as launched; one more at every loss, departure or rejoin.
  uint64_t epoch = 0;
  /// The ranks in the view, increasing: every rank not lost (at epoch 0,
  /// every rank of the job, joined yet or not).
  std::vector<uint32_t> members;
  /// Per rank of the job (world_size entries): how many times it joined
  /// again after it died (Cluster::incarnation).
  std::vector<uint32_t> incarnations;
  /// Whether `rank` is a member.
  bool contains(uint32_t rank) const {
    return std::binary_search(members.begin(), members.end(), rank);
  }
};

/// What a view-scoped allgather or an agreement returns: one value from
/// every member of one view, the same on every member.
struct Gathered {
  /// The view the values were gathered in.
  uint64_t epoch = 0;
  /// Its members, increasing: who contributed.
  std::vector<uint32_t> ranks;
  /// values[i] is what ranks[i] contributed.
  std::vector<std::string> values;
};

}  // namespace sluice
SLUICE_API_END
