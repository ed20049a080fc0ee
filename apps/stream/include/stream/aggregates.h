// stream/aggregates.h: the keyed aggregates of a windowed query, as
// mergeable (CRDT-style) partial states.
//
// An aggregate folds the values of one key in one window into a State, and
// merges two States commutatively, so that partial states computed anywhere
// (each worker's eager partial state in the slash strategy) combine to the
// same result in any order. A user aggregate is any type with these members
// (checked by the MergeableAggregate concept):
//
//   struct Range {                       // max - min of the values
//     using Input = int64_t;             // what the query's value function returns
//     struct State { int64_t lo, hi; };  // trivially copyable: it travels through flows
//     using Result = int64_t;
//     State init() const { return {INT64_MAX, INT64_MIN}; }
//     void add(State& s, Input v) const { s.lo = std::min(s.lo, v); s.hi = std::max(s.hi, v); }
//     void merge(State& s, const State& o) const { ... }   // commutative, associative
//     Result result(const State& s) const { return s.hi - s.lo; }
//   };
//
// Exactness: integer aggregates are exact whatever the merge order; a
// floating-point Sum or Avg may differ from a sequential fold by rounding
// (relative error about 1e-15 per merged partial).
//
// Thread safety: aggregates are stateless values; copy them freely.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace sluice::stream {

template <class A>
concept MergeableAggregate = std::is_trivially_copyable_v<typename A::State> &&
    std::is_trivially_copyable_v<typename A::Input> &&
    std::is_trivially_copyable_v<typename A::Result> &&
    requires(const A a, typename A::State s, const typename A::State o, const typename A::Input v) {
  { a.init() } -> std::convertible_to<typename A::State>;
  a.add(s, v);
  a.merge(s, o);
  { a.result(o) } -> std::convertible_to<typename A::Result>;
};

// The input of an aggregate that needs no value (count): takes no bytes in
// a record that carries it ([[no_unique_address]]).
struct Unit {};

// Number of records.
struct Count {
  using Input = Unit;
  using State = uint64_t;
  using Result = uint64_t;
  State init() const { return 0; }
  void add(State& s, Input) const { ++s; }
  void merge(State& s, const State& o) const { s += o; }
  Result result(const State& s) const { return s; }
};

template <class V>
struct Sum {
  using Input = V;
  using State = V;
  using Result = V;
  State init() const { return V{}; }
  void add(State& s, Input v) const { s += v; }
  void merge(State& s, const State& o) const { s += o; }
  Result result(const State& s) const { return s; }
};

template <class V>
struct Min {
  using Input = V;
  using State = V;
  using Result = V;
  State init() const { return std::numeric_limits<V>::max(); }
  void add(State& s, Input v) const { s = v < s ? v : s; }
  void merge(State& s, const State& o) const { s = o < s ? o : s; }
  Result result(const State& s) const { return s; }
};

template <class V>
struct Max {
  using Input = V;
  using State = V;
  using Result = V;
  State init() const { return std::numeric_limits<V>::lowest(); }
  void add(State& s, Input v) const { s = v > s ? v : s; }
  void merge(State& s, const State& o) const { s = o > s ? o : s; }
  Result result(const State& s) const { return s; }
};

// Mean of the values. With an integer V the running sum is an exact
// integer (so the mean is the same double whatever the merge order).
template <class V>
struct Avg {
  using Input = V;
  struct State {
    V sum;
    uint64_t count;
  };
  using Result = double;
  State init() const { return {V{}, 0}; }
  void add(State& s, Input v) const {
    s.sum += v;
    ++s.count;
  }
  void merge(State& s, const State& o) const {
    s.sum += o.sum;
    s.count += o.count;
  }
  Result result(const State& s) const {
    return s.count == 0 ? 0.0 : static_cast<double>(s.sum) / static_cast<double>(s.count);
  }
};

static_assert(MergeableAggregate<Count>);
static_assert(MergeableAggregate<Sum<int64_t>>);
static_assert(MergeableAggregate<Avg<int64_t>>);

}  // namespace sluice::stream
