// stream/session_op.h: the engine's operator for session windows (engine.h
// drives it). A session of a key is a maximal set of its records whose
// event times, in time order, lie less than `gap` apart; it spans
// [first time, last time + gap) (window.h). Partial sessions are kept as
// intervals [start, last] with a cell (cells.h), in a list per key sorted by
// start, in which no two intervals meet (a.last + gap <= b.start).
//
// Sessions form a CRDT under merging: inserting an interval merges it with
// every interval of its key it meets (the cells combine with
// Cells::absorb), so the final sessions are the connected components of
// the union of every record's [t, t + gap), whatever the order in which
// partial sessions arrive and wherever they were built.
//
// slash: a worker inserts its record as [t, t] into the sessions of the
// partition it leads, or into a delta store; at the end of an epoch it
// ships every delta session to the leader (one message per cell, or per
// record of a list cell, each carrying the session's start and last time)
// and clears the store. The leader inserts what arrives.
// uppar: a record goes to the owner of its key as [t, t].
//
// Triggering: a session whose end plus the allowed lateness the smallest
// watermark has passed is emitted (row start = first time, end = last time
// + gap). A record is late if it is behind its worker's watermark by more
// than the allowed lateness (window.h), so no record that is let in can
// reach a session that has triggered; a leader checks this and fails the
// run naming the session if it ever happens.
//
// Thread safety: one per worker.
#pragma once

#include <sluice/hash.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "stream/cells.h"
#include "stream/protocol.h"
#include "stream/state_table.h"
#include "stream/window.h"

namespace sluice::stream::detail {

// A session message's payload: the session's last time, and a delta or a record.
template <class P>
struct SessionPayload {
  int64_t last;
  [[no_unique_address]] P item;
};

template <class Q, Strategy S>
class SessionOp {
 public:
  using Out = typename Q::Record;
  using Cells = typename Q::Cells;
  using Cell = typename Cells::Cell;
  using Pool = typename Cells::Pool;
  static constexpr bool kSlash = S == Strategy::kSlash;
  using Item = std::conditional_t<kSlash, typename Cells::Elem, typename Cells::Input>;
  using Payload = SessionPayload<Item>;
  using Message = Msg<Payload>;

  SessionOp(const Q& q, const EngineOptions& opt, uint32_t)
      : q_(q), cells_(q.cells()), gap_(q.window.gap), lateness_(opt.allowed_lateness) {}

  // Sessions can end anywhere: publish the watermark whenever it has moved
  // into a new gap-sized span of time (at most one gap of extra latency).
  bool crosses_boundary(int64_t a, int64_t b) const {
    if (b == kNoWatermark) return false;
    if (a == kNoWatermark) return true;
    return session_late_bucket(b, gap_) > session_late_bucket(a, gap_);
  }

  template <class Ctx>
  void ingest(Ctx& ctx, const Out& o, int64_t t, uint64_t key, uint64_t h, uint32_t owner,
              int64_t wm) {
    if (is_late_for_sessions(t, wm, lateness_)) [[unlikely]] {
      ctx.late(session_late_bucket(t, gap_), t, key);
      return;
    }
    const bool mine = owner == ctx.me();
    if constexpr (!kSlash) {
      if (!mine) {
        ctx.push(owner, Message{key, t, Payload{t, q_.input_of(o)}});
        return;
      }
    }
    insert(mine ? owned_ : delta_, key, h, t, t,
           [&](Cell& c, Pool& p) { cells_.add(c, p, q_.input_of(o)); });
    if (mine) min_end_ = std::min(min_end_, t + gap_);
  }

  template <class Ctx>
  void ship(Ctx& ctx, int64_t) {
    if constexpr (kSlash) {
      delta_.heads.for_each([&](uint64_t key, const uint32_t& head) {
        const uint32_t to = ctx.owner(sluice::hash64(key));
        for (uint32_t i = head; i != kNilNode; i = delta_.nodes[i].next) {
          const Session& x = delta_.nodes[i];
          cells_.ship(x.cell, delta_.pool, [&](const auto& e) {
            ctx.push(to, Message{key, x.start, Payload{x.last, e}});
          });
        }
      });
      delta_.clear();
    }
  }

  template <class Ctx>
  void take(Ctx& ctx, uint32_t, const Message& m) {
    const int64_t last = m.payload.last;
    if (saturating_add(last + gap_, lateness_) <= ctx.triggered()) [[unlikely]] {
      ctx.protocol_error("an update for the session of key " + std::to_string(m.key) + " at [" +
                         std::to_string(m.time) + ", " + std::to_string(last + gap_) +
                         ") arrived after it triggered (watermark " +
                         std::to_string(ctx.triggered()) + ")");
      return;
    }
    insert(owned_, m.key, sluice::hash64(m.key), m.time, last, [&](Cell& c, Pool& p) {
      if constexpr (kSlash) {
        cells_.take(c, p, m.payload.item);
      } else {
        cells_.add(c, p, m.payload.item);
      }
    });
    min_end_ = std::min(min_end_, last + gap_);
  }
  bool control(uint32_t, const Message&) { return false; }

  // Emits every session whose end (+ allowed lateness) `low` has passed.
  template <class Ctx>
  void trigger(Ctx& ctx, int64_t low, int64_t since_ns) {
    if (saturating_add(min_end_, lateness_) > low) return;  // nothing can be due
    int64_t min_end = kEndOfTime;
    size_t empty_keys = 0;
    bool any = false;
    owned_.heads.for_each_mut([&](uint64_t key, uint32_t& head) {
      uint32_t* link = &head;
      while (*link != kNilNode) {
        const uint32_t i = *link;
        Session& x = owned_.nodes[i];
        const int64_t end = x.last + gap_;
        if (saturating_add(end, lateness_) <= low) {
          cells_.results(x.cell, owned_.pool,
                         [&](const auto& r) { ctx.emit(x.start, end, key, r); });
          cells_.release(x.cell, owned_.pool);
          any = true;
          *link = x.next;
          owned_.free_node(i);
        } else {
          min_end = std::min(min_end, end);
          link = &x.next;
        }
      }
      if (head == kNilNode) ++empty_keys;
    });
    min_end_ = min_end;
    if (any) ctx.note_latency(since_ns);
    // Keys whose sessions have all gone leave empty entries: rebuild the
    // table once they are most of it, so that it does not grow with every
    // key ever seen.
    if (empty_keys > 1024 && empty_keys * 2 > owned_.heads.size()) {
      StateTable<uint32_t> live(owned_.heads.size() - empty_keys);
      owned_.heads.for_each([&](uint64_t key, const uint32_t& head) {
        if (head != kNilNode) live.upsert(key, sluice::hash64(key), [head] { return head; });
      });
      owned_.heads = std::move(live);
    }
  }

  // A checkpoint of the state (the worker takes it right after an epoch
  // ended, so slash's delta store was shipped and is empty): every session
  // this worker leads or owns, one entry per shipped element of its cell
  // (key, start, last time), each handed to put(); restore() inserts such
  // entries as a leader inserts what arrives (a list cell's elements of one
  // session merge again).
  // (Every snapshot is whole: `all` is always true for a session operator.)
  using StateMsg = Msg<SessionPayload<typename Cells::Elem>>;
  static constexpr bool kIncremental = false;
  template <class Put>
  void snapshot(bool /*all*/, Put put) const {
    owned_.heads.for_each([&](uint64_t key, const uint32_t& head) {
      for (uint32_t i = head; i != kNilNode; i = owned_.nodes[i].next) {
        const Session& x = owned_.nodes[i];
        cells_.ship(x.cell, owned_.pool, [&](const auto& e) {
          put(StateMsg{key, x.start, SessionPayload<typename Cells::Elem>{x.last, e}});
        });
      }
    });
  }
  // Entries of snapshots, all of keys this worker owns now.
  void restore(std::span<const StateMsg> entries) {
    for (const StateMsg& m : entries) {
      insert(owned_, m.key, sluice::hash64(m.key), m.time, m.payload.last,
             [&](Cell& c, Pool& p) { cells_.take(c, p, m.payload.item); });
      min_end_ = std::min(min_end_, m.payload.last + gap_);
    }
  }

  bool empty() const { return owned_.live == 0; }
  void note_state(uint64_t& entries, uint64_t& bytes) const {
    for (const Store* s : {&owned_, &delta_}) {
      entries += s->live;
      bytes += s->heads.bytes() + s->nodes.capacity() * sizeof(Session) + s->pool.bytes();
    }
  }

 private:
  struct Session {
    int64_t start, last;
    Cell cell;
    uint32_t next;
  };
  struct Store {
    StateTable<uint32_t> heads;  // key -> its first session (by start)
    std::vector<Session> nodes;  // every session, linked per key
    uint32_t free = kNilNode;    // unused nodes
    Pool pool;                   // the cells' lists
    uint64_t live = 0;           // sessions

    uint32_t alloc() {
      ++live;
      if (free != kNilNode) {
        const uint32_t i = free;
        free = nodes[i].next;
        return i;
      }
      nodes.emplace_back();
      return static_cast<uint32_t>(nodes.size() - 1);
    }
    void free_node(uint32_t i) {
      --live;
      nodes[i].next = free;
      free = i;
    }
    void clear() {
      heads.clear();
      nodes.clear();
      free = kNilNode;
      pool.clear();
      live = 0;
    }
  };

  // Inserts the session [start, last] whose cell `fill(cell, pool)` makes
  // into the key's list, merged with every session of the key it meets.
  template <class Fill>
  void insert(Store& s, uint64_t key, uint64_t h, int64_t start, int64_t last, Fill&& fill) {
    const uint32_t n = s.alloc();
    s.nodes[n] = {start, last, cells_.init(), kNilNode};
    fill(s.nodes[n].cell, s.pool);
    uint32_t* link = &s.heads.upsert(key, h, [] { return kNilNode; });
    // The list is sorted by start and its sessions do not meet: skip those
    // wholly before the new one, absorb those it meets (it grows, and may
    // then meet the next), and stop at the first wholly after it.
    while (*link != kNilNode) {
      const uint32_t i = *link;
      Session& x = s.nodes[i];
      Session& y = s.nodes[n];
      if (x.last + gap_ <= y.start) {
        link = &x.next;
      } else if (x.start < y.last + gap_) {
        y.start = std::min(y.start, x.start);
        y.last = std::max(y.last, x.last);
        cells_.absorb(y.cell, x.cell, s.pool);
        *link = x.next;
        s.free_node(i);
      } else {
        break;
      }
    }
    s.nodes[n].next = *link;
    *link = n;
  }

  const Q& q_;
  Cells cells_;
  const int64_t gap_;
  const int64_t lateness_;
  Store owned_;                   // sessions of the partition this worker leads / owns
  Store delta_;                   // slash: sessions of other partitions, this epoch
  int64_t min_end_ = kEndOfTime;  // no owned session ends before this
};

}  // namespace sluice::stream::detail
