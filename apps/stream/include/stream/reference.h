// stream/reference.h: the single-threaded reference of a windowed query.
//
// Replays every worker's input in turn through the query's operators and
// folds it into one ordered map with Agg::add, record by record, applying
// the lateness rule of window.h with each worker's own watermark (which
// depends only on that worker's input order). It shares no state structure,
// flow or merge with the engine, so the engine's output must equal it: row
// for row for integer aggregates, and its late counts window for window.
//
// Thread safety: reference() touches only its arguments and locals.
#pragma once

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
  std::vector<Row<R>> rows;          // ordered by (window start, key)
  std::map<int64_t, uint64_t> late;  // window start -> late records
  uint64_t records = 0;              // source records read
  uint64_t checksum() const {
    uint64_t c = 0;
    for (const Row<R>& r : rows) c += row_hash(r.start, r.key, r.value);
    return c;
  }
};

template <class Q>
ReferenceResult<typename Q::Result> reference(const Q& q, uint32_t workers, int64_t lag,
                                              int64_t allowed_lateness) {
  using In = typename Q::Input;
  using Out = typename Q::Record;
  using State = typename Q::Aggregate::State;
  ReferenceResult<typename Q::Result> out;
  std::map<std::pair<int64_t, uint64_t>, State> acc;
  std::vector<In> buf(4096);
  for (uint32_t g = 0; g < workers; ++g) {
    auto source = q.make_source(g, workers);
    int64_t max_seen = kNoWatermark;
    auto fold = [&](const Out& o) {
      const int64_t t = static_cast<int64_t>(q.time_of(o));
      const uint64_t key = static_cast<uint64_t>(q.key_of(o));
      const int64_t wm = watermark_of(max_seen, lag);
      q.window.for_each(t, [&](int64_t start) {
        if (is_late(q.window, start, wm, allowed_lateness)) {
          ++out.late[start];
          return;
        }
        auto it = acc.try_emplace({start, key}, q.agg.init()).first;
        q.agg.add(it->second, q.value_of(o));
      });
      if (t > max_seen) max_seen = t;
    };
    for (;;) {
      const size_t n = source(std::span<In>(buf));
      if (n == 0) break;
      out.records += n;
      for (size_t i = 0; i < n; ++i) q.chain(buf[i], fold);
    }
  }
  out.rows.reserve(acc.size());
  for (const auto& [wk, st] : acc) {
    out.rows.push_back({wk.first, q.window.end(wk.first), wk.second, q.agg.result(st)});
  }
  return out;
}

}  // namespace sluice::stream
