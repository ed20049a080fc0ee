// stream/stream_worker_restore.h: how a StreamWorker (stream_worker.h)
// starts from a checkpoint: its own snapshot read back over the snapshots
// it builds on (checkpoint.h, read_chain), or, when the checkpoint was
// taken by another number of workers, every old worker's snapshot merged
// and only the key groups this worker owns now read; the input moved past
// what the checkpoint had ingested; the sink told what its output held.
// Taking checkpoints stays in stream_worker.h (it is part of the epoch
// protocol's rounds).
//
// Included by stream/stream_worker.h after the class: it defines members
// of StreamWorker and is not meant to be included on its own.
// Thread safety: as StreamWorker (one per worker thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stream/checkpoint.h"
#include "stream/stream_worker.h"

namespace sluice::stream::detail {

template <class Q, class Sink, class Op>
WorkerSnapshot StreamWorker<Q, Sink, Op>::read_worker(uint32_t g, uint32_t first, uint32_t end) {
  const CheckpointOptions& ck = opt_.checkpoint;
  uint64_t read = 0;
  WorkerSnapshot w = read_chain<typename Op::StateMsg>(
      ck.dir, restore_id_, g, ck.fingerprint, groups_.groups(), first, end,
      [&](std::span<const typename Op::StateMsg> entries, bool replace) {
        if constexpr (Op::kIncremental) {
          op_.restore(entries, replace);
        } else {
          op_.restore(entries);
        }
      },
      &read);
  report_.restored_state += read;
  report_.restored_state_max += read;
  return w;
}

template <class Q, class Sink, class Op>
template <class Source>
void StreamWorker<Q, Sink, Op>::restore(Source& source) {
  std::string token;
  if (restore_id_ != 0) {
    const std::string& dir = opt_.checkpoint.dir;
    const std::string own = snapshot_path(dir, restore_id_, me_);
    std::error_code ec;
    const uint32_t taken_by = snapshot_workers(
        std::filesystem::exists(own, ec) ? own : snapshot_path(dir, restore_id_, 0));
    if (taken_by != workers_) return restore_rescaled(source, taken_by);
    const WorkerSnapshot w = read_worker(me_, 0, groups_.groups());
    if (w.worker != me_ || w.workers != workers_) {
      throw std::runtime_error(own + " holds worker " + std::to_string(w.worker) + " of " +
                               std::to_string(w.workers) + ", not worker " + std::to_string(me_) +
                               " of " + std::to_string(workers_));
    }
    report_.records_in = w.records_in;
    report_.input_bytes = w.input_bytes;
    report_.rows = w.rows;
    report_.checksum = w.checksum;
    report_.epochs = w.epochs;
    for (const LateCount& l : w.late) report_.late[l.window] = l.records;
    epoch_ = w.epoch;
    max_seen_ = w.max_seen;
    published_ = w.published;
    wm_ = published_;
    triggered_ = w.triggered;
    vc_ = w.vc;
    next_epoch_ = w.next_epoch;
    // Each partition's largest event time, so that its watermark after
    // the restore is the one it had (the same partitions: the same topic
    // and worker count).
    if (w.lanes.size() == lane_max_.size()) lane_max_ = w.lanes;
    restored(w.records_in);
    bool sought = false;
    if constexpr (requires { source.seek(w.position); }) {
      if (!w.position.empty()) sought = source.seek(w.position);
    }
    if (!sought) skip(source, report_.records_in);
    token = w.token;
  }
  if constexpr (requires { sink_.restore(me_, token); }) sink_.restore(me_, token);
}

template <class Q, class Sink, class Op>
void StreamWorker<Q, Sink, Op>::restored(uint64_t records_in) {
  ckpt_id_ = std::max(ckpt_id_, restore_id_);
  report_.restored_from = restore_id_;
  report_.resumed_at = records_in;
}

template <class Q, class Sink, class Op>
template <class Source>
void StreamWorker<Q, Sink, Op>::restore_rescaled(Source& source, uint32_t old) {
  const std::string& dir = opt_.checkpoint.dir;
  const auto refuse = [&](const std::string& why) {
    throw std::runtime_error("checkpoint " + std::to_string(restore_id_) + " in " + dir +
                             " was taken by " + std::to_string(old) + " workers and this job has " +
                             std::to_string(workers_) + ": " + why);
  };
  int lanes = -1;
  if constexpr (requires { source.lanes(); }) lanes = source.lanes();
  if (lanes < 0) {
    refuse(
        "only a job reading Kafka (--kafka-input) or generated input dealt out by "
        "--partitions can be restored on another number of workers (other inputs are split "
        "by worker)");
  }
  const MergedSnapshots m = merge_snapshots(dir, restore_id_, old, refuse, [&](uint32_t g) {
    return read_worker(g, groups_.first(me_), groups_.end(me_));
  });
  if (me_ == 0) {
    report_.records_in = m.sum.records_in;
    report_.input_bytes = m.sum.input_bytes;
    report_.rows = m.sum.rows;
    report_.checksum = m.sum.checksum;
    report_.epochs = m.sum.epochs;
    for (const LateCount& l : m.sum.late) report_.late[l.window] += l.records;
  }
  epoch_ = m.epoch;
  next_epoch_.assign(workers_, m.epoch + 1);
  max_seen_ = m.max_seen;
  vc_.assign(workers_, m.low_watermark);
  published_ = m.low_watermark;
  wm_ = published_;
  triggered_ = m.low_triggered;
  // This worker's partitions now: me_, me_ + W, me_ + 2W, ... (kafka.h).
  std::map<int32_t, int64_t> offsets;
  for (size_t i = 0; i < lane_max_.size(); ++i) {
    const auto p = static_cast<int32_t>(me_ + i * workers_);
    if (auto it = m.lane_max.find(p); it != m.lane_max.end()) lane_max_[i] = it->second;
    if (auto it = m.offsets.find(p); it != m.offsets.end()) offsets.emplace(p, it->second);
  }
  const std::string position = detail::format_offsets(offsets);
  restored(report_.records_in);
  report_.rescaled_from = old;
  if constexpr (requires { source.seek(position); }) {
    if (!position.empty()) source.seek(position);
  }
  if constexpr (requires { sink_.restore_rescaled(me_, workers_, m.tokens); }) {
    sink_.restore_rescaled(me_, workers_, m.tokens);
  } else {
    refuse("its sink cannot be rescaled");
  }
}

template <class Q, class Sink, class Op>
template <class Source>
void StreamWorker<Q, Sink, Op>::skip(Source& source, uint64_t n) {
  std::vector<In> buf;
  while (n > 0) {
    const auto want = static_cast<size_t>(std::min<uint64_t>(n, 1 << 16));
    size_t k = 0;
    if constexpr (requires { source.view(want); }) {
      k = source.view(want).size();
    } else {
      buf.resize(want);
      k = source(std::span<In>(buf));
    }
    if (k == 0) {
      if constexpr (requires { source.done(); }) {
        if (!source.done()) continue;
      }
      throw std::runtime_error("the input of worker " + std::to_string(me_) +
                               " is shorter than checkpoint " + std::to_string(restore_id_) +
                               " says it had read");
    }
    n -= k;
  }
}

}  // namespace sluice::stream::detail
