/// @file
/// sluice/replay.h: a shuffle flow that outlives its members' deaths with
/// nothing lost and nothing twice (ReplayFlow): records numbered per (source
/// rank, target rank) over the whole job, a bounded replay buffer on every
/// source, explicit acknowledgements from the targets, and the flow declared
/// anew in every membership view, fed from where each target stands.
///
/// Positions. Every record a source rank pushes to a target rank has a
/// position: 0, 1, 2, ... per pair, over every view. A source keeps the
/// records each target has not acknowledged (at most `capacity` per target:
/// a full buffer makes push() wait for acknowledgements, and return kTimeout
/// at its deadline; nothing is ever dropped). A target counts what it
/// consumed from each source (received()) and acknowledges it with commit(),
/// which says "my state holds these records for good" (write it down first):
/// the sources then forget them.
///
/// Views. open(view) declares the flow among the view's members
/// (Cluster::declare(view, ...)) and the members tell each other their
/// positions: every source sends each target again the records after what
/// that target holds (a survivor: what it consumed; a restarted process:
/// what it restored, see restore()), and a restarted source's push() drops
/// the records it makes again that the target already holds. So each target
/// consumes each record once, in position order per source, whatever view
/// changes come between, provided a restarted rank restores the state it
/// committed and its input can produce its records again from the positions
/// it restores (a Kafka offset, a file offset, a generator).
///
/// The loop (one thread of each rank drives its ReplayFlow):
/// @code
///   sluice::ReplayFlow<Rec> flow(cluster, spec);   // spec.explicit_targets()
///   if (restarted) flow.restore(state.received, state.resume_at);
///   for (sluice::View v = cluster.view();; v = cluster.await_view(v.epoch).value()) {
///     if (flow.open(v) != sluice::Status::kOk) continue;   // kViewChanged
///     // push(target_rank, r) and consume() until both ends are done, saving
///     // state with received() / acknowledged() and then commit(); on
///     // kPeerLost or kViewChanged (or cluster.epoch() != flow.epoch()) go
///     // round the loop; then close() and finish() (kOk: done).
///   }
/// @endcode
///
/// What it does not do: move a lost target's records to another rank (its
/// records wait in the buffers for its next incarnation, `sluice run
/// --restarts` or `--spares`; a target that never comes back fills them and
/// its sources wait). One endpoint per rank on each side.
///
/// Thread safety: one thread uses a ReplayFlow at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/errors.h"
#include "sluice/flow.h"
#include "sluice/membership.h"

namespace sluice {

/// How a ReplayFlow keeps records.
struct ReplayOptions {
  /// Records kept per target rank that it has not acknowledged: push() to
  /// a target whose buffer is full waits for its acknowledgement.
  uint64_t capacity = uint64_t{1} << 20;
  /// False: open() sends nothing again (the records a view change caught in
  /// flight are lost). For tests that show what the buffer is for.
  bool replay = true;
};

/// A shuffle flow with a replay buffer on its sources (see the file
/// comment). The spec names the sources and targets (one endpoint per rank,
/// slot 0) and must be explicit_targets(): push() names a target rank.
template <class T>
class ReplayFlow {
 public:
  /// Throws Error(kInvalidArgument) if the spec does not route by explicit target,
  /// names a rank twice on one side or uses a slot other than 0.
  ReplayFlow(Cluster& cluster, ShuffleSpec<T> spec, ReplayOptions options = {})
      : cluster_(cluster), spec_(std::move(spec)), options_(options) {
    const FlowSpec& f = spec_.spec();
    if (f.route() != Route::kExplicit)
      throw Error(ErrorCode::kInvalidArgument,
                  "ReplayFlow '" + f.name() + "': the spec must be explicit_targets()");
    const uint32_t n = cluster_.world_size();
    is_source_.assign(n, 0);
    is_target_.assign(n, 0);
    auto mark = [&](const std::vector<Endpoint>& eps, std::vector<uint8_t>& is, const char* side) {
      for (const Endpoint& e : eps) {
        if (e.rank >= n || e.slot != 0 || is[e.rank])
          throw Error(ErrorCode::kInvalidArgument,
                      "ReplayFlow '" + f.name() + "': its " + side +
                          " must be distinct ranks of the job, slot 0");
        is[e.rank] = 1;
      }
    };
    mark(f.sources(), is_source_, "sources");
    mark(f.targets(), is_target_, "targets");
    me_ = cluster_.rank();
    pairs_.resize(n);
    received_.assign(n, 0);
    pending_ack_.assign(n, 0);
    acked_sent_.assign(n, 0);
  }

  /// A restarted process's positions, from the state it saved before it
  /// died (world_size() entries each): `received[s]`, how many records of
  /// source rank s its state holds (what received(s) said when it saved);
  /// `resume_at[t]`, the position its input produces target rank t's
  /// records from again (acknowledged(t) when it saved is always safe).
  /// Call before the first open(). Throws Error(kInvalidArgument) on a
  /// wrong size.
  void restore(std::vector<uint64_t> received, std::vector<uint64_t> resume_at) {
    const size_t n = cluster_.world_size();
    if (received.size() != n || resume_at.size() != n)
      throw Error(ErrorCode::kInvalidArgument,
                  "ReplayFlow::restore: one position per rank of the job");
    received_ = std::move(received);
    for (size_t t = 0; t < n; ++t) {
      pairs_[t].first = pairs_[t].sent = resume_at[t];
      pairs_[t].kept.clear();
    }
    for (size_t s = 0; s < n; ++s) acked_sent_[s] = pending_ack_[s] = received_[s];
  }

  /// Declares the flow among the members of `view` and works out what each
  /// member target misses; the calls that follow (push, flush, close,
  /// consume) send that first. kOk: push() and consume() work in this view.
  /// kViewChanged: open the newer view. kPeerLost: a member was lost while
  /// the flow was set up (open the next view). kInvalid: a target holds
  /// fewer records than it acknowledged (it restored older state than it
  /// committed), so they are gone; error() names the pair.
  Status open(const View& view, Deadline deadline = kForever) {
    drop_handles();
    view_ = view;
    open_ = false;
    const uint32_t n = cluster_.world_size();
    // Every member's positions, as a target: what it holds of each source
    // and what it committed of it.
    std::string mine(kFields * n * sizeof(uint64_t), '\0');
    for (uint32_t r = 0; r < n; ++r) {
      const uint64_t v[kFields] = {received_[r], pending_ack_[r]};
      std::memcpy(mine.data() + kFields * r * sizeof(uint64_t), v, sizeof v);
    }
    auto gathered = cluster_.allgather(view, spec_.spec().name() + "/positions", mine, deadline);
    if (!gathered) return fail(gathered.status(), "the positions' exchange");
    auto at = [&](size_t i, uint32_t r, Field k) {
      uint64_t v;
      if (gathered->values[i].size() != mine.size()) return uint64_t{0};
      std::memcpy(&v, gathered->values[i].data() + (kFields * r + k) * sizeof(uint64_t), sizeof v);
      return v;
    };
    for (size_t i = 0; i < gathered->ranks.size(); ++i) {
      const uint32_t peer = gathered->ranks[i];
      if (is_target_[peer] && is_source_[me_]) {
        // What `peer` holds of mine (this rank too, if it is a target of
        // its own records): send it again from there.
        Pair& p = pairs_[peer];
        const uint64_t holds = at(i, me_, kHolds);
        trim(p, std::min(at(i, me_, kCommitted), p.sent));  // an acknowledgement lost in flight
        if (holds < p.first)
          return fail(Status::kInvalid, "target rank " + std::to_string(peer) + " holds " +
                                            std::to_string(holds) + " records of rank " +
                                            std::to_string(me_) + " but acknowledged " +
                                            std::to_string(p.first) + ": those between are lost");
        p.held = holds;
        p.resend = options_.replay ? std::min(holds, p.sent) : p.sent;
      }
    }
    // The flow and its acknowledgements' flow (targets to sources).
    auto data = cluster_.declare(view, spec_);
    if (!data) return fail(data.status(), "declaring the flow");
    auto acks = cluster_.declare(view, ack_spec());
    if (!acks) return fail(acks.status(), "declaring its acknowledgements");
    for (uint32_t r = 0; r < n; ++r) acked_sent_[r] = pending_ack_[r];  // its sources know them
    data_flow_ = std::move(*data);
    ack_flow_ = std::move(*acks);
    target_index_.assign(n, kNone);
    source_rank_.clear();
    ack_source_rank_.clear();
    for (const Endpoint& e : spec_.spec().targets())
      if (view.contains(e.rank)) {
        target_index_[e.rank] = static_cast<uint32_t>(ack_source_rank_.size());
        ack_source_rank_.push_back(e.rank);
      }
    for (const Endpoint& e : spec_.spec().sources())
      if (view.contains(e.rank)) source_rank_.push_back(e.rank);
    if (is_source_[me_]) {
      source_ = cluster_.source(spec_, 0);
      ack_target_ = cluster_.target(ack_spec(), 0);
    }
    if (is_target_[me_]) {
      target_ = cluster_.target(spec_, 0);
      ack_source_ = cluster_.source(ack_spec(), 0);
    }
    open_ = true;
    data_ended_ = false;
    acks_closed_ = false;
    source_closed_ = false;
    resend_pending_ = true;
    // What each member target misses goes first, from push(), flush(),
    // close() and consume() (resend()): never from here, where every member
    // pushes and none consumes yet.
    return last_ = Status::kOk;
  }

  /// The epoch of the view open() last opened the flow in.
  uint64_t epoch() const { return view_.epoch; }

  /// Sends `r` to `target_rank` and keeps it until that target acknowledges
  /// it. A target that is not a member now (lost, not back yet) gets it at
  /// its return: it is only kept. A full buffer waits for acknowledgements
  /// up to `deadline` (kTimeout: nothing was pushed, call again).
  /// kPeerLost / kViewChanged: open the next view (nothing was pushed).
  [[nodiscard]] Status push(uint32_t target_rank, const T& r, Deadline deadline = kForever) {
    if (target_rank >= pairs_.size() || !is_target_[target_rank] || !open_ || closed_)
        [[unlikely]] {
      return refuse_push(target_rank);
    }
    if (resend_pending_) [[unlikely]] {
      if (Status s = resend(deadline); s != Status::kOk) return last_ = s;
    }
    Pair& p = pairs_[target_rank];
    if (p.sent < p.held) [[unlikely]] {  // made again after a restart: the target holds it
      trim(p, p.sent);
      p.first = p.resend = ++p.sent;
      return last_ = Status::kOk;
    }
    while (p.sent - p.first >= options_.capacity) [[unlikely]] {
        if (Status s = read_acks(deadline); s != Status::kOk) return last_ = s;
      }
    const uint32_t index = target_index_[target_rank];
    if (index != kNone) [[likely]] {
      if (Status s = source_.push_to(index, r, deadline); s != Status::kOk) [[unlikely]]
        return fail(s, source_.error());
    }
    p.kept.push_back(r);
    ++p.sent;
    if (index != kNone) p.resend = p.sent;  // it went now
    return last_ = Status::kOk;
  }

  /// Publishes what push() wrote and reads the acknowledgements that came.
  [[nodiscard]] Status flush(Deadline deadline = kForever) {
    if (!open_ || !source_) return last_ = Status::kOk;
    if (Status s = resend(deadline); s != Status::kOk) return last_ = s;
    if (Status s = source_.flush(deadline); s != Status::kOk) return fail(s, source_.error());
    return last_ = drain_acks();
  }

  /// This rank's records are all pushed: the flow's end, in this view and
  /// every later one (after the records a new member misses).
  [[nodiscard]] Status close(Deadline deadline = kForever) {
    closed_ = true;
    if (!open_ || !source_) return last_ = Status::kOk;
    if (!source_closed_) resend_pending_ = true;
    return last_ = resend(deadline);
  }

  /// The next batch of records, each once over every view. kEndOfFlow once every source
  /// member closed; otherwise as Target::consume.
  Result<std::span<const T>> consume(Deadline deadline = kForever) {
    if (!open_ || !target_) return last_ = Status::kInvalid;
    (void)send_acks();
    // A rank that is a source too may owe the others records they wait for.
    if (source_ && resend_pending_ && resend(Deadline::min()) == Status::kOk)
      (void)source_.flush(Deadline::min());
    for (;;) {
      auto batch = target_.consume(deadline);
      if (!batch) {
        if (batch.status() == Status::kEndOfFlow)
          data_ended_ = true;
        else
          (void)fail(batch.status(), target_.error());
        return last_ = batch.status();
      }
      const uint32_t s = source_rank_[target_.last_source()];
      received_[s] += batch->size();
      last_source_rank_ = s;
      if (!batch->empty()) return *batch;
    }
  }

  /// The source rank of the batch consume() returned last.
  uint32_t last_source_rank() const { return last_source_rank_; }

  /// Acknowledges every record consumed so far (received()): call once the
  /// state they made is saved for good. Never waits: what cannot leave now
  /// leaves with the next consume(), commit() or finish().
  Status commit() {
    for (uint32_t s = 0; s < received_.size(); ++s)
      if (is_source_[s]) pending_ack_[s] = received_[s];
    if (is_source_[me_]) {  // my own records need no message
      Pair& p = pairs_[me_];
      trim(p, std::min(received_[me_], p.sent));
    }
    if (!open_ || !ack_source_) return last_ = Status::kOk;
    return last_ = send_acks();
  }

  /// Ends this rank's part: after close() and consume()'s kEndOfFlow (and a
  /// last commit()), waits until every target acknowledged every record of
  /// this rank and every member got this far (a view-scoped barrier). kOk:
  /// the flow is done on every member. kViewChanged / kPeerLost: open the
  /// next view and go on (a restarted member may need records again).
  [[nodiscard]] Status finish(Deadline deadline = kForever) {
    if (!open_) return last_ = Status::kInvalid;
    if (ack_source_ && !acks_closed_) {
      if (!data_ended_) return fail(Status::kInvalid, "finish() before consume() reached the end");
      for (uint32_t s = 0; s < pending_ack_.size(); ++s)
        if (Status st = send_ack(s, deadline); st != Status::kOk) return last_ = st;
      if (Status st = ack_source_.close(deadline); st != Status::kOk)
        return fail(st, ack_source_.error());
      acks_closed_ = true;
    }
    if (ack_target_) {
      if (!closed_) return fail(Status::kInvalid, "finish() before close()");
      if (is_target_[me_] && pairs_[me_].first < pairs_[me_].sent)
        return fail(Status::kInvalid,
                    "finish() before commit() acknowledged this rank's own records");
      auto unacked = [&] {
        for (uint32_t t = 0; t < pairs_.size(); ++t)
          if (is_target_[t] && t != me_ && pairs_[t].first < pairs_[t].sent) return true;
        return false;
      };
      while (unacked())
        if (Status s = read_acks(deadline); s != Status::kOk) return last_ = s;
    }
    Status s = cluster_.barrier(view_, spec_.spec().name() + "/finished", deadline);
    return s == Status::kOk ? last_ = s : fail(s, "the closing barrier");
  }

  /// Records of source rank `source` consumed here, over every view.
  uint64_t received(uint32_t source) const { return received_.at(source); }
  /// Records pushed to target rank `target`, over every view.
  uint64_t sent(uint32_t target) const { return pairs_.at(target).sent; }
  /// Records target rank `target` acknowledged, as far as this rank heard.
  uint64_t acknowledged(uint32_t target) const { return pairs_.at(target).first; }
  /// Records kept for target rank `target` (sent, not acknowledged).
  uint64_t buffered(uint32_t target) const {
    return pairs_.at(target).sent - pairs_.at(target).first;
  }
  /// Why the last call failed.
  const std::string& error() const { return error_; }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  // The positions open() exchanges, per rank r of the job: what this rank
  // holds of source r's records and what it committed of them.
  enum Field : uint32_t { kHolds, kCommitted, kFields };
  struct Ack {
    uint64_t position;
  };
  // Records in arrival order, in one array used as a ring (a power of two
  // of slots) that doubles until it holds `capacity`: no allocation once a
  // pair ran at its peak.
  class Kept {
   public:
    void push_back(const T& r) {
      if (count_ == slots_) [[unlikely]]
        grow();
      std::memcpy(slot((head_ + count_++) & (slots_ - 1)), &r, sizeof(T));
    }
    void pop_front() {
      head_ = (head_ + 1) & (slots_ - 1);
      --count_;
    }
    const T& operator[](uint64_t i) const {
      return *std::launder(reinterpret_cast<const T*>(slot((head_ + i) & (slots_ - 1))));
    }
    bool empty() const { return count_ == 0; }
    void clear() { head_ = count_ = 0; }

   private:
    std::byte* slot(size_t i) const { return buf_.get() + i * sizeof(T); }
    void grow() {
      const size_t slots = std::max<size_t>(64, 2 * slots_);
      static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
      std::unique_ptr<std::byte[]> bigger(new std::byte[slots * sizeof(T)]);
      for (size_t i = 0; i < count_; ++i)
        std::memcpy(bigger.get() + i * sizeof(T), slot((head_ + i) & (slots_ - 1)), sizeof(T));
      buf_ = std::move(bigger);
      slots_ = slots;
      head_ = 0;
    }
    std::unique_ptr<std::byte[]> buf_;
    size_t slots_ = 0, head_ = 0, count_ = 0;
  };
  // Per target rank: the records kept for it, positions [first, sent).
  struct Pair {
    uint64_t first = 0;   // acknowledged: kept[0] has this position
    uint64_t sent = 0;    // pushed
    uint64_t resend = 0;  // open(): resend from here
    uint64_t held = 0;    // what the target held at open(): not sent again
    Kept kept;
  };

  ShuffleSpec<Ack> ack_spec() const {
    std::vector<Endpoint> from, to;
    for (const Endpoint& e : spec_.spec().targets()) from.push_back(e);
    for (const Endpoint& e : spec_.spec().sources()) to.push_back(e);
    return shuffle<Ack>(spec_.spec().name() + "/acks").sources(from).targets(to).explicit_targets();
  }

  Status fail(Status s, const std::string& why) {
    error_ = "ReplayFlow '" + spec_.spec().name() + "' (epoch " + std::to_string(view_.epoch) +
             "): " + why;
    return last_ = s;
  }

  void trim(Pair& p, uint64_t upto) {
    while (p.first < upto && !p.kept.empty()) {
      p.kept.pop_front();
      ++p.first;
    }
  }

  // Pushes what this view's member targets miss (from open()), in position
  // order, then the end if close() was called. kTimeout / kWouldBlock at
  // the deadline: the rest goes with the next call.
  Status resend(Deadline deadline) {
    if (!source_ || !resend_pending_) return Status::kOk;
    for (uint32_t t = 0; t < pairs_.size(); ++t) {
      Pair& p = pairs_[t];
      if (target_index_[t] == kNone) continue;
      for (; p.resend < p.sent; ++p.resend) {
        const T& r = p.kept[std::max(p.resend, p.first) - p.first];
        if (Status s = source_.push_to(target_index_[t], r, deadline); s != Status::kOk)
          return s == Status::kTimeout || s == Status::kWouldBlock ? s : fail(s, source_.error());
      }
    }
    if (closed_ && !source_closed_) {
      if (Status s = source_.close(deadline); s != Status::kOk)
        return s == Status::kTimeout || s == Status::kWouldBlock ? s : fail(s, source_.error());
      source_closed_ = true;
    }
    resend_pending_ = false;
    return Status::kOk;
  }
  Status refuse_push(uint32_t target_rank) {
    if (!open_ || closed_) return last_ = closed_ ? Status::kClosed : Status::kInvalid;
    return fail(Status::kInvalid, "push to rank " + std::to_string(target_rank) +
                                      ", which is not a target of the flow");
  }

  // Reads the acknowledgements that came, without waiting.
  Status drain_acks() {
    if (!ack_target_) return Status::kOk;
    for (;;) {
      auto batch = ack_target_.try_consume();
      if (!batch) {
        const Status s = batch.status();
        return s == Status::kWouldBlock || s == Status::kEndOfFlow ? Status::kOk
                                                                   : fail(s, ack_target_.error());
      }
      apply_acks(*batch);
    }
  }
  // Waits for acknowledgements up to `deadline`.
  Status read_acks(Deadline deadline) {
    if (!open_ || !ack_target_) return fail(Status::kInvalid, "no view open");
    if (Status s = source_.flush(deadline); s != Status::kOk) return fail(s, source_.error());
    auto batch = ack_target_.consume(deadline);
    if (!batch) {
      if (batch.status() == Status::kEndOfFlow)
        return fail(Status::kPeerLost, "every target ended without acknowledging all records");
      return fail(batch.status(), ack_target_.error());
    }
    apply_acks(*batch);
    return Status::kOk;
  }
  void apply_acks(std::span<const Ack> acks) {
    const uint32_t t = ack_source_rank_[ack_target_.last_source()];
    for (const Ack& a : acks) trim(pairs_[t], std::min(a.position, pairs_[t].sent));
  }

  // Sends the acknowledgements not sent yet, without waiting.
  Status send_acks() {
    if (!ack_source_) return Status::kOk;
    bool pushed = false;
    for (uint32_t s = 0; s < pending_ack_.size(); ++s) {
      if (pending_ack_[s] == acked_sent_[s] || s == me_) continue;
      Status st = send_ack(s, Deadline::min());
      if (st == Status::kTimeout || st == Status::kWouldBlock) break;
      if (st != Status::kOk) return st;
      pushed = true;
    }
    if (pushed) {
      Status st = ack_source_.flush(Deadline::min());
      if (st != Status::kOk && st != Status::kTimeout && st != Status::kWouldBlock)
        return fail(st, ack_source_.error());
    }
    return Status::kOk;
  }
  Status send_ack(uint32_t s, Deadline deadline) {
    if (pending_ack_[s] == acked_sent_[s] || s == me_ || ack_index_of(s) == kNone)
      return Status::kOk;
    Status st = ack_source_.push_to(ack_index_of(s), Ack{pending_ack_[s]}, deadline);
    if (st == Status::kOk)
      acked_sent_[s] = pending_ack_[s];
    else if (st != Status::kTimeout && st != Status::kWouldBlock)
      return fail(st, ack_source_.error());
    return st;
  }
  uint32_t ack_index_of(uint32_t source_rank) const {
    for (uint32_t i = 0; i < source_rank_.size(); ++i)
      if (source_rank_[i] == source_rank) return i;
    return kNone;
  }

  void drop_handles() {
    if (source_) source_.abort();
    if (ack_source_) ack_source_.abort();
    source_ = {};
    target_ = {};
    ack_source_ = {};
    ack_target_ = {};
    data_flow_ = {};
    ack_flow_ = {};
    open_ = false;
  }

  Cluster& cluster_;
  ShuffleSpec<T> spec_;
  ReplayOptions options_;
  uint32_t me_ = 0;
  std::vector<uint8_t> is_source_, is_target_;
  std::vector<Pair> pairs_;                // [target rank]
  std::vector<uint64_t> received_;         // [source rank]
  std::vector<uint64_t> pending_ack_;      // [source rank]: committed, to acknowledge
  std::vector<uint64_t> acked_sent_;       // [source rank]: acknowledged as far as this
  std::vector<uint32_t> target_index_;     // [rank]: index among this view's targets
  std::vector<uint32_t> source_rank_;      // [source index in this view]: rank
  std::vector<uint32_t> ack_source_rank_;  // [ack source index]: rank (= target ranks in view)
  View view_;
  bool open_ = false;
  bool closed_ = false;
  bool source_closed_ = false;
  bool resend_pending_ = false;  // resend() has records (or the end) to send
  bool data_ended_ = false;
  bool acks_closed_ = false;
  uint32_t last_source_rank_ = 0;
  DeclaredFlow data_flow_, ack_flow_;
  Source<T> source_;
  Target<T> target_;
  Source<Ack> ack_source_;
  Target<Ack> ack_target_;
  Status last_ = Status::kOk;
  std::string error_;
};

}  // namespace sluice
