// python/src/combiner.h: combiner flows of numpy records for the Python
// package (sluice.CombinerFlow; include/sluice/combiner.h). The record's
// layout (the dtype's key and value fields) is known at run time, so the
// flow is a CombinerSpec<Bytes>: the same flow a C++ CombinerSpec<T> of the
// same layout declares. A source folds records pushed as bytes, with the GIL
// released; a target hands over the final groups as columns.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <sluice/sluice.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::python {

namespace nb = nanobind;

// One declared combiner flow and its ends on this rank. Its source and its
// target may each be used by one thread at the same time; the rest by one.
struct CombinerState {
  explicit CombinerState(CombinerSpec<Bytes> s) : spec(std::move(s)) {}
  CombinerSpec<Bytes> spec;
  DeclaredFlow flow;
  Source<Combined<Bytes>> source;
  Target<Combined<Bytes>> target;
  std::atomic<int> busy{0};  // calls in progress
  bool ended = false;        // destroyed, or retired at the cluster's leave()
  // Ends the ends and the declaration (never waits: an open source aborts).
  void end();
};

// The combiner flows a cluster declared, ended before it leaves.
class CombinerTracker {
 public:
  void track(const std::shared_ptr<CombinerState>& c) { flows_.push_back(c); }
  void retire();

 private:
  std::vector<std::weak_ptr<CombinerState>> flows_;
};

// A field of the records: byte offset, held form (0 signed, 1 unsigned, 2
// float: ValueKind) and size in bytes.
using FieldTuple = std::tuple<uint32_t, uint8_t, uint32_t>;
// An aggregate: the field and which ("sum", "min", "max", "avg").
using AggTuple = std::tuple<FieldTuple, std::string>;
using Endpoints = std::vector<std::tuple<uint32_t, uint32_t>>;
using U64Array = nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>;
using F64Array = nb::ndarray<nb::numpy, double, nb::ndim<1>>;
using InRecords = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// A target's groups as columns: keys, counts, and per aggregate (in the
// order declared) its values' held form and bits (sum, min, max) or, for
// avg, doubles.
using GroupColumns = std::tuple<U64Array, U64Array, std::vector<std::tuple<int, nb::object>>>;

// sluice._sluice.CombinerFlow.
class PyCombiner {
 public:
  PyCombiner(Cluster& cluster, CombinerTracker& tracker, const std::string& name,
             uint32_t record_bytes, const FieldTuple& key, const std::vector<AggTuple>& aggs,
             const Endpoints& sources, const Endpoints& targets, uint32_t local_groups,
             uint32_t segment_bytes, uint32_t ring_segments, std::optional<View> view);
  void open_source(uint32_t slot);
  void open_target(uint32_t slot);
  // Folds whole records (a multiple of the record size).
  void push(InRecords records, std::optional<double> timeout);
  void close(std::optional<double> timeout);
  void abort();
  // This target's groups, once every source closed; None afterwards.
  std::optional<GroupColumns> consume(std::optional<double> timeout);
  void destroy();
  // The index into the flow's targets of the target that owns `key`.
  uint32_t target_of(uint64_t key);
  std::string describe();

 private:
  CombinerState& get();
  std::shared_ptr<CombinerState> c_;
  Cluster* cluster_ = nullptr;
  std::vector<std::tuple<size_t, std::string>> aggs_;  // field index, aggregate
};

void bind_combiner(nb::module_& m);

}  // namespace sluice::python
