// apps/kv/store.h: the replicated state machine of sluice-kv — a key-value
// store with put, get, delete and compare-and-set, plus the client table that
// makes every client operation take effect exactly once.
//
// Both protocols (multipaxos.h, nopaxos.h) agree on a log of Commands; every
// replica applies that log in order to its own Store. Because apply() is
// deterministic and the client table is part of the state, replicas that
// apply the same log end with the same digest() — the tests compare exactly
// that.
//
// Thread safety: none; a Store belongs to one replica.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kv {

enum class Op : uint8_t { kNoop, kPut, kGet, kDelete, kCas };

const char* op_name(Op op);

// One client operation. (client, seq) names it uniquely: a client numbers its
// operations 1, 2, 3, ... and has at most one outstanding at a time, so a
// retry of seq carries the same (client, seq).
struct Command {
  Op op = Op::kNoop;
  uint64_t client = 0;
  uint64_t seq = 0;
  std::string key;
  std::string value;     // put: the value; cas: the new value
  std::string expected;  // cas: the value the key must hold for the swap

  bool is_noop() const { return op == Op::kNoop; }
  friend bool operator==(const Command&, const Command&) = default;
};

Command noop_command();

// What an operation returned. put: ok. get: ok = the key exists, value its
// value. delete: ok = the key existed. cas: ok = the key held `expected` and
// now holds `value`.
struct Result {
  bool ok = false;
  std::string value;
  friend bool operator==(const Result&, const Result&) = default;
};

class Store {
 public:
  // Applies one log entry. A command whose (client, seq) was already applied
  // is not executed again: its first result is returned (exactly-once under
  // client retries that land in the log twice). A no-op changes nothing.
  Result apply(const Command& c);

  // An order-independent summary of the whole state (keys, values and the
  // client table), equal on two replicas exactly when their states are.
  uint64_t digest() const;

  // Whether (client, seq) is the client's latest applied operation; if so,
  // *result receives its result. (Only the latest is remembered: a client
  // has one operation outstanding, so older ones are no longer awaited.)
  bool already_applied(uint64_t client, uint64_t seq, Result* result) const;

  // Identities of every applied log entry, in order ((0, 0) for a no-op):
  // the "applied log" the tests compare across replicas.
  const std::vector<std::pair<uint64_t, uint64_t>>& applied() const { return applied_; }
  size_t size() const { return data_.size(); }
  const std::map<std::string, std::string>& data() const { return data_; }

 private:
  struct ClientState {
    uint64_t seq = 0;
    Result result;
  };
  std::map<std::string, std::string> data_;
  std::map<uint64_t, ClientState> clients_;
  std::vector<std::pair<uint64_t, uint64_t>> applied_;
};

// Executes `c` on a plain map with no client table: the sequential reference
// the linearizability checks replay against.
Result execute(std::map<std::string, std::string>& data, const Command& c);

}  // namespace kv
