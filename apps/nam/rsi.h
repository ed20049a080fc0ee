// apps/nam/rsi.h: snapshot-isolation transactions on network-attached memory
// with the RSI protocol ("The End of Slow Networks", section 4.2). The
// compute client does everything with one-sided reads, writes and atomics on
// the memory servers' regions (layout.h); the memory servers run no
// transaction code.
//
//   begin()   read timestamp = the highest timestamp below which every
//             timestamp of the vector is done (committed or aborted)
//   read()    one read of the record's slot; the newest version whose commit
//             id is at most the read timestamp
//   write() / insert()  buffered here
//   commit()  takes this client's next pre-assigned timestamp c, writes its
//             commit log (the write set, for recovery), then per written
//             record one compare-and-swap that validates (the header still
//             holds the commit id read) and locks (header := lock | c); on a
//             failed CAS releases the locks taken, marks c aborted and
//             returns kConflict. Otherwise installs each new version into
//             the slot's oldest (or a free) version: one CAS that claims it
//             (its commit-id word, from the value read to claim bit | c),
//             then one write of its checksum and payload; marks c committed
//             in the vector (the commit point), and unlocks each header with
//             a CAS lock | c -> c. A claim that fails (the version changed
//             since it was read: only a client whose lock recovery released
//             meets that) gives back the claims made, the locks and c.
//
// Old versions (Layout::overflow_entries > 0). A reader publishes its read
// timestamp (a snapshot word per client on memory server 0) when it begins.
// A writer, once it holds its locks, reads the snapshot words; where the
// version its install overwrites (the record's oldest) is the one some
// other client's snapshot sees (its read timestamp at least that version's
// commit id and below the next version's), it first moves that version
// into the table's overflow area on the record's memory server (fetch_add
// for a sequence number, a write of the entry, a write of the slot's
// overflow head, all under the record's lock). A reader that finds every
// version in the slot too new walks the record's overflow chain from its
// head to the newest version its snapshot sees. A snapshot published after
// the writer looked, or a version the ring has since reused, leaves the
// reader with too-old, as without the area: never a wrong version.
//
// Recovery (recover_client): a client that died is found by a timestamp of
// its that stays pending longer than recovery_timeout (every other client's
// read timestamp stops there), by a lock older than that, or, at the end of a
// run, by not having retired. Its last commit log names the records it may
// have locked: if its timestamp is committed they are rolled forward (the
// versions were installed before the commit point; unlock), otherwise the
// timestamp is first fenced (so the client, were it only slow, can no longer
// commit it) and every such record rolled back (the header restored to the
// newest committed version's commit id). The client is then retired from
// its first unfinished timestamp on: that one stays fenced and it and the
// later ones count as done. A client that was only stalled finds out at
// its next begin() or commit() (FencedError). It may resume mid-commit and
// go on writing first: its locks fail (or are given back at its commit
// point), a version it claimed is junk to readers (its commit is fenced; a
// reader that has not yet seen the retirement stops below the fenced
// timestamp) and free to writers once whole, and a version it had not yet
// claimed when recovery ran is one a newer commit may have taken since, so
// its claim fails and nothing is overwritten. A client that dies between
// a claim and its write leaves that version claimed for good (one of the
// record's `versions` fewer; a record whose every version is so held is an
// error naming it).
//
// Errors: a memory server that is gone makes every call throw
// sluice::PeerLostError naming its rank (never a stale or partial result);
// other remote failures and misuse throw NamError.
//
// Thread safety: one RsiClient per thread (it owns that thread's region
// handles). Many clients, in any processes, run against one database.
#pragma once

#include <sluice/sluice.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "layout.h"
#include "txn.h"

namespace sluice::nam {

// Where the test builds may kill the client (SIGKILL), on its n-th commit.
// RSI: after locking / after the commit bit; 2PC (twopc.h): after every
// participant voted yes, before any COMMIT / after one participant of two or
// more committed, before the others heard.
enum class KillPoint : uint8_t { kNone, kAfterLock, kAfterCommitBit, kPrepared, kPartialCommit };

struct RsiOptions {
  std::chrono::milliseconds recovery_timeout{2000};
  // Set (to the rank) when a memory server is known to be gone (liveness.h):
  // begin() and commit() then throw PeerLostError instead of going on.
  const std::atomic<int64_t>* lost_server = nullptr;
  // Limit of every one-sided operation (then NamError, or PeerLostError if
  // the memory server is known to be gone).
  std::chrono::milliseconds op_timeout{10000};
  // A free slot's client (spares.h: a spare slot, or a slot no first
  // process of its rank runs): memory server 0 parked it from its first
  // timestamp, and it starts as parked; its first begin() unparks
  // it (giving up every timestamp others may have passed), and retire()
  // ends the park of one that never began.
  bool starts_parked = false;
  // False (--no-recovery): recover_client throws NamError naming the client
  // instead of recovering it.
  bool recover = true;
  KillPoint test_kill = KillPoint::kNone;
  uint64_t test_kill_on_commit = 1;  // the n-th commit (1-based) that gets that far
  // In-process tests: throw TestKilled at the kill point instead of raising
  // SIGKILL (the test then abandons the client, as if its process had died).
  bool test_kill_throws = false;
  // In-process tests: called in commit() after locking ("after-lock") and
  // after installing, before the commit point ("after-install"); a test
  // stalls the client there (as a SIGSTOP would) by blocking in it.
  std::function<void(std::string_view where)> test_pause;
};

struct TestKilled final : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RsiClient final : public Transactions {
 public:
  // Opens the regions of every memory server (ranks 0 .. memory_servers-1).
  RsiClient(Cluster& cluster, const Layout& layout, uint32_t client, RsiOptions options = {});

  void begin() override;
  // A transaction that only reads: the same snapshot as begin() gives, but
  // the client *parks* first (a park word on memory server 0): while parked,
  // its pending timestamps do not hold back anyone's read timestamp, so a
  // long reader no longer stops writers that committed past it (they wait
  // in begin() for their own commits to become visible). commit() then does
  // no remote operation at all. The client stays parked across read-only
  // transactions; the next begin() unparks it, which gives up (one CAS per
  // vector word) every own timestamp that others may have passed.
  void begin_read_only() override;
  bool parked() const { return parked_; }
  uint64_t read_timestamp() const { return rts_; }
  // Copies the visible version's payload into `out` (payload_bytes of the
  // table; a shorter `out` gets a prefix). False if the record is absent in
  // the snapshot. A record whose visible version was overwritten dooms the
  // transaction (commit() returns kTooOld; what read returned is then
  // meaningless).
  bool read(uint32_t table, uint64_t key, std::span<std::byte> out) override;
  // Buffers a new version (zero-padded to payload_bytes).
  void write(uint32_t table, uint64_t key, std::span<const std::byte> bytes) override;
  // write() of a record that must be absent in the snapshot; commit()
  // returns kConflict if it is not (or was inserted concurrently).
  void insert(uint32_t table, uint64_t key, std::span<const std::byte> bytes) override;
  Outcome commit() override;
  void abort() override;
  // Gives up this client's remaining timestamps (call when done: an idle
  // client that holds the lowest pending timestamp stops everyone's reads).
  void retire() override;

  // Recovers every client that has not retired (call only once every live
  // client retired, e.g. after a barrier): returns how many were recovered.
  uint32_t recover_unretired();
  // Reads a slot's header directly (the end-of-run checks).
  uint64_t header(uint32_t table, uint64_t key);

  const TxnStats& stats() const override { return stats_; }
  uint32_t client() const { return client_; }
  const char* path() const { return meta_.path(); }

 private:
  // The version an install overwrites: a free one, or the oldest (then
  // `valid`, with its commit id and the next older-to-newer one's). `word`:
  // its commit-id word as read, which the install's claim expects; `none`:
  // every version is being installed or held by a fenced commit's claim.
  struct Victim {
    uint32_t index = 0;
    bool valid = false, none = false;
    uint64_t cid = 0, next_cid = 0, word = 0;
  };
  struct Seen {  // a record read in this transaction
    uint32_t table;
    uint64_t key;
    uint64_t cid;  // commit id of the visible version (0 if absent)
    Victim victim;
    bool found;
  };
  struct Pending {  // a buffered write
    uint32_t table;
    uint64_t key;
    uint64_t expected;  // the header value validation expects
    Victim victim;
    bool insert;
    size_t offset;  // payload in arena_
    bool locked;
  };
  static constexpr int kInOverflow = -2;  // visible_: the version came from the overflow area

  RemoteRegion& region(uint32_t table, uint64_t key) {
    return regions_[layout_.server_of(key)][table];
  }
  void start(bool read_only);
  void read_marks();  // the retire and park words, into retire_
  // Whether version `cid` (at most rts_) is a commit's (rsi.cc).
  bool committed_version(uint64_t cid);
  void park();
  void set_park(uint64_t from, uint64_t to);
  void unpark();
  uint64_t highest_finished();
  void check(Status s, RemoteRegion& r, const char* what);
  uint64_t cas(RemoteRegion& r, uint64_t offset, uint64_t expected, uint64_t desired);
  void read_slot(uint32_t table, uint64_t key);  // into slot_
  const Seen& observe(uint32_t table, uint64_t key);
  void buffer(uint32_t table, uint64_t key, std::span<const std::byte> bytes, bool insert);
  // Moves ts from state `from` to `to`; returns the state found (== from on success).
  TsState transition(uint64_t ts, TsState from, TsState to);
  TsState state_of(uint64_t ts);
  void release_locks(uint64_t c);
  // Claims w's victim version for commit c (a CAS from the word observe()
  // saw); false if it was taken meanwhile (only a fenced client's is).
  bool claim(const Pending& w, uint64_t c);
  // Frees the versions this commit claimed (c's installs are done: the
  // slots may be reused at once).
  void unclaim(uint64_t c, size_t claimed);
  // A commit that cannot go on (a lock or a claim refused): gives back the
  // first `claimed` claims and the locks, aborts c; kConflict, or
  // FencedError (text `fenced` + c) if recovery fenced c meanwhile.
  Outcome give_up(uint64_t c, size_t claimed, const std::string& fenced);
  void next_timestamp();
  // The frontier stayed at `frontier` past the recovery timeout: recover
  // the owner of `blocker`, the first pending timestamp not parked (0: none).
  void stall_check(uint64_t frontier, uint64_t blocker);
  void note_lock(uint64_t holder_ts);
  void recover_client(uint32_t j, uint64_t pending_ts);
  void resolve(uint64_t c, const std::vector<LogEntry>& entries);
  void roll_back(const LogEntry& e, uint64_t c);
  void maybe_kill(KillPoint at);
  // Overflow area: the newest version of (table, key) at most rts_ along the
  // chain from `head`, into found_; false if the chain does not reach one.
  bool walk_overflow(uint32_t table, uint64_t key, uint64_t head, uint64_t* cid);
  // Moves w's victim version into the overflow area if another client's
  // published snapshot sees it (under w's lock; c: the commit installing).
  void move_if_needed(const Pending& w, uint64_t c);
  void publish_snapshot(uint64_t word);
  void check_servers();
  Deadline deadline() const { return Clock::now() + options_.op_timeout; }

  Cluster& cluster_;
  Layout layout_;
  uint32_t client_;
  RsiOptions options_;
  std::vector<std::vector<RemoteRegion>> regions_;  // [server][table]
  RemoteRegion meta_;
  std::vector<std::vector<RemoteRegion>> overflow_;  // [server][table], with an overflow area

  uint64_t rts_ = 0, next_ts_ = 0, last_commit_ = 0, scan_ = 1, wait_for_ = 0;
  bool in_txn_ = false, read_only_ = false, parked_ = false;
  Outcome doomed_ = Outcome::kCommitted;  // kCommitted: not doomed
  int visible_ = -1;                      // observe(): the visible version in slot_
  size_t arena_used_ = 0;
  std::vector<Seen> seen_;
  std::vector<Pending> writes_;
  std::vector<std::byte> arena_, slot_, log_, entry_, found_;
  std::vector<uint64_t> snapshots_;       // commit(): the published snapshot words
  std::vector<uint64_t> retire_, words_;  // retire_: retire words, then park words
  std::vector<uint64_t> parks_;           // begin(): the park words before the vector read
  std::vector<LogEntry> entries_;
  uint64_t park_ts_ = 0;  // parked: the park word (the first parked timestamp)
  uint64_t stall_ts_ = 0;
  Clock::time_point stall_since_{};
  uint64_t lock_ts_ = 0;
  Clock::time_point lock_since_{};
  uint64_t kill_countdown_ = 0;
  TxnStats stats_;
};

}  // namespace sluice::nam
