// apps/kv/history.h: a history of completed operations as JSON lines, the
// input of kv-porcupine (apps/kv/porcupine, porcupine's linearizability
// check): one object per operation with the client, the command (op, key,
// value, expected), what the store answered (ok, out) and the invocation and
// completion times ("call", "return", milliseconds of one clock).
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

}  // namespace kv
