// The pure logic of `sluice perf`: statistics over repeated runs, parsing of
// the --sizes / --shapes lists, and the JSON report. Kept apart from the
// benchmark itself so that it can be unit-tested without running one
// (tests/perf/perf_stats_test.cc).
//
// Thread safety: every function is pure or only reads its arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tool::perf {

// Record sizes the benchmark can run: the records are compile-time types, so
// only these are instantiated (multiples of 8 from 16 to 1024).
inline constexpr uint32_t kMinRecordBytes = 16;
inline constexpr uint32_t kMaxRecordBytes = 1024;
inline constexpr uint32_t kRecordBytesStep = 8;

struct Summary {
  double median = 0;
  double min = 0;
  double max = 0;
  size_t n = 0;
};

// Median (mean of the two middle values for an even count), min and max.
// An empty input gives all zeros and n == 0.
Summary summarize(std::vector<double> values);

// The p-th percentile (0..100) by nearest rank: the smallest value with at
// least p% of the values at or below it (p = 0: the minimum). 0 for an empty
// input.
double percentile(std::vector<double> values, double p);

// A flow shape: `sources` source ranks each feeding all `targets` target ranks.
struct Shape {
  uint32_t sources = 0;
  uint32_t targets = 0;
  std::string name() const;  // "2x2"
  friend bool operator==(const Shape&, const Shape&) = default;
};

// Parses "16,64,256" into record sizes. Throws std::invalid_argument with a
// message that starts with `option` and says what is wrong and what is allowed.
std::vector<uint32_t> parse_sizes(std::string_view text, std::string_view option = "--sizes");
// Parses "1x1,2x2" (each side 1..64). Throws std::invalid_argument like parse_sizes.
std::vector<Shape> parse_shapes(std::string_view text, std::string_view option = "--shapes");

// One "host" of a cross-namespace run: a network namespace and its address.
struct NetnsHost {
  std::string netns;
  std::string ip;
  friend bool operator==(const NetnsHost&, const NetnsHost&) = default;
};
// Parses "NS_A=IP_A,NS_B=IP_B" (exactly two hosts, dotted IPv4 addresses).
// The first host runs the registry and the sources (and the TCP peer's
// writer), the second the targets (and the reader). Throws
// std::invalid_argument like parse_sizes.
std::vector<NetnsHost> parse_netns_hosts(std::string_view text, std::string_view option = "--netns");

// The bandwidth in MB/s (as fabtests print it, 10^6 bytes/s) from the
// output of a fabtests bandwidth test such as fi_rma_bw: the MB/sec column
// of the last data row under a header line naming "MB/sec". Negative if the
// output has none.
double parse_fabtests_mbps(std::string_view output);

// Where and on what the benchmark ran.
struct Environment {
  std::string hostname;
  uint32_t nproc = 0;
  std::string kernel;
  std::string cpu_model;
  std::string date;        // UTC, ISO 8601
  std::string git_commit;  // "unknown" outside a git work tree
};

// One timed run of one side (a flow or the baseline ring).
struct Run {
  double records = 0;      // records moved (all sources together)
  double seconds = 0;      // wall time of the slowest consumer
  double cpu_seconds = 0;  // user + system time of every process involved
};

// What was measured for one (shape, record size).
struct Result {
  Shape shape;
  uint32_t record_bytes = 0;
  std::vector<Run> flow;      // one per repeat, in order
  std::vector<Run> baseline;  // the 1:1 peer of the same record size, same repeats
  uint32_t baseline_publish_every = 16;  // shm_ring only
  std::string transport = "shm";         // the flow's: "shm" or "ofi"
  uint32_t segment_bytes = 0;            // the flow's effective segment payload
  uint32_t ring_segments = 0;            // the flow's effective segments per ring
  // The baseline: "shm_ring" (perf_ring.h) or "tcp_stream" (perf_tcp.h,
  // writes of segment_bytes' worth of records between the same endpoints).
  std::string peer = "shm_ring";
  std::string placement = "one host";    // where the two ends ran, for notes
};

// An extra baseline row (e.g. the ring publishing every slot).
struct BaselineRow {
  uint32_t record_bytes = 0;
  uint32_t publish_every = 1;
  std::vector<Run> runs;
};

// Summaries of a series of runs: records/s, GB/s (1e9 bytes), records per
// CPU-second.
nlohmann::json runs_json(const std::vector<Run>& runs, uint32_t record_bytes);
nlohmann::json summary_json(const Summary& s);

// The whole report:
//   {"tool", "version", "env": {...}, "command", "config": {...},
//    "results": [{"shape", "sources", "targets", "record_bytes",
//                 "transport", "segment_bytes", "ring_segments", "peer",
//                 "flow": {...}, "baseline": {...}, "ratio", "ratio_paired",
//                 "baseline_note"}],
//    "extra_baselines": [...]}
// (report_json adds no "latency" or "fabtests"; the caller sets them:
//  "latency": [{"transport", "placement", "flow": {rtt_us_median: summary,
//  rtt_us_p99: summary}, "tcp": {...}, "ratio"}], "fabtests": {...}.)
// "ratio" is the flow's median records/s over the baseline's; "ratio_paired"
// summarizes flow/baseline of the same repeat (they ran back to back).
nlohmann::json report_json(const Environment& env, const std::string& command,
                           const nlohmann::json& config, const std::vector<Result>& results,
                           const std::vector<BaselineRow>& extra_baselines);

// A fixed-width table of the report for people (one row per result, then the
// extra baselines).
std::string report_table(const nlohmann::json& report);

// Joins argv into one shell-quoted command line.
std::string quote_command(const std::vector<std::string>& argv);

// Appends `line` as one JSON line to the file `out`, or prints it to stdout
// when `out` is "-". Throws std::runtime_error if the file cannot be written.
void emit_json_line(const std::string& out, const nlohmann::json& line);

}  // namespace sluice::tool::perf
