// python/src/regions.h: one-sided memory regions for the Python package
// (sluice.Region, sluice.RemoteRegion; include/sluice/memory.h). The owner
// sees its region as a writable numpy array over the region's own memory (no
// copy), which pins the memory while it lives; a peer reads, writes and
// updates 64-bit words atomically with the GIL released.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <sluice/sluice.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::python {

namespace nb = nanobind;

// A region this process exposed: its Python handle and every array over it
// share it, so the memory stays mapped while any of them lives.
struct ExposedRegion {
  MemoryRegion region;
  bool closed = false;         // close() or the cluster's leave(): no more arrays
  std::atomic<int> arrays{0};  // arrays over its memory still alive
};

// A peer's handle to a region, used by one thread at a time.
struct OpenedRegion {
  RemoteRegion region;
  std::atomic<int> busy{0};
};

// The regions a cluster made, ended before it leaves: opened handles are
// closed; an exposed region is destroyed unless arrays still point into
// it, in which case it stays mapped (revoked) until the process exits, as
// a flow that arrays read from does.
class RegionTracker {
 public:
  void track(const std::shared_ptr<ExposedRegion>& r) { exposed_.push_back(r); }
  void track(const std::shared_ptr<OpenedRegion>& r) { opened_.push_back(r); }
  void retire();

 private:
  std::vector<std::weak_ptr<ExposedRegion>> exposed_;
  std::vector<std::weak_ptr<OpenedRegion>> opened_;
};

using RegionArray = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;
using InBytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OutBytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// sluice._sluice.Region: the owner's handle.
class PyRegion {
 public:
  PyRegion(Cluster& cluster, RegionTracker& tracker, const std::string& name, size_t bytes);
  const std::string& name() { return get().name(); }
  size_t size() { return get().size(); }
  std::string path() { return get().path(); }
  // The region's bytes as a writable uint8 array over its memory.
  RegionArray array();
  void revoke() { get().revoke(); }
  // Revokes and gives up this handle; arrays keep the memory mapped.
  void close();

 private:
  MemoryRegion& get();
  std::shared_ptr<ExposedRegion> r_;
};

// sluice._sluice.RemoteRegion: a peer's handle (one per thread).
class PyRemoteRegion {
 public:
  PyRemoteRegion(Cluster& cluster, RegionTracker& tracker, const std::string& name, uint32_t owner,
                 std::optional<double> timeout);
  nb::bytes read(uint64_t offset, size_t bytes, std::optional<double> timeout);
  void read_into(uint64_t offset, OutBytes out, std::optional<double> timeout);
  void write(uint64_t offset, InBytes data, std::optional<double> timeout);
  uint64_t compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired,
                            std::optional<double> timeout);
  uint64_t fetch_add(uint64_t offset, uint64_t delta, std::optional<double> timeout);
  size_t size() { return get().size(); }
  uint32_t owner() { return get().owner(); }
  std::string path() { return get().path(); }
  void close();

 private:
  RemoteRegion& get();
  // Raises the exception for a failed operation's status.
  [[noreturn]] void fail(const char* op, Status s);
  std::shared_ptr<OpenedRegion> r_;
};

// Binds Region and RemoteRegion into the module.
void bind_regions(nb::module_& m);

}  // namespace sluice::python
