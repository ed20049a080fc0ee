// apps/nam/twopc_wire.h: the messages of the 2PC baseline (twopc.h) on its
// flows, shared by the resource managers (twopc.cc) and the clients
// (twopc_client.cc): one record per message, a header and, per record of a
// request, an entry followed by the record's payload (padded to 8 bytes).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <sluice/sluice.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "layout.h"
#include "txn.h"
#include "words.h"

namespace sluice::nam::twopc_wire {

enum MsgType : uint8_t {
  kBegin = 1,
  kGetTs,
  kDone,
  kRead,
  kPrepare,
  kCommit,
  kAbort,
  // Between memory servers (the termination protocol):
  kReport,
  kDecide,
  kResolved,
  // Memory server 0 to every server: a process new to the job runs a free
  // client slot (ADMIT), and no slot can be claimed any more (FINISH).
  kAdmit,
  kFinish
};

struct MsgHeader {
  uint8_t type;
  uint8_t status;  // READ: 0 found, 1 absent, 2 too old; PREPARE: 0 yes, 1 no; GET_TS: 1 refused
  uint16_t count;  // entries (requests); the answering server (replies)
  uint32_t client;
  uint64_t ts;  // read or commit timestamp; a refused PREPARE: the commit id it collided with
};
struct MsgEntry {
  uint32_t table;
  uint32_t insert;
  uint64_t key;
  uint64_t expected;
};
static_assert(sizeof(MsgHeader) == 16 && sizeof(MsgEntry) == 24);

inline uint64_t padded(uint32_t payload) { return (uint64_t{payload} + 7) / 8 * 8; }

inline uint64_t max_message(const Layout& layout) {
  uint64_t biggest = 0;
  for (const TableSpec& t : layout.tables) biggest = std::max(biggest, padded(t.payload_bytes));
  return sizeof(MsgHeader) + kMaxWrites * (sizeof(MsgEntry) + biggest) + 8;
}

using nam::load64;
using nam::store64;

// A version of a slot image, and whether it is whole.
inline bool valid_version(const Layout& l, uint32_t table, uint64_t key, const std::byte* slot,
                          uint32_t v, uint64_t* cid) {
  const std::byte* p = slot + l.version_offset(table, v);
  *cid = version_cid(load64(p));
  const uint64_t sum = load64(p + 8);
  return sum != 0 && sum == version_checksum(*cid, table, key,
                                             std::span(p + 16, l.tables[table].payload_bytes));
}

[[noreturn]] inline void fail(Status s, const std::string& what, const std::string& error,
                              std::optional<LostPeer> peer) {
  if (s == Status::kPeerLost) {
    throw PeerLostError(peer ? peer->rank : 0, "nam 2pc: " + what + ": PeerLost: " + error);
  }
  throw NamError("nam 2pc: " + what + ": " + to_string(s) + ": " + error);
}

}  // namespace sluice::nam::twopc_wire
