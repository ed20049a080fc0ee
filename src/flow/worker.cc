// Worker: poll a thread's targets, push and close its sources, park on all
// of them at once (see sluice/worker.h).
#include "sluice/worker.h"

#include <sched.h>

#include <algorithm>

#include "common/futex.h"
#include "common/test_hooks.h"
#include "flow/parking.h"
#include "flow/wait_set.h"
#include "sluice/cluster.h"

namespace sluice {
namespace {

// A parked worker wakes at least every kParkSlice to look at deadlines and
// at its peers' liveness (which no futex or completion announces). With shm
// and ofi endpoints mixed, one system call cannot wait on all of them: the
// worker sleeps kMixedParkSlice at a time, then polls (WaitSet::sleep).
using detail::kMixedParkSlice;
using detail::until;

}  // namespace

Worker::Worker(IdleStrategy idle)
    : idle_(idle),
      set_(std::make_unique<detail::WaitSet>()),
      driven_(std::make_unique<detail::DrivenSources>()) {}
Worker::~Worker() {
  detail::test_hooks::DestructorScope scope;
  inputs_.clear();
  outputs_.clear();  // while the sources it drives are still known to driven_
}
Worker::Worker(Worker&&) noexcept = default;
Worker& Worker::operator=(Worker&&) noexcept = default;

void Worker::empty_output() {
  throw Error(ErrorCode::kInvalidArgument, "Worker::add_output: the source is empty (moved from?)");
}

std::optional<WorkerFailure> Worker::failure() const {
  auto failed = [this](size_t i) {
    const Status s = inputs_[i]->status;
    return s != Status::kOk && s != Status::kEndOfFlow;
  };
  size_t i = reported_;
  if (i >= inputs_.size() || !failed(i)) {
    for (i = 0; i < inputs_.size() && !failed(i); ++i) {
    }
    if (i == inputs_.size()) return std::nullopt;
  }
  const detail::WorkerInput& in = *inputs_[i];
  return WorkerFailure{
      static_cast<uint32_t>(i), in.flow, in.slot, in.status, in.error(), in.lost_peer()};
}

Worker::InputId Worker::add_input(detail::TargetCore* core,
                                  std::unique_ptr<detail::WorkerInput> input) {
  if (core == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Worker::add: the target is empty (moved from?)");
  input->core = core;
  input->flow = core->flow_name();
  input->slot = core->slot();
  inputs_.push_back(std::move(input));
  ++active_;
  set_->reserve(inputs_.size() + 4);
  return static_cast<InputId>(inputs_.size() - 1);
}

void Worker::drive(detail::SourceCore* core) { driven_->add(core); }

void Worker::watch_views(const Cluster& cluster, std::function<void(const View&)> on_view) {
  views_.cluster = &cluster;
  views_.handler = std::move(on_view);
  views_.seen = cluster.epoch();
}

bool Worker::check_view() {
  if (views_.busy || views_.cluster->epoch() == views_.seen) return false;
  const View v = views_.cluster->view();
  views_.seen = v.epoch;
  views_.busy = true;
  struct Done {
    bool* b;
    ~Done() { *b = false; }
  } done{&views_.busy};
  views_.handler(v);
  return true;
}

size_t Worker::poll(size_t limit) {
  // Sources first: what they finish sending may be what a peer needs before
  // it sends what the inputs wait for.
  if (!driven_->sources.empty()) [[unlikely]]
    driven_->drive();
  size_t work = 0;
  if (views_.cluster != nullptr) [[unlikely]]
    work += check_view() ? 1 : 0;
  for (size_t i = 0; i < inputs_.size() && work < limit; ++i) {
    detail::WorkerInput& in = *inputs_[i];
    if (in.ended || in.busy) continue;
    in.busy = true;
    Status s;
    try {
      s = in.poll_one();
    } catch (...) {
      in.busy = false;
      throw;
    }
    in.busy = false;
    switch (s) {
      case Status::kOk:
        ++work;
        break;
      case Status::kWouldBlock:  // nothing ready
        break;
      case Status::kGap:
        ++work;
        if (!in.on_gap(in.gap())) {
          in.status = Status::kGap;
          if (problem_ < 0) problem_ = static_cast<int64_t>(i);
        }
        break;
      default:  // kEndOfFlow, or a failure that ends the input
        ++work;
        in.ended = true;
        in.status = s;
        --active_;
        if (s != Status::kEndOfFlow) {
          in.release();
          in.core = nullptr;
          if (problem_ < 0) problem_ = static_cast<int64_t>(i);
        }
        break;
    }
  }
  return work;
}

bool Worker::done() const { return active_ == 0 && !driven_->delivering(); }

void Worker::idle(size_t work) { idle(work, kForever); }

void Worker::idle(size_t work, Deadline wake_by) {
  if (work != 0) {
    rounds_ = 0;
    return;
  }
  if (back_off(rounds_++, wake_by)) rounds_ = 0;
}

bool Worker::back_off(uint32_t round, Deadline deadline) {
  if (round < idle_.spin) {
    detail::cpu_relax();
    return false;
  }
  if (round < idle_.spin + idle_.yields || parking_) {
    // (A handler that runs inside a park's last look yields instead of
    // parking again: the outer park holds the announcements.)
    sched_yield();
    return false;
  }
  return park(deadline);
}

bool Worker::park(Deadline deadline) {
  set_->clear();
  bool ready = false;
  for (auto& in : inputs_) {
    if (!in->ended && !in->busy) ready |= !in->core->arm(*set_);
  }
  for (detail::SourceCore* s : waiting_) ready |= !s->arm(*set_);
  for (detail::SourceCore* s : driven_->sources) {
    // Only its completion queue: a source driven in the background has no
    // credit to wait for (one whose push or close waits is armed above).
    if (std::find(waiting_.begin(), waiting_.end(), s) == waiting_.end()) s->arm_driven(*set_);
  }
  if (!ready) {
    // Announced: whatever a peer publishes from now on wakes us. What it
    // published before is found by this last look.
    parking_ = true;
    struct Unmark {
      bool* b;
      ~Unmark() { *b = false; }
    } unmark{&parking_};
    ready = poll() != 0;
    if (!ready) set_->sleep(until(std::min(deadline, set_->wake)), kMixedParkSlice);
  }
  for (auto& in : inputs_) {
    if (in->core != nullptr) in->core->disarm();
  }
  for (detail::SourceCore* s : waiting_) s->disarm();
  return ready;
}

Status Worker::run(Deadline deadline) {
  for (uint32_t round = 0;; ++round) {
    if (problem_ >= 0) {
      const auto i = static_cast<size_t>(problem_);
      problem_ = -1;
      reported_ = static_cast<InputId>(i);
      const Status s = inputs_[i]->status;
      if (s == Status::kGap) inputs_[i]->status = Status::kOk;  // it goes on after the gap
      return s;
    }
    if (active_ == 0 && !driven_->delivering()) return Status::kEndOfFlow;
    if (poll() != 0) {
      round = 0;
      continue;
    }
    if (deadline != kForever && Clock::now() >= deadline) return Status::kTimeout;
    if (back_off(round, deadline)) round = 0;
  }
}

}  // namespace sluice
