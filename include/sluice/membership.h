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
/// Thread safety: plain values (KeyGroups: const calls from any thread).
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

/// Work keyed by groups that must move when their owner is lost: `size()`
/// key groups (a key's group is its hash modulo size()), each with a home
/// among `owners()`. assign(view) gives every group an owner that is a member
/// of the view: its home while the home is a member; else the member owner
/// that ranks highest for that group (rendezvous hashing), so that only a
/// lost owner's groups move, spread over the others about evenly, and go
/// home once it is back. Every rank computes the same map from the same
/// view. Use it to route a shuffle declared in the view (Cluster::declare(
/// view, spec)), and to know whose groups a rank took over.
class KeyGroups {
 public:
  /// `groups` key groups over `owners` (distinct ranks, in any order; home
  /// of group g: owners[g % owners.size()]). Throws Error(kInvalidArgument)
  /// if there are no groups or no owners, or an owner appears twice.
  KeyGroups(uint32_t groups, std::vector<uint32_t> owners);
  /// The number of key groups.
  uint32_t size() const { return groups_; }
  /// The owners, as given.
  const std::vector<uint32_t>& owners() const { return owners_; }
  /// The group of a key whose hash (sluice/hash.h) is `key_hash`.
  uint32_t group_of(uint64_t key_hash) const { return static_cast<uint32_t>(key_hash % groups_); }
  /// Group `group`'s home owner.
  uint32_t home(uint32_t group) const { return owners_[group % owners_.size()]; }
  /// Each group's owner in `view` (size() entries). Throws Error(kPeerLost)
  /// if no owner is a member.
  std::vector<uint32_t> assign(const View& view) const;

 private:
  uint32_t groups_;
  std::vector<uint32_t> owners_;
};

}  // namespace sluice
SLUICE_API_END
