// apps/kv/replica_disk.h: what a replica keeps under `sluice-kv run
// --data-dir DIR` (docs/kv.md, Durability), and reading it back when the
// job starts again.
//
// Replica r keeps DIR/rank-r/:
//   wal       record file (wal.h) of kind kLog; each record a DurableChanges
//             (durable.h) encoded as a message (codec.h), flag = the
//             replica is recovering from the others (its files hold
//             nothing to go on from). Multi-Paxos: an Accept, view =
//             ballot, a = commit index, entries = the entries written;
//             read back in order, the last ballot, the highest commit
//             index and each slot's last entry are the replica's state.
//             NOPaxos: a StartView, view and session = its view, b and c
//             = its last normal view, a = its sync point, entries = the
//             entries written (a
//             rewrite's first one, at the snapshot's slot, is the
//             snapshot's place in the multicast); the last record's
//             numbers and each slot's last entry, dense from the snapshot.
//   snapshot  record file of kind kSnapshot with one record: the slot (u64)
//             then the store's snapshot (Store::serialize, "KVS8").
//   lock      held (flock) while a process uses the directory.
// The header's run counts the runs that started from these files; a run
// stamps its clients' identities with it (flow_job.cc), so that their
// commands are new to a store that remembers earlier runs' clients.
//
// Writing: records are appended and committed per round of the replica's
// loop (one write, and with --fsync always one fdatasync, for all the
// changes of the round: group commit), before that round's messages leave.
// A rewrite (a snapshot taken or installed, a recovery started, the start
// of a run) writes the snapshot file, then the whole log, each to a
// temporary file synced and renamed over the old one, whatever --fsync
// says: a crash leaves the old files or the new ones.
//
// Thread safety: none; a ReplicaDisk belongs to its replica's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "durable.h"
#include "wal.h"

namespace kv {

struct DiskOptions {
  std::string dir;  // DIR; each replica uses DIR/rank-N
  FsyncMode fsync = FsyncMode::kEverySec;
  bool hold_unsynced = false;  // test switch: RecordWriterOptions::hold_unsynced
  uint32_t sync_delay_us = 0;  // test switch: RecordWriterOptions::sync_delay_us
  bool nopaxos = false;        // the replicas run NOPaxos (else Multi-Paxos)
};

class ReplicaDisk {
 public:
  // Opens (creating them if needed) DIR and DIR/rank-`rank` for replica
  // `rank` of `replicas`, locks it, and reads what it holds. Throws
  // RecordFileError for a corrupt file or a directory written by a cluster
  // of another size, sluice::Error if a file cannot be read or created or
  // another process holds the directory.
  ReplicaDisk(const DiskOptions& options, uint32_t replicas, uint32_t rank);
  ~ReplicaDisk();
  ReplicaDisk(const ReplicaDisk&) = delete;
  ReplicaDisk& operator=(const ReplicaDisk&) = delete;

  const std::string& dir() const { return rank_dir_; }
  // The runs started from these files so far (0: the directory was new).
  uint32_t runs() const { return runs_; }
  // What the files held, if they held anything (taken once: moved out).
  std::optional<RestoredState> take_restored() { return std::move(restored_); }
  // A summary of what was read, for the log: "a snapshot of slot S, N log
  // entries, ballot B (a torn tail of T bytes dropped)".
  const std::string& loaded() const { return loaded_; }

  // Starts run `run` with the replica's whole state (a rewrite, synced).
  void begin_run(uint32_t run, const DurableChanges& state);
  // Writes `changes` (appended and committed, or a rewrite). Throws
  // sluice::Error.
  void save(const DurableChanges& changes);
  // --fsync everysec: syncs once a second (RecordWriter::tick).
  void tick(uint64_t now_ms) { log_.tick(now_ms); }
  // Writes and syncs everything (a clean end).
  void sync() { log_.sync(); }
  uint64_t syncs() const { return log_.syncs(); }

 private:
  void rewrite(const DurableChanges& state);

  DiskOptions options_;
  uint32_t replicas_ = 0;
  uint32_t rank_ = 0;
  std::string rank_dir_;
  int lock_fd_ = -1;
  uint32_t runs_ = 0;
  uint64_t snapshot_slot_ = 0;  // of the snapshot file
  std::optional<RestoredState> restored_;
  std::string loaded_;
  RecordWriter log_;
};

}  // namespace kv
