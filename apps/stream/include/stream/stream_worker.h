// stream/stream_worker.h: one worker of the streaming engine (engine.h
// runs one per thread on every rank) for a windowed query (query.h: an
// aggregation, an arg_max or a join, in tumbling, sliding, global or
// session windows): its loop, epochs, markers and watermark vector,
// checkpoints and savepoints (restoring one: stream_worker_restore.h); the
// state per (window, key) and what a record does to it are the operator's
// (window_op.h for fixed windows, session_op.h for sessions), its cells
// (cells.h) an aggregate's state or a list of records.
//
// kSlash (eager partial state, after the Slash paper): every worker folds
// its own input into thread-local window state at once. The key space is
// split into G key groups, fixed for the job (key_groups.h), each led by
// one of the W workers (W = ranks x threads), which leads a contiguous
// range of them. A worker updates the state of the keys it leads in
// place, and keeps the pairs of the others in a delta table. At the end of
// an epoch (every `epoch_mib` of its input, and early when its watermark
// passes a window's end) it ships its delta pairs to their leaders through
// one flow, followed by an epoch marker carrying its epoch number and low
// watermark, and clears the deltas (the next epoch's updates start from
// zero, so each pair is shipped once per epoch in which it changed).
// Leaders merge the deltas commutatively (Agg::merge, list union, session
// merging) and keep the vector
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
// joins the worker threads (sluice::run_workers). The sink is called
// concurrently from the workers (each with its own worker index).
#pragma once

#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "stream/key_groups.h"
#include "stream/protocol.h"
#include "stream/query.h"
#include "stream/report.h"
#include "stream/session_op.h"
#include "stream/window.h"
#include "stream/window_op.h"

namespace sluice::stream {

namespace detail {

// One worker: the loop, epochs, markers, the vector of watermarks and
// failure handling; the state and what travels are the operator's (Op:
// WindowOp or SessionOp), which calls back into the worker for the
// context (push, late, emit, protocol_error, ...).
template <class Q, class Sink, class Op>
class StreamWorker {
  using In = typename Q::Input;
  using Out = typename Q::Record;

 public:
  using Message = typename Op::Message;

  StreamWorker(const Q& q, const EngineOptions& opt, Sink& sink, uint32_t rank, uint32_t slot,
               uint32_t workers, Source<Message> out, Target<Message> in, uint64_t restore_id,
               uint64_t first_id)
      : q_(q),
        opt_(opt),
        sink_(sink),
        rank_(rank),
        me_(rank * opt.threads + slot),
        workers_(workers),
        groups_(opt.key_groups, workers),
        op_(q_, opt, workers),
        out_(std::move(out)),
        w_(IdleStrategy{0, 64}),  // ranks and threads outnumber cores here: never spin
        vc_(workers, kNoWatermark),
        idle_of_(workers, 0),
        next_epoch_(workers, 1),
        sent_(workers, 0),
        restore_id_(restore_id),
        ckpt_id_(first_id) {
    epoch_bytes_ = std::max<uint64_t>(1, static_cast<uint64_t>(opt.epoch_mib * 1024 * 1024));
    ckpt_on_ = !opt.checkpoint.dir.empty();
    ckpt_every_ns_ = std::max<int64_t>(1, opt.checkpoint.every_ms) * 1'000'000;
    w_.add(std::move(in),
           [this](std::span<const Message> batch, const BatchInfo& info) { take(batch, info); });
  }

  // Ingests this worker's input, then takes part in the flow until it ends.
  // The clock starts at `start` (every worker of every rank has its source
  // ready). Throws sluice::PeerLostError (a lost peer, by rank) or
  // std::runtime_error (any other failure) after giving up its ends.
  void run(StartLine& start) {
    auto source = q_.make_source(me_, workers_);
    std::vector<In> buf(std::max<uint32_t>(1, opt_.batch));
    if constexpr (requires { source.position(); }) {
      position_ = [&source] { return source.position(); };
    }
    if constexpr (requires { source.lanes(); }) {
      if (source.lanes() >= 0) {
        lane_max_.assign(static_cast<size_t>(source.lanes()), kNoWatermark);
        lane_idle_.assign(lane_max_.size(), 0);
        idle_lanes_ = [&source](std::vector<char>& idle) { source.idle_lanes(idle); };
      }
    }
    if (ckpt_on_) restore(source);
    start.wait();
    // Progress for the user, and the line a fault test's `sluice run
    // --faults-after` waits for (no rank is told of a fault).
    if (me_ == 0)
      std::fprintf(stderr, "sluice-stream: flow '%s' started on every rank\n",
                   opt_.flow_name.c_str());
    uint64_t next_epoch_at = report_.input_bytes + epoch_bytes_;
    next_ckpt_ns_ = now_ns() + ckpt_every_ns_;
    auto ingest = [this](const Out& o) { this->ingest(o); };
    while (ok() && !stopped_) {
      // A source that holds its records in memory lends them in place
      // (view); any other fills our buffer.
      const In* data = buf.data();
      size_t n = 0;
      const size_t want = paced(buf.size());
      if (want == 0) {  // ahead of --throttle's pace
        idle_turn();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if constexpr (requires { source.view(size_t{1}); }) {
        const std::span<const In> v = source.view(want);
        data = v.data();
        n = v.size();
      } else {
        n = source(std::span<In>(buf).first(want));
      }
      if (n == 0) {
        // A source with done() (Kafka) may have nothing now and more later:
        // take what the flow brought meanwhile, then ask again.
        if constexpr (requires { source.done(); }) {
          if (!source.done()) {
            idle_turn();
            continue;
          }
        }
        break;
      }
      std::span<const uint32_t> lanes;  // each record's partition, with lanes
      if constexpr (requires { source.batch_lanes(); }) {
        if (idle_lanes_) {
          idle_lanes_(lane_idle_);
          lanes = source.batch_lanes();
        }
      }
      if (lanes.empty()) {
        for (size_t i = 0; i < n; ++i) q_.chain(data[i], ingest);
      } else {
        for (size_t i = 0; i < n; ++i) {
          lane_ = lanes[i];
          lane_idle_[lane_] = 0;  // a record came: not idle
          q_.chain(data[i], ingest);
        }
      }
      report_.records_in += n;
      report_.input_bytes += n * sizeof(In);
      if (!ok()) break;
      const int64_t wm = watermark();
      if (report_.input_bytes >= next_epoch_at || op_.crosses_boundary(published_, wm) ||
          idle_ != published_idle_) {
        end_epoch(wm);
        next_epoch_at = report_.input_bytes + epoch_bytes_;
      }
      advance_checkpoint();
      if (checkpoint_due()) {
        checkpoint();  // ends an epoch first
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
    // No checkpoint from here on: a worker that waits for this one's
    // barrier gives its checkpoint up. (Stopped at a savepoint, every
    // worker stops there: nothing more is sent, no window fires.)
    const bool finish = ok() && !stopped_;
    if (finish && ckpt_on_) {
      finish_checkpoint();  // the one being written, if any, completes first
      for (uint32_t j = 0; j < workers_ && ok(); ++j) {
        if (j != me_) push(j, Message{0, kFinalMsg, {}});
      }
    }
    if (finish) end_epoch(kEndOfTime);
    if (ok()) {
      if (const Status s = w_.close(out_); s != Status::kOk) fail_output("closing", s);
    }
    if (ok()) {
      const Status s = w_.run();
      if (s != Status::kEndOfFlow) fail_input("consuming", s);
    }
    if (finish && ok()) {
      trigger(now_ns());
      if (!op_.empty()) error_ = "windows left untriggered at end of stream (a bug in the engine)";
    }
    if (!ok()) {
      // Give up our ends at once, so that peers learn this worker is gone
      // instead of waiting for it.
      w_ = Worker();
      out_.abort();
      if (lost_rank_) throw PeerLostError(*lost_rank_, error_);
      throw std::runtime_error(error_);
    }
  }

  Report& report() { return report_; }

  // ---- the operator's context
  uint32_t me() const { return me_; }
  uint32_t workers() const { return workers_; }
  // The worker that owns the key of `hash` (its key group's).
  uint32_t owner(uint64_t hash) const { return groups_.owner(hash); }
  bool ok() const { return error_.empty(); }
  // The smallest watermark at the last trigger: windows and sessions that
  // end (+ allowed lateness) at or before it have been emitted.
  int64_t triggered() const { return triggered_; }
  // A record at event time t with `key`, late for the window starting at
  // `bucket` (sessions: the gap-sized span of time it falls in): counted,
  // and handed to the sink's side output where it has one.
  void late(int64_t bucket, int64_t t, uint64_t key) {
    ++report_.late[bucket];
    if constexpr (requires { sink_.late(me_, Row<int64_t>{}); }) {
      const int64_t span = q_.window.is_session() ? q_.window.gap : q_.window.size;
      sink_.late(me_, Row<int64_t>{bucket, saturating_add(bucket, span), key, t});
    }
  }
  void push(uint32_t target, const Message& m) {
    if (!ok()) return;
    const Status s = w_.push_to(out_, target, m);
    if (s != Status::kOk) fail_output("pushing into", s);
  }
  template <class R>
  void emit(int64_t start, int64_t end, uint64_t key, const R& value) {
    const Row<R> row{start, end, key, value};
    sink_(me_, row);
    ++report_.rows;
    report_.checksum += row_checksum(row, q_.window.is_session());
  }
  // Upsert output (EngineOptions::upsert): every row goes to the sink as an
  // update (a later one of the same window and key may replace it), and
  // each window's final rows are counted once, at end + allowed lateness
  // (the sink had them as updates).
  template <class R>
  void emit_update(int64_t start, int64_t end, uint64_t key, const R& value) {
    sink_(me_, Row<R>{start, end, key, value});
    ++report_.updates;
  }
  template <class R>
  void count_final(int64_t start, int64_t end, uint64_t key, const R& value) {
    ++report_.rows;
    report_.checksum += row_checksum(Row<R>{start, end, key, value}, q_.window.is_session());
  }
  void note_latency(int64_t since_ns) {
    report_.latency_ms.push_back(static_cast<double>(now_ns() - since_ns) / 1e6);
  }
  void protocol_error(const std::string& what) {
    if (ok()) error_ = "protocol violation: " + what;
  }

 private:
  void fail(const std::string& what, Status s, const std::string& detail,
            std::optional<LostPeer> lost) {
    if (!ok()) return;
    error_ = what + ": " + to_string(s) + (detail.empty() ? "" : ": " + detail);
    if (lost) lost_rank_ = lost->rank;
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

  // One record out of the operator chain.
  void ingest(const Out& o) {
    const int64_t t = static_cast<int64_t>(q_.time_of(o));
    if (t < kMinEventTime || t > kMaxEventTime) [[unlikely]] {
      if (ok()) error_ = "event time " + std::to_string(t) + " out of range [-2^61, 2^61] ms";
      return;
    }
    const uint64_t key = static_cast<uint64_t>(q_.key_of(o));
    const uint64_t h = sluice::hash64(key);
    const uint32_t owner = groups_.owner(h);
    int64_t wm;
    if (idle_lanes_) {
      wm = lane_watermark();
      lane_max_[lane_] = std::max(lane_max_[lane_], t);
    } else {
      wm = watermark_of(max_seen_, opt_.lag);
    }
    max_seen_ = std::max(max_seen_, t);
    op_.ingest(*this, o, t, key, h, owner, wm);
  }

  // Ends this worker's epoch: ships the deltas (slash) and a marker with
  // watermark `wm` to every other worker, then triggers what it can.
  void end_epoch(int64_t wm) {
    ++epoch_;
    ++report_.epochs;
    note_state_size();
    op_.ship(*this, wm);
    const int64_t sent = now_ns();
    const bool idle = idle_ && wm != kEndOfTime;
    for (uint32_t j = 0; j < workers_ && ok(); ++j) {
      if (j == me_) continue;
      push(j, Message{epoch_, kEpochMsg, {}});
      push(j, Message{static_cast<uint64_t>(sent), kSentMsg, {}});
      push(j, Message{std::bit_cast<uint64_t>(wm), idle ? kIdleWatermarkMsg : kWatermarkMsg, {}});
    }
    if (ok() && workers_ > 1) {
      if (const Status s = w_.flush(out_); s != Status::kOk) fail_output("flushing", s);
    }
    published_ = wm;
    published_idle_ = idle;
    wm_ = std::max(wm_, wm);
    vc_[me_] = wm;
    trigger(sent);
  }

  // Runs fn; an exception it throws becomes this worker's failure (false).
  template <class F>
  bool guarded(F fn) {
    try {
      fn();
      return true;
    } catch (const std::exception& e) {
      if (ok()) error_ = e.what();
      return false;
    }
  }

  // A turn without input (none yet, or ahead of the throttle's pace): what
  // the flow brought, and a checkpoint if one is due.
  void idle_turn() {
    if (workers_ > 1) {
      w_.poll();
      check_input();
    }
    if (idle_lanes_ && ok()) {
      // No record now: a partition may have gone idle (the watermark moves
      // past it), or every one has (this worker follows the others).
      idle_lanes_(lane_idle_);
      const int64_t wm = watermark();
      if (idle_ != published_idle_ || op_.crosses_boundary(published_, wm)) end_epoch(wm);
    }
    advance_checkpoint();
    if (checkpoint_due()) checkpoint();
  }

  // This worker's watermark now: from the largest event time ingested, or,
  // with a watermark per partition (lanes), the smallest over the
  // partitions not idle; a worker whose partitions are all idle (or that
  // has none) takes the smallest watermark of the other workers not idle,
  // which holds back no window they would not. Never moves back.
  int64_t watermark() {
    if (!idle_lanes_) return watermark_of(max_seen_, opt_.lag);
    bool active = false;
    for (char idle : lane_idle_) active |= idle == 0;
    idle_ = !active;
    if (!idle_) return lane_watermark();
    int64_t low = kEndOfTime;
    for (uint32_t j = 0; j < workers_; ++j) {
      if (j != me_ && idle_of_[j] == 0) low = std::min(low, vc_[j]);
    }
    return raise_watermark(low);
  }
  // The smallest watermark over the partitions not idle (lanes), never
  // below the last one.
  int64_t lane_watermark() {
    int64_t low = kEndOfTime;
    for (size_t l = 0; l < lane_max_.size(); ++l) {
      if (lane_idle_[l] == 0) low = std::min(low, watermark_of(lane_max_[l], opt_.lag));
    }
    return raise_watermark(low);
  }
  // wm_ raised to `low` (kEndOfTime: nothing to go by, it stays).
  int64_t raise_watermark(int64_t low) {
    if (low != kEndOfTime) wm_ = std::max(wm_, low);
    return wm_;
  }

  // How many records to read now: `max`, or under EngineOptions::throttle
  // what the pace allows since this worker started (0: none yet).
  size_t paced(size_t max) {
    if (opt_.throttle == 0) return max;
    const int64_t now = now_ns();
    if (pace_start_ns_ == 0) pace_start_ns_ = now;
    const auto due = static_cast<uint64_t>(static_cast<double>(now - pace_start_ns_) * 1e-9 *
                                           static_cast<double>(opt_.throttle)) +
                     1;
    const uint64_t taken = report_.records_in - report_.resumed_at;
    return due <= taken ? 0 : static_cast<size_t>(std::min<uint64_t>(max, due - taken));
  }

  // ---- checkpoints (aligned: a barrier round, a round that says the
  // snapshots are taken, and, while the workers go on, a round that says
  // they are written)

  bool checkpoint_due() const {
    if (!ckpt_on_ || !ok() || pending_ != 0) return false;
    if (ckpt_final_) return stop_asked();  // false; says once why no savepoint can be taken
    return want_ckpt_ > ckpt_id_ || now_ns() >= next_ckpt_ns_ || stop_asked();
  }
  // This worker was asked to stop with a savepoint and none is under way.
  // None can be once a worker's input ended (no checkpoint follows that):
  // the job goes on to its end, which this says once per rank.
  bool stop_asked() const {
    if (savepoint_at_ != 0 || !opt_.checkpoint.stop_with_savepoint ||
        !opt_.checkpoint.stop_with_savepoint())
      return false;
    if (!ckpt_final_) return true;
    if (!told_no_savepoint_ && me_ % opt_.threads == 0) {
      told_no_savepoint_ = true;
      std::fprintf(stderr,
                   "sluice-stream: no savepoint can be taken: a worker's input has ended; the job "
                   "goes on to its end (a second signal ends it at once)\n");
    }
    return false;
  }

  void flush_out() {
    if (ok() && workers_ > 1) {
      if (const Status s = w_.flush(out_); s != Status::kOk) fail_output("flushing", s);
    }
  }

  // Takes what the flow brings until every other worker's message of
  // checkpoint c is counted in `seen`; false if the checkpoint is given up
  // (a worker finished its input) or the run failed.
  bool wait_all(std::map<uint64_t, uint32_t>& seen, uint64_t c) {
    while (ok() && !ckpt_final_ && seen[c] + 1 < workers_) {
      if (w_.poll() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      check_input();
    }
    return ok() && !ckpt_final_;
  }

  // Checkpoint ckpt_id_ + 1: ends the epoch (deltas shipped), sends a
  // barrier to every worker and takes messages until every worker's
  // barrier came (so every update sent before any barrier is in), takes
  // this worker's snapshot (its bytes, in memory), says so, and waits until
  // every worker said so before it ingests again (so that nothing sent
  // after a barrier reaches a worker before its snapshot). Another thread
  // writes and syncs the snapshot meanwhile, and the worker goes on;
  // advance_checkpoint() says when it is written, and completes the
  // checkpoint once every worker's is.
  //
  // A savepoint is a checkpoint after which every worker stops: its
  // barriers are kSavepointMsg, sent by a worker asked to stop (or that
  // heard of the savepoint before sending its own), and every worker hears
  // every barrier before it takes its snapshot, so all agree. A savepoint
  // completes before the worker goes on (to its stop).
  void checkpoint() {
    const auto began = std::chrono::steady_clock::now();
    const auto ms_since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t)
          .count();
    };
    const uint64_t c = ckpt_id_ + 1;
    if (stop_asked()) savepoint_at_ = c;
    end_epoch(watermark());
    const int64_t kind = savepoint_at_ == c ? kSavepointMsg : kBarrierMsg;
    for (uint32_t j = 0; j < workers_ && ok(); ++j) {
      if (j != me_) push(j, Message{c, kind, {}});
    }
    flush_out();
    if (!wait_all(barriers_, c)) return;
    SnapshotBytes bytes;
    const auto taking = std::chrono::steady_clock::now();
    if (!guarded([&] { bytes = snapshot(c); })) return;
    report_.checkpoint_sync_ms += ms_since(taking);
    pending_ = c;
    writing_ = std::async(std::launch::async,
                          [path = snapshot_path(opt_.checkpoint.dir, c, me_),
                           b = std::move(bytes)]() mutable -> SnapshotBytes {
                            write_durably(path, b);
                            return std::move(b);  // the next snapshot's buffer
                          });
    for (uint32_t j = 0; j < workers_ && ok(); ++j) {
      if (j != me_) push(j, Message{c, kTakenMsg, {}});
    }
    flush_out();
    if (!wait_all(takens_, c)) {
      // Given up (a worker's input ended) or failed: c never completes
      // (its snapshot stays without a done marker).
      writing_.wait();
      pending_ = 0;
      return;
    }
    takens_.erase(c);
    report_.checkpoint_pause_ms += ms_since(began);
    if (savepoint_at_ == c) finish_checkpoint();
  }

  // The checkpoint being written (pending_), moved on: once this worker's
  // snapshot is written, it says so to every worker; once every worker
  // has, the checkpoint is complete (its done marker, the sink's commit).
  void advance_checkpoint() {
    if (pending_ == 0 || !ok()) return;
    const uint64_t c = pending_;
    if (!written_) {
      if (writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
      if (!guarded([&] { spare_bytes_ = writing_.get(); })) return;
      written_ = true;
      sluice::kill_point("stream-checkpoint-written");  // snapshot whole, checkpoint incomplete
      for (uint32_t j = 0; j < workers_ && ok(); ++j) {
        if (j != me_) push(j, Message{c, kDoneMsg, {}});
      }
      flush_out();
    }
    if (dones_[c] + 1 < workers_) return;
    pending_ = 0;
    written_ = false;
    complete_checkpoint(c);
  }

  // Takes what the flow brings until the checkpoint being written, if one
  // is, completes (or the run fails).
  void finish_checkpoint() {
    while (ok() && pending_ != 0) {
      advance_checkpoint();
      if (pending_ == 0) break;
      if (workers_ > 1 && w_.poll() != 0) {
        check_input();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void complete_checkpoint(uint64_t c) {
    const std::string& dir = opt_.checkpoint.dir;
    if (!guarded([&] { write_durably(done_path(dir, c, me_), {}); })) return;
    sluice::kill_point("stream-checkpoint-complete");
    if constexpr (requires { sink_.committed(me_, c); }) {
      // A sink whose output commits with checkpoints.
      if (!guarded([&] { sink_.committed(me_, c); })) return;
    }
    barriers_.erase(c);
    dones_.erase(c);
    ckpt_id_ = c;
    ++report_.checkpoints;
    next_ckpt_ns_ = now_ns() + ckpt_every_ns_;
    const bool savepoint = savepoint_at_ == c;
    if (me_ % opt_.threads == 0) {
      // (Marked after it is complete: a death in between leaves a plain
      // checkpoint, which a later one replaces.)
      if (savepoint && !guarded([&] { create_marker(savepoint_path(dir, c)); })) return;
      // c and the snapshots it builds on stay (no snapshot is taken while
      // c is pending, so chain_root_ is still c's).
      remove_older(dir, chain_root_);
      if (opt_.on_checkpoint) opt_.on_checkpoint(c);
    }
    if (savepoint) {
      stopped_ = true;
      report_.savepoint = c;
    }
  }

  SnapshotBytes snapshot(uint64_t c) {
    WorkerSnapshot w;
    w.id = c;
    w.worker = me_;
    w.workers = workers_;
    w.records_in = report_.records_in;
    w.input_bytes = report_.input_bytes;
    w.rows = report_.rows;
    w.checksum = report_.checksum;
    w.epochs = report_.epochs;
    for (const auto& [w0, n] : report_.late) w.late.push_back({w0, n});
    w.epoch = epoch_;
    w.max_seen = max_seen_;
    w.published = published_;
    w.triggered = triggered_;
    w.vc = vc_;
    w.next_epoch = next_epoch_;
    w.lanes = lane_max_;  // empty without lanes
    w.position = position_ ? position_() : std::string();
    if constexpr (requires { sink_.prepare(me_, c); }) w.token = sink_.prepare(me_, c);
    // Whole, or what changed since this worker's last snapshot (see
    // checkpoint.h): a savepoint stands alone.
    const bool whole = !Op::kIncremental || last_snapshot_ == 0 || savepoint_at_ == c ||
                       c - chain_root_ >= opt_.checkpoint.full_every;
    if (whole) {
      chain_root_ = c;
    } else {
      w.base = last_snapshot_;
      if constexpr (Op::kIncremental) w.windows = op_.windows();
    }
    last_snapshot_ = c;
    SnapshotBytes bytes = encode_snapshot(
        opt_.checkpoint.fingerprint, w,
        [&](SnapshotWriter& out) {
          snapshot_entries_.clear();
          op_.snapshot(whole,
                       [&](const typename Op::StateMsg& e) { snapshot_entries_.push_back(e); });
          put_state(out, groups_.groups(), snapshot_entries_);
        },
        std::move(spare_bytes_));
    report_.checkpoint_bytes += bytes.size();
    return bytes;
  }

  // ---- restoring a checkpoint (stream_worker_restore.h)

  // Checkpoint restore_id_'s snapshot of worker `g`: its header, and the
  // state of key groups [first, end) folded into op_ (reading those groups'
  // bytes of the file alone, and of the snapshots it builds on).
  WorkerSnapshot read_worker(uint32_t g, uint32_t first, uint32_t end);

  // Before the start: the state of checkpoint restore_id_ (0: a fresh
  // start), and the source moved past what that checkpoint had ingested.
  // A checkpoint taken by another number of workers is rescaled
  // (restore_rescaled).
  template <class Source>
  void restore(Source& source);

  // Notes in the report which checkpoint the run resumed from, and after
  // how many of its input records.
  void restored(uint64_t records_in);

  // A checkpoint taken by `old` workers restored on workers_ (rescaling,
  // as Flink's restart from a savepoint with another parallelism): every
  // worker reads every old worker's snapshot header (so every rank must see
  // the checkpoint directory: one host, or a shared file system) and, of
  // its state, only the key groups it owns now (key_groups.h: each state
  // entry is read by one worker); the input resumes per partition, which
  // only a Kafka or --partitions input has (the others are split by
  // worker); the watermark state is the most conservative of the old
  // workers' (at an aligned checkpoint they all heard the same watermarks);
  // the counts go to worker 0. The sink writes again what an old worker's
  // checkpoint held and never committed.
  template <class Source>
  void restore_rescaled(Source& source, uint32_t old);

  // Reads past the first `n` records of an input that cannot seek to a
  // checkpoint's position.
  template <class Source>
  void skip(Source& source, uint64_t n);

  void note_state_size() {
    uint64_t entries = 0, bytes = 0;
    op_.note_state(entries, bytes);
    report_.state_entries = std::max(report_.state_entries, entries);
    report_.state_bytes = std::max(report_.state_bytes, bytes);
  }

  // The flow's handler: deltas or records, and markers, of one source.
  void take(std::span<const Message> batch, const BatchInfo& info) {
    report_.bytes_moved += batch.size_bytes();
    const uint32_t src = info.source;
    if (src / opt_.threads != rank_) report_.bytes_remote += batch.size_bytes();
    for (const Message& m : batch) {
      if (m.time > kLastControl) [[likely]] {
        op_.take(*this, src, m);
        if (!ok()) return;
        continue;
      }
      switch (m.time) {
        case kEpochMsg:
          if (m.key != next_epoch_[src]) {
            protocol_error("epoch " + std::to_string(m.key) + " of worker " + std::to_string(src) +
                           " arrived when epoch " + std::to_string(next_epoch_[src]) + " was due");
            return;
          }
          ++next_epoch_[src];
          break;
        case kSentMsg:
          sent_[src] = static_cast<int64_t>(m.key);
          break;
        case kWatermarkMsg:
        case kIdleWatermarkMsg:
          vc_[src] = std::bit_cast<int64_t>(m.key);
          idle_of_[src] = m.time == kIdleWatermarkMsg;
          trigger(sent_[src]);
          break;
        case kSavepointMsg:
          savepoint_at_ = std::max(savepoint_at_, m.key);
          [[fallthrough]];
        case kBarrierMsg:
          ++barriers_[m.key];
          want_ckpt_ = std::max(want_ckpt_, m.key);
          break;
        case kTakenMsg:
          ++takens_[m.key];
          break;
        case kDoneMsg:
          ++dones_[m.key];
          break;
        case kFinalMsg:
          ckpt_final_ = true;
          break;
        default:
          if (!op_.control(src, m)) {
            protocol_error("unknown control record " + std::to_string(m.time));
            return;
          }
      }
    }
  }

  // Emits every window whose end (+ allowed lateness) the smallest watermark
  // has passed. `since_ns`: when the watermark that completed it was sent.
  void trigger(int64_t since_ns) {
    const int64_t low = *std::min_element(vc_.begin(), vc_.end());
    if (low == kNoWatermark || low <= triggered_) return;
    triggered_ = low;
    op_.trigger(*this, low, since_ns);
  }

  Q q_;  // this worker's copy of the operators
  const EngineOptions& opt_;
  Sink& sink_;
  const uint32_t rank_, me_, workers_;
  const KeyGroupRanges groups_;  // who owns each key (key_groups.h)
  Op op_;                        // the state; refers to q_
  Source<Message> out_;
  Worker w_;
  uint64_t epoch_bytes_ = 0;
  uint64_t epoch_ = 0;
  int64_t max_seen_ = kNoWatermark;   // largest event time ingested
  int64_t published_ = kNoWatermark;  // watermark of the last epoch marker
  int64_t triggered_ = kNoWatermark;  // smallest watermark at the last trigger
  std::vector<int64_t> vc_;           // every worker's watermark, as last heard
  std::vector<char> idle_of_;         // per worker: its last watermark said it was idle
  // A watermark per partition of the input (a source with lanes: Kafka).
  std::function<void(std::vector<char>&)> idle_lanes_;  // set: the source has lanes
  std::vector<int64_t> lane_max_;      // per lane: the largest event time ingested from it
  std::vector<char> lane_idle_;        // per lane: idle (as of the last look)
  uint32_t lane_ = 0;                  // the lane of the record being ingested
  int64_t wm_ = kNoWatermark;          // the watermark (lanes): never moves back
  bool idle_ = false;                  // every lane is idle (or there are none)
  bool published_idle_ = false;        // the last marker said idle
  std::vector<uint64_t> next_epoch_;   // per source: the epoch number due next
  std::vector<int64_t> sent_;          // per source: send time of its marker being read
  std::string error_;                  // the first failure; empty: none
  std::optional<uint32_t> lost_rank_;  // the lost peer behind error_, if one was
  Report report_;
  // checkpoints
  const uint64_t restore_id_;  // the checkpoint to start from (0: none)
  bool ckpt_on_ = false;
  bool ckpt_final_ = false;  // a worker finished its input: no more checkpoints
  int64_t ckpt_every_ns_ = 0, next_ckpt_ns_ = 0;
  int64_t pace_start_ns_ = 0;               // throttle: when this worker's pace began
  std::function<std::string()> position_;   // the source's position, if it can say
  uint64_t ckpt_id_ = 0;                    // the last checkpoint completed (or restored) here
  uint64_t want_ckpt_ = 0;                  // the largest checkpoint another worker started
  uint64_t savepoint_at_ = 0;               // the checkpoint that is a savepoint (0: none)
  bool stopped_ = false;                    // stopped at the savepoint
  mutable bool told_no_savepoint_ = false;  // said that none can be taken
  std::map<uint64_t, uint32_t> barriers_, takens_, dones_;  // checkpoint id -> workers heard from
  uint64_t pending_ = 0;  // the checkpoint whose snapshot is being written (0: none)
  // This run's last snapshot here (0: none yet: the next is whole) and the
  // whole one it builds on.
  uint64_t last_snapshot_ = 0, chain_root_ = 0;
  std::future<SnapshotBytes> writing_;  // its writer (it hands the buffer back)
  bool written_ = false;  // this worker's snapshot of pending_ is written (and said so)
  // The last snapshot's entries and file image, kept (emptied, capacity
  // and pages kept) for the next: taking a snapshot faults in no fresh
  // memory, at the cost of holding the largest snapshot's size twice.
  std::vector<typename Op::StateMsg> snapshot_entries_;
  SnapshotBytes spare_bytes_;
};

}  // namespace detail

}  // namespace sluice::stream

#include "stream/stream_worker_restore.h"  // restoring a checkpoint: StreamWorker's members
