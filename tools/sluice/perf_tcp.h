// The kernel-TCP peer `sluice perf --transport ofi` compares flows with: a
// plain socket stream between the same two endpoints as the flow (127.0.0.1,
// or the two namespace addresses), moving the same records with the same
// per-record work, plus a 64 B ping-pong for latency. A hidden subcommand so
// that each end can be started in its own network namespace:
//
//   sluice perf-tcp --listen HOST:PORT --sizes 64,1024 --bytes N --chunk-bytes 65536
//                   --latency 2000 --rep I --out FILE|-
//   sluice perf-tcp --connect HOST:PORT (same options but --out)
//
// The listening side is the reader (and the ping-pong initiator): it prints
// "PORT <n>" on stdout once it listens, accepts one connection, and for every
// size sends a 1-byte "go", reads N bytes' worth of records in reads of
// chunk_records = chunk_bytes / size records (recv MSG_WAITALL), copies every
// record out into scratch and folds its key into a checksum (exactly what a
// flow target does), then sends "done"; the writer replies with its own CPU
// seconds. The connecting side fills a buffer of chunk_records records (key
// per record, as a flow source pushes them) and write()s it, over and over.
// The reader appends JSON lines to FILE:
//   {"kind": "tcp_stream", "rep", "record_bytes", "records", "chunk_bytes",
//    "seconds", "cpu_seconds"}
//   {"kind": "tcp_latency", "rep", "round_trips", "rtt_us_median",
//    "rtt_us_p99", "rtt_us_min"}
// Blocking sockets, TCP_NODELAY on both ends, default buffer sizes.
//
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool::perf {

void add_perf_tcp_command(CLI::App& app);

}  // namespace sluice::tool::perf
