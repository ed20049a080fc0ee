// apps/kv/history.h: a history of completed operations as JSON lines, the
// input of kv-porcupine (apps/kv/porcupine, porcupine's linearizability
// check): one object per operation with the client, the command (op, key,
// value, expected), what the store answered (ok, out) and the invocation and
// completion times ("call", "return": microseconds of the host's monotonic
// clock where the driver keeps one, as sluice-kv run does; else the
// simulation's milliseconds). An operation of unknown outcome (Completed::
// unknown) has "unknown":true and neither a result nor a "return": the
// checker lets it take effect at any time after its call, or never. One the
// store refused (maxmemory, Result::refused) has "refused":true. Expiry:
// "now" the command's stamp (Command::now_ms, where set), "ttl" "keep" or
// "set" (absent: the command clears the deadline, if it writes one),
// "deadline" with "set", "if" EXPIRE's conditions (kIfNoDeadline, ...
// bits); a sweep has "keys", the keys it removed, instead of its result's
// bytes. Strings are the bytes of keys and values, each byte one code
// point (bytes under 0x20 and from 0x80 as \u00XX): read back as Latin-1.
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <string>
#include <vector>

#include "client.h"

namespace kv {

// One operation's line (no newline).
std::string history_line(const Completed& op);

// Writes every operation of `history` to `path`; on failure returns false
// and says why in *error.
bool write_history(const std::string& path, const std::vector<Completed>& history,
                   std::string* error);

// Per operation type (get, put, cas, delete): count and latency percentiles
// (p50, p99, max) in microseconds, and the throughput over the run (first
// invocation to last completion), as printable lines. Uses the microsecond
// times; empty when the history has none (the simulation).
std::vector<std::string> latency_report(const std::vector<Completed>& history);

}  // namespace kv
