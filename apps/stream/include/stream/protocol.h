// stream/protocol.h: what the engine's parts share: the strategies and
// options, the message that travels through the engine's flow, and its
// control values.
//
// Thread safety: values and pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "stream/aggregates.h"
#include "stream/checkpoint.h"
#include "stream/key_groups.h"
#include "stream/window.h"

namespace sluice::stream {

enum class Strategy : uint8_t { kSlash, kUppar };

struct EngineOptions {
  Strategy strategy = Strategy::kSlash;  // how state is kept and moved (see top)
  uint32_t threads = 1;                  // worker threads per rank
  // Key groups (key_groups.h): fixed for the life of a job, at least its
  // number of workers at any time.
  uint32_t key_groups = KeyGroupRanges::kDefault;
  double epoch_mib = 64;         // MiB of input per worker between epochs
  int64_t lag = 0;               // ms: watermark = largest event time seen - lag
  int64_t allowed_lateness = 0;  // ms a window waits past its end
  // Fixed windows: emit a window's rows once the watermark passes its end
  // and again, updated, for each key a late record (within the allowed
  // lateness) changes, instead of once at end + allowed lateness; the
  // report counts each window's final rows (window_op.h).
  bool upsert = false;
  uint32_t batch = 1024;             // records read from a source at a time
  uint64_t throttle = 0;             // records per second per worker at most (0: no limit),
                                     // as a live stream delivers them
  uint32_t segment_bytes = 0;        // flow segment payload (0: the flow default)
  uint32_t ring_segments = 0;        // flow ring depth (0: the flow default)
  std::string flow_name = "stream";  // the flow the engine declares (its start barrier:
                                     // flow_name + "-start")
  // The membership view the run belongs to (its members' workers, numbered
  // by their places in it, run the query; its collectives are scoped to
  // it); none: the current view when the run starts. A caller that names
  // the flow after a view passes that view, so that a run started in a
  // view that has changed gives up at once on every member alike.
  std::optional<View> view;
  CheckpointOptions checkpoint;  // checkpoints and restoring one (checkpoint_dir.h)
  // Called by the first worker of each rank when a checkpoint completed
  // (with its id), from that worker's thread; may be empty.
  std::function<void(uint64_t)> on_checkpoint;
};

namespace detail {

// What travels through the engine's flow, one record per message (native
// byte order; both ends run the same build):
//
//   offset 0   key      u64   data: the key; control: the value (below)
//   offset 8   time     i64   data: slash: window (or session) start;
//                             uppar: event time
//                             control: one of the k*Msg values below
//   offset 16  payload  P     the operator's (window_op.h, session_op.h):
//                             slash: a delta (Agg::State, or one record of
//                             a list); uppar: the record's input (none for
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
// Checkpoints (engine.h): a barrier, a worker's snapshot written (synced),
// and a worker that finished its input (no checkpoint after it).
inline constexpr int64_t kBarrierMsg = kNoWatermark + 4;  // key: checkpoint id
inline constexpr int64_t kDoneMsg = kNoWatermark + 5;     // key: checkpoint id
inline constexpr int64_t kFinalMsg = kNoWatermark + 6;    // key: 0
// A worker's snapshot taken (in memory; another thread writes it).
inline constexpr int64_t kTakenMsg = kNoWatermark + 9;  // key: checkpoint id
// A watermark (key: its bits) from a worker whose input is idle: it holds
// no window back, so other idle workers leave it out of theirs (engine.h).
inline constexpr int64_t kIdleWatermarkMsg = kNoWatermark + 7;
// A barrier (key: checkpoint id) of a worker that was asked to stop: the
// checkpoint is a savepoint, after which every worker stops (engine.h).
inline constexpr int64_t kSavepointMsg = kNoWatermark + 8;
inline constexpr int64_t kLastControl = kNoWatermark + 15;
static_assert(kLastControl < kMinEventTime - (int64_t{1} << 60),
              "control values below any window start");

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail

}  // namespace sluice::stream
