// stream/query.h: the typed query API of the stream engine.
//
// A query reads a stream of a trivially copyable record type from a source
// (one per worker: every worker ingests its own partition of the input),
// applies stateless operators, and aggregates by key in event-time windows:
//
//   namespace ss = sluice::stream;
//   auto query = ss::from<Event>(make_source)                  // Event: the input record
//                    .filter([](const Event& e) { return e.type == kView; })
//                    .map([](const Event& e) { return View{e.campaign, e.time}; })
//                    .window(ss::WindowSpec::tumbling(10'000), &View::time)
//                    .key_by(&View::campaign)
//                    .aggregate(ss::Count{});                   // or
//                    .aggregate(ss::Sum<int64_t>{}, value_fn)
//   ss::Report rep = ss::run(cluster, query, engine_options, sink);   // engine.h
//
// make_source(worker, workers) is called once per worker (on its thread)
// and returns a callable `size_t(std::span<Event> out)` that fills `out`
// with the worker's next records and returns how many, 0 at the end of its
// input. Key and time extractors are callables on the mapped record (or
// pointers to its members); the key is a uint64_t, the time milliseconds.
//
// Operators compose at compile time (no virtual call or std::function per
// record): filter and map wrap the chain before them in a lambda.
//
// Thread safety: a query is a value; run() copies its parts into every
// worker, so each worker owns its own source, operators and extractors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "stream/aggregates.h"
#include "stream/cells.h"
#include "stream/window.h"

namespace sluice::stream {

namespace detail {

// A member pointer or a callable, as a callable.
template <class F>
auto as_callable(F f) {
  if constexpr (std::is_member_pointer_v<F>) {
    return [f](const auto& r) { return std::invoke(f, r); };
  } else {
    return f;
  }
}

struct Identity {
  template <class R, class Emit>
  void operator()(const R& r, Emit&& emit) const {
    emit(r);
  }
};

struct NoValue {
  template <class R>
  Unit operator()(const R&) const {
    return {};
  }
};

}  // namespace detail

// A finished query: the source, the operator chain from In to Out, the
// window, the key, the time and value extractors and the aggregate.
template <class In, class Out, class MakeSource, class Chain, class TimeFn, class KeyFn,
          class ValueFn, MergeableAggregate Agg>
struct AggregationQuery {
  using Input = In;
  using Record = Out;
  using Aggregate = Agg;
  using Result = typename Agg::Result;
  MakeSource make_source;
  Chain chain;
  WindowSpec window;
  TimeFn time_of;
  KeyFn key_of;
  ValueFn value_of;
  Agg agg;

  using Cells = AggCells<Agg>;
  Cells cells() const { return {agg}; }
  typename Agg::Input input_of(const Out& o) const { return value_of(o); }
  // The definition, for the single-threaded reference: a plain fold.
  template <class F>
  void reference_group(const std::vector<Out>& group, F&& f) const {
    typename Agg::State s = agg.init();
    for (const Out& o : group) agg.add(s, value_of(o));
    f(agg.result(s));
  }
};

// A finished query whose state is a list of records per (window, key)
// (cells.h): arg_max and join.
template <class In, class Out, class MakeSource, class Chain, class TimeFn, class KeyFn,
          class Policy>
struct ListQuery {
  using Input = In;
  using Record = Out;
  using Result = typename Policy::Result;
  using Cells = ListCells<Policy>;
  MakeSource make_source;
  Chain chain;
  WindowSpec window;
  TimeFn time_of;
  KeyFn key_of;
  Policy policy;

  Cells cells() const { return {policy}; }
  const Out& input_of(const Out& o) const { return o; }
  template <class F>
  void reference_group(const std::vector<Out>& group, F&& f) const {
    policy.reference(group, f);
  }
};

template <class In, class Out, class MakeSource, class Chain, class TimeFn, class KeyFn>
class KeyedStream {
 public:
  KeyedStream(MakeSource s, Chain c, WindowSpec w, TimeFn t, KeyFn k)
      : source_(std::move(s)),
        chain_(std::move(c)),
        window_(w),
        time_(std::move(t)),
        key_(std::move(k)) {}

  // Aggregates `value_of(record)` per key and window with `agg`.
  template <MergeableAggregate Agg, class ValueFn>
  auto aggregate(Agg agg, ValueFn value_of) const {
    auto v = detail::as_callable(std::move(value_of));
    static_assert(
        std::is_convertible_v<std::invoke_result_t<decltype(v), const Out&>, typename Agg::Input>,
        "the value function must return the aggregate's Input type");
    return AggregationQuery<In, Out, MakeSource, Chain, TimeFn, KeyFn, decltype(v), Agg>{
        source_, chain_, window_, time_, key_, std::move(v), agg};
  }
  // An aggregate that needs no value (Count).
  template <MergeableAggregate Agg>
  requires std::is_same_v<typename Agg::Input, Unit>
  auto aggregate(Agg agg) const { return aggregate(agg, detail::NoValue{}); }

  // Every record whose value_of(record) equals the largest value of its
  // key and window (all of them when several tie): rows carry the record.
  template <class ValueFn>
  auto arg_max(ValueFn value_of) const {
    auto v = detail::as_callable(std::move(value_of));
    using P = ArgMaxPolicy<Out, decltype(v)>;
    return ListQuery<In, Out, MakeSource, Chain, TimeFn, KeyFn, P>{
        source_, chain_, window_, time_, key_, P{std::move(v)}};
  }
  // The windowed equi-join of the stream's two record kinds: side_of(r) is
  // false for a left record, true for a right one; every (left, right) pair
  // with the same key in the same window gives a row combine(left, right).
  template <class SideFn, class CombineFn>
  auto join(SideFn side_of, CombineFn combine) const {
    auto s = detail::as_callable(std::move(side_of));
    using P = JoinPolicy<Out, decltype(s), CombineFn>;
    static_assert(std::is_trivially_copyable_v<typename P::Result>,
                  "the join's combine must return a trivially copyable row value");
    return ListQuery<In, Out, MakeSource, Chain, TimeFn, KeyFn, P>{
        source_, chain_, window_, time_, key_, P{std::move(s), std::move(combine), {}, {}}};
  }

 private:
  MakeSource source_;
  Chain chain_;
  WindowSpec window_;
  TimeFn time_;
  KeyFn key_;
};

template <class In, class Out, class MakeSource, class Chain, class TimeFn>
class WindowedStream {
 public:
  WindowedStream(MakeSource s, Chain c, WindowSpec w, TimeFn t)
      : source_(std::move(s)), chain_(std::move(c)), window_(w), time_(std::move(t)) {}

  template <class KeyFn>
  auto key_by(KeyFn key_of) const {
    auto k = detail::as_callable(std::move(key_of));
    static_assert(std::is_convertible_v<std::invoke_result_t<decltype(k), const Out&>, uint64_t>,
                  "the key function must return an integer key (up to 64 bits)");
    return KeyedStream<In, Out, MakeSource, Chain, TimeFn, decltype(k)>(source_, chain_, window_,
                                                                        time_, std::move(k));
  }

 private:
  MakeSource source_;
  Chain chain_;
  WindowSpec window_;
  TimeFn time_;
};

template <class In, class Out, class MakeSource, class Chain>
class Stream {
  static_assert(std::is_trivially_copyable_v<In>, "stream records must be trivially copyable");

 public:
  Stream(MakeSource s, Chain c) : source_(std::move(s)), chain_(std::move(c)) {}

  // Keeps the records for which pred(record) is true.
  template <class Pred>
  auto filter(Pred pred) const {
    auto c = [chain = chain_, pred = detail::as_callable(std::move(pred))](const In& r,
                                                                           auto&& emit) {
      chain(r, [&](const Out& o) {
        if (pred(o)) emit(o);
      });
    };
    return Stream<In, Out, MakeSource, decltype(c)>(source_, std::move(c));
  }
  // Replaces every record by fn(record) (a projection, a derived record).
  template <class Fn>
  auto map(Fn fn) const {
    auto f = detail::as_callable(std::move(fn));
    using Next = std::decay_t<std::invoke_result_t<decltype(f), const Out&>>;
    static_assert(std::is_trivially_copyable_v<Next>,
                  "map must produce a trivially copyable record");
    auto c = [chain = chain_, f](const In& r, auto&& emit) {
      chain(r, [&](const Out& o) { emit(f(o)); });
    };
    return Stream<In, Next, MakeSource, decltype(c)>(source_, std::move(c));
  }
  // Event-time windows over time_of(record) (milliseconds).
  template <class TimeFn>
  auto window(WindowSpec w, TimeFn time_of) const {
    w.validate();
    auto t = detail::as_callable(std::move(time_of));
    return WindowedStream<In, Out, MakeSource, Chain, decltype(t)>(source_, chain_, w,
                                                                   std::move(t));
  }

 private:
  MakeSource source_;
  Chain chain_;
};

// The start of a query: records of type In from make_source(worker, workers).
template <class In, class MakeSource>
auto from(MakeSource make_source) {
  return Stream<In, In, MakeSource, detail::Identity>(std::move(make_source), detail::Identity{});
}

}  // namespace sluice::stream
