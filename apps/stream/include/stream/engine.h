// stream/engine.h: runs a windowed aggregation query (query.h) on every
// rank of a sluice job, T worker threads per rank, with one of two
// strategies:
//
// kSlash (eager partial state, after the Slash paper): every worker folds
// its own input into thread-local window state at once. The key space is
// split into W partitions (W = ranks x threads), partition p led by worker
// p. A worker updates the state of the partition it leads in place, and
// keeps the pairs of the other partitions in a delta table. At the end of
// an epoch (every `epoch_mib` of its input, and early when its watermark
// passes a window's end) it ships its delta pairs to their leaders through
// one flow, followed by an epoch marker carrying its epoch number and low
// watermark, and clears the deltas (the next epoch's updates start from
// zero, so each pair is shipped once per epoch in which it changed).
// Leaders merge the deltas commutatively (Agg::merge) and keep the vector
// of every worker's watermark; a window triggers at its leader once the
// smallest entry has passed its end plus the allowed lateness.
//
// kUppar (the re-partitioning baseline of Flink and Timely): every record is
// sent through the flow to the worker that owns its key, which keeps the only
// state of that key; workers send the same epoch markers (watermarks) to
// every owner, and owners trigger windows by the same rule.
//
// Both run on sluice::Worker: a worker reads a batch of its input, updates
// state (or pushes records), and polls the flow between batches; its pushes
// and closes keep consuming while they wait, and it parks only once its
// input is done and it waits for the others.
//
// Per-source FIFO of the flow is what makes the protocol sound: a worker's
// deltas (or records) of an epoch reach a leader before that epoch's
// marker, so a leader that has seen every worker's watermark pass a window
// holds every update to it. Leaders check that markers arrive with
// consecutive epoch numbers and that no update reaches a window that has
// triggered; either failure ends the run with an error naming it.
//
// Thread safety: run() is called by one thread per process; it starts and
// joins the worker threads. The sink is called concurrently from the
// workers (each with its own worker index).
#pragma once

#include <sluice/sluice.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "stream/query.h"
#include "stream/report.h"
#include "stream/state_table.h"
#include "stream/window.h"

namespace sluice::stream {

enum class Strategy : uint8_t { kSlash, kUppar };

struct EngineOptions {
  Strategy strategy = Strategy::kSlash;  // how state is kept and moved (see top)
  uint32_t threads = 1;                  // worker threads per rank
  double epoch_mib = 64;                 // MiB of input per worker between epochs
  int64_t lag = 0;                       // ms: watermark = largest event time seen - lag
  int64_t allowed_lateness = 0;          // ms a window waits past its end
  uint32_t batch = 1024;                 // records read from a source at a time
  uint32_t segment_bytes = 0;            // flow segment payload (0: the flow default)
  uint32_t ring_segments = 0;            // flow ring depth (0: the flow default)
  std::string flow_name = "stream";      // the name of the flow the engine declares
  // Called on each worker's thread after every batch with the records it
  // has ingested so far (test hooks; empty: never).
  std::function<void(uint32_t worker, uint64_t records)> on_progress;
};

namespace detail {

// What travels through the engine's flow, one record per message (native
// byte order; both ends run the same build):
//
//   offset 0   key      u64   data: the key; control: the value (below)
//   offset 8   time     i64   data: slash: window start; uppar: event time
//                             control: one of the k*Msg values below
//   offset 16  payload  P     slash: Agg::State; uppar: Agg::Input (none for
//                             Count: Unit takes no bytes)
//
// Data records have time > kLastControl (event times are at least
// kMinEventTime, window starts at least that minus a window size). A marker
// is three control records in a row: epoch number, send time, watermark.
template <class P>
struct Msg {
  uint64_t key;
  int64_t time;
  [[no_unique_address]] P payload;
};
static_assert(sizeof(Msg<Unit>) == 16 && offsetof(Msg<Unit>, time) == 8);
static_assert(sizeof(Msg<uint64_t>) == 24 && offsetof(Msg<uint64_t>, payload) == 16);

inline constexpr int64_t kEpochMsg = kNoWatermark;          // key: epoch number (1, 2, ...)
inline constexpr int64_t kSentMsg = kNoWatermark + 1;       // key: send time, ns since 1970
inline constexpr int64_t kWatermarkMsg = kNoWatermark + 2;  // key: the watermark (bits)
inline constexpr int64_t kSkipMsg =
    kNoWatermark + 3;  // key: first non-late window of the next record
inline constexpr int64_t kLastControl = kNoWatermark + 15;
static_assert(kLastControl < kMinEventTime - (int64_t{1} << 60),
              "control values below any window start");

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <class Q, class Sink, Strategy S>
class StreamWorker {
  using In = typename Q::Input;
  using Out = typename Q::Record;
  using Agg = typename Q::Aggregate;
  using State = typename Agg::State;
  using Value = typename Agg::Input;
  static constexpr bool kSlash = S == Strategy::kSlash;

 public:
  using Payload = std::conditional_t<kSlash, State, Value>;
  using Message = Msg<Payload>;

  StreamWorker(const Q& q, const EngineOptions& opt, Sink& sink, uint32_t rank, uint32_t slot,
               uint32_t workers, Source<Message> out, Target<Message> in)
      : q_(q),
        opt_(opt),
        sink_(sink),
        rank_(rank),
        me_(rank * opt.threads + slot),
        workers_(workers),
        out_(std::move(out)),
        w_(IdleStrategy{0, 64}),  // ranks and threads outnumber cores here: never spin
        vc_(workers, kNoWatermark),
        next_epoch_(workers, 1),
        sent_(workers, 0),
        skip_(workers, kNoWatermark) {
    epoch_bytes_ = std::max<uint64_t>(1, static_cast<uint64_t>(opt.epoch_mib * 1024 * 1024));
    w_.add(std::move(in),
           [this](std::span<const Message> batch, const BatchInfo& info) { take(batch, info); });
  }

  // Ingests this worker's input, then takes part in the flow until it ends.
  void run(std::latch& ready, std::latch& go) {
    auto source = q_.make_source(me_, workers_);
    std::vector<In> buf(std::max<uint32_t>(1, opt_.batch));
    ready.count_down();
    go.wait();
    uint64_t next_epoch_at = epoch_bytes_;
    auto ingest = [this](const Out& o) { this->ingest(o); };
    while (ok()) {
      const size_t n = source(std::span<In>(buf));
      if (n == 0) break;
      for (size_t i = 0; i < n; ++i) q_.chain(buf[i], ingest);
      report_.records_in += n;
      report_.input_bytes += n * sizeof(In);
      if (opt_.on_progress) opt_.on_progress(me_, report_.records_in);
      if (!ok()) break;
      const int64_t wm = watermark_of(max_seen_, opt_.lag);
      if (report_.input_bytes >= next_epoch_at || crosses_boundary(published_, wm)) {
        end_epoch(wm);
        next_epoch_at = report_.input_bytes + epoch_bytes_;
      }
      if (workers_ > 1) {
        // Take what has arrived (a few rounds at most, so that a flood of
        // records from others cannot starve this worker's own input).
        for (int round = 0; round < 16 && w_.poll() != 0; ++round) {
        }
        check_input();
      }
    }
    if (ok()) end_epoch(kEndOfTime);
    if (ok()) {
      if (const Status s = w_.close(out_); s != Status::kOk) fail_output("closing", s);
    }
    if (ok()) {
      const Status s = w_.run();
      if (s != Status::kEndOfFlow) fail_input("consuming", s);
    }
    if (ok()) {
      trigger(now_ns());
      if (!owned_.empty()) {
        error_ = "windows left untriggered at end of stream (a bug in the engine)";
      }
    }
    if (!ok()) {
      // Give up our ends at once, so that peers learn this worker is gone
      // instead of waiting for it.
      w_ = Worker();
      out_.abort();
    }
    report_.error = error_;
  }

  Report& report() { return report_; }
  // After a kPeerLost: the rank it named, if one was known.
  std::optional<uint32_t> lost_rank() const { return lost_rank_; }
  std::chrono::steady_clock::time_point failed_at() const { return failed_at_; }

 private:
  bool ok() const { return error_.empty(); }
  void fail(const std::string& what, Status s, const std::string& detail,
            std::optional<LostPeer> lost) {
    if (!ok()) return;
    error_ = what + ": " + to_string(s) + (detail.empty() ? "" : ": " + detail);
    if (lost) lost_rank_ = lost->rank;
    failed_at_ = std::chrono::steady_clock::now();
  }
  void fail_input(const char* what, Status s) {
    fail(what + std::string(" flow ") + opt_.flow_name, s, w_.error(0), w_.lost_peer(0));
  }
  void fail_output(const char* what, Status s) {
    fail(what + std::string(" flow ") + opt_.flow_name, s, out_.error(), out_.lost_peer());
  }
  void check_input() {
    const Status s = w_.status(0);
    if (s != Status::kOk && s != Status::kEndOfFlow) fail_input("consuming", s);
  }

  // The watermark passes a window end (+ allowed lateness) between a and b.
  bool crosses_boundary(int64_t a, int64_t b) const {
    if (b == kNoWatermark || q_.window.is_global()) return false;
    if (a == kNoWatermark) return true;
    const int64_t step = q_.window.step();
    auto index = [&](int64_t x) {
      const int64_t y = saturating_add(x, -opt_.allowed_lateness);
      return y >= 0 ? y / step : -((-y + step - 1) / step);
    };
    return index(b) > index(a);
  }

  StateTable<State>& table(std::map<int64_t, StateTable<State>>& m, int64_t start,
                           int64_t& cached_start, StateTable<State>*& cached) {
    if (cached != nullptr && cached_start == start) [[likely]]
      return *cached;
    auto it = m.try_emplace(start).first;
    cached_start = start;
    cached = &it->second;
    return it->second;
  }
  StateTable<State>& owned(int64_t start) {
    return table(owned_, start, owned_start_, owned_cache_);
  }
  StateTable<State>& delta(int64_t start) {
    return table(delta_, start, delta_start_, delta_cache_);
  }

  // One record out of the operator chain.
  void ingest(const Out& o) {
    const int64_t t = static_cast<int64_t>(q_.time_of(o));
    if (t < kMinEventTime || t > kMaxEventTime) [[unlikely]] {
      if (ok()) error_ = "event time " + std::to_string(t) + " out of range [-2^61, 2^61] ms";
      return;
    }
    const uint64_t key = static_cast<uint64_t>(q_.key_of(o));
    const Value v = q_.value_of(o);
    const uint64_t h = sluice::hash64(key);
    const uint32_t owner = sluice::reduce_hash(h, workers_);
    const int64_t wm = watermark_of(max_seen_, opt_.lag);
    max_seen_ = std::max(max_seen_, t);
    auto init = [this] { return q_.agg.init(); };
    if constexpr (kSlash) {
      q_.window.for_each(t, [&](int64_t start) {
        if (is_late(q_.window, start, wm, opt_.allowed_lateness)) [[unlikely]] {
          ++report_.late[start];
          return;
        }
        StateTable<State>& tab = owner == me_ ? owned(start) : delta(start);
        q_.agg.add(tab.upsert(key, h, init), v);
      });
    } else {
      int64_t first = kNoWatermark;  // the oldest window the record is not late for
      bool any_late = false;
      q_.window.for_each(t, [&](int64_t start) {
        if (is_late(q_.window, start, wm, opt_.allowed_lateness)) [[unlikely]] {
          ++report_.late[start];
          any_late = true;
        } else if (first == kNoWatermark) {
          first = start;
        }
      });
      if (first == kNoWatermark) return;  // late for every window
      if (owner == me_) {
        add_owned(key, h, t, first, v);
        return;
      }
      if (any_late) [[unlikely]]
        push(owner, Message{std::bit_cast<uint64_t>(first), kSkipMsg, {}});
      push(owner, Message{key, t, v});
    }
  }

  // uppar: folds a record into the owner's windows from `first` on.
  void add_owned(uint64_t key, uint64_t h, int64_t t, int64_t first, const Value& v) {
    auto init = [this] { return q_.agg.init(); };
    q_.window.for_each(t, [&](int64_t start) {
      if (start < first) return;
      if (!check_open(start)) return;
      q_.agg.add(owned(start).upsert(key, h, init), v);
    });
  }

  // False (and fails the run) if the window at `start` has triggered here.
  bool check_open(int64_t start) {
    if (saturating_add(q_.window.end(start), opt_.allowed_lateness) > triggered_) [[likely]]
      return true;
    if (ok()) {
      error_ = "protocol violation: an update for window " + std::to_string(start) +
               " arrived after it triggered (watermark " + std::to_string(triggered_) + ")";
    }
    return false;
  }

  void push(uint32_t target, const Message& m) {
    if (!ok()) return;
    const Status s = w_.push_to(out_, target, m);
    if (s != Status::kOk) fail_output("pushing into", s);
  }

  // Ends this worker's epoch: ships the deltas (slash) and a marker with
  // watermark `wm` to every other worker, then triggers what it can.
  void end_epoch(int64_t wm) {
    ++epoch_;
    ++report_.epochs;
    note_state_size();
    if constexpr (kSlash) {
      for (auto it = delta_.begin(); it != delta_.end() && ok();) {
        const int64_t start = it->first;
        it->second.for_each([&](uint64_t key, const State& st) {
          push(sluice::reduce_hash(sluice::hash64(key), workers_), Message{key, start, st});
        });
        it->second.clear();
        // A window this worker's watermark has closed takes no more local
        // updates: its (empty) delta table goes.
        if (is_late(q_.window, start, wm, opt_.allowed_lateness)) {
          it = delta_.erase(it);
          delta_cache_ = nullptr;
        } else {
          ++it;
        }
      }
    }
    const int64_t sent = now_ns();
    for (uint32_t j = 0; j < workers_ && ok(); ++j) {
      if (j == me_) continue;
      push(j, Message{epoch_, kEpochMsg, {}});
      push(j, Message{static_cast<uint64_t>(sent), kSentMsg, {}});
      push(j, Message{std::bit_cast<uint64_t>(wm), kWatermarkMsg, {}});
    }
    if (ok() && workers_ > 1) {
      if (const Status s = w_.flush(out_); s != Status::kOk) fail_output("flushing", s);
    }
    published_ = wm;
    vc_[me_] = wm;
    trigger(sent);
  }

  void note_state_size() {
    uint64_t entries = 0, bytes = 0;
    for (const auto& [s, t] : owned_) entries += t.size(), bytes += t.bytes();
    for (const auto& [s, t] : delta_) entries += t.size(), bytes += t.bytes();
    report_.state_entries = std::max(report_.state_entries, entries);
    report_.state_bytes = std::max(report_.state_bytes, bytes);
  }

  // The flow's handler: deltas or records, and markers, of one source.
  void take(std::span<const Message> batch, const BatchInfo& info) {
    report_.bytes_moved += batch.size_bytes();
    const uint32_t src = info.source;
    if (src / opt_.threads != rank_) report_.bytes_remote += batch.size_bytes();
    auto init = [this] { return q_.agg.init(); };
    for (const Message& m : batch) {
      if (m.time > kLastControl) [[likely]] {
        if constexpr (kSlash) {
          if (!check_open(m.time)) return;
          q_.agg.merge(owned(m.time).upsert(m.key, sluice::hash64(m.key), init), m.payload);
        } else {
          add_owned(m.key, sluice::hash64(m.key), m.time, skip_[src], m.payload);
          skip_[src] = kNoWatermark;
        }
        continue;
      }
      switch (m.time) {
        case kEpochMsg:
          if (m.key != next_epoch_[src]) {
            if (ok()) {
              error_ = "protocol violation: epoch " + std::to_string(m.key) + " of worker " +
                       std::to_string(src) + " arrived when epoch " +
                       std::to_string(next_epoch_[src]) + " was due";
            }
            return;
          }
          ++next_epoch_[src];
          break;
        case kSentMsg:
          sent_[src] = static_cast<int64_t>(m.key);
          break;
        case kWatermarkMsg:
          vc_[src] = std::bit_cast<int64_t>(m.key);
          trigger(sent_[src]);
          break;
        case kSkipMsg:
          skip_[src] = std::bit_cast<int64_t>(m.key);
          break;
        default:
          if (ok()) error_ = "protocol violation: unknown control record " + std::to_string(m.time);
          return;
      }
    }
  }

  // Emits every window whose end (+ allowed lateness) the smallest watermark
  // has passed. `since_ns`: when the watermark that completed it was sent.
  void trigger(int64_t since_ns) {
    const int64_t low = *std::min_element(vc_.begin(), vc_.end());
    if (low == kNoWatermark || low <= triggered_) return;
    triggered_ = low;
    while (!owned_.empty()) {
      auto it = owned_.begin();
      const int64_t start = it->first;
      const int64_t end = q_.window.end(start);
      if (saturating_add(end, opt_.allowed_lateness) > low) break;
      it->second.for_each([&](uint64_t key, const State& st) {
        const Row<typename Agg::Result> row{start, end, key, q_.agg.result(st)};
        sink_(me_, row);
        ++report_.rows;
        report_.checksum += row_hash(start, key, row.value);
      });
      if (!it->second.empty())
        report_.latency_ms.push_back(static_cast<double>(now_ns() - since_ns) / 1e6);
      owned_.erase(it);
      owned_cache_ = nullptr;
    }
  }

  Q q_;  // this worker's copy of the operators
  const EngineOptions& opt_;
  Sink& sink_;
  const uint32_t rank_, me_, workers_;
  Source<Message> out_;
  Worker w_;
  uint64_t epoch_bytes_ = 0;
  uint64_t epoch_ = 0;
  int64_t max_seen_ = kNoWatermark;             // largest event time ingested
  int64_t published_ = kNoWatermark;            // watermark of the last epoch marker
  int64_t triggered_ = kNoWatermark;            // smallest watermark at the last trigger
  std::map<int64_t, StateTable<State>> owned_;  // window start -> state this worker leads / owns
  std::map<int64_t, StateTable<State>> delta_;  // slash: window start -> pairs of other partitions
  int64_t owned_start_ = 0, delta_start_ = 0;
  StateTable<State>* owned_cache_ = nullptr;
  StateTable<State>* delta_cache_ = nullptr;
  std::vector<int64_t> vc_;           // every worker's watermark, as last heard
  std::vector<uint64_t> next_epoch_;  // per source: the epoch number due next
  std::vector<int64_t> sent_;         // per source: send time of its marker being read
  std::vector<int64_t> skip_;         // uppar, per source: first window of its next record
  std::string error_;
  std::optional<uint32_t> lost_rank_;
  std::chrono::steady_clock::time_point failed_at_{};
  Report report_;
};

template <class Q, class Sink, Strategy S>
Report run_with(Cluster& cluster, const Q& q, const EngineOptions& opt, Sink& sink) {
  using SW = StreamWorker<Q, Sink, S>;
  using Message = typename SW::Message;
  const uint32_t threads = opt.threads;
  const uint32_t world = cluster.world_size(), rank = cluster.rank();
  const uint32_t workers = world * threads;
  auto spec = shuffle<Message>(opt.flow_name)
                  .sources(cluster.all_ranks(threads))
                  .targets(cluster.all_ranks(threads))
                  .explicit_targets();
  if (opt.segment_bytes != 0) spec.segment_bytes(opt.segment_bytes);
  if (opt.ring_segments != 0) spec.ring_segments(opt.ring_segments);
  const DeclaredFlow flow = cluster.declare(spec);
  std::vector<std::unique_ptr<SW>> ws;
  for (uint32_t t = 0; t < threads; ++t) {
    ws.push_back(std::make_unique<SW>(q, opt, sink, rank, t, workers, cluster.source(spec, t),
                                      cluster.target(spec, t)));
  }
  std::latch ready(threads), go(1);
  std::vector<std::thread> pool;
  for (auto& w : ws) pool.emplace_back([&ready, &go, p = w.get()] { p->run(ready, go); });
  ready.wait();
  Report total;
  try {
    cluster.barrier("stream-start");
  } catch (...) {
    go.count_down();
    for (auto& t : pool) t.join();
    throw;
  }
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& t : pool) t.join();
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  total.cpu_seconds = process_cpu_seconds() - cpu0;
  // Several workers may fail, most only because a sibling's failure ended
  // its end of the flow (a failed worker abandons its ends at once): report
  // the first failure on this rank, the root cause here.
  SW* first = nullptr;
  for (auto& w : ws) {
    Report& r = w->report();
    if (!r.error.empty() && (first == nullptr || w->failed_at() < first->failed_at()))
      first = w.get();
  }
  for (auto& w : ws) {
    Report r = w->report();
    r.error.clear();
    r.seconds = 0;
    total.add(r);
  }
  if (first != nullptr) total.error = first->report().error;
  ws.clear();  // sources and targets go before the flow
  return total;
}

}  // namespace detail

// Runs `query` on this rank's workers (all ranks of the job call it with
// the same query and options) and returns this rank's report; rows go to
// sink(worker, Row<Result>) as windows trigger. A failure (a lost peer, a
// protocol violation, an event time out of range) is in report.error.
// Throws sluice::Error on a setup failure (declaring the flow, the start
// barrier).
template <class Q, class Sink>
Report run(Cluster& cluster, const Q& query, const EngineOptions& options, Sink& sink) {
  if (options.threads == 0)
    throw std::invalid_argument("EngineOptions::threads must be at least 1");
  if (!(options.epoch_mib > 0))
    throw std::invalid_argument("EngineOptions::epoch_mib must be positive");
  if (options.lag < 0 || options.allowed_lateness < 0) {
    throw std::invalid_argument("EngineOptions::lag and allowed_lateness must be >= 0 ms");
  }
  query.window.validate();
  if (options.strategy == Strategy::kSlash) {
    return detail::run_with<Q, Sink, Strategy::kSlash>(cluster, query, options, sink);
  }
  return detail::run_with<Q, Sink, Strategy::kUppar>(cluster, query, options, sink);
}

}  // namespace sluice::stream
