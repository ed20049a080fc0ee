#include "batch_flow.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <span>
#include <utility>

#include "declare.h"
#include "py_errors.h"

namespace sluice::python {

using namespace nb::literals;

namespace {

std::atomic<uint64_t> copied{0};

[[noreturn]] void fail(const BatchFlowState& f, const std::string& what, Status s,
                       const std::string& error, std::optional<LostPeer> lost) {
  raise_status(s, "flow '" + f.name + "': " + what + (error.empty() ? "" : ": " + error),
               lost ? std::optional<uint32_t>(lost->rank) : std::nullopt);
}

// Counts a call in progress, so that destroy() can refuse to end a flow
// another thread is inside.
struct BatchBusy {
  explicit BatchBusy(BatchFlowState& f) : f_(f) { f_.busy.fetch_add(1); }
  ~BatchBusy() { f_.busy.fetch_sub(1); }
  BatchFlowState& f_;
};

// The C struct behind an Arrow PyCapsule (the Arrow PyCapsule interface:
// __arrow_c_schema__ / __arrow_c_array__).
template <class T>
T* capsule_struct(nb::handle capsule, const char* name) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), name);
  if (p == nullptr) throw nb::python_error();
  return static_cast<T*>(p);
}

// A kept segment: given back to its target once no batch of it is alive.
struct SegmentPin {
  SegmentPin(std::shared_ptr<BatchFlowState> f, uint64_t id) : flow(std::move(f)), id(id) {
    flow->kept.pin();
  }
  ~SegmentPin() {
    flow->kept.release_later(id);
    flow->kept.unpin();
  }
  std::shared_ptr<BatchFlowState> flow;
  uint64_t id;
};

void release_shells(std::vector<ArrowArray>* shells) {
  for (ArrowArray& a : *shells) {
    if (a.release != nullptr) a.release(&a);  // not taken by pyarrow
  }
  shells->clear();
}

}  // namespace

uint64_t batch_copied_bytes() { return copied.load(std::memory_order_relaxed); }

BatchFlowState::~BatchFlowState() {
  release_shells(&shells);
  if (schema.release != nullptr) schema.release(&schema);
}

void BatchFlowState::end() {
  if (ended) return;
  ended = true;
  release_shells(&shells);
  source.abort();  // (a closed source's abort changes nothing)
  source = Source<Bytes>();
  target = Target<Bytes>();
  declared = DeclaredFlow();
}

void BatchTracker::retire() {
  static auto* kept_for_batches = new std::vector<std::shared_ptr<BatchFlowState>>;
  for (const std::weak_ptr<BatchFlowState>& w : flows_) {
    std::shared_ptr<BatchFlowState> f = w.lock();
    if (!f) continue;
    if (f->kept.pinned()) {
      kept_for_batches->push_back(std::move(f));  // batches still read its rings
    } else {
      f->end();
    }
  }
  flows_.clear();
}

PyBatchFlow::PyBatchFlow(Cluster& cluster, BatchTracker& tracker, const std::string& name,
                         bool replicate, nb::object schema, const std::string& type_tag,
                         const Endpoints& sources, const Endpoints& targets, uint32_t segment_bytes,
                         uint32_t ring_segments, std::optional<View> view)
    : f_(std::make_shared<BatchFlowState>()), cluster_(&cluster) {
  BatchFlowState& f = *f_;
  f.name = name;
  f.replicate = replicate;
  for (const auto& [r, s] : sources) {
    if (!view || view->contains(r)) f.sources.push_back(Endpoint{r, s});
  }
  for (const auto& [r, s] : targets) {
    if (!view || view->contains(r)) f.targets.push_back(Endpoint{r, s});
  }
  if (f.sources.empty() || f.targets.empty()) {
    raise(exc.peer_lost, "flow '" + name + "': no " + (f.sources.empty() ? "source" : "target") +
                             " of it is a member of view " + std::to_string(view->epoch));
  }
  // The schema, moved out of its capsule: the flow owns it from now on.
  nb::object capsule = schema.attr("__arrow_c_schema__")();
  auto* given = capsule_struct<ArrowSchema>(capsule, "arrow_schema");
  f.schema = *given;
  given->release = nullptr;
  const uint32_t seg = segment_bytes != 0 ? segment_bytes : 256 * 1024;
  if (replicate) {
    ReplicateSpec<Bytes> spec(name);
    spec.sources(f.sources).targets(f.targets).type_tag(type_tag).segment_bytes(seg);
    if (ring_segments != 0) spec.ring_segments(ring_segments);
    f.replicated = spec;
  } else {
    ShuffleSpec<Bytes> spec(name);
    spec.sources(f.sources).targets(f.targets).type_tag(type_tag).segment_bytes(seg);
    spec.explicit_targets();
    if (ring_segments != 0) spec.ring_segments(ring_segments);
    f.shuffle = spec;
  }
  {
    nb::gil_scoped_release unlocked;
    f.declared = f.replicate ? declare_in(cluster, view, "flow '" + name + "'", *f.replicated)
                             : declare_in(cluster, view, "flow '" + name + "'", *f.shuffle);
  }
  tracker.track(f_);
}

BatchFlowState& PyBatchFlow::get() {
  if (!f_ || f_->ended) raise(exc.closed, "the batch flow was destroyed");
  return *f_;
}

uint32_t PyBatchFlow::max_record_bytes() {
  BatchFlowState& f = get();
  return f.spec().max_record_bytes();
}

std::vector<std::tuple<uint32_t, uint32_t>> PyBatchFlow::targets() {
  std::vector<std::tuple<uint32_t, uint32_t>> out;
  for (const Endpoint& e : get().targets) out.emplace_back(e.rank, e.slot);
  return out;
}

void PyBatchFlow::open_source(uint32_t slot) {
  BatchFlowState& f = get();
  if (f.source) raise(exc.invalid, "this flow's source is open already");
  BatchBusy busy(f);
  nb::gil_scoped_release unlocked;
  f.source =
      f.replicate ? cluster_->source(*f.replicated, slot) : cluster_->source(*f.shuffle, slot);
}

void PyBatchFlow::open_target(uint32_t slot) {
  BatchFlowState& f = get();
  if (f.target) raise(exc.invalid, "this flow's target is open already");
  BatchBusy busy(f);
  nb::gil_scoped_release unlocked;
  f.target =
      f.replicate ? cluster_->target(*f.replicated, slot) : cluster_->target(*f.shuffle, slot);
}

size_t PyBatchFlow::measure(nb::object batch) {
  BatchFlowState& f = get();
  nb::tuple caps = nb::cast<nb::tuple>(batch.attr("__arrow_c_array__")());
  const auto* schema = capsule_struct<ArrowSchema>(caps[0], "arrow_schema");
  const auto* array = capsule_struct<ArrowArray>(caps[1], "arrow_array");
  return f.encoder.measure(*array, *schema);
}

void PyBatchFlow::push(nb::object batch, std::optional<uint32_t> to, std::optional<double> timeout,
                       Deliverer* worker) {
  BatchFlowState& f = get();
  if (!f.source) raise(exc.invalid, "push(): open the source first (source())");
  if (f.replicate == to.has_value()) {
    raise(exc.invalid, f.replicate ? "a replicate flow sends every batch to every target"
                                   : "push(): a shuffle flow's batch needs its target (to=)");
  }
  if (to && *to >= f.targets.size()) {
    raise(exc.invalid, "push(): target index " + std::to_string(*to) + " of a flow with " +
                           std::to_string(f.targets.size()) + " targets");
  }
  BatchBusy busy(f);
  nb::tuple caps = nb::cast<nb::tuple>(batch.attr("__arrow_c_array__")());
  const auto* schema = capsule_struct<ArrowSchema>(caps[0], "arrow_schema");
  const auto* array = capsule_struct<ArrowArray>(caps[1], "arrow_array");
  Status s;
  size_t encoded = 0;
  std::vector<std::byte> held;
  {
    // (The capsules, held here, keep the batch's buffers alive.)
    nb::gil_scoped_release unlocked;
    const std::span<const std::byte> rec = f.encoder.encode(*array, *schema);
    encoded = rec.size();
    if (encoded > f.spec().max_record_bytes()) {
      s = Status::kInvalid;
    } else if (worker == nullptr) {
      s = to ? f.source.push_to(*to, rec, deadline_of(timeout))
             : f.source.push(rec, deadline_of(timeout));
    } else {
      s = to ? f.source.try_push_to(*to, rec) : f.source.try_push(rec);
      if (s == Status::kWouldBlock) held.assign(rec.begin(), rec.end());  // (handlers may push)
    }
  }
  if (s == Status::kWouldBlock) {
    // In a Worker: its inputs are delivered while the ring is full.
    const Deadline deadline = deadline_of(timeout);
    const std::span<const std::byte> rec(held);
    while (s == Status::kWouldBlock) {
      if (Clock::now() >= deadline) {
        s = Status::kTimeout;
        break;
      }
      worker->wait(worker->deliver_once());
      s = to ? f.source.try_push_to(*to, rec) : f.source.try_push(rec);
    }
  }
  if (s == Status::kInvalid && encoded > max_record_bytes()) {
    raise(exc.invalid, "flow '" + f.name + "': a batch of " + std::to_string(encoded) +
                           " bytes encoded, more than a record holds (" +
                           std::to_string(max_record_bytes()) +
                           "): slice it, or declare the flow with a larger segment_bytes");
  }
  if (s != Status::kOk) fail(f, "push", s, f.source.error(), f.source.lost_peer());
}

template <class Call>
void PyBatchFlow::source_call(const char* what, std::optional<double> timeout, Call&& call) {
  BatchFlowState& f = get();
  if (!f.source) raise(exc.invalid, std::string(what) + "(): open the source first (source())");
  BatchBusy busy(f);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = call(f.source, deadline_of(timeout));
  }
  if (s != Status::kOk) fail(f, what, s, f.source.error(), f.source.lost_peer());
}

void PyBatchFlow::flush(std::optional<double> timeout) {
  source_call("flush", timeout, [](Source<Bytes>& s, Deadline d) { return s.flush(d); });
}

void PyBatchFlow::close(std::optional<double> timeout, Deliverer* worker) {
  if (worker == nullptr) {
    source_call("close", timeout, [](Source<Bytes>& s, Deadline d) { return s.close_and_wait(d); });
    return;
  }
  BatchFlowState& f = get();
  if (!f.source) raise(exc.invalid, "close(): open the source first (source())");
  BatchBusy busy(f);
  const Deadline deadline = deadline_of(timeout);
  Status s = f.source.close_and_wait(Deadline::min());
  while (s == Status::kTimeout || s == Status::kWouldBlock) {
    if (Clock::now() >= deadline) break;
    worker->wait(worker->deliver_once());
    s = f.source.close_and_wait(Deadline::min());
  }
  if (s != Status::kOk) fail(f, "close", s, f.source.error(), f.source.lost_peer());
}

void PyBatchFlow::abort() {
  BatchFlowState& f = get();
  if (f.source) f.source.abort();
}

std::optional<std::vector<uintptr_t>> PyBatchFlow::consume(std::optional<double> timeout) {
  std::vector<uintptr_t> out;
  const Status s = take(deadline_of(timeout), &out);
  if (s == Status::kEndOfFlow) return std::nullopt;
  if (s != Status::kOk) raise_consume_failure(s);
  return out;
}

void PyBatchFlow::raise_consume_failure(Status s) {
  BatchFlowState& f = get();
  fail(f, "consume", s, f.target.error(), f.target.lost_peer());
}

Status PyBatchFlow::take(Deadline deadline, std::vector<uintptr_t>* out) {
  BatchFlowState& f = get();
  if (!f.target) raise(exc.invalid, "consume(): open the target first (target())");
  BatchBusy busy(f);
  release_shells(&f.shells);
  std::string error;
  Status s = Status::kOk;
  uint32_t source = 0;
  {
    nb::gil_scoped_release unlocked;
    f.kept.release_queued([&](uint64_t id) { f.target.release(id); });
    const uint32_t ring = f.spec().effective_ring_segments();
    error = f.kept.ring_full(ring, f.sources, "record batches");
    if (!error.empty()) {
      s = Status::kInvalid;
    } else {
      Result<RecordBatch> batch = f.target.consume(deadline);
      s = batch.status();
      if (batch) {
        source = f.target.last_source();
        const uint64_t id = f.target.keep();
        f.kept.kept(source, id);
        auto pin = std::make_shared<SegmentPin>(f_, id);
        for (std::span<const std::byte> rec : *batch) {
          ArrowArray shell{};
          size_t copied_now = 0;
          error = decode_batch(rec, f.schema, pin, &shell, &copied_now);
          if (!error.empty()) break;
          copied.fetch_add(copied_now, std::memory_order_relaxed);
          f.shells.push_back(shell);
        }
      }
    }
  }
  if (s == Status::kInvalid && !error.empty()) {
    raise(exc.invalid, "flow '" + f.name + "': " + error);
  }
  if (s == Status::kOk && !error.empty()) {
    release_shells(&f.shells);
    const Endpoint& from = f.sources[source];
    raise(exc.invalid, "flow '" + f.name + "': a record from source " + std::to_string(source) +
                           " (rank " + std::to_string(from.rank) +
                           ") is not a batch of the flow's schema: " + error);
  }
  out->clear();
  for (ArrowArray& a : f.shells) out->push_back(reinterpret_cast<uintptr_t>(&a));
  return s;
}

void PyBatchFlow::destroy() {
  if (!f_ || f_->ended) return;
  if (f_->busy.load() != 0) {
    raise(exc.invalid, "destroy(): another thread is inside a call on this batch flow");
  }
  f_->end();
}

namespace {

// The codec alone, for the tests: a batch's record as the flow carries it.
nb::bytes encode_for_test(nb::object batch) {
  nb::tuple caps = nb::cast<nb::tuple>(batch.attr("__arrow_c_array__")());
  BatchEncoder encoder;
  const std::span<const std::byte> out =
      encoder.encode(*capsule_struct<ArrowArray>(caps[1], "arrow_array"),
                     *capsule_struct<ArrowSchema>(caps[0], "arrow_schema"));
  return nb::bytes(reinterpret_cast<const char*>(out.data()), out.size());
}

// And back, under `schema`, from bytes placed where the flow would put them
// (4 bytes past an 8-byte boundary): the address of an ArrowArray for
// pyarrow.RecordBatch._import_from_c (valid until the next call), or the
// decoder's complaint as InvalidArgument.
uintptr_t decode_for_test(nb::bytes record, nb::object schema) {
  static ArrowArray shell{};
  if (shell.release != nullptr) shell.release(&shell);
  nb::object capsule = schema.attr("__arrow_c_schema__")();
  const auto* s = capsule_struct<ArrowSchema>(capsule, "arrow_schema");
  auto storage = std::make_shared<std::vector<uint64_t>>(record.size() / 8 + 2);
  auto* at = reinterpret_cast<std::byte*>(storage->data()) + 4;
  std::memcpy(at, record.c_str(), record.size());
  size_t copied_now = 0;
  const std::string error =
      decode_batch(std::span<const std::byte>(at, record.size()), *s, storage, &shell, &copied_now);
  if (!error.empty()) raise(exc.invalid, error);
  return reinterpret_cast<uintptr_t>(&shell);
}

}  // namespace

void bind_batches(nb::module_& m) {
  m.def("_batch_encode", &encode_for_test, "batch"_a);
  m.def("_batch_decode", &decode_for_test, "record"_a, "schema"_a);
  m.def("batch_copied_bytes", &batch_copied_bytes,
        "Bytes batch flows copied out of rings (a record not 8-byte aligned); 0 normally.");
  nb::class_<PyBatchFlow>(m, "BatchFlow")
      .def_prop_ro("max_record_bytes", &PyBatchFlow::max_record_bytes)
      .def_prop_ro("targets", &PyBatchFlow::targets)
      .def("open_source", &PyBatchFlow::open_source, "slot"_a)
      .def("open_target", &PyBatchFlow::open_target, "slot"_a)
      .def("measure", &PyBatchFlow::measure, "batch"_a)
      .def(
          "push",
          [](PyBatchFlow& f, nb::object batch, std::optional<uint32_t> to,
             std::optional<double> timeout) { f.push(std::move(batch), to, timeout, nullptr); },
          "batch"_a, "to"_a.none(), "timeout"_a.none())
      .def("flush", &PyBatchFlow::flush, "timeout"_a.none())
      .def(
          "close", [](PyBatchFlow& f, std::optional<double> timeout) { f.close(timeout, nullptr); },
          "timeout"_a.none())
      .def("abort", &PyBatchFlow::abort)
      .def("consume", &PyBatchFlow::consume, "timeout"_a.none())
      .def("destroy", &PyBatchFlow::destroy);
}

}  // namespace sluice::python
