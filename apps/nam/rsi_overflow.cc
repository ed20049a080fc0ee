// apps/nam/rsi_overflow.cc: RsiClient's overflow area (rsi.h): the
// snapshots clients publish, the walk of a record's older versions there,
// and the move of a version a published snapshot still needs before a
// commit overwrites it.
#include <cstring>

#include "rsi.h"
#include "words.h"

namespace sluice::nam {

void RsiClient::publish_snapshot(uint64_t word) {
  check(meta_.write(layout_.snapshot_offset(client_), bytes_of(word), deadline()), meta_,
        "publishing the snapshot");
}

bool RsiClient::walk_overflow(uint32_t table, uint64_t key, uint64_t head, uint64_t* cid) {
  const uint32_t payload = layout_.tables[table].payload_bytes;
  const uint64_t bytes = layout_.overflow_entry_bytes(table);
  RemoteRegion& r = overflow_[layout_.server_of(key)][table];
  uint64_t seq = head;
  for (uint32_t steps = 0; seq != 0 && steps < layout_.overflow_entries; ++steps) {
    check(r.read(layout_.overflow_offset(table, seq), std::span(entry_.data(), bytes), deadline()),
          r, "reading the overflow area");
    const std::byte* e = entry_.data();
    const uint64_t got = load64(e), prev = load64(e + 8), until = load64(e + 16),
                   c = load64(e + 24), sum = load64(e + 32);
    const std::span<const std::byte> data(e + 40, payload);
    // Reused by the ring for a newer version (or being rewritten): the
    // chain is cut here.
    if (got != seq || sum != overflow_checksum(got, prev, until, c, table, key, data)) return false;
    if (c <= rts_) {
      // The version of snapshots in [c, until): a later version overwritten
      // without being moved (no snapshot needed it when it was) leaves a
      // gap, and this one is then too old for us.
      if (rts_ >= until) return false;
      std::memcpy(found_.data(), data.data(), payload);
      *cid = c;
      ++stats_.overflow_hits;
      return true;
    }
    if (prev >= seq) return false;  // chains only go back in time
    seq = prev;
  }
  return false;
}

void RsiClient::move_if_needed(const Pending& w, uint64_t commit) {
  if (!w.victim.valid) return;
  bool needed = false;
  for (uint32_t j = 0; j < layout_.clients && !needed; ++j) {
    if (j == client_ || snapshots_[j] == 0) continue;
    const uint64_t rts = snapshots_[j] - 1;
    needed = rts >= w.victim.cid && rts < w.victim.next_cid;
  }
  if (!needed) return;
  // The slot as it is under our lock: its overflow head, and the victim
  // (gone already if a rolled-back install took its place: nothing to move).
  read_slot(w.table, w.key);
  const uint32_t payload = layout_.tables[w.table].payload_bytes;
  const std::byte* v = slot_.data() + layout_.version_offset(w.table, w.victim.index);
  const uint64_t c = version_cid(load64(v)), sum = load64(v + 8);
  const std::span<const std::byte> data(v + 16, payload);
  if (c != w.victim.cid || sum == 0 || sum != version_checksum(c, w.table, w.key, data)) return;
  // Its successor: the next newer version in the slot, or the one we install.
  uint64_t until = commit;
  for (uint32_t i = 0; i < layout_.versions; ++i) {
    if (i == w.victim.index) continue;
    const std::byte* o = slot_.data() + layout_.version_offset(w.table, i);
    const uint64_t oc = version_cid(load64(o)), os = load64(o + 8);
    if (os != 0 && os == version_checksum(oc, w.table, w.key, std::span(o + 16, payload)) && oc > c)
      until = std::min(until, oc);
  }
  const uint64_t head = load64(slot_.data() + Layout::kOverflowHead);
  RemoteRegion& r = overflow_[layout_.server_of(w.key)][w.table];
  const auto taken = r.fetch_add(Layout::kOverflowCursor, 1, deadline());
  check(taken.status(), r, "taking an overflow entry");
  const uint64_t seq = *taken + 1;  // sequence numbers start at 1 (0: no entry)
  std::byte* e = entry_.data();
  store64(e, seq);
  store64(e + 8, head);
  store64(e + 16, until);
  store64(e + 24, c);
  store64(e + 32, overflow_checksum(seq, head, until, c, w.table, w.key, data));
  std::memcpy(e + 40, data.data(), payload);
  check(r.write(layout_.overflow_offset(w.table, seq), std::span<const std::byte>(e, 40 + payload),
                deadline()),
        r, "writing an overflow entry");
  // Then the head: a reader that sees it finds the entry whole. (A CAS from
  // the head read under the lock: a client stalled past recovery that
  // resumes here cannot put back an older chain.)
  if (cas(region(w.table, w.key), layout_.slot_offset(w.table, w.key) + Layout::kOverflowHead, head,
          seq) == head)
    ++stats_.overflow_moved;
}

}  // namespace sluice::nam
