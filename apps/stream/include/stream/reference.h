// stream/reference.h: the single-threaded reference of a windowed query.
//
// Replays every worker's input in turn through the query's operators and
// folds it into one ordered map with Agg::add, record by record (or, for
// arg_max and joins, collects each window's records and applies the
// query's plain definition; for sessions, sorts each key's records by time
// and splits them where they lie a gap apart), applying
// the lateness rule of window.h with each worker's own watermark (which
// depends only on that worker's input order). It shares no state structure,
// flow or merge with the engine, so the engine's output must equal it: row
// for row for integer aggregates, and its late counts window for window.
//
// Thread safety: reference() touches only its arguments and locals.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "stream/report.h"
#include "stream/window.h"

namespace sluice::stream {

template <class R>
struct ReferenceResult {
  std::vector<Row<R>> rows;          // ordered by (window start, key) for aggregations
  std::map<int64_t, uint64_t> late;  // window start (sessions: gap-sized span) -> late records
  uint64_t records = 0;              // source records read
  bool sessions = false;             // rows are sessions (the checksum names their end)
  uint64_t checksum() const {
    uint64_t c = 0;
    for (const Row<R>& r : rows) c += row_checksum(r, sessions);
    return c;
  }
};

template <class Q>
ReferenceResult<typename Q::Result> reference(const Q& q, uint32_t workers, int64_t lag,
                                              int64_t allowed_lateness) {
  using In = typename Q::Input;
  using Out = typename Q::Record;
  using R = typename Q::Result;
  // Aggregations in fixed windows fold as they go (little memory for large
  // inputs); the others keep each group's records and apply the query's
  // definition (Q::reference_group) to them at the end.
  constexpr bool kFold = requires(const Q& x) { x.agg; };
  const bool sessions = q.window.is_session();
  ReferenceResult<R> out;
  out.sessions = sessions;
  std::map<std::pair<int64_t, uint64_t>, typename Q::Cells::Cell> acc;
  std::map<std::pair<int64_t, uint64_t>, std::vector<Out>> groups;
  std::map<uint64_t, std::vector<std::pair<int64_t, Out>>> by_key;  // sessions
  std::vector<In> buf(4096);
  for (uint32_t g = 0; g < workers; ++g) {
    auto source = q.make_source(g, workers);
    int64_t max_seen = kNoWatermark;
    auto fold = [&](const Out& o) {
      const int64_t t = static_cast<int64_t>(q.time_of(o));
      const uint64_t key = static_cast<uint64_t>(q.key_of(o));
      const int64_t wm = watermark_of(max_seen, lag);
      if (t > max_seen) max_seen = t;
      if (sessions) {
        if (is_late_for_sessions(t, wm, allowed_lateness)) {
          ++out.late[session_late_bucket(t, q.window.gap)];
        } else {
          by_key[key].push_back({t, o});
        }
        return;
      }
      q.window.for_each(t, [&](int64_t start) {
        if (is_late(q.window, start, wm, allowed_lateness)) {
          ++out.late[start];
          return;
        }
        if constexpr (kFold) {
          auto it = acc.try_emplace({start, key}, q.agg.init()).first;
          q.agg.add(it->second, q.value_of(o));
        } else {
          groups[{start, key}].push_back(o);
        }
      });
    };
    for (;;) {
      const size_t n = source(std::span<In>(buf));
      if (n == 0) {
        if constexpr (requires { source.done(); }) {
          if (!source.done()) continue;  // nothing yet (Kafka): ask again
        }
        break;
      }
      out.records += n;
      for (size_t i = 0; i < n; ++i) q.chain(buf[i], fold);
    }
  }
  if constexpr (kFold) {
    for (const auto& [wk, st] : acc)
      out.rows.push_back({wk.first, q.window.end(wk.first), wk.second, q.agg.result(st)});
  }
  for (const auto& [wk, group] : groups) {
    q.reference_group(group, [&](const R& v) {
      out.rows.push_back({wk.first, q.window.end(wk.first), wk.second, v});
    });
  }
  // Sessions: each key's records in time order, split where two
  // consecutive times lie a gap or more apart.
  std::vector<Out> group;
  for (auto& [key, recs] : by_key) {
    std::stable_sort(recs.begin(), recs.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < recs.size();) {
      size_t j = i + 1;
      while (j < recs.size() && recs[j].first - recs[j - 1].first < q.window.gap) ++j;
      group.clear();
      for (size_t k = i; k < j; ++k) group.push_back(recs[k].second);
      const int64_t start = recs[i].first, end = recs[j - 1].first + q.window.gap;
      q.reference_group(group, [&](const R& v) { out.rows.push_back({start, end, key, v}); });
      i = j;
    }
  }
  return out;
}

}  // namespace sluice::stream
