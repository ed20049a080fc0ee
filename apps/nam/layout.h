// apps/nam/layout.h: where everything of the NAM database lives in the memory
// servers' regions, shared by the memory servers (which expose and load) and
// the compute clients (which read, lock and install with one-sided calls).
//
// Tables. A table is a fixed number of records, each a fixed-size slot;
// record k of a table lives on memory server k % M at slot k / M of that
// server's region "nam-<table>" (layout.prefix). A slot is
//
//   [ header: lock bit (bit 63) | 63-bit commit id of the newest version ]
//   [ version 0: commit id | checksum | payload ] ... [ version V-1 ]
//
// A header of 0 means "never written" (the record is absent: insert CASes 0).
// A version's first word is its commit id; RSI sets bit 63 of it (the claim
// bit) when its install claims the version with a compare-and-swap from the
// word it last saw, before it writes the checksum and payload behind it
// (rsi.h: a client stalled past recovery then finds its version taken
// instead of overwriting a newer commit). A commit id read from a version
// is therefore always taken through version_cid().
// Versions hold the record's last V committed (or, while its writer holds the
// lock, one being installed) states; a reader takes the newest version whose
// commit id is at most its read timestamp. A version's checksum covers its
// commit id, table, key and payload and is never 0, so a zeroed (free or
// rolled-back) version and one torn by a concurrent install are both told
// apart from a whole one without relying on the order in which a NIC or
// memcpy places bytes. Loaded data carries commit id 0 (visible to everyone).
//
// With an overflow area (overflow_entries > 0) a slot's header is followed
// by one more word, the sequence number of the record's newest version moved
// to the overflow area (0: none), and each memory server exposes, per table,
// region "nam-<table>-overflow": a cursor (fetch_add hands out sequence
// numbers), then a ring of overflow_entries entries
//
//   [ seq | prev seq | until | commit id | checksum | payload ]
//
// Sequence number q lives in entry (q - 1) % overflow_entries; an entry
// names the record's next older overflowed version (prev, 0: none), so a
// record's overflowed versions form a chain from new to old. `until` is the
// commit id of the record's next newer version when this one was moved: it
// is the version of snapshots in [commit id, until). A version overwritten
// without being moved leaves a gap, which `until` shows (a reader then must
// not take an older one). The checksum also covers seq, prev and until: an
// entry the ring has since reused for another version, or one half
// rewritten, is told from the one a chain points to.
//
// Metadata, on memory server 0, region "nam-meta" (layout.prefix):
//   [ retire words: N x u64 ]   client i retired from timestamp retire[i] on
//                               (0: active); its later timestamps count as done
//   [ park words: N x u64 ]     client i runs read-only transactions from its
//                               timestamp park[i] on (0: not parked): others
//                               pass those timestamps while pending, but only
//                               below a finished one (rsi.h, begin_read_only)
//   [ timestamp vector ]        2 bits per timestamp, 32 per word: 0 pending,
//                               1 committed, 2 fenced by recovery, 3 aborted
//   [ commit logs: N slots ]    client i's write set for its current commit
//                               timestamp, written before it takes a lock, so
//                               that recovery knows which records to resolve
//   [ snapshots: N x u64 ]      with an overflow area: client i's read
//                               timestamp + 1 (0: none), so that a writer
//                               knows which old versions a reader may need
// Timestamps start at 1 and are pre-assigned round-robin: client i owns
// i + 1, i + 1 + N, i + 1 + 2N, ...
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice::nam {

inline constexpr uint64_t kLockBit = uint64_t{1} << 63;
inline constexpr uint64_t kClaimBit = uint64_t{1} << 63;  // in a version's commit-id word
inline constexpr uint64_t version_cid(uint64_t word) { return word & ~kClaimBit; }
inline constexpr uint32_t kMaxWrites = 16;  // records one transaction may write

enum TsState : uint64_t { kPending = 0, kCommitted = 1, kFenced = 2, kAborted = 3 };

struct TableSpec {
  std::string name;
  uint64_t records = 0;        // keys 0 .. records-1
  uint32_t payload_bytes = 0;  // every version's payload
};

// The schema and sizes every rank derives from the same command line.
struct Layout {
  std::vector<TableSpec> tables;
  uint32_t memory_servers = 1;
  uint32_t clients = 1;  // compute clients in the whole job, spare slots included
  // The last `spares` client ids are spare slots (spares.h): memory server 0
  // parks each from its first timestamp when it creates the metadata.
  uint32_t spares = 0;
  uint32_t versions = 4;  // versions kept per record (>= 2)
  uint64_t max_timestamps = 1 << 20;
  // Overflow entries per table and memory server (0: no overflow area).
  uint32_t overflow_entries = 0;

  // Per table.
  uint64_t version_bytes(uint32_t table) const;  // 16 + payload rounded up to 8
  uint64_t slot_bytes(uint32_t table) const;     // header_bytes + versions * version_bytes
  // The header word, and with an overflow area the overflow head after it.
  uint64_t header_bytes() const { return overflow_entries != 0 ? 16 : 8; }
  static constexpr uint64_t kOverflowHead = 8;  // offset of the overflow head in a slot
  uint32_t server_of(uint64_t key) const { return static_cast<uint32_t>(key % memory_servers); }
  uint64_t slot_offset(uint32_t table, uint64_t key) const {
    return (key / memory_servers) * slot_bytes(table);
  }
  uint64_t version_offset(uint32_t table, uint32_t v) const {
    return header_bytes() + v * version_bytes(table);
  }
  // The overflow area of a table on one memory server.
  static constexpr uint64_t kOverflowCursor = 0, kOverflowStart = 64;
  uint64_t overflow_entry_bytes(uint32_t table) const { return 24 + version_bytes(table); }
  uint64_t overflow_offset(uint32_t table, uint64_t seq) const {
    return kOverflowStart + ((seq - 1) % overflow_entries) * overflow_entry_bytes(table);
  }
  uint64_t overflow_region_bytes(uint32_t table) const {
    return kOverflowStart + uint64_t{overflow_entries} * overflow_entry_bytes(table);
  }
  // Bytes of table `table`'s region on memory server `server`.
  uint64_t region_bytes(uint32_t table, uint32_t server) const;
  // Region names: "<prefix>-<table>", "<prefix>-meta" (several databases,
  // e.g. one per protocol of a `--protocol both` run, live side by side).
  std::string prefix = "nam";
  std::string region_name(const std::string& table) const { return prefix + "-" + table; }
  std::string meta_name() const { return prefix + "-meta"; }
  std::string overflow_name(const std::string& table) const {
    return prefix + "-" + table + "-overflow";
  }

  // The metadata region (server 0).
  uint64_t retire_offset(uint32_t client) const { return 8ull * client; }
  uint64_t park_offset(uint32_t client) const { return 8ull * (clients + client); }
  uint64_t ts_words() const { return max_timestamps / 32 + 1; }
  uint64_t ts_offset() const { return 16ull * clients; }
  uint64_t log_bytes() const { return 24 + 16ull * kMaxWrites; }
  uint64_t log_offset(uint32_t client) const {
    return ts_offset() + 8 * ts_words() + client * log_bytes();
  }
  uint64_t snapshot_offset(uint32_t client) const { return log_offset(clients) + 8ull * client; }
  uint64_t meta_bytes() const { return snapshot_offset(overflow_entries != 0 ? clients : 0); }

  uint32_t first_spare() const { return clients - spares; }
  uint32_t ts_owner(uint64_t ts) const { return static_cast<uint32_t>((ts - 1) % clients); }
  uint32_t find_table(const std::string& name) const;  // throws if absent
};

// The 2-bit state of timestamp `ts` within its vector word.
inline uint64_t ts_word(uint64_t ts) { return ts / 32; }
inline uint32_t ts_shift(uint64_t ts) { return static_cast<uint32_t>(2 * (ts % 32)); }
inline TsState ts_state(uint64_t word, uint64_t ts) {
  return static_cast<TsState>((word >> ts_shift(ts)) & 3);
}

// A version's checksum: never 0.
uint64_t version_checksum(uint64_t cid, uint32_t table, uint64_t key,
                          std::span<const std::byte> payload);

// An overflow entry's checksum: never 0.
uint64_t overflow_checksum(uint64_t seq, uint64_t prev, uint64_t until, uint64_t cid,
                           uint32_t table, uint64_t key, std::span<const std::byte> payload);

// One write-set entry of a commit log.
struct LogEntry {
  uint32_t table = 0;
  uint64_t key = 0;
};
// A commit log: [ts][count][checksum][entries]; checksum over the rest,
// never 0, so a torn or never-written log is recognised.
void encode_log(uint64_t ts, std::span<const LogEntry> entries, std::span<std::byte> out);
// False if `in` is not a whole log.
bool decode_log(std::span<const std::byte> in, uint64_t* ts, std::vector<LogEntry>* entries);

// Writes a committed version (commit id 0) of record `key` into a slot image
// (the memory server's loader).
void load_record(const Layout& layout, uint32_t table, uint64_t key,
                 std::span<const std::byte> payload, std::byte* slot);

}  // namespace sluice::nam
