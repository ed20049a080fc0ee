// apps/nam/rsi_recovery.cc: RsiClient's recovery of clients that died
// (rsi.h): a dead client's log read back, its locked records rolled back
// or forward as its commit word decides, its timestamp finished; and the
// reporter's sweep of clients that never retired.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "rsi.h"
#include "words.h"

namespace sluice::nam {

uint64_t RsiClient::header(uint32_t table, uint64_t key) {
  uint64_t h = 0;
  RemoteRegion& r = region(table, key);
  check(r.read(layout_.slot_offset(table, key), bytes_of(h), deadline()), r, "reading a header");
  return h;
}

// The record's header goes back to its newest committed version. Versions
// c claimed stay as they are: the client may only be stalled and still
// write them, and a claimed version is never installed over while it is
// not whole (rsi.cc, observe), and is junk to readers once whole (its
// commit stays fenced). Versions of commits fenced earlier are skipped.
void RsiClient::roll_back(const LogEntry& e, uint64_t c) {
  read_slot(e.table, e.key);
  if (load64(slot_.data()) != (kLockBit | c)) return;
  const uint32_t payload = layout_.tables[e.table].payload_bytes;
  uint64_t newest = 0;
  for (uint32_t v = 0; v < layout_.versions; ++v) {
    const std::byte* p = slot_.data() + layout_.version_offset(e.table, v);
    const uint64_t cid = version_cid(load64(p)), sum = load64(p + 8);
    const bool valid =
        sum != 0 && sum == version_checksum(cid, e.table, e.key, std::span(p + 16, payload));
    if (valid && cid != c && cid > newest && (cid == 0 || state_of(cid) == kCommitted))
      newest = cid;
  }
  RemoteRegion& r = region(e.table, e.key);
  if (cas(r, layout_.slot_offset(e.table, e.key), kLockBit | c, newest) == (kLockBit | c))
    ++stats_.recovered_back;
}

void RsiClient::resolve(uint64_t c, const std::vector<LogEntry>& entries) {
  TsState st = state_of(c);
  if (st == kPending) st = transition(c, kPending, kFenced) == kPending ? kFenced : state_of(c);
  if (st == kCommitted) {
    for (const LogEntry& e : entries) {
      if (cas(region(e.table, e.key), layout_.slot_offset(e.table, e.key), kLockBit | c, c) ==
          (kLockBit | c)) {
        ++stats_.recovered_forward;
      }
    }
    return;
  }
  // c stays fenced (unfinished), never aborted: a reader that has not yet
  // seen the client retired stops below it, so a version the client
  // installs late is never taken for a commit's (rsi.cc,
  // committed_version); retirement (from c on) lets readers pass it.
  for (const LogEntry& e : entries) roll_back(e, c);
}

void RsiClient::recover_client(uint32_t j, uint64_t p) {
  if (j == client_) return;
  if (!options_.recover)
    throw NamError("nam: client " + std::to_string(j) + " held timestamp " + std::to_string(p) +
                   " past the recovery timeout, and recovery is off (--no-recovery)");
  // Fence j's first unfinished timestamp: j can then never commit it, nor
  // any later one (they come after it).
  for (;;) {
    const TsState st = transition(p, kPending, kFenced);
    if (st == kPending || st == kFenced) break;
    p += layout_.clients;  // j finished p meanwhile (it is alive after all): chase it
  }
  std::vector<LogEntry> entries;
  uint64_t c = 0;
  check(meta_.read(layout_.log_offset(j), log_, deadline()), meta_, "reading a commit log");
  if (decode_log(log_, &c, &entries) && c != 0) resolve(c, entries);
  // p stays fenced, and j retires from p on: its later timestamps and p
  // itself count as done (see resolve). Two live clients may recover the
  // same dead one side by side (each saw its timestamp pending past the
  // timeout; every step above is a CAS and idempotent): the one whose
  // retirement of j lands counts it.
  const bool retired_it = cas(meta_, layout_.retire_offset(j), 0, p) == 0;
  if (layout_.overflow_entries != 0) {
    // Its snapshot is gone with it: writers need not keep versions for it.
    uint64_t zero = 0;
    check(meta_.write(layout_.snapshot_offset(j), bytes_of(zero), deadline()), meta_,
          "clearing a snapshot word");
  }
  if (!retired_it) return;
  ++stats_.clients_recovered;
  std::fprintf(stderr,
               "nam: client %u recovered client %u (log timestamp %" PRIu64 ", fenced %" PRIu64
               ")\n",
               client_, j, c, p);
}

uint32_t RsiClient::recover_unretired() {
  check(
      meta_.read(layout_.retire_offset(0), std::as_writable_bytes(std::span(retire_)), deadline()),
      meta_, "reading the retire words");
  uint32_t n = 0;
  for (uint32_t j = 0; j < layout_.clients; ++j) {
    if (j == client_ || retire_[j] != 0) continue;
    // j's first unfinished timestamp, reading the vector a few words at a time.
    uint64_t p = j + 1;
    for (bool found = false; !found;) {
      const uint64_t w0 = ts_word(p);
      if (w0 >= layout_.ts_words())
        throw NamError("nam: no unfinished timestamp of client " + std::to_string(j));
      const uint64_t n = std::min<uint64_t>(words_.size(), layout_.ts_words() - w0);
      check(meta_.read(layout_.ts_offset() + 8 * w0,
                       std::as_writable_bytes(std::span(words_.data(), n)), deadline()),
            meta_, "reading the timestamp vector");
      for (; ts_word(p) < w0 + n; p += layout_.clients) {
        const TsState st = ts_state(words_[ts_word(p) - w0], p);
        if (st == kPending || st == kFenced) {
          found = true;
          break;
        }
      }
    }
    recover_client(j, p);
    ++n;
  }
  return n;
}

}  // namespace sluice::nam
