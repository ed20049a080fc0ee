// The kernel-TCP peer `sluice perf` compares flows with: a plain socket
// between the same two endpoints as the flow (127.0.0.1, or the two
// namespace addresses), moving the same records with the same per-record
// work. A hidden subcommand so that each end can be started in its own
// network namespace:
//
//   sluice-perf tcp --listen HOST:PORT --mode stream|pingpong --sizes 64,1024
//                   [--bytes N] [--chunk-bytes 65536] [--round-trips N] --rep I --out FILE|-
//   sluice-perf tcp --connect HOST:PORT (same options but --out)
//
// The listening side is the reader / the ping-pong initiator: it prints
// "PORT <n>" on stdout once it listens and accepts one connection.
// stream: for every size it sends a 1-byte "go", reads N bytes' worth of
// records in reads of chunk_bytes / size records (recv MSG_WAITALL), copies
// every record out into scratch and folds its key into a checksum (what a
// flow target does), then sends "done"; the writer, which fills a buffer of
// that many records and write()s it over and over, replies with its CPU
// seconds. pingpong: for every size, round_trips_for(N, size) round trips of
// one record after a warm-up, both ends spinning on a non-blocking recv.
// The reader appends one sample per size to FILE (perf_stats.h fields):
//   {"kind": "tcp_stream"|"tcp_pingpong", "rep", "record_bytes", "records",
//    "seconds", "cpu_seconds", "src_cpu_seconds", "tgt_cpu_seconds",
//    ["chunk_bytes"], ["rtt_us_p50", "rtt_us_p99", "rtt_us_p999"]}
// Blocking sends, TCP_NODELAY on both ends, default buffer sizes.
//
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool::perf {

void add_perf_tcp_command(CLI::App& app);

}  // namespace sluice::tool::perf
