// apps/kv/linearizability.h: a small exhaustive linearizability checker for
// the completed operations of a history (Wing & Gong's search with
// memoisation of (operations linearized, store state)).
//
// It replays candidate orders on the sequential reference (store.h
// execute()), respecting real time: an operation that completed before
// another was invoked must come first. Exponential in the worst case, so it
// takes at most 62 operations; the tests keep per-key histories that short.
// (Long histories will go to porcupine, issue 14.)
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <vector>

#include "client.h"

namespace kv {

// Whether the completed operations `ops` (any keys) have a linearization.
// On false, *why (if given) says so. REQUIRES: ops.size() <= 62.
bool linearizable(const std::vector<Completed>& ops, std::string* why = nullptr);

}  // namespace kv
