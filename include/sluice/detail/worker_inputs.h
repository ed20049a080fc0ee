// sluice/detail/worker_inputs.h: the inputs of a Worker (worker.h): each
// target added to a worker, held with its handlers behind one interface the
// worker polls. Internal: applications use Worker::add and never name
// anything here. Included by worker.h.
//
// Thread safety: an input belongs to its Worker and is called only from the
// thread that drives it. Ownership: an input owns its target (until
// release()) and its handlers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/combiner.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow.h"

SLUICE_API_BEGIN
namespace sluice {
namespace detail {

// One target of a worker with its handler.
class WorkerInput {
 public:
  virtual ~WorkerInput() = default;
  // Takes one ready batch and hands it to the handler: kOk if it did,
  // kWouldBlock if nothing was ready, else what the target reported.
  virtual Status poll_one() = 0;
  virtual const std::string& error() const = 0;
  virtual std::optional<LostPeer> lost_peer() const { return std::nullopt; }
  virtual uint64_t gap() const = 0;
  // Destroys the target after it failed (keeping its error): its live
  // sources learn at once that it is gone, instead of waiting for credit
  // nobody will return.
  virtual void release() = 0;
  // Called with the missing sequence number after kGap; without one, the
  // gap is reported by Worker::run().
  virtual bool on_gap(uint64_t /*sequence*/) { return false; }

  TargetCore* core = nullptr;  // the target's (owned by it); null once released
  std::string flow;            // its flow's name and its slot (for Worker::failure)
  uint32_t slot = 0;
  Status status = Status::kOk;  // kOk while open; how it ended otherwise
  bool busy = false;            // its handler is running
  bool ended = false;
};

// A target (Target<T>, T may be Bytes) with its batch handler and, for
// ordered flows, its gap handler (std::nullptr_t: none). `Info` is
// sluice::BatchInfo (worker.h): what a handler taking two arguments is
// handed with each batch.
template <class Info, class Tgt, class F, class G>
class TypedInput final : public WorkerInput {
 public:
  TypedInput(Tgt target, F on_batch, G on_gap)
      : target_(std::move(target)), on_batch_(std::move(on_batch)), on_gap_(std::move(on_gap)) {}

  Status poll_one() override {
    auto batch = target_.try_consume();
    if (!batch) return target_.status();
    if constexpr (std::is_invocable_v<F&, decltype(*batch), const Info&>) {
      on_batch_(*batch, Info{target_.last_source(), target_.last_sequence()});
    } else {
      on_batch_(*batch);
    }
    return Status::kOk;
  }
  const std::string& error() const override { return target_ ? target_.error() : released_error_; }
  std::optional<LostPeer> lost_peer() const override {
    return target_ ? target_.lost_peer() : released_lost_;
  }
  uint64_t gap() const override { return target_ ? target_.gap() : 0; }
  void release() override {
    released_error_ = target_.error();
    released_lost_ = target_.lost_peer();
    target_ = Tgt{};
  }
  bool on_gap(uint64_t sequence) override {
    if constexpr (std::is_same_v<G, std::nullptr_t>) {
      return false;
    } else {
      on_gap_(sequence);
      return true;
    }
  }

 private:
  Tgt target_;
  F on_batch_;
  G on_gap_;
  std::string released_error_;
  std::optional<LostPeer> released_lost_;
};

// A combiner target with its result handler: poll_one() merges one batch
// of partials; at end of flow it hands the final groups to the handler.
template <class T, class F>
class CombinerInput final : public WorkerInput {
 public:
  CombinerInput(Target<Combined<T>> target, CombinerTargetCore* combiner, F on_result)
      : target_(std::move(target)), combiner_(combiner), on_result_(std::move(on_result)) {}

  Status poll_one() override {
    const Status s = combiner_->poll_one();
    if (s == Status::kEndOfFlow) on_result_(std::move(combiner_->result()));
    return s;
  }
  const std::string& error() const override { return target_ ? target_.error() : released_error_; }
  std::optional<LostPeer> lost_peer() const override {
    return target_ ? target_.lost_peer() : released_lost_;
  }
  uint64_t gap() const override { return 0; }
  void release() override {
    released_error_ = target_.error();
    released_lost_ = target_.lost_peer();
    combiner_ = nullptr;
    target_ = Target<Combined<T>>{};
  }

 private:
  Target<Combined<T>> target_;
  CombinerTargetCore* combiner_;  // target_'s; null once released
  F on_result_;
  std::string released_error_;
  std::optional<LostPeer> released_lost_;
};

// A source the Worker owns (Worker::add_output): Source<T> (T may be
// Bytes or Combined<R>), destroyed with the worker, after its inputs.
class WorkerOutput {
 public:
  virtual ~WorkerOutput() = default;
};
template <class S>
class OwnedOutput final : public WorkerOutput {
 public:
  explicit OwnedOutput(S s) : source(std::move(s)) {}
  S source;
};

template <class S>
inline constexpr bool is_source = false;
template <class T>
inline constexpr bool is_source<Source<T>> = true;  // Combined<R> and Bytes too

}  // namespace detail
}  // namespace sluice
SLUICE_API_END
