// stream/window_op.h: the engine's operator for tumbling, sliding and global
// windows (engine.h drives it): per window start, a table of cells
// (cells.h) per key.
//
// slash: a record goes into every window that holds its time, into the
// table of the partition this worker leads if it leads the key's
// partition, else into a delta table; at the end of an epoch the delta
// tables are shipped to the leaders (one message per cell, or per record of
// a list cell) and cleared, and leaders fold them in with Cells::take.
//
// uppar: a record is pushed to the owner of its key, which folds it into
// its windows with Cells::add. A record the sender found late for some
// (oldest) windows of a sliding window is preceded by a control record
// naming the first window it counts for.
//
// Thread safety: one per worker.
#pragma once

#include <sluice/hash.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "stream/protocol.h"
#include "stream/state_table.h"
#include "stream/window.h"

namespace sluice::stream::detail {

template <class Q, Strategy S>
class WindowOp {
 public:
  using Out = typename Q::Record;
  using Cells = typename Q::Cells;
  using Cell = typename Cells::Cell;
  using Pool = typename Cells::Pool;
  static constexpr bool kSlash = S == Strategy::kSlash;
  using Payload = std::conditional_t<kSlash, typename Cells::Elem, typename Cells::Input>;
  using Message = Msg<Payload>;

  WindowOp(const Q& q, const EngineOptions& opt, uint32_t workers)
      : q_(q),
        cells_(q.cells()),
        window_(q.window),
        lateness_(opt.allowed_lateness),
        upsert_(opt.upsert),
        skip_(workers, kNoWatermark) {}

  // The watermark passes a window end (+ allowed lateness) between a and b.
  bool crosses_boundary(int64_t a, int64_t b) const {
    if (b == kNoWatermark || window_.is_global()) return false;
    if (a == kNoWatermark) return true;
    const int64_t step = window_.step();
    auto index = [&](int64_t x) {
      const int64_t y = saturating_add(x, -lateness_);
      return y >= 0 ? y / step : -((-y + step - 1) / step);
    };
    return index(b) > index(a);
  }

  // One record out of the operator chain, at this worker's watermark wm.
  template <class Ctx>
  void ingest(Ctx& ctx, const Out& o, int64_t t, uint64_t key, uint64_t h, uint32_t owner,
              int64_t wm) {
    if constexpr (kSlash) {
      window_.for_each(t, [&](int64_t start) {
        if (is_late(window_, start, wm, lateness_)) [[unlikely]] {
          ctx.late(start, t, key);
          return;
        }
        Table& tab = owner == ctx.me() ? owned(start) : delta(start);
        cells_.add(tab.cells.upsert(key, h, init()), tab.pool, q_.input_of(o));
        if (owner == ctx.me()) touched(start, key);
      });
    } else {
      int64_t first = kNoWatermark;  // the oldest window the record is not late for
      bool any_late = false;
      window_.for_each(t, [&](int64_t start) {
        if (is_late(window_, start, wm, lateness_)) [[unlikely]] {
          ctx.late(start, t, key);
          any_late = true;
        } else if (first == kNoWatermark) {
          first = start;
        }
      });
      if (first == kNoWatermark) return;  // late for every window
      if (owner == ctx.me()) {
        add_owned(ctx, key, h, t, first, q_.input_of(o));
        return;
      }
      if (any_late) [[unlikely]]
        ctx.push(owner, Message{std::bit_cast<uint64_t>(first), kSkipMsg, {}});
      ctx.push(owner, Message{key, t, q_.input_of(o)});
    }
  }

  // slash, at the end of an epoch: ships every delta to its leader and
  // clears the deltas; drops the tables of windows watermark wm has closed.
  template <class Ctx>
  void ship(Ctx& ctx, int64_t wm) {
    if constexpr (kSlash) {
      for (auto it = delta_.begin(); it != delta_.end() && ctx.ok();) {
        const int64_t start = it->first;
        Table& tab = it->second;
        tab.cells.for_each([&](uint64_t key, const Cell& c) {
          const uint32_t to = ctx.owner(sluice::hash64(key));
          cells_.ship(c, tab.pool, [&](const auto& e) { ctx.push(to, Message{key, start, e}); });
        });
        tab.cells.clear();
        tab.pool.clear();
        // A window this worker's watermark has closed takes no more local
        // updates: its (empty) delta table goes.
        if (is_late(window_, start, wm, lateness_)) {
          it = delta_.erase(it);
          delta_cache_ = nullptr;
        } else {
          ++it;
        }
      }
    }
  }

  // A data message from worker src: a delta (slash) or a record (uppar).
  template <class Ctx>
  void take(Ctx& ctx, uint32_t src, const Message& m) {
    const uint64_t h = sluice::hash64(m.key);
    if constexpr (kSlash) {
      if (!check_open(ctx, m.time)) return;
      Table& tab = owned(m.time);
      cells_.take(tab.cells.upsert(m.key, h, init()), tab.pool, m.payload);
      touched(m.time, m.key);
    } else {
      add_owned(ctx, m.key, h, m.time, skip_[src], m.payload);
      skip_[src] = kNoWatermark;
    }
  }
  // An operator's control record; false if it is not one.
  bool control(uint32_t src, const Message& m) {
    if (m.time != kSkipMsg) return false;
    skip_[src] = std::bit_cast<int64_t>(m.key);
    return true;
  }

  // Emits every window whose end (+ allowed lateness) `low` has passed.
  // Upsert: a window's rows once `low` passes its end, the rows of the keys
  // changed since (late records) at each trigger after, and at end +
  // allowed lateness its final rows counted (ctx.count_final) and its
  // state dropped.
  template <class Ctx>
  void trigger(Ctx& ctx, int64_t low, int64_t since_ns) {
    if (upsert_) return trigger_upsert(ctx, low, since_ns);
    close_windows(
        low,
        [&](int64_t start, int64_t end, uint64_t key, const auto& r) {
          ctx.emit(start, end, key, r);
        },
        [&](const Table& tab) {
          if (!tab.cells.empty()) ctx.note_latency(since_ns);
        });
  }

  // A checkpoint of the state (the worker takes it right after an epoch
  // ended, so slash's deltas are shipped and empty): the cells this worker
  // leads or owns in their shipped form, (key, window start, element), each
  // handed to put(); restore() folds such entries back in as a leader
  // folds deltas (the worker files them by key group, checkpoint.h).
  // `all`: every cell (a whole snapshot); else only the cells changed since
  // the last snapshot (an incremental one: its reader restores the
  // snapshots it builds on first, then these cells over theirs).
  using StateMsg = Msg<typename Cells::Elem>;
  static constexpr bool kIncremental = true;
  template <class Put>
  void snapshot(bool all, Put put) {
    for (auto& [start, tab] : owned_) {
      tab.cells.take_changed(all, [&](uint64_t key, const Cell& c) {
        cells_.ship(c, tab.pool, [&](const auto& e) { put(StateMsg{key, start, e}); });
      });
    }
  }
  // The windows the state holds now: what an incremental snapshot keeps of
  // the snapshots it builds on (a window dropped since is gone; a window
  // never opens again once dropped, check_open).
  std::vector<int64_t> windows() const {
    std::vector<int64_t> starts;
    starts.reserve(owned_.size());
    for (const auto& [start, tab] : owned_) starts.push_back(start);
    return starts;
  }
  // Entries of snapshots, all of keys this worker owns now. `replace`: the
  // entries are of an incremental snapshot read over earlier ones, each
  // cell whole (its entries in a row): it replaces what those restored.
  void restore(std::span<const StateMsg> entries, bool replace = false) {
    const StateMsg* prev = nullptr;
    for (const StateMsg& m : entries) {
      Table& tab = owned(m.time);
      Cell& c = tab.cells.upsert(m.key, sluice::hash64(m.key), init());
      // (A replaced cell's pool elements, if any, stay until its window
      // is dropped.)
      if (replace && (prev == nullptr || prev->key != m.key || prev->time != m.time))
        c = cells_.init();
      cells_.take(c, tab.pool, m.payload);
      prev = &m;
    }
  }

  bool empty() const { return owned_.empty(); }

  void note_state(uint64_t& entries, uint64_t& bytes) const {
    for (const auto* m : {&owned_, &delta_}) {
      for (const auto& [s, t] : *m)
        entries += t.cells.size(), bytes += t.cells.bytes() + t.pool.bytes();
    }
  }

 private:
  template <class Ctx>
  void trigger_upsert(Ctx& ctx, int64_t low, int64_t since_ns) {
    const auto rows = [&](int64_t start, const Table& tab, uint64_t key, const Cell& c) {
      cells_.results(c, tab.pool,
                     [&](const auto& r) { ctx.emit_update(start, window_.end(start), key, r); });
    };
    // The keys late records changed in windows that fired before.
    for (const auto& [start, key] : dirty_) {
      auto it = owned_.find(start);
      if (it == owned_.end()) continue;
      if (const Cell* c = it->second.cells.find(key, sluice::hash64(key)))
        rows(start, it->second, key, *c);
    }
    dirty_.clear();
    // Windows whose end the watermark passed now: every key's rows.
    for (auto& [start, tab] : owned_) {
      const int64_t end = window_.end(start);
      if (end > low) break;
      if (end <= fired_) continue;
      tab.cells.for_each([&](uint64_t key, const Cell& c) { rows(start, tab, key, c); });
      if (!tab.cells.empty()) ctx.note_latency(since_ns);
    }
    fired_ = std::max(fired_, low);
    // Past end + allowed lateness: final, counted, dropped.
    close_windows(
        low,
        [&](int64_t start, int64_t end, uint64_t key, const auto& r) {
          ctx.count_final(start, end, key, r);
        },
        [](const Table&) {});
  }

  // Drops every window whose end + allowed lateness `low` has passed, oldest
  // first, each of its rows to row(start, end, key, result) and then the
  // window's table to done(table).
  template <class Row, class Done>
  void close_windows(int64_t low, const Row& row, const Done& done) {
    while (!owned_.empty()) {
      auto it = owned_.begin();
      const int64_t start = it->first;
      const int64_t end = window_.end(start);
      if (saturating_add(end, lateness_) > low) break;
      const Table& tab = it->second;
      tab.cells.for_each([&](uint64_t key, const Cell& c) {
        cells_.results(c, tab.pool, [&](const auto& r) { row(start, end, key, r); });
      });
      done(tab);
      owned_.erase(it);
      owned_cache_ = nullptr;
    }
  }
  struct Table {
    StateTable<Cell> cells;
    Pool pool;
  };

  auto init() const {
    return [this] { return cells_.init(); };
  }
  // Upsert: a key of a window that has fired changed (emitted again at the
  // next trigger).
  void touched(int64_t start, uint64_t key) {
    if (upsert_ && window_.end(start) <= fired_) [[unlikely]]
      dirty_.insert({start, key});
  }
  Table& table(std::map<int64_t, Table>& m, int64_t start, int64_t& cached_start, Table*& cached) {
    if (cached != nullptr && cached_start == start) [[likely]]
      return *cached;
    auto it = m.try_emplace(start).first;
    cached_start = start;
    cached = &it->second;
    return it->second;
  }
  Table& owned(int64_t start) { return table(owned_, start, owned_start_, owned_cache_); }
  Table& delta(int64_t start) { return table(delta_, start, delta_start_, delta_cache_); }

  // uppar: folds a record into the owner's windows from `first` on.
  template <class Ctx, class V>
  void add_owned(Ctx& ctx, uint64_t key, uint64_t h, int64_t t, int64_t first, const V& v) {
    window_.for_each(t, [&](int64_t start) {
      if (start < first) return;
      if (!check_open(ctx, start)) return;
      Table& tab = owned(start);
      cells_.add(tab.cells.upsert(key, h, init()), tab.pool, v);
      touched(start, key);
    });
  }

  // False (and fails the run) if the window at `start` has triggered here.
  template <class Ctx>
  bool check_open(Ctx& ctx, int64_t start) {
    if (saturating_add(window_.end(start), lateness_) > ctx.triggered()) [[likely]]
      return true;
    ctx.protocol_error("an update for window " + std::to_string(start) +
                       " arrived after it triggered (watermark " + std::to_string(ctx.triggered()) +
                       ")");
    return false;
  }

  const Q& q_;
  Cells cells_;
  const WindowSpec window_;
  const int64_t lateness_;
  const bool upsert_;
  int64_t fired_ = kNoWatermark;                  // upsert: windows ending by this fired
  std::set<std::pair<int64_t, uint64_t>> dirty_;  // upsert: (start, key) changed since
  std::map<int64_t, Table> owned_;                // window start -> state this worker leads / owns
  std::map<int64_t, Table> delta_;  // slash: window start -> cells of other partitions
  int64_t owned_start_ = 0, delta_start_ = 0;
  Table* owned_cache_ = nullptr;
  Table* delta_cache_ = nullptr;
  std::vector<int64_t> skip_;  // uppar, per source: first window of its next record
};

}  // namespace sluice::stream::detail
