/// @file
/// sluice/cluster.h: joining a job, declaring flows, opening their endpoints.
///
/// A Cluster is this process's membership in one sluice job. Cluster::join()
/// reads the bootstrap environment that `sluice run`, Slurm, mpirun or torchrun
/// set (see docs/operations.md, "Environment"), connects to the job's registry and
/// authenticates with the job secret. From then on the process can declare
/// flows, open sources and targets for its own endpoints, and meet the other
/// ranks at barriers.
///
/// Failure: setup calls throw sluice::Error (see errors.h). A peer that dies,
/// leaves, or stops heart-beating (ClusterOptions::peer_timeout) is reported to
/// every flow that waits on it as Status::kPeerLost naming the rank.
///
/// Thread safety: every Cluster method may be called from any thread
/// concurrently. Several Clusters may live in one process (each joins with its
/// own options). The Sources and Targets it hands out are single-owner; see
/// flow.h.
///
/// Ownership: the Cluster owns the registry connection, one control thread
/// (heart-beats and peer events; never on the data path), and the shared
/// memory of every flow declared through it until that flow's DeclaredFlow is
/// destroyed (or the Cluster is). Destroy every Source and Target before its
/// flow's DeclaredFlow, and every handle before the Cluster; then call
/// leave(), which leaves the job cleanly (peers see "left", not "died").
/// No destructor waits for the network (docs/guide.md, "Lifecycle").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sluice/combiner.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow.h"
#include "sluice/membership.h"
#include "sluice/memory.h"
#include "sluice/options.h"

SLUICE_API_BEGIN
namespace sluice {

namespace detail {
class ClusterImpl;
}  // namespace detail

/// A flow declared by this rank: its rings, mappings, ofi endpoints and
/// registered memory here, and its entries in the registry. Move-only; the
/// name can be declared again once every participant destroyed its handle.
///
/// Lifecycle (the rule that makes a re-declaration safe): destroying a flow is
/// collective among its participants. destroy() (or the destructor) tells the
/// registry that this rank is done with the flow and waits until every other
/// participant is done too (or lost); only then does it free this rank's
/// memory and endpoints, and by then the registry has forgotten the
/// declaration and erased its keys ("flow/<name>/..."). So a new declaration
/// of the name, with the same spec or another, never sees a key, a ring or an
/// endpoint of the old one, and no peer is still using the old one: every
/// peer had destroyed its Sources and Targets of it first (REQUIRES below).
/// A participant that is lost does not hold the others up.
///
/// REQUIRES: every Source and Target (and combiner end) of the flow opened on
/// this rank is destroyed before its DeclaredFlow; destroy() refuses
/// otherwise (Error(kInvalidArgument) counting them) and leaves the flow
/// declared. The DeclaredFlow is destroyed before its Cluster (one that
/// outlives it does nothing: the Cluster freed the flow).
///
/// Thread safety: one thread at a time per handle; handles of different flows
/// may be destroyed concurrently.
class [[nodiscard]] DeclaredFlow {
 public:
  DeclaredFlow() = default;
  /// Takes over `other`'s flow; `other` is left empty.
  DeclaredFlow(DeclaredFlow&& other) noexcept;
  /// Destroys the flow this handle held, as the destructor does, then takes
  /// over `other`'s; `other` is left empty.
  DeclaredFlow& operator=(DeclaredFlow&& other) noexcept;
  /// Never waits: withdraws the flow in the background, freeing this rank's
  /// memory once every participant destroyed theirs (or is lost), as
  /// destroy() does, or after options().setup_timeout, or when the Cluster
  /// ends; declaring the name again on this rank waits for that. If the
  /// flow still has open Sources or Targets here, logs an error and leaves
  /// the flow declared until the Cluster ends (never frees memory a core
  /// uses).
  ~DeclaredFlow();

  /// Destroys the flow on this rank as described above, waiting for it
  /// (first for the last transfers of its sources destroyed right after
  /// close()). Idempotent; an empty handle does nothing and returns kOk.
  /// Returns kOk once every participant destroyed theirs (or is lost);
  /// kInvalid if Sources or Targets of the flow are still open here (nothing
  /// is done, the handle still holds the flow; error() counts them);
  /// kTimeout naming the participants that have not destroyed theirs by
  /// `deadline`, or kPeerLost if the registry is lost (lost_peer() names a
  /// rank where one is known): after these two this rank's resources are
  /// freed all the same, and the name can be declared again once the others
  /// have destroyed theirs. Throws Error only for a malformed registry reply.
  [[nodiscard]] Status destroy(Deadline deadline = kForever);
  /// Why the last destroy() failed; empty after kOk.
  const std::string& error() const;
  /// After kPeerLost: the rank it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return lost_; }

  /// The flow's name; empty for an empty handle.
  const std::string& name() const { return name_; }
  /// False for an empty handle: default-constructed, moved from, or
  /// destroyed.
  explicit operator bool() const { return !name_.empty(); }

 private:
  friend class Cluster;
  void release() noexcept;  ///< the destructor's destroy()
  void destroy_or_throw(Deadline deadline);
  DeclaredFlow(std::weak_ptr<detail::ClusterImpl> cluster, std::string name)
      : cluster_(std::move(cluster)), name_(std::move(name)) {}
  std::weak_ptr<detail::ClusterImpl> cluster_;
  std::string name_;  ///< empty: no flow
  Status last_ = Status::kOk;
  std::string error_;
  std::optional<LostPeer> lost_;
};

/// This process's membership in one sluice job: joins it, declares flows,
/// opens their endpoints, exposes memory regions and meets the other ranks
/// at barriers. Move-only. See the top of this file for its thread safety
/// and what it owns.
class Cluster {
 public:
  /// Joins the job described by `options` (see options.h); join() without
  /// arguments is join(ClusterOptions::from_env()). Explicit options win over
  /// the environment, except that bootstrap fields left unset (rank,
  /// world_size, registry, secret) come from the launcher's variables.
  /// Throws Error(kInvalidArgument) naming the field if options.validate()
  /// fails (or, for join(), naming the SLUICE_* variable that is malformed),
  /// Error(kBootstrap) if the environment does not name a job, Error(kAuth) on
  /// a wrong secret, Error(kTimeout) if the registry does not answer within
  /// setup_timeout. Sets the process's log level to options.log_level and, at
  /// info, logs options.describe() once.
  ///@{
  static Cluster join();
  static Cluster join(const ClusterOptions& options);
  ///@}

  /// Moves the membership; the moved-from Cluster may only be destroyed or
  /// assigned to.
  ///@{
  Cluster(Cluster&&) noexcept;
  Cluster& operator=(Cluster&&) noexcept;
  ///@}
  /// Never waits (docs/guide.md, "Lifecycle"). After leave() it only frees
  /// memory. Without it, it gives up on what destroyed handles left
  /// unfinished (an ofi source's last transfers after close(), a destroyed
  /// flow's withdrawal), saying so in a warning, and sends LEAVE without
  /// waiting for the registry: peers mostly see "left", but a target may
  /// see a source's rank lost before its last segments. End with leave().
  ~Cluster();

  /// Leaves the job cleanly: waits until what destroyed handles left
  /// unfinished is done (the last transfers of ofi sources destroyed right
  /// after close(), this rank's withdrawal of flows whose DeclaredFlow was
  /// destroyed: not the other participants', since a rank that leaves is
  /// done with its flows), then tells the registry this rank leaves and
  /// waits until it confirmed (peers then see "left", not "died"). kOk; kTimeout if
  /// something was not done by `deadline` (a warning says what; the rank has
  /// left all the same: after such a wait the registry still gets a second to
  /// confirm); kClosed if it was called before. Every other call
  /// on the Cluster is an error afterwards; destroy its handles first.
  [[nodiscard]] Status leave(Deadline deadline = kForever);

  /// This process's rank in the job: 0 .. world_size() - 1.
  uint32_t rank() const;
  /// The number of ranks in the job: of rank numbers, in an elastic job
  /// (`sluice run --max-ranks M`: M, the numbers no process holds yet
  /// included; view().members says which are in).
  uint32_t world_size() const;
  /// The options in force: those given to join(), with rank, world_size,
  /// registry and secret as the bootstrap resolved them.
  const ClusterOptions& options() const;

  /// Whether `rank` is in the job: false once the registry reported it lost
  /// (it died, stopped heart-beating for peer_timeout, or left), and for
  /// every other rank once the registry itself is lost. A rank that died
  /// may join again as a new process (`sluice run --restarts`): alive() is
  /// then true again and incarnation() one higher. Flows and regions set up
  /// before stay failed: they belong to the old incarnation. Cheap (an atomic
  /// load): a loop may poll it every round, e.g. to rebuild its flows among
  /// the ranks that remain (docs/guide.md, "Guarantees and failure"; apps/kv does so).
  /// Throws Error(kInvalidArgument) if `rank` does not exist.
  bool alive(uint32_t rank) const;
  /// Whether `rank` left the job (Cluster::leave(), which the job harness
  /// calls when its body returns) rather than being lost to a failure (it
  /// died or stopped heart-beating): false while it is alive, after such a
  /// failure, and once it joined again as a new incarnation. Lets a rank
  /// tell a peer that finished from one that crashed, e.g. a replica
  /// restarted after its clients were done. True, too, for an elastic job's
  /// vacancy (a number no process has held yet). Cheap (an atomic load).
  /// Throws Error(kInvalidArgument) if `rank` does not exist.
  bool left(uint32_t rank) const;
  /// The ranks alive() reports, in increasing order (this rank included while
  /// the registry is reachable).
  std::vector<uint32_t> live_ranks() const;
  /// How many times `rank` joined the job again after it died: 0 for the
  /// process the job started with. incarnation(rank()) tells a restarted
  /// process that it is one (it starts with none of its old state). Throws
  /// Error(kInvalidArgument) if `rank` does not exist.
  uint32_t incarnation(uint32_t rank) const;

  /// The transport that carries flows (and memory regions) between this rank
  /// and `rank`: Transport::kShm or Transport::kOfi, never kAuto. It follows
  /// from options().transport and whether the two ranks share a host; every
  /// flow between them uses it. Asks the registry for the rank's host the
  /// first time (then cached). Throws Error(kInvalidArgument) if `rank` does
  /// not exist, or if transport is kShm and `rank` is on another host;
  /// Error(kTimeout) / PeerLostError if the registry cannot say within
  /// setup_timeout.
  Transport transport_to(uint32_t rank) const;

  /// Endpoints (r, 0..slots-1) for every rank r, in rank-major order.
  std::vector<Endpoint> all_ranks(uint32_t slots = 1) const;
  /// Endpoints (rank, 0..slots-1) for one rank.
  std::vector<Endpoint> ranks(std::vector<uint32_t> ranks, uint32_t slots = 1) const;

  /// Declares a flow and returns this rank's handle to it: the flow lives
  /// until the handle is destroyed (see DeclaredFlow; a discarded handle would
  /// destroy the flow at once, hence [[nodiscard]]). Every rank that appears
  /// in its sources or targets must declare it with an identical spec; the
  /// call returns once all have, and throws Error(kSpecMismatch) naming both
  /// ranks and the differing fields if one disagrees, Error(kTimeout) naming
  /// the missing ranks, or PeerLostError. Declaring a name this rank has
  /// declared and not destroyed is an error; so is declaring it anew while a
  /// participant of its previous declaration has not destroyed that one yet.
  /// Takes every kind of spec (ShuffleSpec, ReplicateSpec, CombinerSpec: each
  /// converts to its FlowSpec); a combiner flow's participants must also
  /// agree on its group key, value fields and aggregates.
  [[nodiscard]] DeclaredFlow declare(const FlowSpec& spec);

  /// Declares a flow among the members of `view` (membership.h): of the
  /// spec's sources and targets, those whose rank is a member, in the spec's
  /// order. Every member passes the same spec at every view, and the flow
  /// re-forms among the living: a lost rank's endpoints drop out, a rank
  /// back as a new incarnation is in again. It is held as "name@epoch" (one
  /// declaration per view: nothing waits for the last view's to be
  /// withdrawn); source(spec, slot) and target(spec, slot) open the latest.
  /// A shuffle's explicit target index (push_to) counts the targets that
  /// remain. kOk once every participant declared it in `view`; kViewChanged
  /// on every participant alike if the view is not current, or changes (a
  /// loss, departure or rejoin) before all declared; kViewChanged too where
  /// a participant is lost while the flow is set up (a participant that had
  /// finished sees the loss on the flow, as kPeerLost). Declare it again in
  /// view() then. Throws as declare(spec) does otherwise, and
  /// Error(kInvalidArgument) if this rank is not a member of `view`,
  /// Error(kPeerLost) if none of the sources, or none of the targets, is.
  /// Shuffle, replicate and combiner flows (a combiner's groups are spread
  /// by a hash of their key over the targets that remain).
  Result<DeclaredFlow> declare(const View& view, const FlowSpec& spec);

  /// The source for endpoint (rank(), slot) of a declared flow (T may be
  /// Bytes). REQUIRES: the endpoint is one of the flow's sources, opened at
  /// most once.
  template <class T>
  Source<T> source(const ShuffleSpec<T>& spec, uint32_t slot) {
    check_record(spec.spec(), detail::RecordShape<T>::kSize);
    return detail::source_from_core<T>(open_source(spec.spec().name(), slot));
  }
  /// The target for endpoint (rank(), slot) of a declared flow (T may be
  /// Bytes). REQUIRES: the endpoint is one of the flow's targets, opened at
  /// most once.
  template <class T>
  Target<T> target(const ShuffleSpec<T>& spec, uint32_t slot) {
    check_record(spec.spec(), detail::RecordShape<T>::kSize);
    return detail::target_from_core<T>(open_target(spec.spec().name(), slot));
  }
  /// The same for replicate flows: push() writes to every target.
  ///@{
  template <class T>
  Source<T> source(const ReplicateSpec<T>& spec, uint32_t slot) {
    check_record(spec.spec(), detail::RecordShape<T>::kSize);
    return detail::source_from_core<T>(open_source(spec.spec().name(), slot));
  }
  template <class T>
  Target<T> target(const ReplicateSpec<T>& spec, uint32_t slot) {
    check_record(spec.spec(), detail::RecordShape<T>::kSize);
    return detail::target_from_core<T>(open_target(spec.spec().name(), slot));
  }
  ///@}
  /// The same for combiner flows: push() folds into the source's table,
  /// the target ends up with the final groups.
  ///@{
  template <class T>
  Source<Combined<T>> source(const CombinerSpec<T>& spec, uint32_t slot) {
    const FlowSpec flow = spec.spec();
    check_record(flow, 0);
    return detail::combiner_source_from_core<T>(detail::make_combiner_source(
        detail::CombinerSpecAccess::core(spec), open_source(flow.name(), slot)));
  }
  template <class T>
  Target<Combined<T>> target(const CombinerSpec<T>& spec, uint32_t slot) {
    const FlowSpec flow = spec.spec();
    check_record(flow, 0);
    return detail::combiner_target_from_core<T>(detail::make_combiner_target(
        detail::CombinerSpecAccess::core(spec), open_target(flow.name(), slot)));
  }
  ///@}

  /// Waits until every rank of the job has called barrier with the same name
  /// (reusable: the n-th call meets the others' n-th call; a call that threw
  /// does not count, so its retry meets the others' same call). Calls of one
  /// name made at once by several threads of a rank are counted in the order
  /// the registry receives them. Throws on timeout (naming the missing ranks)
  /// or PeerLostError.
  void barrier(std::string_view name, Deadline deadline = kForever);
  /// Arrive-and-wait for a set of endpoints (threads of any ranks): returns
  /// once every endpoint of `members` has made its n-th call of barrier
  /// `name` with the same members; the caller is endpoint (rank(), slot).
  /// Reusable as above. Throws Error(kTimeout) naming the missing endpoints,
  /// PeerLostError if a member's rank is gone, Error(kInvalidArgument) if the
  /// caller is not a member or members disagree (a name serves one member
  /// set for the whole job; every-rank barriers are the set of all (rank, 0)).
  void barrier(std::string_view name, const std::vector<Endpoint>& members, uint32_t slot,
               Deadline deadline = kForever);

  /// Exposes `bytes` of zeroed memory of this rank under `name` for one-sided
  /// access by every rank (see memory.h). Names are per rank: two ranks may
  /// expose the same name. Destroying the MemoryRegion withdraws it: its
  /// registry entry no longer describes it (later open_region calls fail at
  /// once) and the name may be exposed again. Throws Error(kInvalidArgument)
  /// on a bad name or one this rank exposes already, Error(kResource) if
  /// memory or an endpoint cannot be had.
  MemoryRegion expose(std::string_view name, size_t bytes);
  /// Opens region `name` of rank `owner`, waiting until the owner exposed it.
  /// Throws Error(kTimeout) at the deadline, PeerLostError if the owner is
  /// gone (also when it destroyed the region by leaving or dying),
  /// Error(kInvalidArgument) at once if the live owner exposed it and has
  /// since destroyed it (and not exposed it again), Error(kProtocol) on a
  /// malformed descriptor.
  RemoteRegion open_region(std::string_view name, uint32_t owner, Deadline deadline = kForever);

  /// The current membership view (membership.h): its epoch, members and
  /// incarnations, read together. Cheap (no registry round trip).
  View view() const;
  /// The current view's epoch (view().epoch without copying the members):
  /// one atomic load, cheap enough to test in a loop.
  uint64_t epoch() const;
  /// Waits until the view's epoch is greater than `after_epoch` and returns
  /// the new view; kTimeout at the deadline. Throws Error(kRegistry) if the
  /// registry is lost (no later view can come).
  Result<View> await_view(uint64_t after_epoch, Deadline deadline = kForever) const;
  /// A view-scoped allgather: every member of `view` contributes `value`;
  /// returns every member's value, the same on every member (the n-th call
  /// of `name` in a view meets the others' n-th; one call of a name per
  /// rank at a time). kViewChanged, on every member alike, if `view` is not
  /// the current one or the membership changes before every member called
  /// (view() then has the new view; nothing was gathered). Throws
  /// Error(kTimeout) naming the members that did not call, Error(kRegistry)
  /// if the registry is lost, Error(kInvalidArgument) if the values exceed
  /// a registry message (1 MiB together). Setup-time (through the registry).
  Result<Gathered> allgather(const View& view, std::string_view name, std::string_view value,
                             Deadline deadline = kForever);
  /// allgather(view, name, "") as a barrier: kOk once every member of
  /// `view` called it, kViewChanged as above.
  [[nodiscard]] Status barrier(const View& view, std::string_view name,
                               Deadline deadline = kForever);
  /// The survivors agree (MPI ULFM's agree): every live rank contributes
  /// `value`, and every rank that is not lost during the call returns the
  /// same Gathered, from the members of the first view in which all of them
  /// contributed (a loss during the call moves it to the next view; the
  /// lost rank's value is not in it). For example, how far each rank got
  /// before a failure. Throws as allgather(view, ...) does.
  Gathered agree(std::string_view name, std::string_view value, Deadline deadline = kForever);

  /// Every rank contributes `value`; returns all contributions indexed by rank.
  /// Setup-time only (goes through the registry). The n-th call meets the
  /// others' n-th call, counted as for barrier() (concurrent calls of one name
  /// from several threads of a rank each meet one call of every other rank,
  /// and all of them see the same values). Same failure rules as barrier.
  std::vector<std::string> allgather(std::string_view name, std::string_view value,
                                     Deadline deadline = kForever);

 private:
  explicit Cluster(std::shared_ptr<detail::ClusterImpl> impl);
  void check_record(const FlowSpec& spec, size_t record_size) const;
  std::unique_ptr<detail::SourceCore> open_source(const std::string& flow, uint32_t slot);
  std::unique_ptr<detail::TargetCore> open_target(const std::string& flow, uint32_t slot);

  /// Shared only with weak references: handles that outlive the Cluster
  /// against their contract (regions, declared flows) find it gone.
  std::shared_ptr<detail::ClusterImpl> impl_;
};

}  // namespace sluice
SLUICE_API_END
