// The pure logic of `sluice perf`: statistics over repeated runs, parsing of
// the option lists, the JSON report (ratios to the best peer and to the
// physical bound, the goals of docs/benchmarks.md) and the table. Kept apart
// from the benchmark itself so that it can be unit-tested without running
// one (tests/perf/perf_stats_test.cc).
//
// Vocabulary. A *point* is one (mode, transport, shape, record size). At a
// point the flow and zero or more other *series* were measured, one *sample*
// per repeat. A series is a `bound` (what the hardware allows: the
// two-process shm ring, the shm ping-pong, memcpy) or a `peer` (another way
// of moving the same records: kernel TCP, UCX, Open MPI, ZeroMQ, fabtests).
// "Ahead of every peer" compares with peers only; bounds are reported as
// `ratio_to_bound`.
//
// Thread safety: every function is pure or only reads its arguments.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tool::perf {

// Record sizes the benchmark can run. The records are compile-time types, so
// only these are instantiated: 8, multiples of 8 up to 1024, then the powers
// of two up to 1 MiB.
inline constexpr uint32_t kMinRecordBytes = 8;
// Every multiple of 8 up to here, then powers of two: each size is a record
// type compiled into every mode, so the list stays short (22 sizes).
inline constexpr uint32_t kSmallRecordsMax = 64;
inline constexpr uint32_t kRecordBytesStep = 8;
inline constexpr uint32_t kMaxRecordBytes = 1u << 20;
bool is_supported_record_size(uint32_t bytes);

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

// Parses "8,64,1k,64K,1m" into record sizes (k/K = KiB, m/M = MiB). Throws
// std::invalid_argument with a message that starts with `option` and says
// what is wrong and what is allowed.
std::vector<uint32_t> parse_sizes(std::string_view text, std::string_view option = "--sizes");
// Parses "1x1,2x2" (each side 1..64). Throws std::invalid_argument like parse_sizes.
std::vector<Shape> parse_shapes(std::string_view text, std::string_view option = "--shapes");
// Parses a comma list of words, each one of `allowed`, none twice (e.g.
// --modes bandwidth,latency). Throws std::invalid_argument like parse_sizes.
std::vector<std::string> parse_words(std::string_view text, const std::vector<std::string>& allowed,
                                     std::string_view option);

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
std::vector<NetnsHost> parse_netns_hosts(std::string_view text,
                                         std::string_view option = "--netns");

// Where and on what the benchmark ran.
struct Environment {
  std::string hostname;
  uint32_t nproc = 0;
  std::string kernel;
  std::string cpu_model;
  double cpu_ghz = 0;      // nominal clock, for cycles = CPU seconds x clock
  std::string date;        // UTC, ISO 8601
  std::string git_commit;  // "unknown" outside a git work tree
};

// What a mode measures, as the report needs it: its primary metric (a key of
// metrics_json) and whether more of it is better.
struct ModeTraits {
  std::string name;    // "bandwidth"
  std::string metric;  // "gbytes_per_s"
  bool higher_is_better = true;
};

// Round trips a latency run makes with records of `record_bytes` when
// `requested` are asked for: at most 256 MiB of records each way (so 1 MiB
// records make 256), and never fewer than 100.
uint32_t round_trips_for(uint32_t requested, uint32_t record_bytes);

// Untimed round trips made before `round_trips` timed ones: a tenth and
// ten, at most 1000.
inline uint32_t warmup_for(uint32_t round_trips) {
  return std::min<uint32_t>(round_trips / 10 + 10, 1000);
}

// One sample is a JSON object of raw numbers from one repeat:
//   records, seconds, cpu_seconds            (every sample)
//   src_cpu_seconds, tgt_cpu_seconds         (where the sides are known)
//   rtt_us_p50, rtt_us_p99, rtt_us_p999      (latency samples)
// "records" is records moved (bandwidth) or round trips (latency); CPU time
// is getrusage user+system of the processes, over the timed interval.
//
// Derived per sample (metrics_json summarizes each over the samples):
//   records_per_s, gbytes_per_s (10^9 B/s; bandwidth only), records_per_cpu_s,
//   src_cycles_per_record, tgt_cycles_per_record (CPU seconds x cpu_ghz / records),
//   and the rtt_us_* values as given.
nlohmann::json derive_metrics(const nlohmann::json& sample, uint32_t record_bytes, double cpu_ghz);
// {metric: {median, min, max, n}} over the samples, plus "runs": the samples.
nlohmann::json metrics_json(const std::vector<nlohmann::json>& samples, uint32_t record_bytes,
                            double cpu_ghz);
nlohmann::json summary_json(const Summary& s);

// A flow, bound or peer measured at one point.
struct Series {
  std::string name;           // "sluice", "shm_ring", "tcp_stream", "ucx_posix_put_bw", ...
  std::string kind = "peer";  // "flow", "bound" or "peer"
  std::string shape;          // the shape it ran as ("1x1"); empty: the point's
  std::string note;           // how to read it (e.g. UCX put is the sender's store rate)
  std::string command;        // how it was run, where it is one command
  std::vector<nlohmann::json> samples;  // one per repeat, in repeat order
};

struct Point {
  ModeTraits traits{"bandwidth", "gbytes_per_s", true};
  std::string transport = "shm";  // the flow's
  std::string placement = "one host";
  Shape shape;
  uint32_t record_bytes = 0;
  uint32_t segment_bytes = 0;  // the flow's effective values
  uint32_t ring_segments = 0;
  Series flow;
  std::vector<Series> others;  // bounds and peers
};

// The "results" row of one point (its mode is traits.name):
//   {mode, transport, placement, shape, sources, targets, record_bytes,
//    segment_bytes, ring_segments, metric, higher_is_better,
//    flow: metrics, peers: [{name, kind, shape, note, command, metrics,
//    ratio, ratio_paired}], best_peer, best_peer_shape, ratio_to_best_peer,
//    ratio_paired_to_best_peer, bound, ratio_to_bound}
// Every ratio is "flow advantage": flow/other of the primary metric when
// higher is better, other/flow when lower is (latency), so > 1 means the flow
// is ahead. The best peer is the peer of the same shape with the best median;
// a point with no peer of its shape uses the best 1x1 peer (best_peer_shape
// says so). The bound is the first series of kind "bound" (e.g. the shm ring,
// not memcpy, for bandwidth). ratio_paired summarizes the ratio of the samples of the same
// repeat (they ran back to back). Missing comparisons are null.
nlohmann::json point_json(const Point& p, double cpu_ghz);

// The goals of docs/benchmarks.md, evaluated over report["results"]: one
// entry per goal with "met" (true, false, or null when nothing measured it)
// and "checks": the points it looked at, each with its values and "met".
nlohmann::json goals_json(const nlohmann::json& results, uint32_t nproc);

// The whole report:
//   {"tool", "version", "env", "command", "config", "results": [point_json...],
//    "skipped": [{"name", "why"}], "goals": goals_json}
nlohmann::json report_json(const Environment& env, const std::string& command,
                           const nlohmann::json& config, const std::vector<Point>& points,
                           const nlohmann::json& skipped);

// A fixed-width table of the report for people: one block per (mode,
// transport), one row per point, then the goals.
std::string report_table(const nlohmann::json& report);

// Joins argv into one shell-quoted command line.
std::string quote_command(const std::vector<std::string>& argv);

// Appends `line` as one JSON line to the file `out`, or prints it to stdout
// when `out` is "-". Throws std::runtime_error if the file cannot be written.
void emit_json_line(const std::string& out, const nlohmann::json& line);

}  // namespace sluice::tool::perf
