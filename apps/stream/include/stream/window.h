// stream/window.h: event-time windows, watermarks and the lateness rule
// that the engine and every reference share.
//
// Event time is a signed 64-bit count of milliseconds. A window is
// [start, start + size); tumbling windows have slide == size, sliding
// windows slide < size (a record belongs to size/slide of them), and the
// global window (size 0) holds everything and closes at end of stream.
//
// Watermarks (per worker): a worker that has seen event times up to m
// promises no record older than m - lag (lag: the out-of-orderness bound it
// assumes). A record that reaches a worker when that promise already covers
// the end of one of its windows plus the allowed lateness is *late* for
// that window: it is counted in the window's late count, never aggregated.
// The rule is applied by the worker that ingests the record, before the
// record raises its watermark, so it depends only on that worker's input
// order and a single-threaded reference can replay it exactly. A window
// triggers (its rows go to the sink) once every worker's watermark has
// passed end + allowed lateness; at end of stream every watermark is
// kEndOfTime.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace sluice::stream {

// The watermark of a worker that has seen nothing yet, and of one whose
// input has ended.
inline constexpr int64_t kNoWatermark = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kEndOfTime = std::numeric_limits<int64_t>::max();
// Event times must lie in [kMinEventTime, kMaxEventTime] (the values
// outside are kept for the engine's control records).
inline constexpr int64_t kMinEventTime = -(int64_t{1} << 61);
inline constexpr int64_t kMaxEventTime = int64_t{1} << 61;

inline int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kEndOfTime : kNoWatermark;
  return r;
}

struct WindowSpec {
  int64_t size = 0;   // ms; 0: one global window (unless a session gap is set)
  int64_t slide = 0;  // ms; 0 or == size: tumbling
  int64_t gap = 0;    // ms; > 0: session windows with this gap (size and slide unused)

  static WindowSpec global() { return {}; }
  static WindowSpec tumbling(int64_t size_ms) { return {size_ms, size_ms, 0}; }
  static WindowSpec sliding(int64_t size_ms, int64_t slide_ms) { return {size_ms, slide_ms, 0}; }
  // Session windows: a key's records whose event times lie less than
  // `gap_ms` apart (in time order) form one session; a session spans
  // [first time, last time + gap), and two sessions of a key that overlap
  // are one session. Sessions are merged wherever partial ones meet (see
  // session_op.h), so the result does not depend on which worker saw what.
  static WindowSpec session(int64_t gap_ms) { return {0, 0, gap_ms}; }

  bool is_session() const { return gap > 0; }
  bool is_global() const { return size == 0 && gap == 0; }
  int64_t step() const { return slide == 0 ? size : slide; }
  // Throws std::invalid_argument naming the problem.
  void validate() const {
    if (gap < 0 || gap > (int64_t{1} << 60)) {
      throw std::invalid_argument("session gap must lie in [1, 2^60] ms, not " +
                                  std::to_string(gap));
    }
    if (gap > 0) return;
    if (size > (int64_t{1} << 60)) {
      throw std::invalid_argument("window size must be at most 2^60 ms, not " +
                                  std::to_string(size));
    }
    if (size < 0)
      throw std::invalid_argument("window size must be >= 0 ms, not " + std::to_string(size));
    if (size > 0 && (step() <= 0 || step() > size || size % step() != 0)) {
      throw std::invalid_argument("window slide must divide the size and lie in (0, size], not " +
                                  std::to_string(slide) + " for size " + std::to_string(size));
    }
  }
  // The end of the window that starts at `start` (kEndOfTime for the global one).
  int64_t end(int64_t start) const { return is_global() ? kEndOfTime : start + size; }
  // The latest window start whose window holds time t.
  int64_t last_start(int64_t t) const {
    const int64_t s = step();
    const int64_t q = t >= 0 ? t / s : -((-t + s - 1) / s);
    return q * s;
  }
  // Calls f(start) for every window that holds time t, oldest first.
  template <class F>
  void for_each(int64_t t, F&& f) const {
    if (is_global()) {
      f(int64_t{0});
      return;
    }
    const int64_t last = last_start(t);
    for (int64_t st = last - size + step(); st <= last; st += step()) f(st);
  }
};

// One output row: the aggregate of `key` in window [start, end).
template <class R>
struct Row {
  int64_t start = 0;
  int64_t end = 0;
  uint64_t key = 0;
  R value{};
};

// True if a record at event time t reaching a worker at watermark wm is
// late for session windows: it is behind the watermark by more than the
// allowed lateness. A session triggers once the smallest watermark has
// passed its end (last time + gap) plus the allowed lateness, so a record
// that is not late (t >= wm - allowed_lateness) can neither touch nor
// extend a session that has triggered.
inline bool is_late_for_sessions(int64_t t, int64_t wm, int64_t allowed_lateness) {
  return wm != kNoWatermark && saturating_add(t, allowed_lateness) < wm;
}

// Late records of session windows are counted per gap-sized span of event
// time, keyed by its start (sessions have no fixed windows to name).
inline int64_t session_late_bucket(int64_t t, int64_t gap) {
  const int64_t q = t >= 0 ? t / gap : -((-t + gap - 1) / gap);
  return q * gap;
}

// The watermark of a worker that has seen event times up to max_seen.
inline int64_t watermark_of(int64_t max_seen, int64_t lag) {
  return max_seen == kNoWatermark ? kNoWatermark : saturating_add(max_seen, -lag);
}

// True if a record reaching a worker at watermark wm is late for the window
// that starts at `start`.
inline bool is_late(const WindowSpec& w, int64_t start, int64_t wm, int64_t allowed_lateness) {
  return wm != kNoWatermark && saturating_add(w.end(start), allowed_lateness) <= wm;
}

}  // namespace sluice::stream
