// python/src/batch_flow.h: sluice._sluice.BatchFlow, a flow of Arrow
// record batches (python/sluice/batches.py wraps it). Each batch travels
// as one byte record (arrow_codec.h) of a shuffle or replicate flow of
// Bytes; a target decodes the records of each segment it consumes into
// ArrowArrays over the ring itself, which pyarrow imports without a copy.
// The segment stays kept (Target::keep) until every batch of it, and every
// array or buffer sliced from one, is gone.
#pragma once

#include <nanobind/nanobind.h>
#include <sluice/sluice.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrow_codec.h"
#include "kept_segments.h"

namespace sluice::python {

namespace nb = nanobind;

// One declared batch flow's state on this rank, shared by its Python
// handle and the segments its batches keep.
struct BatchFlowState {
  ~BatchFlowState();
  // Ends the flow (its ends and declaration); keeps the schema.
  void end();
  // The declared flow's spec, whichever kind it is.
  const FlowSpec& spec() const { return replicate ? replicated->spec() : shuffle->spec(); }

  std::string name;
  bool replicate = false;
  std::vector<Endpoint> sources, targets;
  std::optional<ShuffleSpec<Bytes>> shuffle;  // one of the two
  std::optional<ReplicateSpec<Bytes>> replicated;
  ArrowSchema schema{};  // the flow's, owned (released by the destructor)
  DeclaredFlow declared;
  Source<Bytes> source;
  Target<Bytes> target;
  BatchEncoder encoder;
  std::vector<ArrowArray> shells;  // the last consume's batches, for pyarrow to take
  KeptSegments kept;
  std::atomic<int> busy{0};
  bool ended = false;
};

// Every batch flow of one cluster, for its leave(): a flow whose batches
// are still alive stays (its rings mapped) until the process exits.
class BatchTracker {
 public:
  void track(const std::shared_ptr<BatchFlowState>& f) { flows_.push_back(f); }
  void retire();

 private:
  std::vector<std::weak_ptr<BatchFlowState>> flows_;
};

using Endpoints = std::vector<std::tuple<uint32_t, uint32_t>>;

// A Worker, as a push or close that waits for ring space sees it: it
// delivers the worker's inputs meanwhile (a handler may push to the rings
// this one waits on). Called with the GIL held.
class Deliverer {
 public:
  virtual ~Deliverer() = default;
  // Delivers what each input has now (its handlers run); true if any did.
  virtual bool deliver_once() = 0;
  // After a round that delivered `delivered`: a short wait without the GIL
  // when nothing came, so that the loop does not spin.
  virtual void wait(bool delivered) = 0;
};

// sluice._sluice.BatchFlow.
class PyBatchFlow {
 public:
  // `schema`: a pyarrow.Schema (anything with __arrow_c_schema__);
  // `type_tag`: what the ranks must agree on (the package's digest of it).
  PyBatchFlow(Cluster& cluster, BatchTracker& tracker, const std::string& name, bool replicate,
              nb::object schema, const std::string& type_tag, const Endpoints& sources,
              const Endpoints& targets, uint32_t segment_bytes, uint32_t ring_segments,
              std::optional<View> view);
  // The largest encoded batch one record holds.
  uint32_t max_record_bytes();
  std::vector<std::tuple<uint32_t, uint32_t>> targets();
  void open_source(uint32_t slot);
  void open_target(uint32_t slot);
  // The encoded size of `batch` (anything with __arrow_c_array__).
  size_t measure(nb::object batch);
  // Pushes `batch` (whose encoding fits one record) to target index `to`
  // (a shuffle flow) or to every target (a replicate flow: to is None).
  // In a Worker (`worker`), the pushes wait by delivering its inputs.
  void push(nb::object batch, std::optional<uint32_t> to, std::optional<double> timeout,
            Deliverer* worker);
  void flush(std::optional<double> timeout);
  void close(std::optional<double> timeout, Deliverer* worker);
  void abort();
  // The next segment's batches as addresses of ArrowArrays for
  // pyarrow.RecordBatch._import_from_c (each valid until the next consume),
  // or None at the end of the flow.
  std::optional<std::vector<uintptr_t>> consume(std::optional<double> timeout);
  // The next segment's batches into *out, as consume() takes them: kOk,
  // kEndOfFlow, kTimeout (nothing by the deadline), or a failure status
  // (a malformed record or a held ring raise InvalidArgument).
  Status take(Deadline deadline, std::vector<uintptr_t>* out);
  // Raises what a target's failed consume (status `s`) means.
  [[noreturn]] void raise_consume_failure(Status s);
  void destroy();

 private:
  BatchFlowState& get();
  // flush() and close(): `call` on the open source without the GIL, its
  // failure raised as the package's exception.
  template <class Call>
  void source_call(const char* what, std::optional<double> timeout, Call&& call);
  std::shared_ptr<BatchFlowState> f_;
  Cluster* cluster_ = nullptr;
};

// Bytes copied out of rings by batch flows (a record not 8-byte aligned):
// the tests assert it stays 0.
uint64_t batch_copied_bytes();

void bind_batches(nb::module_& m);

}  // namespace sluice::python
