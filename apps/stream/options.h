// apps/stream/options.h: the command line of sluice-stream, on the job
// harness (sluice/job.h): the harness owns --json, --verify, --seed and the
// cluster flags; add_options() adds the rest, --workers among them (the
// harness's worker count, JobFlags::threads).
//
// Thread safety: plain values, filled in by the harness's parse on main()'s
// thread.
#pragma once

#include <cstdint>
#include <string>

#include "stream/engine.h"
#include "stream/key_groups.h"
#include "stream/workloads.h"

namespace CLI {
class App;
}

namespace sluice {
struct JobFlags;
}

namespace sluice::stream {

struct Options {
  std::string query = "ysb";             // --query ysb|ro|cm|nb7|nb8|nb11|q11
  Strategy strategy = Strategy::kSlash;  // --strategy
  uint32_t threads = 1;                  // --workers: worker threads per rank
  GenSpec gen;                           // --records --keys --zipf --disorder --rate --seed
  int64_t window_ms = 0;                 // --window-ms (default per query; 0: global)
  int64_t slide_ms = 0;                  // --slide-ms (0: tumbling)
  int64_t session_gap_ms = 10'000;       // --session-gap-ms (nb11, q11)
  double epoch_mib = 64;                 // --epoch-mib
  int64_t lag = 0;                       // --lag (default: --disorder)
  int64_t lateness = 0;                  // --allowed-lateness
  uint32_t segment_bytes = 0;            // --segment-bytes
  bool verify = false;                   // --verify
  bool json = false;                     // --json
  bool print_rows = false;               // --print-rows
  bool live = false;                     // --live-generation
  std::string csv_out;                   // --csv-out FILE
  std::string late_output;               // --late-output FILE: late records, a file per worker
  std::string input_csv_dir;             // --input-csv-dir DIR
  std::string input_binary_dir;          // --input-binary-dir DIR
  std::string input;                     // --input PATTERN (files instead of the generator)
  std::string input_format;              // --input-format binary|csv ("": by the extension)
  bool no_header = false;                // --no-header (CSV files without a header line)
  bool upsert = false;                   // --upsert: early rows, updated by late records
  bool follow = false;                   // --follow: --input files grow; read until a signal
  std::string input_socket;              // --input-socket HOST:PORT,... (a TCP server's lines)
  uint32_t input_idle_ms = 0;            // --input-idle-ms: a quiet followed file or socket
  uint64_t throttle = 0;                 // --throttle N records/s per worker (0: none)
  std::string checkpoint_dir;            // --checkpoint-dir DIR
  int64_t checkpoint_every_ms = 1000;    // --checkpoint-every MS
  uint32_t full_checkpoint_every = 10;   // --full-checkpoint-every N
  bool restore = false;                  // --restore
  uint64_t restore_from = 0;             // --restore-from ID (a checkpoint or savepoint)
  bool stop_with_savepoint = false;      // --stop-with-savepoint: a signal stops at a savepoint
  double recover_within_s = 0;           // --recover-within S (0: a lost rank fails the job)
  bool elastic = false;                  // --elastic: rescale live as ranks join and leave
  uint32_t partitions = 0;  // --partitions P: generated input dealt out (0: per worker)
  uint32_t key_groups = KeyGroupRanges::kDefault;  // --key-groups G (key_groups.h)
  std::string kafka;                               // --kafka HOST:PORT (the broker)
  std::string kafka_input;                         // --kafka-input TOPIC
  bool kafka_follow = false;                       // --kafka-follow: read until SIGINT/SIGTERM
  std::string kafka_event_time = "field";          // --kafka-event-time field|timestamp
  int kafka_idle_ms = 0;               // --kafka-idle-ms: a partition without records is idle
  std::string kafka_output;            // --kafka-output TOPIC
  std::string kafka_transactional_id;  // --kafka-transactional-id (default sluice-stream-TOPIC)
};

// Adds sluice-stream's options to `cli` (the Job's), --workers bound to
// flags.threads (so that ClusterOptions::threads_per_rank counts the
// workers). After the parse, `o` holds every option, the harness's
// (--workers, --json, --verify, --seed) included, with the defaults that
// depend on the query filled in. A value or a combination the command
// cannot use throws sluice::UsageError (or std::invalid_argument) from the
// parse: exit status 2, the message naming the flag.
void add_options(CLI::App& cli, JobFlags& flags, Options& o);

const char* to_string(Strategy s);

// True for the queries in session windows (nb11, q11).
inline bool is_session_query(const std::string& q) { return q == "nb11" || q == "q11"; }
// The query's window from the options.
inline WindowSpec window_of(const Options& o) {
  if (is_session_query(o.query)) return WindowSpec::session(o.session_gap_ms);
  return {o.window_ms, o.slide_ms == 0 ? o.window_ms : o.slide_ms, 0};
}

}  // namespace sluice::stream
