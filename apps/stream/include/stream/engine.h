// stream/engine.h: runs a windowed query (query.h) on every rank of a
// sluice job, T worker threads per rank, with one of two strategies (slash's
// eager partial state or uppar's re-partitioning): run() declares the flow
// between the workers, picks the checkpoint to start from and runs the
// workers (stream_worker.h: their loop, epochs, watermarks, checkpoints and
// the protocol between them).
//
// Thread safety: run() is called by one thread per process; it starts and
// joins the worker threads (sluice::run_workers). The sink is called
// concurrently from the workers (each with its own worker index).
#pragma once

#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "stream/checkpoint.h"
#include "stream/query.h"
#include "stream/report.h"
#include "stream/session_op.h"
#include "stream/stream_worker.h"
#include "stream/window.h"
#include "stream/window_op.h"

namespace sluice::stream {

namespace detail {
template <class Q, class Sink, class Op>
Report run_with(Cluster& cluster, const Q& q, const EngineOptions& opt, Sink& sink) {
  using SW = StreamWorker<Q, Sink, Op>;
  using Message = typename SW::Message;
  const uint32_t threads = opt.threads;
  // The run belongs to the current membership view: its members' workers,
  // numbered by their places in it (an elastic job's vacancies and the
  // ranks that left have none), slot s's threads s * threads ...
  const View view = opt.view ? *opt.view : cluster.view();
  const auto place = std::find(view.members.begin(), view.members.end(), cluster.rank());
  const auto gave_up = [&opt, &view](const std::string& while_doing) {
    Report r;
    r.failure = JobFailure{"the membership changed while " + while_doing + " flow '" +
                               opt.flow_name + "' in view " + std::to_string(view.epoch),
                           std::nullopt};
    return r;
  };
  if (place == view.members.end()) return gave_up("this rank, no member, started");
  const auto slot = static_cast<uint32_t>(place - view.members.begin());
  const auto workers = static_cast<uint32_t>(view.members.size()) * threads;
  auto spec = shuffle<Message>(opt.flow_name)
                  .sources(cluster.ranks(view.members, threads))
                  .targets(cluster.ranks(view.members, threads))
                  .explicit_targets();
  if (opt.segment_bytes != 0) spec.segment_bytes(opt.segment_bytes);
  if (opt.ring_segments != 0) spec.ring_segments(opt.ring_segments);
  // The checkpoint to restore and the id new checkpoints follow.
  const std::optional<CheckpointStart> ck = choose_checkpoint(
      cluster, view, opt.checkpoint, opt.flow_name + "-restore", slot * threads, threads);
  if (!ck) return gave_up("choosing the checkpoint of");
  // Declared in the view, the flow is pinned to its members'
  // incarnations: a rank that dies and is back within moments (a restart,
  // a spare) fails it on the others as a death does, instead of passing
  // for the process the flow was made with. A view that changed before
  // every member declared fails the run (the command recovers, rescales or
  // ends the job).
  Result<DeclaredFlow> declared = cluster.declare(view, spec);
  if (!declared) return gave_up("declaring");
  const DeclaredFlow flow = std::move(*declared);
  std::vector<std::unique_ptr<SW>> ws;
  for (uint32_t t = 0; t < threads; ++t) {
    ws.push_back(std::make_unique<SW>(q, opt, sink, slot, t, workers, cluster.source(spec, t),
                                      cluster.target(spec, t), ck->restore_id, ck->first_id));
  }
  const PoolReport run =
      run_workers(cluster, {threads, opt.flow_name + "-start", cluster.ranks(view.members)},
                  [&ws](uint32_t t, StartLine& start) { ws[t]->run(start); });
  // Every worker's figures, a failed one's too; the failure is the root
  // cause run_workers found (a lost peer first).
  Report total;
  for (auto& w : ws) total.add(w->report());
  total.seconds = run.seconds;
  total.cpu_seconds = run.cpu_seconds;
  total.failure = run.failure;
  ws.clear();  // sources and targets go before the flow
  return total;
}

}  // namespace detail

// Runs `query` on this rank's workers (all ranks of the job call it with
// the same query and options) and returns this rank's report; rows go to
// sink(worker, Row<Result>) as windows trigger. A failure (a lost peer, a
// protocol violation, an event time out of range, the start barrier) is in
// report.failure, its root cause. Throws sluice::Error when declaring the
// flow fails.
// Which windows a run() instance can run: any (the query's WindowSpec
// decides at run time), or only fixed (tumbling, sliding) or only session
// windows, for a caller that knows its query's: each kind is the engine
// compiled for two strategies, so naming one halves the code (and the
// compile time) of every query instantiated.
enum class Windows : uint8_t { kAny, kFixed, kSession };

template <class Q, class Sink, Windows kWindows = Windows::kAny>
Report run(Cluster& cluster, const Q& query, const EngineOptions& options, Sink& sink) {
  if (options.threads == 0)
    throw std::invalid_argument("EngineOptions::threads must be at least 1");
  if (!(options.epoch_mib > 0))
    throw std::invalid_argument("EngineOptions::epoch_mib must be positive");
  if (options.lag < 0 || options.allowed_lateness < 0) {
    throw std::invalid_argument("EngineOptions::lag and allowed_lateness must be >= 0 ms");
  }
  query.window.validate();
  constexpr Strategy kSlash = Strategy::kSlash, kUppar = Strategy::kUppar;
  if (query.window.is_session()) {
    if constexpr (kWindows == Windows::kFixed) {
      throw std::invalid_argument("this run() was built for fixed windows, not session windows");
    } else {
      if (options.strategy == kSlash)
        return detail::run_with<Q, Sink, detail::SessionOp<Q, kSlash>>(cluster, query, options,
                                                                       sink);
      return detail::run_with<Q, Sink, detail::SessionOp<Q, kUppar>>(cluster, query, options, sink);
    }
  } else {
    if constexpr (kWindows == Windows::kSession) {
      throw std::invalid_argument("this run() was built for session windows, not fixed windows");
    } else {
      if (options.strategy == kSlash)
        return detail::run_with<Q, Sink, detail::WindowOp<Q, kSlash>>(cluster, query, options,
                                                                      sink);
      return detail::run_with<Q, Sink, detail::WindowOp<Q, kUppar>>(cluster, query, options, sink);
    }
  }
}

}  // namespace sluice::stream
