// python/src/module.cc: sluice._sluice, the extension module under the
// Python package (python/sluice): the job (Cluster), its collectives over
// the registry, and flows of fixed-size records (records_flow.h) that the
// package presents as numpy structured arrays. Every call that can wait
// releases the GIL; every failure is a Python exception of the package's
// hierarchy (Error and its subclasses, made here), PeerLost with .rank.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "alltoallv.h"
#include "batch_flow.h"
#include "combiner.h"
#include "declare.h"
#include "key_routing.h"
#include "py_errors.h"
#include "py_worker.h"
#include "records_flow.h"
#include "regions.h"
#include "replay.h"
#include "ring_view.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace sluice::python {

Exceptions exc;

namespace {

[[noreturn]] void raise_failure(const FlowFailure& f) { raise_status(f.status, f.message, f.rank); }

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const PeerLostError& e) {
    nb::object o = exc.peer_lost(e.what());
    o.attr("rank") = e.rank();
    PyErr_SetObject(exc.peer_lost.ptr(), o.ptr());
  } catch (const Error& e) {
    nb::handle type = exc.error;
    switch (e.code()) {
      case ErrorCode::kSpecMismatch:
        type = exc.spec_mismatch;
        break;
      case ErrorCode::kTimeout:
        type = exc.timeout;
        break;
      case ErrorCode::kInvalidArgument:
        type = exc.invalid;
        break;
      case ErrorCode::kBootstrap:
      case ErrorCode::kAuth:
        type = exc.bootstrap;
        break;
      case ErrorCode::kViewChanged:
        type = exc.view_changed;
        break;
      case ErrorCode::kPeerLost:
        type = exc.peer_lost;
        break;
      default:
        break;
    }
    PyErr_SetString(type.ptr(), e.what());
  }
}

ViewTuple to_tuple(const View& v) { return {v.epoch, v.members, v.incarnations}; }
// What a view-scoped gather or an agreement returns: (epoch, ranks, values).
using GatheredTuple = std::tuple<uint64_t, std::vector<uint32_t>, std::vector<nb::bytes>>;
GatheredTuple to_tuple(const Gathered& g) {
  std::vector<nb::bytes> values;
  values.reserve(g.values.size());
  for (const std::string& v : g.values) values.emplace_back(v.data(), v.size());
  return {g.epoch, g.ranks, std::move(values)};
}

// The job, as this process joined it.
class PyCluster {
 public:
  static std::unique_ptr<PyCluster> join() {
    auto c = std::make_unique<PyCluster>();
    {
      nb::gil_scoped_release unlocked;
      c->cluster_ = std::make_unique<Cluster>(Cluster::join());
    }
    return c;
  }
  ~PyCluster() {
    finish_exchanges(Deadline{});  // a deadline already past: no waiting
    retire_flows();
    replays_.retire();
    batches_.retire();
    combiners_.retire();
    regions_.retire();
  }
  // One alltoallv call among the job's ranks, over the exchange of
  // `segment_bytes` (declared at the first call that needs it; ended
  // after a failed call). Without the GIL: calls from several threads
  // run one at a time (collectives are made in one order on every rank,
  // as MPI's on a communicator).
  std::vector<ReceivedBuffer> exchange(Cluster& c, uint32_t segment_bytes,
                                       std::span<const std::span<const std::byte>> sends,
                                       Deadline deadline) {
    std::lock_guard<std::mutex> lock(exchanges_mu_);
    std::unique_ptr<Exchange>& e = exchanges_[segment_bytes];
    try {
      if (!e) {
        AlltoallvSpec spec;
        spec.name = "sluice.py.exchange." + std::to_string(++exchanges_made_);
        spec.segment_bytes = segment_bytes;
        e = std::make_unique<Exchange>(c, spec);
      }
      return e->run(sends, deadline);
    } catch (...) {
      if (!e || e->broken()) exchanges_.erase(segment_bytes);
      throw;
    }
  }
  // Every flow declared through this cluster, for leave().
  void track(const std::shared_ptr<RecordsFlow>& f) { flows_.push_back(f); }
  Cluster& get() {
    if (!cluster_ || left_) raise(exc.closed, "the cluster was left (leave() was called)");
    return *cluster_;
  }
  uint32_t rank() { return get().rank(); }
  uint32_t world_size() { return get().world_size(); }
  uint64_t epoch() { return get().epoch(); }
  std::vector<uint32_t> live_ranks() { return get().live_ranks(); }
  bool alive(uint32_t r) { return get().alive(r); }
  uint32_t incarnation(uint32_t r) { return get().incarnation(r); }
  ViewTuple view() { return to_tuple(get().view()); }
  ViewTuple await_view(uint64_t after_epoch, std::optional<double> timeout) {
    Cluster& c = get();
    Result<View> v = Status::kTimeout;
    {
      nb::gil_scoped_release unlocked;
      v = c.await_view(after_epoch, deadline_of(timeout));
    }
    if (!v) raise(exc.timeout, "await_view(): no view after epoch " + std::to_string(after_epoch));
    return to_tuple(*v);
  }
  GatheredTuple allgather_in(const ViewTuple& view, const std::string& name, nb::bytes value,
                             std::optional<double> timeout) {
    Cluster& c = get();
    const View v = to_view(view);
    const std::string mine(value.c_str(), value.size());
    Result<Gathered> g = Status::kTimeout;
    {
      nb::gil_scoped_release unlocked;
      g = c.allgather(v, name, mine, deadline_of(timeout));
    }
    if (g.status() == Status::kViewChanged) {
      raise(exc.view_changed, "'" + name + "' in view " + std::to_string(v.epoch) +
                                  ": the membership changed (now view " +
                                  std::to_string(c.epoch()) + ")");
    }
    return to_tuple(*g);
  }
  GatheredTuple agree(const std::string& name, nb::bytes value, std::optional<double> timeout) {
    Cluster& c = get();
    const std::string mine(value.c_str(), value.size());
    Gathered g;
    {
      nb::gil_scoped_release unlocked;
      g = c.agree(name, mine, deadline_of(timeout));
    }
    return to_tuple(g);
  }

  void barrier(const std::string& name, std::optional<double> timeout) {
    Cluster& c = get();
    nb::gil_scoped_release unlocked;
    c.barrier(name, deadline_of(timeout));
  }
  std::vector<nb::bytes> allgather(const std::string& name, nb::bytes value,
                                   std::optional<double> timeout) {
    Cluster& c = get();
    const std::string v(value.c_str(), value.size());
    std::vector<std::string> all;
    {
      nb::gil_scoped_release unlocked;
      all = c.allgather(name, v, deadline_of(timeout));
    }
    std::vector<nb::bytes> out;
    out.reserve(all.size());
    for (const std::string& s : all) out.emplace_back(s.data(), s.size());
    return out;
  }
  void leave(std::optional<double> timeout) {
    if (!cluster_ || left_) return;
    {
      nb::gil_scoped_release unlocked;
      finish_exchanges(deadline_of(timeout));
    }
    retire_flows();
    replays_.retire();
    batches_.retire();
    combiners_.retire();
    regions_.retire();
    Status s;
    {
      nb::gil_scoped_release unlocked;
      s = cluster_->leave(deadline_of(timeout));
    }
    left_ = true;
    if (s == Status::kTimeout) raise(exc.timeout, "leave(): the registry did not confirm in time");
  }

 private:
  // The handles go before the job is left (or the cluster destroyed): each
  // flow still alive ends now, except one that arrays still read from,
  // which stays as it is (its rings mapped) until the process exits.
  void retire_flows() {
    static auto* kept_for_arrays = new std::vector<std::shared_ptr<RecordsFlow>>;
    for (const std::weak_ptr<RecordsFlow>& w : flows_) {
      if (std::shared_ptr<RecordsFlow> f = w.lock(); f && !f->end_if_unpinned())
        kept_for_arrays->push_back(std::move(f));
    }
    flows_.clear();
  }

  // The exchanges alltoallv calls among the job's ranks go over, one per
  // segment size; each ends before the job is left.
  void finish_exchanges(Deadline deadline) {
    std::lock_guard<std::mutex> lock(exchanges_mu_);
    for (auto& [bytes, exchange] : exchanges_) exchange->finish(deadline, false);
    exchanges_.clear();
  }

  std::unique_ptr<Cluster> cluster_;
  bool left_ = false;
  std::mutex exchanges_mu_;
  std::map<uint32_t, std::unique_ptr<Exchange>> exchanges_;
  uint64_t exchanges_made_ = 0;  // names them, in the same order on every rank
  std::vector<std::weak_ptr<RecordsFlow>> flows_;
  RegionTracker regions_;  // ended before the cluster, as the flows
  CombinerTracker combiners_;
  BatchTracker batches_;
  ReplayTracker replays_;

 public:
  std::unique_ptr<PyRegion> expose(const std::string& name, size_t bytes) {
    return std::make_unique<PyRegion>(get(), regions_, name, bytes);
  }
  std::unique_ptr<PyRemoteRegion> open_region(const std::string& name, uint32_t owner,
                                              std::optional<double> timeout) {
    return std::make_unique<PyRemoteRegion>(get(), regions_, name, owner, timeout);
  }
  std::unique_ptr<PyBatchFlow> batch_flow(const std::string& name, bool replicate,
                                          nb::object schema, const std::string& type_tag,
                                          const Endpoints& sources, const Endpoints& targets,
                                          uint32_t segment_bytes, uint32_t ring_segments,
                                          std::optional<ViewTuple> view) {
    return std::make_unique<PyBatchFlow>(
        get(), batches_, name, replicate, std::move(schema), type_tag, sources, targets,
        segment_bytes, ring_segments,
        view ? std::optional<View>(to_view(*view)) : std::optional<View>());
  }
  std::unique_ptr<PyReplayFlow> replay_flow(const std::string& name, uint32_t itemsize,
                                            const std::string& type_tag,
                                            const std::vector<uint32_t>& sources,
                                            const std::vector<uint32_t>& targets, uint64_t capacity,
                                            bool replay, uint32_t segment_bytes,
                                            uint32_t ring_segments) {
    return std::make_unique<PyReplayFlow>(get(), replays_, name, itemsize, type_tag, sources,
                                          targets, capacity, replay, segment_bytes, ring_segments);
  }
  std::unique_ptr<PyCombiner> combiner(const std::string& name, uint32_t record_bytes,
                                       const FieldTuple& key, const std::vector<AggTuple>& aggs,
                                       const Endpoints& sources, const Endpoints& targets,
                                       uint32_t local_groups, uint32_t segment_bytes,
                                       uint32_t ring_segments, std::optional<ViewTuple> view) {
    return std::make_unique<PyCombiner>(
        get(), combiners_, name, record_bytes, key, aggs, sources, targets, local_groups,
        segment_bytes, ring_segments,
        view ? std::optional<View>(to_view(*view)) : std::optional<View>());
  }
};

// A byte view of a C-contiguous numpy array (the package passes
// `records.view(numpy.uint8)`): no copy.
using ByteArray = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using TargetArray = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;

// Received bytes copied out of a ring (consume(copy=True), exchange()),
// which the tests count: receiving through consume() copies nothing.
std::atomic<uint64_t> copied_bytes{0};

// Received bytes as a numpy uint8 array that owns them (the package views
// it as the flow's dtype).
OutArray to_array(RecordBytes&& bytes) {
  copied_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  auto* owned = new RecordBytes(std::move(bytes));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<RecordBytes*>(p); });
  return OutArray(reinterpret_cast<uint8_t*>(owned->data()), {owned->size()}, owner);
}

class PyFlow {
 public:
  PyFlow(PyCluster& cluster, const std::string& name, bool replicate, uint32_t itemsize,
         const std::string& type_tag, const std::vector<std::tuple<uint32_t, uint32_t>>& sources,
         const std::vector<std::tuple<uint32_t, uint32_t>>& targets,
         std::optional<uint32_t> key_offset, uint32_t key_size, uint32_t segment_bytes,
         uint32_t ring_segments, std::optional<ViewTuple> view) {
    RecordsFlowSpec s;
    s.name = name;
    s.replicate = replicate;
    s.itemsize = itemsize;
    s.type_tag = type_tag;
    for (const auto& [r, slot] : sources) s.sources.push_back(Endpoint{r, slot});
    for (const auto& [r, slot] : targets) s.targets.push_back(Endpoint{r, slot});
    s.key_offset = key_offset;
    s.key_size = key_size;
    s.segment_bytes = segment_bytes;
    s.ring_segments = ring_segments;
    if (view) s.view = to_view(*view);
    Cluster& c = cluster.get();
    {
      nb::gil_scoped_release unlocked;
      flow_ = std::make_shared<RecordsFlow>(c, s);
    }
    cluster.track(flow_);
  }

  RecordsFlow& get() {
    if (!flow_) raise(exc.closed, "the flow was destroyed");
    return *flow_;
  }
  // Counts a call in progress (a source's push in one thread and a
  // target's consume in another may overlap; destroy() may not).
  struct Busy {
    explicit Busy(PyFlow& f) : f_(f) { f_.busy_.fetch_add(1); }
    ~Busy() { f_.busy_.fetch_sub(1); }
    PyFlow& f_;
  };
  uint32_t num_targets() { return get().num_targets(); }
  // The flow's targets: in a view, the members' only.
  std::vector<std::tuple<uint32_t, uint32_t>> targets() {
    std::vector<std::tuple<uint32_t, uint32_t>> out;
    for (const Endpoint& e : get().spec().targets) out.emplace_back(e.rank, e.slot);
    return out;
  }

  // Each record's target by the flow's key: a uint32 array.
  nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>> route(ByteArray records) {
    RecordsFlow& f = get();
    const size_t n = records.size() / f.spec().itemsize;
    auto* out = new std::vector<uint32_t>(n);
    nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
    f.route(reinterpret_cast<const std::byte*>(records.data()), n, out->data());
    return nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>(out->data(), {n}, owner);
  }

  void open_source(uint32_t slot) {
    RecordsFlow& f = get();
    Busy busy(*this);
    nb::gil_scoped_release unlocked;
    f.open_source(slot);
  }
  void open_target(uint32_t slot) {
    RecordsFlow& f = get();
    Busy busy(*this);
    nb::gil_scoped_release unlocked;
    f.open_target(slot);
  }

  void push(ByteArray records, std::optional<TargetArray> targets, std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    const Routed r = routed_records(f, records, targets);
    std::optional<FlowFailure> failed;
    {
      nb::gil_scoped_release unlocked;
      failed = f.push(r.data, r.n, r.to, deadline_of(timeout));
    }
    if (failed) raise_failure(*failed);
  }
  void flush(std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    std::optional<FlowFailure> failed;
    {
      nb::gil_scoped_release unlocked;
      failed = f.flush(deadline_of(timeout));
    }
    if (failed) raise_failure(*failed);
  }
  void close(std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    std::optional<FlowFailure> failed;
    {
      nb::gil_scoped_release unlocked;
      failed = f.close(deadline_of(timeout));
    }
    if (failed) raise_failure(*failed);
  }
  void abort() { get().abort(); }

  // push() and close() in a Worker: they deliver its inputs while they wait.
  std::shared_ptr<RecordsFlow> shared() {
    get();
    return flow_;
  }
  void push_in(PyWorker& w, ByteArray records, std::optional<TargetArray> targets,
               std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    const Routed r = routed_records(f, records, targets);
    w.push_records(f, r.data, r.n, r.to, timeout);
  }
  void close_in(PyWorker& w, std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    w.close_records(f, timeout);
  }

  // The next batch's records as a read-only uint8 array over the ring
  // itself, or None at the end of the flow. The array pins its segment: the
  // target keeps it (Target::keep) until the array and every view of it are
  // collected, whatever is consumed meanwhile; then the segment goes back
  // to its source at the target's next call.
  std::optional<RingArray> consume_view(std::optional<double> timeout) {
    std::shared_ptr<RecordsFlow> f = flow_;
    if (!f) raise(exc.closed, "the flow was destroyed");
    Busy busy(*this);
    RecordsFlow::Kept kept;
    FlowFailure failure;
    // A batch that is ready is taken without letting go of the GIL: another
    // Python thread (one pushing, say) would take it, and this one would
    // then wait for it back. Only a wait releases it.
    Status s = f->consume_kept(Deadline::min(), &kept, &failure);
    if (s == Status::kTimeout) {
      nb::gil_scoped_release unlocked;
      s = f->consume_kept(deadline_of(timeout), &kept, &failure);
    }
    if (s == Status::kEndOfFlow) return std::nullopt;
    if (s != Status::kOk) raise_failure(failure);
    return ring_view(f, nb::find(this), kept);
  }

  // The next batch's records as bytes (a copy), or None at the end of the flow.
  std::optional<OutArray> consume(std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    RecordBytes out;
    FlowFailure failure;
    Status s;
    {
      nb::gil_scoped_release unlocked;
      s = f.consume(deadline_of(timeout), &out, &failure);
    }
    if (s == Status::kEndOfFlow) return std::nullopt;
    if (s != Status::kOk) raise_failure(failure);
    return to_array(std::move(out));
  }

  OutArray exchange(ByteArray records, std::optional<TargetArray> targets, uint32_t slot,
                    std::optional<double> timeout) {
    RecordsFlow& f = get();
    Busy busy(*this);
    const Routed r = routed_records(f, records, targets);
    RecordBytes got;
    {
      nb::gil_scoped_release unlocked;
      got = f.exchange(r.data, r.n, r.to, slot, deadline_of(timeout));
    }
    return to_array(std::move(got));
  }

  // Gives up the flow (its ends first): what the package's destroy() and
  // context manager call. Never waits for the network.
  void destroy() {
    if (busy_.load() != 0) {
      raise(exc.invalid,
            "destroy(): another thread is inside a call on this flow; "
            "join it first");
    }
    flow_.reset();
  }

 private:
  // A push's records and where each goes (targets_of), as push, push_in and
  // exchange take them; `to` may point into `routed`.
  struct Routed {
    const std::byte* data = nullptr;
    size_t n = 0;
    const uint32_t* to = nullptr;
    std::vector<uint32_t> routed;
  };
  static Routed routed_records(RecordsFlow& f, const ByteArray& records,
                               const std::optional<TargetArray>& targets) {
    Routed r;
    r.data = reinterpret_cast<const std::byte*>(records.data());
    r.n = count(f, records);
    r.to = targets_of(f, records, r.n, targets, &r.routed);
    return r;  // (a move keeps `routed`'s buffer, which `to` may point into)
  }

  // Where each of the n records goes: `targets` (checked), the flow's
  // routing (into *routed), or nowhere on a replicate flow (nullptr).
  static const uint32_t* targets_of(RecordsFlow& f, const ByteArray& records, size_t n,
                                    const std::optional<TargetArray>& targets,
                                    std::vector<uint32_t>* routed) {
    if (f.spec().replicate) {
      if (targets) raise(exc.invalid, "a replicate flow sends every record to every target");
      return nullptr;
    }
    if (!targets) {
      if (f.routes_itself()) return nullptr;  // the flow routes by key
      routed->resize(n);
      f.route(reinterpret_cast<const std::byte*>(records.data()), n, routed->data());
      return routed->data();
    }
    if (targets->size() != n) {
      raise(exc.invalid, "targets: " + std::to_string(targets->size()) + " for " +
                             std::to_string(n) + " records (one per record)");
    }
    const uint32_t* to = targets->data();
    for (size_t i = 0; i < n; ++i) {
      if (to[i] >= f.num_targets()) {
        raise(exc.invalid, "targets[" + std::to_string(i) + "] = " + std::to_string(to[i]) +
                               " is not below the flow's " + std::to_string(f.num_targets()) +
                               " targets");
      }
    }
    return to;
  }
  static size_t count(RecordsFlow& f, const ByteArray& records) {
    const size_t size = f.spec().itemsize;
    if (records.size() % size != 0) {
      raise(exc.invalid, std::to_string(records.size()) + " bytes are not whole records of " +
                             std::to_string(size) + " bytes");
    }
    return records.size() / size;
  }
  // Shared with the arrays received over the ring (consume_view's pins):
  // destroy() gives up this handle's share; the flow ends when they are gone.
  std::shared_ptr<RecordsFlow> flow_;
  std::atomic<int> busy_{0};
};

// Cluster.alltoallv: one buffer to every rank taking part (uint8 arrays,
// in the order of alltoallv_ranks), one from each, as uint8 arrays that own
// their bytes (copied once out of the rings, counted in copied_bytes).
std::vector<OutArray> alltoallv_of(PyCluster& cluster, const std::string& name,
                                   const std::vector<ByteArray>& sends,
                                   std::optional<ViewTuple> view, uint32_t segment_bytes,
                                   std::optional<double> timeout) {
  Cluster& c = cluster.get();
  AlltoallvSpec spec;
  spec.name = name;
  spec.segment_bytes = segment_bytes;
  if (view) spec.view = to_view(*view);
  std::vector<std::span<const std::byte>> bufs;
  bufs.reserve(sends.size());
  for (const ByteArray& a : sends)
    bufs.emplace_back(reinterpret_cast<const std::byte*>(a.data()), a.size());
  std::vector<ReceivedBuffer> got;
  if (view) {
    nb::gil_scoped_release unlocked;
    got = alltoallv(c, spec, bufs, deadline_of(timeout));
  } else {
    nb::gil_scoped_release unlocked;
    got = cluster.exchange(c, segment_bytes, bufs, deadline_of(timeout));
  }
  std::vector<OutArray> out;
  out.reserve(got.size());
  for (ReceivedBuffer& b : got) {
    copied_bytes.fetch_add(b.size, std::memory_order_relaxed);
    auto* owned = new ReceivedBuffer(std::move(b));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<ReceivedBuffer*>(p); });
    out.emplace_back(reinterpret_cast<uint8_t*>(owned->data.get()),
                     std::initializer_list<size_t>{owned->size}, owner);
  }
  return out;
}

nb::handle new_exception(nb::module_& m, const char* name, nb::handle base,
                         nb::handle second = nb::handle(), const char* doc = nullptr) {
  const std::string qualified = nb::cast<std::string>(m.attr("__name__")) + "." + name;
  PyObject* bases = second ? PyTuple_Pack(2, base.ptr(), second.ptr()) : base.inc_ref().ptr();
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::steal(type);
  return m.attr(name);
}

// The Worker's garbage collector slots: its handlers often refer to the
// worker itself.
int worker_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  return nb::inst_ptr<PyWorker>(self)->traverse([&](PyObject* o) {
    Py_VISIT(o);
    return 0;
  });
}

int worker_clear(PyObject* self) {
  nb::inst_ptr<PyWorker>(self)->clear();
  return 0;
}

PyType_Slot worker_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(worker_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(worker_clear)},
                              {0, nullptr}};

}  // namespace
}  // namespace sluice::python

NB_MODULE(_sluice, m) {
  using namespace sluice::python;
  m.doc() = "sluice's extension module; use the sluice package, which wraps it";

  exc.error = new_exception(m, "Error", PyExc_RuntimeError, nb::handle(),
                            "A sluice call failed; the message says what and why.");
  exc.peer_lost = new_exception(m, "PeerLost", exc.error, nb::handle(),
                                "A peer this call depends on is gone; .rank names it.");
  exc.spec_mismatch = new_exception(m, "SpecMismatch", exc.error, nb::handle(),
                                    "Ranks declared the same flow differently.");
  exc.timeout =
      new_exception(m, "Timeout", exc.error, PyExc_TimeoutError, "A deadline passed first.");
  exc.invalid = new_exception(m, "InvalidArgument", exc.error, PyExc_ValueError,
                              "A bad argument, spec or record; the message names it.");
  exc.bootstrap = new_exception(m, "BootstrapError", exc.error, nb::handle(),
                                "The environment does not say how to join a job.");
  exc.closed = new_exception(m, "Closed", exc.error, nb::handle(),
                             "The handle was closed, left or destroyed.");
  exc.view_changed = new_exception(m, "ViewChanged", exc.error, nb::handle(),
                                   "The job's membership changed during the call.");
  nb::register_exception_translator(translate);
  m.def(
      "copied_bytes", [] { return copied_bytes.load(std::memory_order_relaxed); },
      "Bytes copied out of rings so far (consume(copy=True), exchange()); consume() copies none.");

  m.def("alltoallv", &alltoallv_of, "cluster"_a, "name"_a, "sends"_a, "view"_a.none(),
        "segment_bytes"_a, "timeout"_a.none(),
        "One buffer to every rank taking part, one from each (MPI's Alltoallv).");
  bind_key_routing(m);
  bind_regions(m);
  bind_combiner(m);
  bind_batches(m);
  bind_replay(m);
  nb::class_<PyCluster>(m, "Cluster")
      .def_static("join", &PyCluster::join, "Joins the job the environment names.")
      .def_prop_ro("rank", &PyCluster::rank)
      .def_prop_ro("world_size", &PyCluster::world_size)
      .def_prop_ro("epoch", &PyCluster::epoch)
      .def("live_ranks", &PyCluster::live_ranks)
      .def("alive", &PyCluster::alive, "rank"_a)
      .def("incarnation", &PyCluster::incarnation, "rank"_a)
      .def("view", &PyCluster::view)
      .def("await_view", &PyCluster::await_view, "after_epoch"_a, "timeout"_a = nb::none())
      .def("allgather_in", &PyCluster::allgather_in, "view"_a, "name"_a, "value"_a,
           "timeout"_a = nb::none())
      .def("agree", &PyCluster::agree, "name"_a, "value"_a, "timeout"_a = nb::none())
      .def("barrier", &PyCluster::barrier, "name"_a, "timeout"_a = nb::none())
      .def("allgather", &PyCluster::allgather, "name"_a, "value"_a, "timeout"_a = nb::none())
      .def("leave", &PyCluster::leave, "timeout"_a = nb::none())
      .def("expose", &PyCluster::expose, "name"_a, "size"_a)
      .def("open_region", &PyCluster::open_region, "name"_a, "owner"_a, "timeout"_a.none())
      .def("replay_flow", &PyCluster::replay_flow, "name"_a, "itemsize"_a, "type_tag"_a,
           "sources"_a, "targets"_a, "capacity"_a, "replay"_a, "segment_bytes"_a, "ring_segments"_a,
           nb::keep_alive<0, 1>())
      .def("batch_flow", &PyCluster::batch_flow, "name"_a, "replicate"_a, "schema"_a, "type_tag"_a,
           "sources"_a, "targets"_a, "segment_bytes"_a, "ring_segments"_a, "view"_a.none(),
           nb::keep_alive<0, 1>())
      .def("combiner", &PyCluster::combiner, "name"_a, "record_bytes"_a, "key"_a, "aggs"_a,
           "sources"_a, "targets"_a, "local_groups"_a, "segment_bytes"_a, "ring_segments"_a,
           "view"_a.none(), nb::keep_alive<0, 1>());

  nb::class_<sluice::KeyGroups>(m, "KeyGroups")
      .def(nb::init<uint32_t, std::vector<uint32_t>>(), "groups"_a, "owners"_a)
      .def_prop_ro("size", &sluice::KeyGroups::size)
      .def_prop_ro("owners", &sluice::KeyGroups::owners)
      .def("home", &sluice::KeyGroups::home, "group"_a)
      .def(
          "assign",
          [](const sluice::KeyGroups& k, const ViewTuple& v) { return k.assign(to_view(v)); },
          "view"_a);

  nb::class_<PyWorker>(m, "Worker", nb::type_slots(worker_slots))
      .def(nb::init<>())
      .def(
          "add_records",
          [](PyWorker& w, PyFlow& f, nb::object handler, nb::object on_end) {
            w.add_records(f.shared(), nb::find(&f), std::move(handler), std::move(on_end));
          },
          "flow"_a, "handler"_a, "on_end"_a.none())
      .def(
          "add_batches",
          [](PyWorker& w, PyBatchFlow& f, nb::object handler, nb::object on_end) {
            w.add_batches(&f, nb::find(&f), std::move(handler), std::move(on_end));
          },
          "flow"_a, "handler"_a, "on_end"_a.none())
      .def("run", &PyWorker::run, "timeout"_a.none())
      .def(
          "push_records",
          [](PyWorker& w, PyFlow& f, ByteArray records, std::optional<TargetArray> targets,
             std::optional<double> timeout) { f.push_in(w, records, targets, timeout); },
          "flow"_a, "records"_a.noconvert(), "targets"_a.noconvert().none(), "timeout"_a.none())
      .def(
          "close_records",
          [](PyWorker& w, PyFlow& f, std::optional<double> timeout) { f.close_in(w, timeout); },
          "flow"_a, "timeout"_a.none())
      .def(
          "push_batch",
          [](PyWorker& w, PyBatchFlow& f, nb::object batch, std::optional<uint32_t> to,
             std::optional<double> timeout) { f.push(std::move(batch), to, timeout, &w); },
          "flow"_a, "batch"_a, "to"_a.none(), "timeout"_a.none())
      .def(
          "close_batches",
          [](PyWorker& w, PyBatchFlow& f, std::optional<double> timeout) { f.close(timeout, &w); },
          "flow"_a, "timeout"_a.none());

  nb::class_<PyFlow>(m, "Flow")
      .def(nb::init<PyCluster&, const std::string&, bool, uint32_t, const std::string&,
                    const std::vector<std::tuple<uint32_t, uint32_t>>&,
                    const std::vector<std::tuple<uint32_t, uint32_t>>&, std::optional<uint32_t>,
                    uint32_t, uint32_t, uint32_t, std::optional<ViewTuple>>(),
           "cluster"_a, "name"_a, "replicate"_a, "itemsize"_a, "type_tag"_a, "sources"_a,
           "targets"_a, "key_offset"_a.none(), "key_size"_a, "segment_bytes"_a, "ring_segments"_a,
           "view"_a.none(), nb::keep_alive<1, 2>())
      .def_prop_ro("num_targets", &PyFlow::num_targets)
      .def_prop_ro("targets", &PyFlow::targets)
      .def("route", &PyFlow::route, "records"_a.noconvert())
      .def("open_source", &PyFlow::open_source, "slot"_a)
      .def("open_target", &PyFlow::open_target, "slot"_a)
      .def("push", &PyFlow::push, "records"_a.noconvert(), "targets"_a.noconvert().none(),
           "timeout"_a.none())
      .def("flush", &PyFlow::flush, "timeout"_a.none())
      .def("close", &PyFlow::close, "timeout"_a.none())
      .def("abort", &PyFlow::abort)
      .def("consume", &PyFlow::consume, "timeout"_a.none())
      .def("consume_view", &PyFlow::consume_view, "timeout"_a.none())
      .def("exchange", &PyFlow::exchange, "records"_a.noconvert(), "targets"_a.noconvert().none(),
           "slot"_a, "timeout"_a.none())
      .def("destroy", &PyFlow::destroy);
}
