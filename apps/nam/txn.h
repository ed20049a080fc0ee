// apps/nam/txn.h: the transaction client interface the workloads run on,
// implemented by RSI on one-sided memory (rsi.h) and by the message-based
// two-phase commit baseline (twopc.h). Both give snapshot isolation.
//
//   begin(); read(table, key, out); write(...) / insert(...); commit() or abort()
//
// Thread safety: one client per thread.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>

namespace sluice::nam {

class NamError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A client that recovery presumed dead (silent longer than the recovery
// timeout: stalled, not dead) and fenced: its work was rolled forward or
// back by another client, and it must stop. It counts as a client that died.
class FencedError : public NamError {
 public:
  using NamError::NamError;
};

enum class Outcome : uint8_t {
  kCommitted,
  kConflict,  // a written record changed since the snapshot, or was locked
  kTooOld,    // a record no longer holds a version old enough for the snapshot
  kAborted,   // abort() was called
};
const char* to_string(Outcome o);

struct TxnStats {
  uint64_t commits = 0, conflicts = 0, too_old = 0, read_only = 0;
  uint64_t burned = 0;  // RSI: own timestamps given up so the read timestamp can pass them
  uint64_t recovered_forward = 0, recovered_back = 0, clients_recovered = 0;  // RSI recovery
  // RSI with an overflow area: old versions this client moved there for a
  // reader, and versions it read from there.
  uint64_t overflow_moved = 0, overflow_hits = 0;
};

class Transactions {
 public:
  virtual ~Transactions() = default;
  virtual void begin() = 0;
  // A transaction that will only read (write() and insert() then throw).
  // RSI: it holds back no other client's read timestamp, however long it
  // runs (rsi.h). By default the same as begin().
  virtual void begin_read_only() { begin(); }
  // Copies the visible version's payload into `out` (a prefix if shorter).
  // False if the record is absent in the snapshot, or if the transaction is
  // doomed (commit() will say kTooOld or kConflict).
  virtual bool read(uint32_t table, uint64_t key, std::span<std::byte> out) = 0;
  virtual void write(uint32_t table, uint64_t key, std::span<const std::byte> bytes) = 0;
  // A write of a record that must be absent in the snapshot (else kConflict).
  virtual void insert(uint32_t table, uint64_t key, std::span<const std::byte> bytes) = 0;
  virtual Outcome commit() = 0;
  virtual void abort() = 0;
  // Called once when the client is done.
  virtual void retire() = 0;
  virtual const TxnStats& stats() const = 0;
};

}  // namespace sluice::nam
