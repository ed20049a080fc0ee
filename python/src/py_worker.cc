#include "py_worker.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "py_errors.h"
#include "ring_view.h"

namespace sluice::python {

namespace {

[[noreturn]] void raise_failure(const FlowFailure& f) { raise_status(f.status, f.message, f.rank); }

}  // namespace

void PyWorker::add_records(std::shared_ptr<RecordsFlow> flow, nb::object owner, nb::object handler,
                           nb::object on_end) {
  if (running_) raise(exc.invalid, "Worker.add(): the worker is running");
  Input in;
  in.records = std::move(flow);
  in.owner = std::move(owner);
  in.handler = std::move(handler);
  in.on_end = std::move(on_end);
  inputs_.push_back(std::move(in));
}

void PyWorker::add_batches(PyBatchFlow* flow, nb::object owner, nb::object handler,
                           nb::object on_end) {
  if (running_) raise(exc.invalid, "Worker.add(): the worker is running");
  Input in;
  in.batches = flow;
  in.owner = std::move(owner);
  in.handler = std::move(handler);
  in.on_end = std::move(on_end);
  inputs_.push_back(std::move(in));
}

bool PyWorker::poll(Input& in, Deadline deadline) {
  struct Busy {
    bool* busy;
    explicit Busy(bool* b) : busy(b) { *busy = true; }
    ~Busy() { *busy = false; }
  };
  Status s;
  if (in.records) {
    RecordsFlow::Kept kept;
    FlowFailure failure;
    {
      nb::gil_scoped_release unlocked;
      s = in.records->consume_kept(deadline, &kept, &failure);
    }
    if (s == Status::kOk) {
      Busy busy(&in.busy);
      in.handler(ring_view(in.records, in.owner, kept));
      return true;
    }
    if (s != Status::kEndOfFlow && s != Status::kTimeout) raise_failure(failure);
  } else {
    std::vector<uintptr_t> shells;
    s = in.batches->take(deadline, &shells);  // (without the GIL while it waits)
    if (s == Status::kOk) {
      Busy busy(&in.busy);
      in.handler(shells);
      return true;
    }
    if (s != Status::kEndOfFlow && s != Status::kTimeout) in.batches->raise_consume_failure(s);
  }
  if (s == Status::kTimeout) return false;
  in.ended = true;  // kEndOfFlow
  if (!in.on_end.is_none()) {
    Busy busy(&in.busy);
    in.on_end();
  }
  return true;
}

bool PyWorker::deliver_once() {
  bool delivered = false;
  // (Indexes: a handler may not add inputs, but stays clear of iterators.)
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Input& in = inputs_[i];
    if (!in.ended && !in.busy) delivered = poll(in, Deadline::min()) || delivered;
  }
  return delivered;
}

bool PyWorker::block(Deadline deadline, Clock::duration most) {
  for (size_t k = 0; k < inputs_.size(); ++k) {
    Input& in = inputs_[next_++ % inputs_.size()];
    if (in.ended || in.busy) continue;
    return poll(in, std::min(deadline, Clock::now() + most));
  }
  // Nothing left to deliver (a push or close waits on rings this worker
  // does not consume): wait a moment without the GIL.
  nb::gil_scoped_release unlocked;
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  return false;
}

void PyWorker::wait(bool delivered) {
  if (!delivered) block(kForever, std::chrono::milliseconds(1));
}

void PyWorker::run(std::optional<double> timeout) {
  if (running_) raise(exc.invalid, "Worker.run(): the worker runs already (a handler called it)");
  running_ = true;
  struct Stop {
    bool* running;
    ~Stop() { *running = false; }
  } stop{&running_};
  const Deadline deadline = deadline_of(timeout);
  while (std::any_of(inputs_.begin(), inputs_.end(), [](const Input& in) { return !in.ended; })) {
    if (deliver_once()) continue;
    if (Clock::now() >= deadline) {
      raise(exc.timeout, "Worker.run(): inputs still open at the timeout");
    }
    block(deadline, std::chrono::milliseconds(2));
  }
}

void PyWorker::push_records(RecordsFlow& f, const std::byte* data, size_t n,
                            const uint32_t* targets, std::optional<double> timeout) {
  const Deadline deadline = deadline_of(timeout);
  size_t done = 0;
  FlowFailure failure;
  Status s = f.try_push(data, n, targets, &done, &failure);
  while (s == Status::kWouldBlock) {
    if (Clock::now() >= deadline) {
      raise(exc.timeout, "push(): the rings stayed full until the timeout (" +
                             std::to_string(done) + " words of the run went)");
    }
    wait(deliver_once());
    s = f.try_push(data, n, targets, &done, &failure);
  }
  if (s != Status::kOk) raise_failure(failure);
}

void PyWorker::close_records(RecordsFlow& f, std::optional<double> timeout) {
  const Deadline deadline = deadline_of(timeout);
  FlowFailure failure;
  Status s = f.try_close(&failure);
  while (s == Status::kWouldBlock) {
    if (Clock::now() >= deadline) raise(exc.timeout, "close(): not delivered by the timeout");
    wait(deliver_once());
    s = f.try_close(&failure);
  }
  if (s != Status::kOk) raise_failure(failure);
}

}  // namespace sluice::python
