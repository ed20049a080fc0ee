#include "replay.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "declare.h"
#include "py_errors.h"

namespace sluice::python {

using namespace nb::literals;

// What every record size's flow does, behind one interface.
struct PyReplayFlow::Impl {
  virtual ~Impl() = default;
  // Ends the flow (its flows withdrawn): the cluster's leave(), destroy().
  virtual void end() = 0;
  bool ended = false;
  virtual void restore(std::vector<uint64_t> received, std::vector<uint64_t> resume_at) = 0;
  virtual Status open(const View& view, Deadline deadline) = 0;
  virtual Status push(uint32_t target_rank, const std::byte* record, Deadline deadline) = 0;
  virtual Status flush(Deadline deadline) = 0;
  virtual Status close(Deadline deadline) = 0;
  // The next batch's records (itemsize bytes each) appended to *out.
  virtual Status consume(Deadline deadline, uint32_t* source, std::vector<std::byte>* out) = 0;
  virtual Status commit() = 0;
  virtual Status finish(Deadline deadline) = 0;
  virtual uint64_t received(uint32_t source) const = 0;
  virtual uint64_t sent(uint32_t target) const = 0;
  virtual uint64_t acknowledged(uint32_t target) const = 0;
  virtual uint64_t buffered(uint32_t target) const = 0;
  virtual uint64_t epoch() const = 0;
  virtual const std::string& error() const = 0;
};

template <size_t N>
struct PyReplayFlow::Typed final : Impl {
  struct alignas(8) Rec {
    std::byte bytes[N];
  };
  Typed(Cluster& cluster, ShuffleSpec<Rec> spec, ReplayOptions options, uint32_t itemsize)
      : itemsize(itemsize) {
    flow.emplace(cluster, std::move(spec), options);
  }
  void end() override {
    ended = true;
    flow.reset();
  }

  void restore(std::vector<uint64_t> received, std::vector<uint64_t> resume_at) override {
    flow->restore(std::move(received), std::move(resume_at));
  }
  Status open(const View& view, Deadline deadline) override { return flow->open(view, deadline); }
  Status push(uint32_t target_rank, const std::byte* record, Deadline deadline) override {
    Rec r{};  // (the padding past itemsize: zeros)
    std::memcpy(r.bytes, record, itemsize);
    return flow->push(target_rank, r, deadline);
  }
  Status flush(Deadline deadline) override { return flow->flush(deadline); }
  Status close(Deadline deadline) override { return flow->close(deadline); }
  Status consume(Deadline deadline, uint32_t* source, std::vector<std::byte>* out) override {
    Result<std::span<const Rec>> batch = flow->consume(deadline);
    if (!batch) return batch.status();
    *source = flow->last_source_rank();
    const size_t at = out->size();
    out->resize(at + batch->size() * itemsize);
    for (size_t i = 0; i < batch->size(); ++i) {
      std::memcpy(out->data() + at + i * itemsize, (*batch)[i].bytes, itemsize);
    }
    return Status::kOk;
  }
  Status commit() override { return flow->commit(); }
  Status finish(Deadline deadline) override { return flow->finish(deadline); }
  uint64_t received(uint32_t source) const override { return flow->received(source); }
  uint64_t sent(uint32_t target) const override { return flow->sent(target); }
  uint64_t acknowledged(uint32_t target) const override { return flow->acknowledged(target); }
  uint64_t buffered(uint32_t target) const override { return flow->buffered(target); }
  uint64_t epoch() const override { return flow->epoch(); }
  const std::string& error() const override { return flow->error(); }

  std::optional<ReplayFlow<Rec>> flow;
  uint32_t itemsize;
};

namespace {

template <class Rec>
ShuffleSpec<Rec> spec_of(const std::string& name, const std::string& type_tag,
                         const std::vector<uint32_t>& sources, const std::vector<uint32_t>& targets,
                         uint32_t segment_bytes, uint32_t ring_segments) {
  std::vector<Endpoint> src, dst;
  for (uint32_t r : sources) src.push_back(Endpoint{r, 0});
  for (uint32_t r : targets) dst.push_back(Endpoint{r, 0});
  ShuffleSpec<Rec> spec(name);
  spec.sources(src).targets(dst).type_tag(type_tag).explicit_targets();
  if (segment_bytes != 0) spec.segment_bytes(segment_bytes);
  if (ring_segments != 0) spec.ring_segments(ring_segments);
  return spec;
}

}  // namespace

PyReplayFlow::PyReplayFlow(Cluster& cluster, ReplayTracker& tracker, const std::string& name,
                           uint32_t itemsize, const std::string& type_tag,
                           const std::vector<uint32_t>& sources,
                           const std::vector<uint32_t>& targets, uint64_t capacity, bool replay,
                           uint32_t segment_bytes, uint32_t ring_segments)
    : itemsize_(itemsize), name_(name) {
  if (itemsize == 0 || itemsize > 128) {
    raise(exc.invalid, "replay flow '" + name + "': records of " + std::to_string(itemsize) +
                           " bytes (1 to 128 travel)");
  }
  const ReplayOptions options{.capacity = capacity, .replay = replay};
  auto make = [&]<size_t N>() -> std::shared_ptr<Impl> {
    using Rec = typename Typed<N>::Rec;
    return std::make_shared<Typed<N>>(
        cluster, spec_of<Rec>(name, type_tag, sources, targets, segment_bytes, ring_segments),
        options, itemsize);
  };
  if (itemsize <= 8) {
    impl_ = make.template operator()<8>();
  } else if (itemsize <= 16) {
    impl_ = make.template operator()<16>();
  } else if (itemsize <= 32) {
    impl_ = make.template operator()<32>();
  } else if (itemsize <= 64) {
    impl_ = make.template operator()<64>();
  } else {
    impl_ = make.template operator()<128>();
  }
  tracker.track(impl_);
}

PyReplayFlow::~PyReplayFlow() = default;

PyReplayFlow::Impl& PyReplayFlow::impl() {
  if (!impl_ || impl_->ended) {
    raise(exc.closed, "replay flow '" + name_ + "' was destroyed or its job left");
  }
  return *impl_;
}

void PyReplayFlow::destroy() {
  if (impl_) impl_->end();
}

void ReplayTracker::retire() {
  for (const std::weak_ptr<PyReplayFlow::Impl>& w : flows_) {
    if (auto f = w.lock()) f->end();
  }
  flows_.clear();
}

namespace {

// Raises what `s` means for replay flow `name` (its error() says why).
[[noreturn]] void fail(const std::string& name, const std::string& what, Status s,
                       const std::string& error) {
  raise_status(s, "replay flow '" + name + "': " + what + (error.empty() ? "" : ": " + error));
}

}  // namespace

void PyReplayFlow::restore(std::vector<uint64_t> received, std::vector<uint64_t> resume_at) {
  impl().restore(std::move(received), std::move(resume_at));
}

void PyReplayFlow::open(const ViewTuple& view, std::optional<double> timeout) {
  const View v = to_view(view);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = impl().open(v, deadline_of(timeout));
  }
  if (s != Status::kOk) fail(name_, "open", s, impl().error());
}

size_t PyReplayFlow::push(ReplayRecords records, ReplayRanks target_ranks,
                          std::optional<double> timeout) {
  if (records.size() % itemsize_ != 0 || records.size() / itemsize_ != target_ranks.size()) {
    raise(exc.invalid, "push(): " + std::to_string(target_ranks.size()) + " target ranks for " +
                           std::to_string(records.size() / itemsize_) +
                           " records (one per record)");
  }
  const size_t n = target_ranks.size();
  const auto* data = reinterpret_cast<const std::byte*>(records.data());
  const Deadline deadline = deadline_of(timeout);
  size_t done = 0;
  Status s = Status::kOk;
  {
    nb::gil_scoped_release unlocked;
    for (; done < n; ++done) {
      s = impl().push(target_ranks.data()[done], data + done * itemsize_, deadline);
      if (s != Status::kOk) break;
    }
  }
  if (s == Status::kOk || s == Status::kTimeout) return done;
  // (The records before `done` went: the caller's input resumes at it.)
  nb::handle type = s == Status::kViewChanged ? exc.view_changed
                    : s == Status::kPeerLost  ? exc.peer_lost
                                              : exc.invalid;
  nb::object e = type("replay flow '" + name_ + "': push: " + std::string(to_string(s)) + ": " +
                      impl().error());
  e.attr("pushed") = done;
  PyErr_SetObject(type.ptr(), e.ptr());
  throw nb::python_error();
}

template <class Call>
void PyReplayFlow::wait(const char* verb, Call call) {
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = call();
  }
  if (s != Status::kOk) fail(name_, verb, s, impl().error());
}

void PyReplayFlow::flush(std::optional<double> timeout) {
  wait("flush", [this, timeout] { return impl().flush(deadline_of(timeout)); });
}

void PyReplayFlow::close(std::optional<double> timeout) {
  wait("close", [this, timeout] { return impl().close(deadline_of(timeout)); });
}

std::optional<std::tuple<uint32_t, ReplayOut>> PyReplayFlow::consume(
    std::optional<double> timeout) {
  auto* out = new std::vector<std::byte>();
  nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<std::byte>*>(p); });
  uint32_t source = 0;
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = impl().consume(deadline_of(timeout), &source, out);
  }
  if (s == Status::kEndOfFlow) return std::nullopt;
  if (s != Status::kOk) fail(name_, "consume", s, impl().error());
  return std::make_tuple(source,
                         ReplayOut(reinterpret_cast<uint8_t*>(out->data()), {out->size()}, owner));
}

void PyReplayFlow::commit() {
  const Status s = impl().commit();
  if (s != Status::kOk) fail(name_, "commit", s, impl().error());
}

void PyReplayFlow::finish(std::optional<double> timeout) {
  wait("finish", [this, timeout] { return impl().finish(deadline_of(timeout)); });
}

uint64_t PyReplayFlow::received(uint32_t source) { return impl().received(source); }
uint64_t PyReplayFlow::sent(uint32_t target) { return impl().sent(target); }
uint64_t PyReplayFlow::acknowledged(uint32_t target) { return impl().acknowledged(target); }
uint64_t PyReplayFlow::buffered(uint32_t target) { return impl().buffered(target); }
uint64_t PyReplayFlow::epoch() { return impl().epoch(); }

void bind_replay(nb::module_& m) {
  nb::class_<PyReplayFlow>(m, "ReplayFlow")
      .def("restore", &PyReplayFlow::restore, "received"_a, "resume_at"_a)
      .def("open", &PyReplayFlow::open, "view"_a, "timeout"_a.none())
      .def("push", &PyReplayFlow::push, "records"_a.noconvert(), "target_ranks"_a.noconvert(),
           "timeout"_a.none())
      .def("flush", &PyReplayFlow::flush, "timeout"_a.none())
      .def("close", &PyReplayFlow::close, "timeout"_a.none())
      .def("consume", &PyReplayFlow::consume, "timeout"_a.none())
      .def("commit", &PyReplayFlow::commit)
      .def("finish", &PyReplayFlow::finish, "timeout"_a.none())
      .def("received", &PyReplayFlow::received, "source"_a)
      .def("sent", &PyReplayFlow::sent, "target"_a)
      .def("acknowledged", &PyReplayFlow::acknowledged, "target"_a)
      .def("buffered", &PyReplayFlow::buffered, "target"_a)
      .def_prop_ro("epoch", &PyReplayFlow::epoch)
      .def("destroy", &PyReplayFlow::destroy);
}

}  // namespace sluice::python
