#include "rsi.h"

#include <signal.h>
#include <sluice/job.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "words.h"

namespace sluice::nam {

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kCommitted:
      return "committed";
    case Outcome::kConflict:
      return "conflict";
    case Outcome::kTooOld:
      return "too-old";
    case Outcome::kAborted:
      return "aborted";
  }
  return "?";
}

RsiClient::RsiClient(Cluster& cluster, const Layout& layout, uint32_t client, RsiOptions options)
    : cluster_(cluster), layout_(layout), client_(client), options_(options) {
  if (layout_.versions < 2) throw NamError("nam: --versions must be at least 2");
  if (client_ >= layout_.clients) throw NamError("nam: client id out of range");
  regions_.resize(layout_.memory_servers);
  uint64_t max_slot = 0, max_payload = 0;
  for (uint32_t s = 0; s < layout_.memory_servers; ++s) {
    for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
      regions_[s].push_back(cluster_.open_region(layout_.region_name(layout_.tables[t].name), s));
    }
  }
  for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
    max_slot = std::max(max_slot, layout_.slot_bytes(t));
    max_payload = std::max(max_payload, layout_.version_bytes(t));
  }
  meta_ = cluster_.open_region(layout_.meta_name(), 0);
  if (layout_.overflow_entries != 0) {
    overflow_.resize(layout_.memory_servers);
    for (uint32_t s = 0; s < layout_.memory_servers; ++s) {
      for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
        overflow_[s].push_back(
            cluster_.open_region(layout_.overflow_name(layout_.tables[t].name), s));
      }
    }
    entry_.resize(24 + max_payload);
    found_.resize(max_payload);
    snapshots_.resize(layout_.clients);
  }
  next_ts_ = client_ + 1;
  if (options_.starts_parked) {
    park_ts_ = next_ts_;
    parked_ = true;
  }
  seen_.reserve(64);
  writes_.reserve(kMaxWrites);
  arena_.resize(kMaxWrites * max_payload);
  slot_.resize(max_slot);
  log_.resize(layout_.log_bytes());
  retire_.resize(2 * uint64_t{layout_.clients});  // retire words, then park words
  parks_.reserve(layout_.clients);
  // A read of the vector covers more than a round of the clients' timestamps
  // (begin() and highest_finished() rely on it).
  words_.resize(std::max<uint64_t>(8, layout_.clients / 32 + 2));
  entries_.reserve(kMaxWrites);
  kill_countdown_ = options_.test_kill_on_commit;
}

void RsiClient::check(Status s, RemoteRegion& r, const char* what) {
  if (s == Status::kOk) return;
  const std::string where = "memory server rank " + std::to_string(r.owner());
  // kClosed: the region was withdrawn, which for a memory server means it
  // is gone as far as the database is concerned (the ofi path also reports
  // an owner that died this way).
  if (s == Status::kPeerLost || s == Status::kClosed) {
    throw PeerLostError(r.owner(), "nam: " + where + " is lost (" + what + ": " +
                                       sluice::to_string(s) + "): " + r.error());
  }
  // A timeout: first whether the memory server is known to be gone (some
  // paths do not report a dead owner, see docs/nam.md).
  if (s == Status::kTimeout) check_servers();
  throw NamError("nam: " + std::string(what) + " on " + where + " failed: " + sluice::to_string(s) +
                 ": " + r.error());
}

uint64_t RsiClient::cas(RemoteRegion& r, uint64_t offset, uint64_t expected, uint64_t desired) {
  const auto prev = r.compare_and_swap(offset, expected, desired, deadline());
  check(prev.status(), r, "compare-and-swap");
  return *prev;
}

void RsiClient::read_slot(uint32_t table, uint64_t key) {
  if (key >= layout_.tables[table].records) {
    throw NamError("nam: key " + std::to_string(key) + " is outside table '" +
                   layout_.tables[table].name + "' (" +
                   std::to_string(layout_.tables[table].records) + " records)");
  }
  RemoteRegion& r = region(table, key);
  check(r.read(layout_.slot_offset(table, key), std::span(slot_.data(), layout_.slot_bytes(table)),
               deadline()),
        r, "reading a record");
}

// Reads the record and picks the version visible at the read timestamp,
// leaving the slot image in slot_ and the chosen version in visible_.
const RsiClient::Seen& RsiClient::observe(uint32_t table, uint64_t key) {
  const uint32_t payload = layout_.tables[table].payload_bytes;
  for (int attempt = 0;; ++attempt) {
    read_slot(table, key);
    int best = -1, free_v = -1, oldest = -1;
    uint64_t best_cid = 0, oldest_cid = 0, second_cid = ~uint64_t{0}, free_word = 0;
    uint64_t oldest_word = 0;
    uint32_t fenced_claims = 0;
    bool torn = false, any = false;
    for (uint32_t v = 0; v < layout_.versions; ++v) {
      const std::byte* p = slot_.data() + layout_.version_offset(table, v);
      const uint64_t word = load64(p), cid = version_cid(word), sum = load64(p + 8);
      const bool valid =
          sum != 0 && sum == version_checksum(cid, table, key, std::span(p + 16, payload));
      if (!valid) {
        // Word 0: free (never written, or given back by the commit that
        // claimed it). Otherwise claimed and not whole: an install under
        // way (the lock holder's), or a fenced client's claim that it may
        // still write: never a version to install over.
        if (word == 0) {
          if (free_v < 0) free_v = static_cast<int>(v), free_word = word;
        } else {
          torn = true;
          if (cid != 0 && retire_[layout_.ts_owner(cid)] != 0) ++fenced_claims;
        }
        continue;
      }
      // Whole, but a fenced commit's (its client is retired and was done
      // writing it): junk, and the best version to install over.
      if (!committed_version(cid)) {
        if (free_v < 0) free_v = static_cast<int>(v), free_word = word;
        continue;
      }
      any = true;
      if (cid <= rts_ && (best < 0 || cid > best_cid) && committed_version(cid))
        best = static_cast<int>(v), best_cid = cid;
      if (oldest < 0 || cid < oldest_cid) {
        if (oldest >= 0) second_cid = std::min(second_cid, oldest_cid);
        oldest = static_cast<int>(v), oldest_cid = cid, oldest_word = word;
      } else {
        second_cid = std::min(second_cid, cid);
      }
    }
    // A torn version is being installed (or was left by a dead client): if
    // nothing visible was found, the version needed may be the one being
    // overwritten; look again a few times before calling it gone.
    if (best < 0 && torn && attempt < 3) {
      std::this_thread::yield();
      continue;
    }
    // Every version here is too new: an older one may be in the overflow
    // area. (Not found: a writer may have moved it between our reads of
    // the head and of the versions; look again a few times.)
    if (best < 0 && any && layout_.overflow_entries != 0) {
      uint64_t cid = 0;
      if (walk_overflow(table, key, load64(slot_.data() + Layout::kOverflowHead), &cid)) {
        best = kInOverflow;
        best_cid = cid;
      } else if (attempt < 3) {
        std::this_thread::yield();
        continue;
      }
    }
    Victim victim;
    if (free_v >= 0) {
      victim.index = static_cast<uint32_t>(free_v);
      victim.word = free_word;
    } else if (oldest >= 0) {
      victim =
          Victim{static_cast<uint32_t>(oldest), true, false, oldest_cid, second_cid, oldest_word};
    } else {
      victim.none = true;
      if (fenced_claims == layout_.versions) {
        throw NamError("nam: record " + std::to_string(key) + " of table '" +
                       layout_.tables[table].name + "' has no version left to install into: all " +
                       std::to_string(layout_.versions) +
                       " are claimed by commits that recovery fenced mid-install (raise "
                       "--versions)");
      }
    }
    const bool found = best >= 0 || best == kInOverflow;
    Seen s{table, key, found ? best_cid : 0, victim, found};
    visible_ = best;
    if (!found && (any || torn))
      doomed_ = doomed_ == Outcome::kCommitted ? Outcome::kTooOld : doomed_;
    for (Seen& old : seen_) {
      if (old.table == table && old.key == key) {
        // The snapshot is fixed: the same version must be visible again.
        if (old.cid != s.cid || old.found != s.found) doomed_ = Outcome::kTooOld;
        return old;
      }
    }
    seen_.push_back(s);
    return seen_.back();
  }
}

void RsiClient::check_servers() {
  if (options_.lost_server == nullptr) return;
  const int64_t lost = options_.lost_server->load(std::memory_order_acquire);
  if (lost < 0) return;
  throw PeerLostError(static_cast<uint32_t>(lost),
                      "nam: memory server rank " + std::to_string(lost) +
                          " is lost (it is no longer in the job's membership view)");
}

void RsiClient::begin() { start(false); }

void RsiClient::begin_read_only() { start(true); }

// A version at or below the read timestamp is a committed one's, except
// one a stalled client installed after recovery presumed it dead and rolled
// its commit back (it resumed mid-commit; recovery had dropped what it
// found installed by then): such a client is retired, so a version of a
// retired client's timestamp is checked against the vector. (Retired
// clients are few; a live one's versions need no read.)
bool RsiClient::committed_version(uint64_t cid) {
  if (cid == 0 || retire_[layout_.ts_owner(cid)] == 0) return true;  // (0: the loaded data)
  return state_of(cid) == kCommitted;
}

void RsiClient::read_marks() {
  check(
      meta_.read(layout_.retire_offset(0), std::as_writable_bytes(std::span(retire_)), deadline()),
      meta_, "reading the retire and park words");
}

void RsiClient::start(bool read_only) {
  check_servers();
  if (in_txn_) throw NamError("nam: begin() inside a transaction (commit() or abort() it first)");
  seen_.clear();
  writes_.clear();
  arena_used_ = 0;
  doomed_ = Outcome::kCommitted;
  // A read-only transaction parks the client (its timestamps no longer hold
  // anyone back) and it stays parked until a transaction that may write.
  if (read_only && !parked_) park();
  if (!read_only && parked_) unpark();
  const uint64_t words_total = layout_.ts_words();
  const uint64_t* park = retire_.data() + layout_.clients;
  for (;;) {
    read_marks();
    if (retire_[client_] != 0) {
      throw FencedError(
          "nam: client " + std::to_string(client_) +
          " was fenced: recovery presumed it dead (silent longer than the recovery timeout)");
    }
    // The frontier: the first timestamp not done. Done: committed, aborted,
    // or retired; and a parked client's pending timestamp, but only below
    // a finished one (so that a parked client can later abort every one
    // anybody passed: unpark()). `run`: the first parked timestamp not yet
    // known to lie below a finished one.
    // `blocker`: the first pending timestamp that is not parked, which is
    // what holds the frontier back even where a parked run lies before it
    // (0: none in sight).
    uint64_t frontier = 0, hint = 0, t = scan_, run = 0, blocker = 0;
    bool run_others = false, passed_others = false;
    for (;;) {
      const uint64_t w0 = ts_word(t);
      const uint64_t n = std::min<uint64_t>(words_.size(), words_total - w0);
      check(meta_.read(layout_.ts_offset() + 8 * w0,
                       std::as_writable_bytes(std::span(words_.data(), n)), deadline()),
            meta_, "reading the timestamp vector");
      bool finished_here = false;
      for (; ts_word(t) < w0 + n; ++t) {
        const TsState st = ts_state(words_[ts_word(t) - w0], t);
        const uint32_t owner = layout_.ts_owner(t);
        const bool finished = st == kCommitted || st == kAborted;
        finished_here = finished_here || finished;
        if (frontier != 0) {
          if (finished) hint = t;
          continue;
        }
        if (finished) {
          passed_others = passed_others || run_others;
          run = 0, run_others = false;
          continue;
        }
        if (retire_[owner] != 0 && t >= retire_[owner]) continue;
        if (st == kPending && park[owner] != 0 && t >= park[owner]) {
          if (run == 0) run = t;
          run_others = run_others || owner != client_;
          continue;
        }
        frontier = run != 0 ? run : t;
        blocker = t;
      }
      if (frontier != 0) break;
      // Nothing finished in a whole window (wider than the clients' round,
      // so nothing finished beyond it either): the parked run stays ahead.
      if (run != 0 && !finished_here) {
        frontier = run;
        break;
      }
      if (w0 + n >= words_total) {
        throw NamError("nam: the timestamp vector is exhausted (raise --max-timestamps, now " +
                       std::to_string(layout_.max_timestamps) + ")");
      }
    }
    // Another client's parked timestamps were passed: they count as done
    // only if it was still parked after the vector was read (unpark() then
    // aborts every one of them that lies below what it finds finished).
    if (passed_others) {
      parks_.assign(park, park + layout_.clients);
      read_marks();
      if (!std::equal(parks_.begin(), parks_.end(), park)) continue;
    }
    scan_ = frontier;
    // Own timestamps below what others already finished only hold everyone
    // back (reads stop below the lowest pending one): give them up. So do
    // those below a commit this client waits for (a retry after a conflict),
    // which its snapshot can only include once they are finished. (Parked:
    // unpark() gives them up, all at once.)
    const uint64_t wanted = std::max(last_commit_, wait_for_);
    const uint64_t below = frontier > wanted ? hint : std::max(hint, wanted);
    if (!parked_ && next_ts_ < below) {
      while (next_ts_ < below) {
        if (transition(next_ts_, kPending, kAborted) != kPending) {
          throw FencedError("nam: client " + std::to_string(client_) + " was fenced by recovery");
        }
        ++stats_.burned;
        next_timestamp();
      }
      continue;
    }
    rts_ = frontier - 1;
    // Read-your-writes (our last commit), and a retry after a conflict sees
    // the commit it collided with.
    const bool waiting = rts_ < wanted;
    // A pending timestamp matters only if commits after it are held back
    // (a live idle client gives its timestamps up then, see above), or if
    // this client waits for it: the lock holder of a conflict that died
    // between locking and its commit bit leaves nothing finished after its
    // timestamp, and must still be recovered.
    if (hint > frontier || waiting) stall_check(frontier, blocker);
    if (!waiting) break;
    check_servers();
    std::this_thread::yield();
  }
  // Before anything is read: writers from now on keep what this snapshot sees.
  if (layout_.overflow_entries != 0) publish_snapshot(rts_ + 1);
  read_only_ = read_only;
  in_txn_ = true;
}

// The park word changes by compare-and-swap, not a write: a CAS is also a
// full fence on the shm path (a plain write is a memcpy), so the read of the
// vector in unpark() cannot overtake the clearing of the word (else it could
// miss a finished timestamp that a reader which still saw the park relied on).
void RsiClient::set_park(uint64_t from, uint64_t to) {
  if (cas(meta_, layout_.park_offset(client_), from, to) != from)
    throw NamError("nam: client " + std::to_string(client_) + "'s park word changed under it");
}

void RsiClient::park() {
  park_ts_ = next_ts_;
  set_park(0, park_ts_);
  parked_ = true;
}

// The highest finished timestamp from scan_ on (at least scan_ - 1: every
// timestamp below scan_ counts as done for this client). Every client finishes its
// own timestamps in order (commits, give-ups and unpark() leave no pending
// one below a finished one of the same client), so below the highest
// finished one every window of `clients` timestamps holds a finished one: a
// window of words_ (wider) with none ends the search.
uint64_t RsiClient::highest_finished() {
  uint64_t highest = scan_ - 1;
  for (uint64_t w0 = ts_word(scan_); w0 < layout_.ts_words();) {
    const uint64_t n = std::min<uint64_t>(words_.size(), layout_.ts_words() - w0);
    check(meta_.read(layout_.ts_offset() + 8 * w0,
                     std::as_writable_bytes(std::span(words_.data(), n)), deadline()),
          meta_, "reading the timestamp vector");
    bool any = false;
    for (uint64_t t = 32 * w0; t < 32 * (w0 + n); ++t) {
      const TsState st = ts_state(words_[ts_word(t) - w0], t);
      if (t != 0 && (st == kCommitted || st == kAborted)) highest = t, any = true;
    }
    if (!any) break;
    w0 += n;
  }
  return highest;
}

// Ends the park: from now on others stop at this client's pending
// timestamps again. Every own timestamp a reader may have passed while
// this client was parked lies below a timestamp finished before the
// reader's check of the park word, so below what is found finished here
// after the park word is cleared: those are given up, a vector word (up to
// 32 timestamps) per compare-and-swap, before this client commits anything.
void RsiClient::unpark() {
  set_park(park_ts_, 0);
  parked_ = false;
  // Own timestamps below `highest` + 1: those below scan_ this client passed
  // itself while parked, and whatever others may have passed.
  const uint64_t highest = highest_finished() + 1;
  while (next_ts_ < highest) {
    const uint64_t w = ts_word(next_ts_);
    const uint64_t off = layout_.ts_offset() + 8 * w;
    uint64_t word = 0, given = 0;  // a guess (all pending); the CAS tells the truth
    for (;;) {
      uint64_t desired = word;
      given = 0;
      for (uint64_t t = next_ts_; ts_word(t) == w && t < highest; t += layout_.clients) {
        const TsState st = ts_state(word, t);
        if (st == kFenced) {
          throw FencedError("nam: client " + std::to_string(client_) + " was fenced by recovery");
        }
        if (st == kPending) desired |= uint64_t{kAborted} << ts_shift(t), ++given;
      }
      const uint64_t prev = cas(meta_, off, word, desired);
      if (prev == word) break;
      word = prev;
    }
    stats_.burned += given;
    while (ts_word(next_ts_) == w && next_ts_ < highest) next_timestamp();
  }
}

void RsiClient::next_timestamp() {
  next_ts_ += layout_.clients;
  if (next_ts_ >= layout_.ts_words() * 32) {
    throw NamError("nam: the timestamp vector is exhausted (raise --max-timestamps, now " +
                   std::to_string(layout_.max_timestamps) + ")");
  }
}

void RsiClient::stall_check(uint64_t frontier, uint64_t blocker) {
  const auto now = Clock::now();
  if (frontier != stall_ts_) {
    stall_ts_ = frontier;
    stall_since_ = now;
    return;
  }
  if (now - stall_since_ < options_.recovery_timeout) return;
  // The client presumed dead is the blocker's owner: a parked run before it
  // (a read-only client's, or a free slot nobody runs yet: spares.h) holds
  // no one back by itself, and fencing it would only fence a live reader or
  // the slot's later claimant.
  stall_ts_ = 0;
  if (blocker == 0) return;
  const uint32_t j = layout_.ts_owner(blocker);
  if (j != client_) recover_client(j, blocker);
}

void RsiClient::note_lock(uint64_t holder) {
  const auto now = Clock::now();
  if (holder != lock_ts_) {
    lock_ts_ = holder;
    lock_since_ = now;
    return;
  }
  if (now - lock_since_ < options_.recovery_timeout) return;
  const uint32_t j = layout_.ts_owner(holder);
  lock_ts_ = 0;
  if (j == client_) return;
  // The first timestamp of j that is not finished: what to fence.
  uint64_t p = holder;
  for (;;) {
    const TsState st = state_of(p);
    if (st == kPending || st == kFenced) break;
    p += layout_.clients;
  }
  recover_client(j, p);
}

bool RsiClient::read(uint32_t table, uint64_t key, std::span<std::byte> out) {
  if (!in_txn_) throw NamError("nam: read() outside a transaction");
  const uint32_t payload = layout_.tables[table].payload_bytes;
  const size_t n = std::min<size_t>(out.size(), payload);
  for (const Pending& w : writes_) {
    if (w.table == table && w.key == key) {
      std::memcpy(out.data(), arena_.data() + w.offset, n);
      return true;
    }
  }
  const Seen& s = observe(table, key);
  if (!s.found || (visible_ < 0 && visible_ != kInOverflow)) return false;
  if (visible_ == kInOverflow) {
    std::memcpy(out.data(), found_.data(), n);
    return true;
  }
  std::memcpy(out.data(), slot_.data() + layout_.version_offset(table, visible_) + 16, n);
  return true;
}

void RsiClient::write(uint32_t table, uint64_t key, std::span<const std::byte> bytes) {
  buffer(table, key, bytes, false);
}
void RsiClient::insert(uint32_t table, uint64_t key, std::span<const std::byte> bytes) {
  buffer(table, key, bytes, true);
}

void RsiClient::buffer(uint32_t table, uint64_t key, std::span<const std::byte> bytes,
                       bool insert) {
  if (!in_txn_) throw NamError("nam: write() outside a transaction");
  if (read_only_) throw NamError("nam: write() in a read-only transaction (begin_read_only())");
  if (table >= layout_.tables.size()) throw NamError("nam: no table " + std::to_string(table));
  const uint32_t payload = layout_.tables[table].payload_bytes;
  if (bytes.size() > payload) {
    throw NamError("nam: a " + std::to_string(bytes.size()) + "-byte value does not fit table '" +
                   layout_.tables[table].name + "' (" + std::to_string(payload) + " bytes)");
  }
  Pending* w = nullptr;
  for (Pending& x : writes_) {
    if (x.table == table && x.key == key) w = &x;
  }
  if (w == nullptr) {
    if (writes_.size() == kMaxWrites) {
      throw NamError("nam: a transaction writes at most " + std::to_string(kMaxWrites) +
                     " records");
    }
    bool known = false;
    Seen s{};
    for (const Seen& x : seen_) {
      if (x.table == table && x.key == key) s = x, known = true;
    }
    if (!known) s = observe(table, key);  // a blind write: validation needs the visible commit id
    if (insert && s.found && doomed_ == Outcome::kCommitted) doomed_ = Outcome::kConflict;
    writes_.push_back(Pending{table, key, s.cid, s.victim, insert, arena_used_, false});
    arena_used_ += layout_.version_bytes(table);
    w = &writes_.back();
  }
  std::byte* dst = arena_.data() + w->offset;
  std::memcpy(dst, bytes.data(), bytes.size());
  std::memset(dst + bytes.size(), 0, payload - bytes.size());
}

TsState RsiClient::state_of(uint64_t ts) {
  uint64_t word = 0;
  check(meta_.read(layout_.ts_offset() + 8 * ts_word(ts), bytes_of(word), deadline()), meta_,
        "reading the timestamp vector");
  return ts_state(word, ts);
}

TsState RsiClient::transition(uint64_t ts, TsState from, TsState to) {
  const uint64_t off = layout_.ts_offset() + 8 * ts_word(ts);
  const uint32_t shift = ts_shift(ts);
  uint64_t word = uint64_t{from} << shift;  // a guess; the CAS tells the truth
  for (;;) {
    const TsState st = ts_state(word, ts);
    if (st != from) return st;
    const uint64_t desired = (word & ~(uint64_t{3} << shift)) | (uint64_t{to} << shift);
    const uint64_t prev = cas(meta_, off, word, desired);
    if (prev == word) return from;
    word = prev;
  }
}

void RsiClient::maybe_kill(KillPoint at) {
  // `sluice run --kill-at RANK:NAME[:K]` arms these from outside.
  sluice::kill_point(at == KillPoint::kAfterLock ? "nam-rsi-after-lock"
                                                 : "nam-rsi-after-commit-bit");
  if (options_.test_kill != at || kill_countdown_ == 0) return;
  if (--kill_countdown_ != 0) return;
  std::fprintf(stderr, "nam test hook: client %u kills itself %s (timestamp %" PRIu64 ")\n",
               client_,
               at == KillPoint::kAfterLock ? "after locking, before installing"
                                           : "after setting its timestamp bit, before unlocking",
               next_ts_);
  std::fflush(stderr);
  if (options_.test_kill_throws) throw TestKilled("nam test hook: client killed");
  ::raise(SIGKILL);
}

void RsiClient::release_locks(uint64_t c) {
  for (Pending& w : writes_) {
    if (!w.locked) continue;
    cas(region(w.table, w.key), layout_.slot_offset(w.table, w.key), kLockBit | c, w.expected);
    w.locked = false;
  }
}

bool RsiClient::claim(const Pending& w, uint64_t c) {
  if (w.victim.none) return false;
  const uint64_t off =
      layout_.slot_offset(w.table, w.key) + layout_.version_offset(w.table, w.victim.index);
  return cas(region(w.table, w.key), off, w.victim.word, kClaimBit | c) == w.victim.word;
}

void RsiClient::unclaim(uint64_t c, size_t claimed) {
  for (size_t i = 0; i < claimed; ++i) {
    const Pending& w = writes_[i];
    cas(region(w.table, w.key),
        layout_.slot_offset(w.table, w.key) + layout_.version_offset(w.table, w.victim.index),
        kClaimBit | c, 0);
  }
}

Outcome RsiClient::give_up(uint64_t c, size_t claimed, const std::string& fenced) {
  unclaim(c, claimed);
  release_locks(c);
  if (transition(c, kPending, kAborted) != kPending) throw FencedError(fenced + std::to_string(c));
  next_timestamp();
  ++stats_.conflicts;
  return Outcome::kConflict;
}

void RsiClient::abort() {
  if (!in_txn_) throw NamError("nam: abort() outside a transaction");
  in_txn_ = false;
  read_only_ = false;
}

Outcome RsiClient::commit() {
  if (!in_txn_) throw NamError("nam: commit() outside a transaction");
  in_txn_ = false;
  read_only_ = false;
  if (doomed_ != Outcome::kCommitted) {
    (doomed_ == Outcome::kTooOld ? stats_.too_old : stats_.conflicts)++;
    return doomed_;
  }
  if (writes_.empty()) {
    ++stats_.read_only;
    return Outcome::kCommitted;
  }
  const uint64_t c = next_ts_;
  const std::string fenced =
      "nam: client " + std::to_string(client_) + " was fenced by recovery at timestamp ";
  // The commit log first: recovery must know every record this commit may lock.
  entries_.clear();
  for (const Pending& w : writes_) entries_.push_back(LogEntry{w.table, w.key});
  encode_log(c, entries_, log_);
  check(meta_.write(layout_.log_offset(client_), log_, deadline()), meta_,
        "writing the commit log");
  // Validate and lock: one CAS per written record.
  for (Pending& w : writes_) {
    const uint64_t prev =
        cas(region(w.table, w.key), layout_.slot_offset(w.table, w.key), w.expected, kLockBit | c);
    if (prev == w.expected) {
      w.locked = true;
      continue;
    }
    if (prev & kLockBit) note_lock(prev & ~kLockBit);
    // A retry can only succeed on a snapshot that includes the commit we
    // collided with (or sees its timestamp aborted): begin() waits for it.
    wait_for_ = std::max(wait_for_, prev & ~kLockBit);
    return give_up(c, 0, fenced);
  }
  maybe_kill(KillPoint::kAfterLock);
  if (options_.test_pause) options_.test_pause("after-lock");
  // Old versions another client's snapshot still sees go to the overflow
  // area first (one read of the snapshot words if any install overwrites one).
  if (layout_.overflow_entries != 0 &&
      std::any_of(writes_.begin(), writes_.end(),
                  [](const Pending& w) { return w.victim.valid; })) {
    check(meta_.read(layout_.snapshot_offset(0), std::as_writable_bytes(std::span(snapshots_)),
                     deadline()),
          meta_, "reading the snapshot words");
    for (const Pending& w : writes_) move_if_needed(w, c);
  }
  // Install each new version over the record's oldest (or a free) one:
  // claim it, then write its checksum and payload behind the claim. The
  // lock keeps live writers off the record, but not a client that recovery
  // presumed dead and rolled back while it was stalled here: if it resumes,
  // its claim finds the version taken by a newer commit (and gives up)
  // instead of overwriting that commit's version, and a claim it won stays
  // its own (others never install over a claimed version that is not
  // whole) until it gives it back.
  size_t claimed = 0;
  for (const Pending& w : writes_) {
    if (!claim(w, c)) return give_up(c, claimed, fenced);
    ++claimed;
    const uint32_t payload = layout_.tables[w.table].payload_bytes;
    std::byte* v = slot_.data();
    const std::span<const std::byte> data(arena_.data() + w.offset, payload);
    store64(v, version_checksum(c, w.table, w.key, data));
    std::memcpy(v + 8, data.data(), payload);
    RemoteRegion& r = region(w.table, w.key);
    check(r.write(layout_.slot_offset(w.table, w.key) +
                      layout_.version_offset(w.table, w.victim.index) + 8,
                  std::span<const std::byte>(v, 8 + payload), deadline()),
          r, "installing a version");
  }
  if (options_.test_pause) options_.test_pause("after-install");
  // The commit point: never once a memory server is known to be gone.
  check_servers();
  if (transition(c, kPending, kCommitted) != kPending) {
    // Fenced: recovery presumed this client dead and rolled c back while it
    // was stalled in this commit. Its installs are done: give the versions
    // back. A record it locked after that recovery is no recoverer's to
    // find: give such locks back too (the CAS leaves alone a record
    // recovery released), or the record stays locked by a commit that
    // never happens and every later writer of it conflicts for ever.
    unclaim(c, claimed);
    release_locks(c);
    throw FencedError(fenced + std::to_string(c));
  }
  maybe_kill(KillPoint::kAfterCommitBit);
  // Unlock: the header now names the new version (a CAS, so that a
  // recoverer that already rolled forward is not overwritten).
  for (Pending& w : writes_)
    cas(region(w.table, w.key), layout_.slot_offset(w.table, w.key), kLockBit | c, c);
  last_commit_ = c;
  next_timestamp();
  ++stats_.commits;
  return Outcome::kCommitted;
}

void RsiClient::retire() {
  if (in_txn_) throw NamError("nam: retire() inside a transaction");
  if (layout_.overflow_entries != 0) publish_snapshot(0);
  // Parked: next_ts_ is still the first parked timestamp, so the retire
  // word covers every timestamp the park did, and the park word can go.
  const uint64_t prev = cas(meta_, layout_.retire_offset(client_), 0, next_ts_);
  if (prev != 0 && prev != next_ts_) {
    std::fprintf(stderr, "nam: client %u had been retired by recovery already\n", client_);
  }
  if (parked_) {
    set_park(park_ts_, 0);
    parked_ = false;
  }
}

}  // namespace sluice::nam
