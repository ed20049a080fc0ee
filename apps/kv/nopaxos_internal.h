// apps/kv/nopaxos_internal.h: what the files of NoPaxosReplica share
// (nopaxos.cc: normal operation, gaps and synchronization;
// nopaxos_view_change.cc; nopaxos_transfer.cc: snapshots and recovery).
// Not part of the library's interface.
#pragma once

#include <cstddef>
#include <cstdint>

#include "message.h"

namespace kv::nopaxos_detail {

// Every message a replica builds from its log stays below this many bytes
// (codec.cc: the header, and per entry its fixed fields and its command),
// well inside a 64 KiB flow segment, whatever the log's length.
inline constexpr size_t kMaxMessageBytes = 48 * 1024;
inline constexpr size_t kHeaderBytes = 128;
inline constexpr size_t kEntryFixedBytes = 32;  // plus wire_bytes(cmd)
// Phase 2 requests the chosen leader leaves unanswered before starting over.
inline constexpr uint32_t kRecoveryPatience = 4;

// An entry's place in the log and the multicast, without its commands
// (and without copying them).
inline Entry position(const Entry& e) {
  Entry p;
  p.slot = e.slot;
  p.session = e.session;
  p.msgnum = e.msgnum;
  return p;
}

}  // namespace kv::nopaxos_detail
