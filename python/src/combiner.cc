#include "combiner.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <utility>

#include "declare.h"
#include "py_errors.h"

namespace sluice::python {

using namespace nb::literals;

namespace {

[[noreturn]] void fail(const std::string& what, Status s, const std::string& error,
                       std::optional<LostPeer> lost) {
  raise_status(s, what + (error.empty() ? "" : ": " + error),
               lost ? std::optional<uint32_t>(lost->rank) : std::nullopt);
}

// Counts a call in progress, so that destroy() can refuse to end a flow
// another thread is inside.
struct CombinerBusy {
  explicit CombinerBusy(CombinerState& c) : c_(c) { c_.busy.fetch_add(1); }
  ~CombinerBusy() { c_.busy.fetch_sub(1); }
  CombinerState& c_;
};

ValueKind kind_of(uint8_t k) {
  if (k > 2) raise(exc.invalid, "a field's kind is 0 (signed), 1 (unsigned) or 2 (float)");
  return static_cast<ValueKind>(k);
}

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> column(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

}  // namespace

void CombinerState::end() {
  if (ended) return;
  ended = true;
  source.abort();  // (a closed source's abort changes nothing)
  source = Source<Combined<Bytes>>();
  target = Target<Combined<Bytes>>();
  flow = DeclaredFlow();
}

void CombinerTracker::retire() {
  for (const std::weak_ptr<CombinerState>& w : flows_) {
    if (std::shared_ptr<CombinerState> c = w.lock()) c->end();
  }
  flows_.clear();
}

PyCombiner::PyCombiner(Cluster& cluster, CombinerTracker& tracker, const std::string& name,
                       uint32_t record_bytes, const FieldTuple& key,
                       const std::vector<AggTuple>& aggs, const Endpoints& sources,
                       const Endpoints& targets, uint32_t local_groups, uint32_t segment_bytes,
                       uint32_t ring_segments, std::optional<View> view)
    : cluster_(&cluster) {
  std::vector<Endpoint> src, dst;
  for (const auto& [r, s] : sources) src.push_back(Endpoint{r, s});
  for (const auto& [r, s] : targets) dst.push_back(Endpoint{r, s});
  CombinerSpec<Bytes> spec = combiner(name, record_bytes).sources(src).targets(dst);
  spec.group_by(std::get<0>(key), kind_of(std::get<1>(key)), std::get<2>(key));
  for (const auto& [field, agg] : aggs) {
    const auto& [offset, kind, bytes] = field;
    const ValueKind k = kind_of(kind);
    if (agg == "sum") {
      spec.sum(offset, k, bytes);
    } else if (agg == "min") {
      spec.min(offset, k, bytes);
    } else if (agg == "max") {
      spec.max(offset, k, bytes);
    } else if (agg == "avg") {
      spec.avg(offset, k, bytes);
    } else {
      raise(exc.invalid, "combiner '" + name + "': no aggregate '" + agg +
                             "' (sum, min, max, avg; count is always there)");
    }
  }
  if (aggs.empty()) spec.count();
  if (local_groups != 0) spec.local_groups(local_groups);
  if (segment_bytes != 0) spec.segment_bytes(segment_bytes);
  if (ring_segments != 0) spec.ring_segments(ring_segments);
  for (const auto& [field, agg] : aggs) {
    const auto& [offset, kind, bytes] = field;
    aggs_.emplace_back(spec.field(offset, kind_of(kind), bytes), agg);
  }
  c_ = std::make_shared<CombinerState>(spec);
  {
    nb::gil_scoped_release unlocked;
    c_->flow = declare_in(cluster, view, "combiner '" + name + "'", spec);
  }
  tracker.track(c_);
}

CombinerState& PyCombiner::get() {
  if (!c_ || c_->ended) raise(exc.closed, "the combiner flow was destroyed");
  return *c_;
}

void PyCombiner::open_source(uint32_t slot) {
  CombinerState& c = get();
  if (c.source) raise(exc.invalid, "the source of this combiner flow is open already");
  CombinerBusy busy(c);
  nb::gil_scoped_release unlocked;
  c.source = cluster_->source(c.spec, slot);
}

void PyCombiner::open_target(uint32_t slot) {
  CombinerState& c = get();
  if (c.target) raise(exc.invalid, "the target of this combiner flow is open already");
  CombinerBusy busy(c);
  nb::gil_scoped_release unlocked;
  c.target = cluster_->target(c.spec, slot);
}

void PyCombiner::push(InRecords records, std::optional<double> timeout) {
  CombinerState& c = get();
  if (!c.source) raise(exc.invalid, "push(): open the source first (source())");
  CombinerBusy busy(c);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = c.source.push(std::span(reinterpret_cast<const std::byte*>(records.data()), records.size()),
                      deadline_of(timeout));
  }
  if (s != Status::kOk) fail("push", s, c.source.error(), c.source.lost_peer());
}

void PyCombiner::close(std::optional<double> timeout) {
  CombinerState& c = get();
  if (!c.source) raise(exc.invalid, "close(): open the source first (source())");
  CombinerBusy busy(c);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = c.source.close(deadline_of(timeout));
  }
  if (s != Status::kOk) fail("close", s, c.source.error(), c.source.lost_peer());
}

void PyCombiner::abort() {
  CombinerState& c = get();
  if (c.source) c.source.abort();
}

std::optional<GroupColumns> PyCombiner::consume(std::optional<double> timeout) {
  CombinerState& c = get();
  if (!c.target) raise(exc.invalid, "consume(): open the target first (target())");
  CombinerBusy busy(c);
  Result<CombinerResult> r = Status::kOk;
  {
    nb::gil_scoped_release unlocked;
    r = c.target.consume(deadline_of(timeout));
  }
  if (!r && r.status() == Status::kEndOfFlow) return std::nullopt;
  if (!r) fail("consume", r.status(), c.target.error(), c.target.lost_peer());
  const CombinerResult& groups = *r;
  const size_t n = groups.size();
  std::vector<uint64_t> keys(n), counts(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = groups.groups()[i].key;
    counts[i] = groups.groups()[i].count;
  }
  std::vector<std::tuple<int, nb::object>> values;
  for (const auto& [field, agg] : aggs_) {
    if (agg == "avg") {
      std::vector<double> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = groups.groups()[i].avg(field);
      values.emplace_back(-1, nb::cast(column(std::move(v))));
      continue;
    }
    std::vector<uint64_t> bits(n);
    int kind = 0;
    for (size_t i = 0; i < n; ++i) {
      const Group& g = groups.groups()[i];
      const Value v = agg == "sum" ? g.sum(field) : agg == "min" ? g.min(field) : g.max(field);
      bits[i] = v.bits();
      kind = static_cast<int>(v.kind());
    }
    values.emplace_back(kind, nb::cast(column(std::move(bits))));
  }
  return GroupColumns{column(std::move(keys)), column(std::move(counts)), std::move(values)};
}

void PyCombiner::destroy() {
  if (!c_ || c_->ended) return;
  if (c_->busy.load() != 0) {
    raise(exc.invalid, "destroy(): another thread is inside a call on this combiner flow");
  }
  c_->end();
}

uint32_t PyCombiner::target_of(uint64_t key) { return get().spec.target_of(key); }

std::string PyCombiner::describe() { return get().spec.describe(); }

void bind_combiner(nb::module_& m) {
  nb::class_<PyCombiner>(m, "CombinerFlow")
      .def("open_source", &PyCombiner::open_source, "slot"_a)
      .def("open_target", &PyCombiner::open_target, "slot"_a)
      .def("push", &PyCombiner::push, "records"_a.noconvert(), "timeout"_a.none())
      .def("close", &PyCombiner::close, "timeout"_a.none())
      .def("abort", &PyCombiner::abort)
      .def("consume", &PyCombiner::consume, "timeout"_a.none())
      .def("destroy", &PyCombiner::destroy)
      .def("target_of", &PyCombiner::target_of, "key"_a)
      .def("describe", &PyCombiner::describe);
}

}  // namespace sluice::python
