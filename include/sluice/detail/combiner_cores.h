// sluice/detail/combiner_cores.h: what the inline parts of combiner.h need:
// the field and aggregate encodings its templates compute, and the untyped
// halves of CombinerSpec and the combiner ends (Source<Combined<T>>,
// Target<Combined<T>>), implemented in
// src/combiner. Internal: applications use combiner.h and never name
// anything here. Included by combiner.h.
//
// Thread safety: a CombinerSpecCore is a value; a CombinerSourceCore or
// CombinerTargetCore belongs to the thread that owns its combiner source
// or target. Ownership: the source and target halves own the flow
// source or target they are opened over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "sluice/detail/hash.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow.h"

SLUICE_API_BEGIN
namespace sluice {

class CombinerResult;
template <class T>
class Source;
template <class T>
class Target;
template <class T>
struct Combined;

namespace detail {

// How a field's bytes are read.
enum class ValueType : uint8_t { kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kF32, kF64 };

template <class V>
constexpr ValueType value_type_of() {
  static_assert((std::is_integral_v<V> && sizeof(V) <= 8) || std::is_same_v<V, float> ||
                    std::is_same_v<V, double>,
                "combiner value fields are integers of up to 8 bytes, float or double");
  if constexpr (std::is_same_v<V, float>) {
    return ValueType::kF32;
  } else if constexpr (std::is_same_v<V, double>) {
    return ValueType::kF64;
  } else if constexpr (std::is_signed_v<V>) {
    return sizeof(V) == 1   ? ValueType::kI8
           : sizeof(V) == 2 ? ValueType::kI16
           : sizeof(V) == 4 ? ValueType::kI32
                            : ValueType::kI64;
  } else {
    return sizeof(V) == 1   ? ValueType::kU8
           : sizeof(V) == 2 ? ValueType::kU16
           : sizeof(V) == 4 ? ValueType::kU32
                            : ValueType::kU64;
  }
}

// Byte offset of `member` in T (T is trivially copyable, so this is its
// offsetof; the same probe flow.h's key() uses).
template <class T, class V>
uint32_t member_offset(V T::*member) {
  alignas(T) static const unsigned char probe[sizeof(T)] = {};
  const T* p = reinterpret_cast<const T*>(probe);
  return static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(&(p->*member)) - probe);
}

// Aggregates of one field, as a bit set.
inline constexpr uint8_t kAggSum = 1;
inline constexpr uint8_t kAggMin = 2;
inline constexpr uint8_t kAggMax = 4;
inline constexpr uint8_t kAggAvg = 8;

// What a combiner aggregates (key, fields, slots); src/combiner/layout.h.
struct CombineLayout;
// A table of groups; src/combiner/group_table.h.
class GroupTable;

// The final groups of `table`, sorted by key (src/combiner/result.cc).
CombinerResult result_from_table(const GroupTable& table, uint64_t partials);

// The untyped part of a CombinerSpec: the flow of partials and the layout.
// A value: copies share the layout, which is immutable (every builder call
// replaces it). Implemented in src/combiner/spec.cc.
class CombinerSpecCore {
 public:
  CombinerSpecCore(std::string name, std::string type_name, uint32_t record_size);

  // The flow of partials (a shuffle of byte records keyed by group) as the
  // builder fills it in.
  FlowSpec& flow() { return flow_; }
  void group_by(uint32_t offset, ValueType type);
  void add(uint32_t offset, ValueType type, uint8_t aggs);
  void count();
  void local_groups(uint32_t n) { local_groups_ = n; }
  void expected_groups(uint32_t n) { expected_groups_ = n; }

  size_t field(uint32_t offset, ValueType type, const char* what) const;
  uint32_t target_of(uint64_t key) const {
    const auto n = static_cast<uint32_t>(flow_.targets().size());
    return n <= 1 ? 0 : reduce(mix64(key), n);
  }
  void validate() const;
  std::string describe() const;
  // The flow of partials as Cluster::declare takes it: validated, its record
  // type naming the layout, so that participants with other layouts fail
  // to declare.
  FlowSpec flow_spec() const;
  const std::shared_ptr<const CombineLayout>& layout() const { return layout_; }
  uint32_t local_groups() const { return local_groups_; }
  uint32_t expected_groups() const { return expected_groups_; }

 private:
  FlowSpec flow_;
  std::shared_ptr<const CombineLayout> layout_;
  uint32_t local_groups_ = 1u << 14;
  uint32_t expected_groups_ = 4096;
};

// The untyped core of a CombinerSpec<T> (combiner.h), for Cluster and tests.
struct CombinerSpecAccess {
  template <class Spec>
  static const CombinerSpecCore& core(const Spec& spec) {
    return spec.core_;
  }
};

// The untyped half of a Source<Combined<T>> (src/combiner/combiner_source.cc).
class CombinerSourceCore {
 public:
  virtual ~CombinerSourceCore() = default;
  // Folds record `rec` into its group; when the table is full, first sends
  // its partials (waiting for credit unless `try_only`), resuming where a
  // previous call stopped. As Source<Combined<T>>::push.
  virtual Status push(const std::byte* rec, Deadline deadline, bool try_only) = 0;
  virtual Status flush(Deadline deadline) = 0;
  virtual Status close(Deadline deadline) = 0;
  virtual void abort() = 0;
  virtual const std::string& error() const = 0;
  // After kPeerLost: the peer it is about (the flow of partials' source says).
  virtual std::optional<LostPeer> lost_peer() const = 0;
  virtual uint64_t table_flushes() const = 0;
  virtual uint64_t partials_sent() const = 0;
  // The source of the flow of partials: what a Worker parks on for credit.
  virtual SourceCore* flow_source() = 0;
  // Bytes per record pushed (the spec's record size).
  virtual uint32_t record_bytes() const = 0;
};

// The untyped half of a Target<Combined<T>> (src/combiner/combiner_target.cc).
class CombinerTargetCore {
 public:
  virtual ~CombinerTargetCore() = default;
  // Merges at most one batch of partials, never waiting: kOk if it merged
  // one, kWouldBlock if none was ready, kEndOfFlow once every source closed
  // (the result is ready; again on every later call), kPeerLost or kInvalid.
  virtual Status poll_one() = 0;
  virtual Status collect(Deadline deadline) = 0;
  virtual bool done() const = 0;
  virtual CombinerResult& result() = 0;
  virtual const std::string& error() const = 0;
  // After kPeerLost: the peer it is about (the flow of partials' target says).
  virtual std::optional<LostPeer> lost_peer() const = 0;
  virtual uint64_t partials_merged() const = 0;
  // The target of the flow of partials: what a Worker parks on for data.
  virtual TargetCore* flow_target() = 0;
};

// Opens the halves over an endpoint of spec.flow_spec() (as Cluster does).
std::unique_ptr<CombinerSourceCore> make_combiner_source(const CombinerSpecCore& spec,
                                                         std::unique_ptr<SourceCore> flow);
std::unique_ptr<CombinerTargetCore> make_combiner_target(const CombinerSpecCore& spec,
                                                         std::unique_ptr<TargetCore> flow);

// The handle (combiner.h) over a core, whose constructor from a core is
// private: for Cluster (cluster.h) and the tests' in-process combiners.
// Defined in combiner.h. REQUIRES: `core` is not null.
template <class T>
Source<Combined<T>> combiner_source_from_core(std::unique_ptr<CombinerSourceCore> core);
template <class T>
Target<Combined<T>> combiner_target_from_core(std::unique_ptr<CombinerTargetCore> core);

}  // namespace detail
}  // namespace sluice
SLUICE_API_END
