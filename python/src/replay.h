// python/src/replay.h: sluice._sluice.ReplayFlow, the C++ API's
// sluice::ReplayFlow (sluice/replay.h) over numpy records of any size up to
// 128 bytes (python/sluice/replay.py wraps it). Records travel in the
// smallest of 8, 16, 32, 64 or 128 bytes that holds them (padded with
// zeros), so that five instantiations serve every record size; consume()
// returns the records themselves (a copy: ReplayFlow's batches are valid
// until its next call).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <sluice/sluice.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "declare.h"

namespace sluice::python {

namespace nb = nanobind;

using ReplayRecords = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ReplayRanks = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ReplayOut = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;

class ReplayTracker;

class PyReplayFlow {
 public:
  struct Impl;
  // Every rank of `ranks` is a source and a target (slot 0).
  PyReplayFlow(Cluster& cluster, ReplayTracker& tracker, const std::string& name, uint32_t itemsize,
               const std::string& type_tag, const std::vector<uint32_t>& sources,
               const std::vector<uint32_t>& targets, uint64_t capacity, bool replay,
               uint32_t segment_bytes, uint32_t ring_segments);
  ~PyReplayFlow();
  void restore(std::vector<uint64_t> received, std::vector<uint64_t> resume_at);
  void open(const ViewTuple& view, std::optional<double> timeout);
  // Pushes records[i] to rank target_ranks[i], in order; returns how many
  // went before a full buffer's timeout. ViewChanged / PeerLost carry
  // `.pushed`, the records that went before it.
  size_t push(ReplayRecords records, ReplayRanks target_ranks, std::optional<double> timeout);
  void flush(std::optional<double> timeout);
  void close(std::optional<double> timeout);
  // (source rank, the records' bytes), None at the end; Timeout if none came.
  std::optional<std::tuple<uint32_t, ReplayOut>> consume(std::optional<double> timeout);
  void commit();
  void finish(std::optional<double> timeout);
  uint64_t received(uint32_t source);
  uint64_t sent(uint32_t target);
  uint64_t acknowledged(uint32_t target);
  uint64_t buffered(uint32_t target);
  uint64_t epoch();
  // Ends the flow on this rank (its flows withdrawn). Never waits.
  void destroy();

 private:
  template <size_t N>
  struct Typed;
  Impl& impl();
  // Runs `call` (a wait: flush, close, finish) without the GIL; raises
  // naming `verb` if it fails.
  template <class Call>
  void wait(const char* verb, Call call);
  std::shared_ptr<Impl> impl_;
  uint32_t itemsize_;
  std::string name_;
};

// Every replay flow of one cluster, ended by its leave().
class ReplayTracker {
 public:
  void track(const std::shared_ptr<PyReplayFlow::Impl>& f) { flows_.push_back(f); }
  void retire();

 private:
  std::vector<std::weak_ptr<PyReplayFlow::Impl>> flows_;
};

void bind_replay(nb::module_& m);

}  // namespace sluice::python
