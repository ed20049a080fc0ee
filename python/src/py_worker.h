// python/src/py_worker.h: sluice._sluice.Worker (python/sluice/worker.py
// wraps it): one thread that drives the targets of several flows, numpy
// and Arrow, calling a Python handler for each batch as it arrives, and
// whose pushes and closes deliver those inputs while a ring is full (so
// that a handler may push into a flow this same worker consumes). Every
// wait is made without the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <sluice/sluice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "batch_flow.h"
#include "records_flow.h"

namespace sluice::python {

namespace nb = nanobind;

class PyWorker final : public Deliverer {
 public:
  // A numpy flow's open target: handler(ring array) for each batch (a
  // uint8 view of the ring, pinned as consume() pins it), then on_end()
  // (None: nothing) once every source closed. `owner` keeps the Python
  // flow alive.
  void add_records(std::shared_ptr<RecordsFlow> flow, nb::object owner, nb::object handler,
                   nb::object on_end);
  // A batch flow's open target: handler(list of ArrowArray addresses) for
  // each segment's batches, as PyBatchFlow::consume returns them.
  void add_batches(PyBatchFlow* flow, nb::object owner, nb::object handler, nb::object on_end);
  // Delivers every input until each has ended. Raises the first failure
  // (PeerLost naming the rank, ...), a handler's exception, or Timeout.
  void run(std::optional<double> timeout);
  // RecordsFlow::push and close, delivering the inputs while they wait.
  void push_records(RecordsFlow& f, const std::byte* data, size_t n, const uint32_t* targets,
                    std::optional<double> timeout);
  void close_records(RecordsFlow& f, std::optional<double> timeout);

  bool deliver_once() override;
  void wait(bool delivered) override;

  // The Python objects it holds, for the garbage collector (handlers that
  // refer to the worker make a cycle through it): visit, and drop them.
  template <class Visit>
  int traverse(Visit&& visit) const {
    for (const Input& in : inputs_) {
      for (const nb::object* o : {&in.owner, &in.handler, &in.on_end}) {
        if (o->ptr() != nullptr) {
          if (int r = visit(o->ptr()); r != 0) return r;
        }
      }
    }
    return 0;
  }
  void clear() { inputs_.clear(); }

 private:
  struct Input {
    std::shared_ptr<RecordsFlow> records;  // one of the two
    PyBatchFlow* batches = nullptr;
    nb::object owner, handler, on_end;
    bool ended = false;
    bool busy = false;  // its handler runs (a push in it delivers the others only)
  };
  // Takes what input `in` has by `deadline` and hands it to its handler:
  // true if it delivered a batch or its end. An input is never delivered
  // inside its own handler: its batches and its end come in order, each
  // after the handler of the one before returned.
  bool poll(Input& in, Deadline deadline);
  // Waits up to `most` (and not past `deadline`) on the next input that
  // has not ended, delivering what comes.
  bool block(Deadline deadline, Clock::duration most);

  std::vector<Input> inputs_;
  size_t next_ = 0;
  bool running_ = false;
};

}  // namespace sluice::python
