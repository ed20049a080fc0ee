/// @file
/// sluice/worker.h: one progress loop for a thread that sends and receives.
///
/// The worker threads of a stream engine, a replicated store or a query
/// engine are sources and targets at once, and must keep consuming while one
/// of their outputs is back-pressured (the peer they wait for may be waiting
/// for them). A Worker holds a thread's targets with a handler each, and
/// pushes and closes its sources: whenever a push or close would wait,
/// arriving batches are delivered to their handlers instead, and when
/// nothing at all can move, the thread parks (no CPU) until any of them can.
///
/// @code
///   sluice::Worker w;
///   w.add(cluster.target(spec, slot), [&](std::span<const Order> batch) {
///     for (const Order& o : batch) total += o.amount;
///   });
///   auto& out = w.add_output(cluster.source(spec, slot));  // lives as long as w
///   for (const Order& o : orders)
///     if (w.push(out, o) != sluice::Status::kOk) { ... out.error() ... }
///   if (w.close(out) != sluice::Status::kOk) { ... }
///   if (w.run() != sluice::Status::kEndOfFlow) { ... w.failure()->error ... }
/// @endcode
///
/// Combiner flows take part the same way: w.add(cluster.target(combiner_spec,
/// slot), on_result) merges partials as they arrive and hands the final
/// groups to on_result(CombinerResult&&) at end of flow, and w.push(src, r) /
/// w.close(src) take a Source<Combined<T>>.
///
/// A worker that also has local work polls, works, and idles (the worker loop
/// of the shuffle-middleware paper): idle(n) with the work done this round
/// resets the back-off when n > 0, and otherwise spins, yields, then parks
/// until an input has data or a slice passes (idle(n, wake_by): or its own
/// next timer is due).
///
/// @code
///   while (!w.done()) w.idle(w.poll() + do_local_work());
/// @endcode
///
/// Progress: poll() hands at most one batch per input to its handler, so one
/// busy flow cannot starve the others. An input that fails (kPeerLost, ...)
/// is destroyed at once (its live sources elsewhere learnt it is gone when
/// it failed, rather than wait for credit it can no longer return; a
/// replicate source goes on without it); run() then reports the failure. A handler may push
/// (through the same worker) into any flow, even one the worker's own inputs are fed by; while a
/// handler runs, its input is not polled again (its batch stays valid), the other inputs are.
///
/// Parking: a parked worker sleeps in one system call on everything it
/// waits for: the futex words of its shm endpoints (one futex_waitv), or the
/// completion queues of its ofi endpoints (one poll(2) on their wait fds).
/// With shm and ofi endpoints mixed (a futex cannot wake a poll), or on a
/// provider without completion-queue wait fds, it sleeps in slices of 1 ms.
/// Deadlines and peer failure are honoured as in the blocking calls: a parked
/// worker looks at its peers' liveness at least every 50 ms.
///
/// Background progress: over ofi, what a source handed to the provider
/// (close()'s END above all) may move only while its endpoint is driven.
/// A worker that pushed or closed an ofi source keeps driving it in poll()
/// and wakes for it when parked, until its last transfers completed and its
/// targets confirmed the end, or the source is destroyed; run() and done()
/// wait for the last transfers of the sources closed through it, so that a
/// thread may go on to a barrier (or anything that does not drive the
/// worker) right after run() without holding back what its peers wait for.
///
/// Giving up: a thread that stops driving its worker (after a failure, say)
/// should destroy it, and abort() its sources, before it waits on anything
/// else: until then its peers may wait for it to consume.
///
/// Thread safety: a Worker and everything added to it belong to one thread at
/// a time (it may be moved to another). Ownership: it owns the targets added
/// to it and the sources given to add_output() (destroyed with it, targets
/// first, before their Cluster), so a source cannot end before the loop that
/// drives its last transfers; a source the caller keeps must outlive the
/// calls that name it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/combiner.h"
#include "sluice/detail/worker_inputs.h"
#include "sluice/export.h"
#include "sluice/flow.h"
#include "sluice/membership.h"

SLUICE_API_BEGIN
namespace sluice {

/// How a worker with nothing to do waits: `spin` idle rounds busy-waiting,
/// then `yields` rounds of sched_yield(), then parking. Spinning answers in
/// microseconds but costs a CPU; on a machine with fewer cores than busy
/// threads, set spin to 0.
struct IdleStrategy {
  uint32_t spin = 200;   ///< idle rounds that busy-wait
  uint32_t yields = 64;  ///< idle rounds after those that call sched_yield()
};

/// Where a batch came from: the index of its source in the flow's sources(),
/// and on ordered replicate flows its sequence number.
struct BatchInfo {
  uint32_t source = 0;    ///< index into the flow's sources() (Target::last_source)
  uint64_t sequence = 0;  ///< ordered replicate flows: the sequence number (Target::last_sequence)
};

class Cluster;

/// Why a Worker's input failed (Worker::failure).
struct WorkerFailure {
  uint32_t input = 0;            ///< the input, as add() numbered it (Worker::InputId)
  std::string flow;              ///< its flow's name
  uint32_t slot = 0;             ///< its endpoint's slot on this rank
  Status status = Status::kOk;   ///< kPeerLost, kInvalid, ...: how it ended
  std::string error;             ///< what happened, as the target said it
  std::optional<LostPeer> peer;  ///< after kPeerLost: the rank it is about, where known
};

/// One thread's progress loop over its targets and sources; see the top of
/// this file. Move-only; one owning thread.
class Worker {
 public:
  /// Index of an input, in the order add() was called.
  using InputId = uint32_t;

  /// A worker with no inputs, that idles as `idle` says.
  explicit Worker(IdleStrategy idle = {});
  ~Worker();
  /// Moves the inputs and everything the worker drives (to another thread,
  /// say); the moved-from Worker may only be destroyed or assigned to.
  ///@{
  Worker(Worker&&) noexcept;
  Worker& operator=(Worker&&) noexcept;
  ///@}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Adds a target; poll() hands its batches to `on_batch`, called as
  /// on_batch(std::span<const T>) or on_batch(std::span<const T>, const BatchInfo&)
  /// (a Target<Bytes>'s with a RecordBatch). The batch is valid during the call.
  template <class T, class F>
  InputId add(Target<T> target, F on_batch) {
    return add(std::move(target), std::move(on_batch), nullptr);
  }
  /// Ordered replicate flows: `on_gap(uint64_t sequence)` is told of every
  /// sequence number that never arrived (see Target::consume), and delivery
  /// goes on. Without it (or with nullptr), run() returns kGap.
  template <class T, class F, class G>
  InputId add(Target<T> target, F on_batch, G on_gap) {
    detail::TargetCore* core = target.core_.get();
    return add_input(core, std::make_unique<detail::TypedInput<BatchInfo, Target<T>, F, G>>(
                               std::move(target), std::move(on_batch), std::move(on_gap)));
  }

  /// Combiner flows (combiner.h): poll() merges the partials as they arrive,
  /// one batch at a time, and once every source has closed hands the final
  /// groups to `on_result`, called once as on_result(CombinerResult&&) (a
  /// handler taking a CombinerResult by value or by const reference works
  /// too). A failure (kPeerLost, kInvalid from partials of another layout)
  /// ends the input without a result; run() reports it.
  template <class T, class F>
  InputId add(Target<Combined<T>> target, F on_result) {
    static_assert(std::is_invocable_v<F&, CombinerResult&&>,
                  "a combiner target's handler is called as on_result(CombinerResult&&)");
    detail::CombinerTargetCore* combiner = target.core_.get();
    detail::TargetCore* core = combiner != nullptr ? combiner->flow_target() : nullptr;
    return add_input(core, std::make_unique<detail::CombinerInput<T, F>>(
                               std::move(target), combiner, std::move(on_result)));
  }

  /// Hands at most one ready batch per input to its handler, at most `limit`
  /// in all, and notes inputs that ended or failed. Returns the batches
  /// handed out plus the inputs that ended (the work done). Never waits.
  size_t poll(size_t limit = std::numeric_limits<size_t>::max());
  /// Back-off between rounds of a loop: `work` is what the round did (0: it
  /// found nothing). Resets on work; otherwise spins, yields, then parks
  /// until an input may have data or a park slice passes (50 ms).
  void idle(size_t work);
  /// The same, but a park also ends at `wake_by`: a loop with timers of its
  /// own (a heartbeat, an election timeout) says when the next is due, and
  /// runs it then rather than up to a park slice late.
  void idle(size_t work, Deadline wake_by);
  /// Polls and idles until every input has ended, and every ofi source
  /// closed through this worker has handed its last segments over (see
  /// Background progress above). Returns kEndOfFlow then;
  /// or, at once, the first failure of an input (kPeerLost, ...: reported()
  /// says which, error(id) why; the others go on if run() is called again), kGap from an ordered
  /// input without an on_gap handler (gap(reported()) is the missing number; call run() again to go
  /// on), or kTimeout at the deadline (call again).
  Status run(Deadline deadline = kForever);
  /// The input whose failure or gap run() returned last.
  InputId reported() const { return reported_; }
  /// The failure run() reported last, or else the first input that failed
  /// (any status but kOk and kEndOfFlow); nullopt while none has.
  std::optional<WorkerFailure> failure() const;

  /// Takes `source` (a Source<T>: T a record type, Bytes or Combined<R>) into the
  /// worker, which owns it from now on and destroys it with itself, after
  /// its inputs; returns it, valid as long as the worker, to push and close
  /// through the worker. Throws Error(kInvalidArgument) for an empty source.
  template <class S>
  S& add_output(S source) {
    static_assert(detail::is_source<S>, "add_output takes a Source<T> by value");
    if (!source) empty_output();
    auto out = std::make_unique<detail::OwnedOutput<S>>(std::move(source));
    S& s = out->source;
    outputs_.push_back(std::move(out));
    return s;
  }

  /// Membership views (membership.h): from now on, poll() (and so run(), and
  /// push() and close() while they wait) calls `on_view(const View&)` with
  /// the new view whenever `cluster`'s view moved past the last one this
  /// worker reported (several changes between two polls: once, with the
  /// latest). A parked worker notices within its park slice (50 ms). The
  /// handler may call the Cluster (agree(), declare(), ...) and this worker;
  /// while it runs, it is not called again. `cluster` must outlive the
  /// worker or the next on_view(); a second call replaces the first.
  template <class F>
  void on_view(const Cluster& cluster, F on_view) {
    static_assert(std::is_invocable_v<F&, const View&>,
                  "on_view is called as on_view(const View&)");
    watch_views(cluster, std::function<void(const View&)>(std::move(on_view)));
  }

  /// True once every input has ended (kEndOfFlow or a failure) and no ofi
  /// source closed through this worker is still handing its last segments
  /// over.
  bool done() const;
  /// How many inputs add() added (ended ones included).
  size_t num_inputs() const { return inputs_.size(); }
  /// kOk while input `id` is open; kEndOfFlow or the failure that ended it.
  Status status(InputId id) const { return inputs_[id]->status; }
  /// Why input `id` failed; empty while it is fine.
  const std::string& error(InputId id) const { return inputs_[id]->error(); }
  /// After kPeerLost on input `id`: the rank (and host) it is about, where
  /// one is known (combiner inputs too).
  std::optional<LostPeer> lost_peer(InputId id) const { return inputs_[id]->lost_peer(); }
  /// After run() returned kGap for input `id`: the sequence number that never
  /// arrived (as Target::gap).
  uint64_t gap(InputId id) const { return inputs_[id]->gap(); }

  /// Source::push (or Source<Bytes>::push with a span of bytes, or
  /// Source<Combined<T>>::push), delivering the inputs while the record's ring
  /// is full (a combiner source's partials wait for credit). Same results as
  /// the source's push: kOk, kTimeout at the deadline (also while the inputs
  /// keep delivering), kPeerLost, kClosed, kInvalid; details in s.error().
  template <class S, class R>
  requires(!detail::is_record_run<S, R>) [[nodiscard]] Status
      push(S& s, const R& r, Deadline deadline = kForever) {
    Status st = s.try_push(r);
    if (st != Status::kWouldBlock) [[likely]] {
      note(flow_core(s));
      return st;
    }
    return wait_for(
        flow_core(s), deadline, [&] { return s.try_push(r); }, [&] { return s.push(r, deadline); });
  }
  /// Source::push(span): a run of records (a std::span, std::vector, array,
  /// ... of T), delivering the inputs while a ring is full. Records already
  /// pushed are never pushed again on a retry: s.last_pushed() says how many
  /// of the run went when the status is not kOk.
  template <class T, class Run>
  requires detail::is_record_run<Source<T>, Run>
  [[nodiscard]] Status push(Source<T>& s, const Run& run, Deadline deadline = kForever) {
    const std::span<const T> all(run);
    return push_rest(s, deadline, [&](size_t done, Deadline d, bool try_only) {
      return try_only ? s.try_push(all.subspan(done)) : s.push(all.subspan(done), d);
    });
  }
  /// Source::push_to(targets, records) the same way: a run whose records'
  /// targets are named.
  template <class T, class Targets, class Run>
  requires detail::is_record_run<Source<T>, Run> &&
      std::is_convertible_v<const Targets&, std::span<const uint32_t>>
  [[nodiscard]] Status push_to(Source<T>& s, const Targets& targets, const Run& run,
                               Deadline deadline = kForever) {
    const std::span<const uint32_t> to(targets);
    const std::span<const T> all(run);
    // Spans of different lengths fail on the first attempt (kInvalid, nothing pushed).
    return push_rest(s, deadline, [&](size_t done, Deadline d, bool try_only) {
      return try_only ? s.try_push_to(to.subspan(done), all.subspan(done))
                      : s.push_to(to.subspan(done), all.subspan(done), d);
    });
  }
  /// Source::push_to(target, r) (T may be Bytes), delivering the inputs
  /// while that target's ring is full. Same results as the source's push_to.
  template <class S, class R>
  [[nodiscard]] Status push_to(S& s, uint32_t target, const R& r, Deadline deadline = kForever) {
    Status st = s.try_push_to(target, r);
    if (st != Status::kWouldBlock) [[likely]] {
      note(s.core_.get());
      return st;
    }
    return wait_for(
        s.core_.get(), deadline, [&] { return s.try_push_to(target, r); },
        [&] { return s.push_to(target, r, deadline); });
  }
  /// Source::flush and Source::close (and a combiner source's), delivering
  /// the inputs while they wait. close()'s rules hold: after kTimeout, call
  /// again.
  ///@{
  template <class S>
  [[nodiscard]] Status flush(S& s, Deadline deadline = kForever) {
    return wait_for(
        flow_core(s), deadline, [&] { return s.last_ = s.core_->flush(Deadline::min()); },
        [&] { return s.flush(deadline); });
  }
  template <class S>
  [[nodiscard]] Status close(S& s, Deadline deadline = kForever) {
    return wait_for(
        flow_core(s), deadline, [&] { return s.last_ = s.core_->close(Deadline::min()); },
        [&] { return s.close(deadline); });
  }
  ///@}

 private:
  /// The flow source under `s` (a combiner source's partials go through one).
  template <class S>
  static detail::SourceCore* flow_core(S& s) {
    if constexpr (requires { s.core_->flow_source(); }) {
      return s.core_->flow_source();
    } else {
      return s.core_.get();
    }
  }
  /// The runs' retry loop: `attempt(done, deadline, try_only)` pushes the
  /// run from record `done` on; each record goes once, and last_pushed()
  /// ends up counting the whole run.
  template <class T, class Attempt>
  Status push_rest(Source<T>& s, Deadline deadline, Attempt&& attempt) {
    size_t done = 0;
    auto step = [&](bool try_only, Deadline d) {
      const Status st = attempt(done, d, try_only);
      done += s.last_pushed();
      s.pushed_ = done;
      return st;
    };
    const Status st = step(true, kForever);
    if (st != Status::kWouldBlock) [[likely]] {
      note(s.core_.get());
      return st;
    }
    return wait_for(
        s.core_.get(), deadline, [&] { return step(true, kForever); },
        [&] { return step(false, deadline); });
  }
  /// REQUIRES: `core` is the core of the target `input` owns (not null).
  InputId add_input(detail::TargetCore* core, std::unique_ptr<detail::WorkerInput> input);
  [[noreturn]] static void empty_output();
  void watch_views(const Cluster& cluster, std::function<void(const View&)> on_view);
  /// poll()'s test for a new view; true if it called the handler.
  bool check_view();
  /// Retries `attempt` (which never waits) until it stops reporting
  /// back-pressure, delivering the inputs and backing off meanwhile; at the
  /// deadline, `last` (the blocking call with that deadline) gives the answer.
  template <class Attempt, class Last>
  Status wait_for(detail::SourceCore* core, Deadline deadline, Attempt&& attempt, Last&& last) {
    drive(core);
    waiting_.push_back(core);
    // Counted as the source's credit wait (sluice top, Prometheus) once the
    // first attempt found no room, however the wait ends.
    struct Pop {
      std::vector<detail::SourceCore*>* v;
      detail::SourceCore* core;
      Clock::time_point start{};
      ~Pop() {
        v->pop_back();
        if (start != Clock::time_point{}) core->count_wait(Clock::now() - start);
      }
    } pop{&waiting_, core};
    for (uint32_t round = 0;; ++round) {
      const size_t work = poll();
      const Status st = attempt();
      if (st != Status::kWouldBlock && st != Status::kTimeout) return st;
      if (pop.start == Clock::time_point{}) pop.start = Clock::now();
      // The deadline holds while inputs keep delivering too.
      if (deadline != kForever && Clock::now() >= deadline) return last();
      if (work != 0) {
        round = 0;
        continue;
      }
      if (back_off(round, deadline)) round = 0;
    }
  }
  /// From now on, poll() drives `core` in the background, and park() wakes
  /// for its completions, until nothing of it is left to move (ofi sources
  /// only; see SourceCore::drive).
  void drive(detail::SourceCore* core);
  /// drive(core) unless done already: one test per push on the fast path.
  void note(detail::SourceCore* core) {
    if (core->drivable_ && core->driver_ != driven_.get()) [[unlikely]]
      drive(core);
  }
  /// One idle round: spin, yield or park, by how many came before it.
  /// True if it did work (a park's last look delivered batches).
  bool back_off(uint32_t round, Deadline deadline);
  /// Parks until something this worker waits on may have changed.
  bool park(Deadline deadline);

  IdleStrategy idle_;
  std::vector<std::unique_ptr<detail::WorkerInput>> inputs_;
  std::vector<std::unique_ptr<detail::WorkerOutput>> outputs_;  ///< add_output()'s
  std::vector<detail::SourceCore*> waiting_;  ///< sources whose push/close waits (handlers nest)
  std::unique_ptr<detail::WaitSet> set_;
  std::unique_ptr<detail::DrivenSources> driven_;
  size_t active_ = 0;
  uint32_t rounds_ = 0;   ///< idle() rounds without work
  int64_t problem_ = -1;  ///< an input whose failure or gap run() has yet to report
  InputId reported_ = 0;
  bool parking_ = false;
  struct ViewWatch {
    const Cluster* cluster = nullptr;
    std::function<void(const View&)> handler;
    uint64_t seen = 0;  ///< the epoch last reported (or current at on_view())
    bool busy = false;  ///< the handler runs
  };
  ViewWatch views_;
};

}  // namespace sluice
SLUICE_API_END
