// stream/cells.h: what the engine keeps per (window, key), as "cells" with
// a commutative merge, for the two kinds of stateful operator:
//
// AggCells<Agg>: a keyed aggregate (aggregates.h). The cell is Agg::State;
// slash ships the cell itself as a delta and leaders merge it.
//
// ListCells<Policy>: a list of records per (window, key), for operators that
// must keep the records themselves: the records at the maximum (arg_max,
// NEXMark Q7) and the two sides of a windowed equi-join (NB8, NB11). Lists
// live in a pool per table (linked nodes in one vector with a free list),
// so appending allocates nothing once the pool has grown. Slash ships every
// record of a delta list as its own message and the leader folds it in with
// the same rule a local record meets (`take` is `add`), so the lists at the
// leader are the union of everyone's, whatever the order:
//  - arg_max: a record above the cell's maximum replaces the list, one equal
//    to it is appended, one below is dropped; the final list is every record
//    equal to the largest value (a commutative, idempotent-free merge of
//    (max, multiset at max) pairs);
//  - join: every record is appended; at trigger the cell's left and right
//    records are paired.
//
// The engine calls, per table (a window's, or a session store's):
//   Cell init(); add(cell, pool, input); take(cell, pool, elem);
//   ship(cell, pool, f(elem)); absorb(dst, src, pool) (merge two cells of
//   one pool: sessions that meet); results(cell, pool, f(result));
//   release(cell, pool) (the cell's nodes go back to the free list).
//
// Thread safety: a cells object and its pools belong to one worker.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "stream/aggregates.h"

namespace sluice::stream {

template <MergeableAggregate Agg>
struct AggCells {
  using Input = typename Agg::Input;
  using Elem = typename Agg::State;  // a slash delta: the partial state
  using Cell = typename Agg::State;
  using Result = typename Agg::Result;
  struct Pool {
    void clear() {}
    size_t bytes() const { return 0; }
  };

  Agg agg;

  Cell init() const { return agg.init(); }
  void add(Cell& c, Pool&, const Input& v) const { agg.add(c, v); }
  void take(Cell& c, Pool&, const Elem& e) const { agg.merge(c, e); }
  template <class F>
  void ship(const Cell& c, const Pool&, F&& f) const {
    f(c);
  }
  void absorb(Cell& dst, const Cell& src, Pool&) const { agg.merge(dst, src); }
  template <class F>
  void results(const Cell& c, const Pool&, F&& f) const {
    f(agg.result(c));
  }
  void release(Cell&, Pool&) const {}
};

// What a list policy decides for a record meeting a cell's header.
enum class Admit : uint8_t { kDrop, kAppend, kReplace };
// What it decides when two cells of a key meet (src merged into dst).
enum class Combine : uint8_t { kKeepDst, kTakeSrc, kConcat };

inline constexpr uint32_t kNilNode = 0xffffffffu;

template <class E>
class ListPool {
 public:
  struct Node {
    E elem;
    uint32_t next;
  };
  uint32_t push(const E& e) {
    if (free_ != kNilNode) {
      const uint32_t i = free_;
      free_ = nodes_[i].next;
      nodes_[i] = {e, kNilNode};
      return i;
    }
    nodes_.push_back({e, kNilNode});
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  Node& operator[](uint32_t i) { return nodes_[i]; }
  const Node& operator[](uint32_t i) const { return nodes_[i]; }
  // Gives the chain head..tail back.
  void free_chain(uint32_t head, uint32_t tail) {
    if (head == kNilNode) return;
    nodes_[tail].next = free_;
    free_ = head;
  }
  void clear() {
    nodes_.clear();
    free_ = kNilNode;
  }
  size_t bytes() const { return nodes_.capacity() * sizeof(Node); }

 private:
  std::vector<Node> nodes_;
  uint32_t free_ = kNilNode;
};

template <class Policy>
struct ListCells {
  using Elem = typename Policy::Elem;
  using Input = Elem;
  using Result = typename Policy::Result;
  using Header = typename Policy::Header;
  struct Cell {
    Header header;
    uint32_t head, tail;
  };
  using Pool = ListPool<Elem>;

  Policy policy;

  Cell init() const { return {policy.init(), kNilNode, kNilNode}; }
  void add(Cell& c, Pool& p, const Elem& e) const {
    switch (policy.admit(c.header, e)) {
      case Admit::kDrop:
        return;
      case Admit::kReplace:
        p.free_chain(c.head, c.tail);
        c.head = c.tail = kNilNode;
        [[fallthrough]];
      case Admit::kAppend: {
        const uint32_t n = p.push(e);
        if (c.tail == kNilNode) {
          c.head = n;
        } else {
          p[c.tail].next = n;
        }
        c.tail = n;
      }
    }
  }
  void take(Cell& c, Pool& p, const Elem& e) const { add(c, p, e); }
  template <class F>
  void ship(const Cell& c, const Pool& p, F&& f) const {
    for (uint32_t i = c.head; i != kNilNode; i = p[i].next) f(p[i].elem);
  }
  void absorb(Cell& dst, Cell& src, Pool& p) const {
    switch (policy.combine(dst.header, src.header)) {
      case Combine::kKeepDst:
        p.free_chain(src.head, src.tail);
        break;
      case Combine::kTakeSrc:
        p.free_chain(dst.head, dst.tail);
        dst = src;
        break;
      case Combine::kConcat:
        if (src.head == kNilNode) break;
        if (dst.tail == kNilNode) {
          dst.head = src.head;
        } else {
          p[dst.tail].next = src.head;
        }
        dst.tail = src.tail;
        break;
    }
    src.head = src.tail = kNilNode;
  }
  template <class F>
  void results(const Cell& c, const Pool& p, F&& f) const {
    policy.results(
        c.header,
        [&](auto&& visit) {
          for (uint32_t i = c.head; i != kNilNode; i = p[i].next) visit(p[i].elem);
        },
        f);
  }
  void release(Cell& c, Pool& p) const {
    p.free_chain(c.head, c.tail);
    c.head = c.tail = kNilNode;
  }
};

// Every record whose value equals the largest value of its (window, key):
// NEXMark Q7's "bids at the highest price".
template <class Rec, class ValueFn>
struct ArgMaxPolicy {
  using Elem = Rec;
  using Result = Rec;
  using Value = std::decay_t<std::invoke_result_t<ValueFn, const Rec&>>;
  struct Header {
    Value max;
    bool any;
  };
  ValueFn value_of;

  Header init() const { return {Value{}, false}; }
  Admit admit(Header& h, const Rec& r) const {
    const Value v = value_of(r);
    if (!h.any || v > h.max) {
      h = {v, true};
      return Admit::kReplace;
    }
    return v == h.max ? Admit::kAppend : Admit::kDrop;
  }
  Combine combine(Header& dst, const Header& src) const {
    if (!src.any) return Combine::kKeepDst;
    if (!dst.any || src.max > dst.max) return Combine::kTakeSrc;
    return src.max == dst.max ? Combine::kConcat : Combine::kKeepDst;
  }
  template <class Each, class F>
  void results(const Header&, Each&& each, F&& f) const {
    each([&](const Rec& r) { f(r); });
  }
  // The definition, for the single-threaded reference: no shared code with
  // the incremental rule above.
  template <class F>
  void reference(const std::vector<Rec>& group, F&& f) const {
    if (group.empty()) return;
    Value best = value_of(group[0]);
    for (const Rec& r : group) best = std::max(best, value_of(r));
    for (const Rec& r : group)
      if (value_of(r) == best) f(r);
  }
};

// The windowed equi-join of two record kinds in one stream: side_of(r) is
// false for the left side, true for the right; every (left, right) pair of
// a (window, key) gives combine(left, right).
template <class Rec, class SideFn, class CombineFn>
struct JoinPolicy {
  using Elem = Rec;
  using Result = std::decay_t<std::invoke_result_t<CombineFn, const Rec&, const Rec&>>;
  struct Header {};
  SideFn side_of;
  CombineFn combine_fn;
  // Per worker (each worker has its own copy of the query): the cell's
  // left and right records at trigger time, reused.
  mutable std::vector<Rec> left_, right_;

  Header init() const { return {}; }
  Admit admit(Header&, const Rec&) const { return Admit::kAppend; }
  Combine combine(Header&, const Header&) const { return Combine::kConcat; }
  template <class Each, class F>
  void results(const Header&, Each&& each, F&& f) const {
    left_.clear();
    right_.clear();
    each([&](const Rec& r) { (side_of(r) ? right_ : left_).push_back(r); });
    for (const Rec& l : left_)
      for (const Rec& r : right_) f(combine_fn(l, r));
  }
  template <class F>
  void reference(const std::vector<Rec>& group, F&& f) const {
    for (const Rec& l : group) {
      if (side_of(l)) continue;
      for (const Rec& r : group)
        if (side_of(r)) f(combine_fn(l, r));
    }
  }
};

}  // namespace sluice::stream
