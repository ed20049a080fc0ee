// python/src/regions.cc: see regions.h.
#include "regions.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "py_errors.h"

using namespace nanobind::literals;

namespace sluice::python {
namespace {

// Counts a call in progress on a RemoteRegion: a second thread is refused
// (the handle is one thread's; each thread opens its own).
class Busy {
 public:
  explicit Busy(OpenedRegion& r) : r_(r) {
    if (r_.busy.fetch_add(1) != 0) {
      r_.busy.fetch_sub(1);
      raise(exc.invalid,
            "another thread is inside a call on this RemoteRegion: a handle is one "
            "thread's at a time (open one per thread)");
    }
  }
  ~Busy() { r_.busy.fetch_sub(1); }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  OpenedRegion& r_;
};

}  // namespace

void RegionTracker::retire() {
  // Regions that arrays still point into: mapped until the process exits.
  static auto* kept_for_arrays = new std::vector<std::shared_ptr<ExposedRegion>>;
  for (const std::weak_ptr<ExposedRegion>& w : exposed_) {
    std::shared_ptr<ExposedRegion> r = w.lock();
    if (!r) continue;
    r->closed = true;
    if (r->arrays.load() == 0) {
      r->region = MemoryRegion();  // withdrawn now; the handle raises Closed from here on
    } else {
      r->region.revoke();
      kept_for_arrays->push_back(std::move(r));
    }
  }
  exposed_.clear();
  // A handle another thread is inside a call on (a leave() racing it) is
  // kept, never destroyed after the cluster.
  static auto* kept_busy = new std::vector<std::shared_ptr<OpenedRegion>>;
  for (const std::weak_ptr<OpenedRegion>& w : opened_) {
    std::shared_ptr<OpenedRegion> r = w.lock();
    if (!r) continue;
    if (r->busy.load() == 0) {
      r->region = RemoteRegion();
    } else {
      kept_busy->push_back(std::move(r));
    }
  }
  opened_.clear();
}

PyRegion::PyRegion(Cluster& cluster, RegionTracker& tracker, const std::string& name,
                   size_t bytes) {
  MemoryRegion region;
  {
    nb::gil_scoped_release unlocked;
    region = cluster.expose(name, bytes);
  }
  r_ = std::make_shared<ExposedRegion>();
  r_->region = std::move(region);
  tracker.track(r_);
}

MemoryRegion& PyRegion::get() {
  if (!r_ || r_->closed) raise(exc.closed, "the region was closed (or its cluster left)");
  return r_->region;
}

RegionArray PyRegion::array() {
  MemoryRegion& region = get();
  auto* pin = new std::shared_ptr<ExposedRegion>(r_);
  r_->arrays.fetch_add(1);
  nb::capsule owner(pin, [](void* p) noexcept {
    auto* pin = static_cast<std::shared_ptr<ExposedRegion>*>(p);
    (*pin)->arrays.fetch_sub(1);
    delete pin;
  });
  return RegionArray(reinterpret_cast<uint8_t*>(region.data()), {region.size()}, owner);
}

void PyRegion::close() {
  if (!r_) return;
  if (!r_->closed) r_->region.revoke();
  r_->closed = true;
  r_.reset();  // the last array (or this) destroys the region: its name is withdrawn
}

PyRemoteRegion::PyRemoteRegion(Cluster& cluster, RegionTracker& tracker, const std::string& name,
                               uint32_t owner, std::optional<double> timeout) {
  RemoteRegion region;
  {
    nb::gil_scoped_release unlocked;
    region = cluster.open_region(name, owner, deadline_of(timeout));
  }
  r_ = std::make_shared<OpenedRegion>();
  r_->region = std::move(region);
  tracker.track(r_);
}

RemoteRegion& PyRemoteRegion::get() {
  if (!r_ || !r_->region) raise(exc.closed, "the remote region was closed (or its cluster left)");
  return r_->region;
}

void PyRemoteRegion::fail(const char* op, Status s) {
  raise_status(s,
               std::string(op) + " on region of rank " + std::to_string(r_->region.owner()) + ": " +
                   r_->region.error(),
               r_->region.owner());
}

nb::bytes PyRemoteRegion::read(uint64_t offset, size_t bytes, std::optional<double> timeout) {
  RemoteRegion& region = get();
  Busy busy(*r_);
  std::string out(bytes, '\0');
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = region.read(offset, std::as_writable_bytes(std::span(out.data(), out.size())),
                    deadline_of(timeout));
  }
  if (s != Status::kOk) fail("read", s);
  return nb::bytes(out.data(), out.size());
}

void PyRemoteRegion::read_into(uint64_t offset, OutBytes out, std::optional<double> timeout) {
  RemoteRegion& region = get();
  Busy busy(*r_);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = region.read(offset, std::span(reinterpret_cast<std::byte*>(out.data()), out.size()),
                    deadline_of(timeout));
  }
  if (s != Status::kOk) fail("read_into", s);
}

void PyRemoteRegion::write(uint64_t offset, InBytes data, std::optional<double> timeout) {
  RemoteRegion& region = get();
  Busy busy(*r_);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = region.write(offset,
                     std::span(reinterpret_cast<const std::byte*>(data.data()), data.size()),
                     deadline_of(timeout));
  }
  if (s != Status::kOk) fail("write", s);
}

uint64_t PyRemoteRegion::compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired,
                                          std::optional<double> timeout) {
  RemoteRegion& region = get();
  Busy busy(*r_);
  Result<uint64_t> previous = Status::kTimeout;
  {
    nb::gil_scoped_release unlocked;
    previous = region.compare_and_swap(offset, expected, desired, deadline_of(timeout));
  }
  if (!previous) fail("compare_and_swap", previous.status());
  return *previous;
}

uint64_t PyRemoteRegion::fetch_add(uint64_t offset, uint64_t delta, std::optional<double> timeout) {
  RemoteRegion& region = get();
  Busy busy(*r_);
  Result<uint64_t> previous = Status::kTimeout;
  {
    nb::gil_scoped_release unlocked;
    previous = region.fetch_add(offset, delta, deadline_of(timeout));
  }
  if (!previous) fail("fetch_add", previous.status());
  return *previous;
}

void PyRemoteRegion::close() {
  if (!r_) return;
  if (r_->busy.load() != 0) {
    raise(exc.invalid, "close(): another thread is inside a call on this RemoteRegion");
  }
  r_->region = RemoteRegion();
  r_.reset();
}

void bind_regions(nb::module_& m) {
  nb::class_<PyRegion>(m, "Region")
      .def_prop_ro("name", &PyRegion::name)
      .def_prop_ro("size", &PyRegion::size)
      .def_prop_ro("path", &PyRegion::path)
      .def("array", &PyRegion::array)
      .def("revoke", &PyRegion::revoke)
      .def("close", &PyRegion::close);
  nb::class_<PyRemoteRegion>(m, "RemoteRegion")
      .def_prop_ro("size", &PyRemoteRegion::size)
      .def_prop_ro("owner", &PyRemoteRegion::owner)
      .def_prop_ro("path", &PyRemoteRegion::path)
      .def("read", &PyRemoteRegion::read, "offset"_a, "size"_a, "timeout"_a.none())
      .def("read_into", &PyRemoteRegion::read_into, "offset"_a, "out"_a.noconvert(),
           "timeout"_a.none())
      .def("write", &PyRemoteRegion::write, "offset"_a, "data"_a.noconvert(), "timeout"_a.none())
      .def("compare_and_swap", &PyRemoteRegion::compare_and_swap, "offset"_a, "expected"_a,
           "desired"_a, "timeout"_a.none())
      .def("fetch_add", &PyRemoteRegion::fetch_add, "offset"_a, "delta"_a, "timeout"_a.none())
      .def("close", &PyRemoteRegion::close);
}

}  // namespace sluice::python
