#include "twopc.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

namespace sluice::nam {

namespace {

enum MsgType : uint8_t { kBegin = 1, kGetTs, kDone, kRead, kPrepare, kCommit, kAbort };

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

uint64_t padded(uint32_t payload) { return (uint64_t{payload} + 7) / 8 * 8; }

uint64_t max_message(const Layout& layout) {
  uint64_t biggest = 0;
  for (const TableSpec& t : layout.tables) biggest = std::max(biggest, padded(t.payload_bytes));
  return sizeof(MsgHeader) + kMaxWrites * (sizeof(MsgEntry) + biggest) + 8;
}

uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

// A version of a slot image, and whether it is whole.
bool valid_version(const Layout& l, uint32_t table, uint64_t key, const std::byte* slot, uint32_t v,
                   uint64_t* cid) {
  const std::byte* p = slot + l.version_offset(table, v);
  *cid = load64(p);
  const uint64_t sum = load64(p + 8);
  return sum != 0 && sum == version_checksum(*cid, table, key,
                                             std::span(p + 16, l.tables[table].payload_bytes));
}

[[noreturn]] void fail(Status s, const std::string& what, const std::string& error,
                       std::optional<LostPeer> peer) {
  if (s == Status::kPeerLost) {
    throw PeerLostError(peer ? peer->rank : 0, "nam 2pc: " + what + ": PeerLost: " + error);
  }
  throw NamError("nam 2pc: " + what + ": " + to_string(s) + ": " + error);
}

}  // namespace

TwoPcFlows two_pc_flows(const Cluster& cluster, const Layout& layout, uint32_t clients_per_rank) {
  std::vector<uint32_t> servers, compute;
  for (uint32_t r = 0; r < cluster.world_size(); ++r)
    (r < layout.memory_servers ? servers : compute).push_back(r);
  const uint32_t segment = static_cast<uint32_t>((max_message(layout) + 64 + 63) / 64 * 64);
  TwoPcFlows f;
  f.request.sources(cluster.ranks(compute, clients_per_rank))
      .targets(cluster.ranks(servers))
      .explicit_targets()
      .optimize(Optimize::kLatency)
      .segment_bytes(segment);
  f.reply.sources(cluster.ranks(servers))
      .targets(cluster.ranks(compute, clients_per_rank))
      .explicit_targets()
      .optimize(Optimize::kLatency)
      .segment_bytes(segment);
  return f;
}

// ------------------------------------------------------------ server

struct ResourceManager::Impl {
  Cluster& cluster;
  Layout layout;
  TwoPcFlows flows;
  std::vector<std::byte*> tables;
  uint32_t me;
  // Server 0: the timestamp service.
  uint64_t issued = 0, watermark = 0;
  std::vector<uint8_t> done;
  std::vector<std::byte> out;

  std::byte* slot(uint32_t t, uint64_t key) { return tables[t] + layout.slot_offset(t, key); }

  void roll_back(uint32_t t, uint64_t key, uint64_t c) {
    std::byte* s = slot(t, key);
    if (load64(s) != (kLockBit | c)) return;
    uint64_t newest = 0;
    for (uint32_t v = 0; v < layout.versions; ++v) {
      uint64_t cid;
      const bool ok = valid_version(layout, t, key, s, v, &cid);
      if (!ok || cid == c) {
        std::memset(s + layout.version_offset(t, v), 0, 16);
      } else {
        newest = std::max(newest, cid);
      }
    }
    store64(s, newest);
  }

  // Validates, locks and installs one record; false (nothing done) if it
  // changed since the client's snapshot or is locked.
  bool prepare(const MsgEntry& e, const std::byte* payload, uint64_t c, uint64_t* seen) {
    std::byte* s = slot(e.table, e.key);
    *seen = load64(s);
    if (*seen != e.expected) return false;
    int victim = -1, oldest = -1;
    uint64_t oldest_cid = 0;
    for (uint32_t v = 0; v < layout.versions; ++v) {
      uint64_t cid;
      if (!valid_version(layout, e.table, e.key, s, v, &cid)) {
        if (victim < 0) victim = static_cast<int>(v);
      } else if (oldest < 0 || cid < oldest_cid) {
        oldest = static_cast<int>(v), oldest_cid = cid;
      }
    }
    if (victim < 0) victim = oldest;
    store64(s, kLockBit | c);
    const uint32_t payload_bytes = layout.tables[e.table].payload_bytes;
    std::byte* v = s + layout.version_offset(e.table, static_cast<uint32_t>(victim));
    store64(v, c);
    store64(v + 8, version_checksum(c, e.table, e.key, std::span(payload, payload_bytes)));
    std::memcpy(v + 16, payload, payload_bytes);
    return true;
  }

  // Handles one request; returns the reply's length (0: no reply).
  size_t handle(std::span<const std::byte> rec) {
    MsgHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    MsgHeader r{h.type, 0, static_cast<uint16_t>(me), h.client, 0};
    size_t n = sizeof(r);
    const std::byte* p = rec.data() + sizeof(h);
    switch (h.type) {
      case kBegin:
        r.ts = watermark;
        break;
      case kGetTs:
        // Every client has at most one timestamp outstanding, so a window
        // of done flags past the watermark suffices.
        if (issued - watermark >= done.size() - 1) {
          r.status = 1;
          break;
        }
        r.ts = ++issued;
        done[r.ts % done.size()] = 0;
        break;
      case kDone:
        if (h.ts > watermark && h.ts <= issued) done[h.ts % done.size()] = 1;
        while (watermark < issued && done[(watermark + 1) % done.size()]) ++watermark;
        return 0;
      case kRead: {
        MsgEntry e;
        std::memcpy(&e, p, sizeof(e));
        const std::byte* s = slot(e.table, e.key);
        int best = -1;
        uint64_t best_cid = 0;
        bool any = false;
        for (uint32_t v = 0; v < layout.versions; ++v) {
          uint64_t cid;
          if (!valid_version(layout, e.table, e.key, s, v, &cid)) continue;
          any = true;
          if (cid <= h.ts && (best < 0 || cid > best_cid))
            best = static_cast<int>(v), best_cid = cid;
        }
        r.status = best >= 0 ? 0 : any ? 2 : 1;
        store64(out.data() + n, best_cid);
        n += 8;
        if (best >= 0) {
          const uint32_t pb = layout.tables[e.table].payload_bytes;
          std::memcpy(out.data() + n, s + layout.version_offset(e.table, best) + 16, pb);
          n += pb;
        }
        break;
      }
      case kPrepare: {
        const std::byte* q = p;
        for (uint16_t i = 0; i < h.count; ++i) {
          MsgEntry e;
          std::memcpy(&e, q, sizeof(e));
          uint64_t seen = 0;
          if (!prepare(e, q + sizeof(e), h.ts, &seen)) {
            // Undo this request's earlier records, then say no.
            const std::byte* u = p;
            for (uint16_t j = 0; j < i; ++j) {
              MsgEntry d;
              std::memcpy(&d, u, sizeof(d));
              roll_back(d.table, d.key, h.ts);
              u += sizeof(d) + padded(layout.tables[d.table].payload_bytes);
            }
            r.status = 1;
            r.ts = seen & ~kLockBit;
            break;
          }
          q += sizeof(e) + padded(layout.tables[e.table].payload_bytes);
        }
        break;
      }
      case kCommit:
      case kAbort:
        for (uint16_t i = 0; i < h.count; ++i) {
          MsgEntry e;
          std::memcpy(&e, p + i * sizeof(e), sizeof(e));
          if (h.type == kAbort) {
            roll_back(e.table, e.key, h.ts);
          } else if (load64(slot(e.table, e.key)) == (kLockBit | h.ts)) {
            store64(slot(e.table, e.key), h.ts);
          }
        }
        break;
      default:
        throw NamError("nam 2pc: server " + std::to_string(me) + " got a malformed request (type " +
                       std::to_string(h.type) + ")");
    }
    std::memcpy(out.data(), &r, sizeof(r));
    return n;
  }
};

ResourceManager::ResourceManager(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                                 std::vector<std::byte*> tables)
    : impl_(new Impl{cluster, layout, flows, std::move(tables), cluster.rank(), 0, 0, {}, {}}) {
  if (impl_->me == 0) impl_->done.assign(std::max<uint64_t>(1024, 4ull * layout.clients), 0);
  impl_->out.resize(max_message(layout));
}
ResourceManager::~ResourceManager() = default;

void ResourceManager::serve() {
  Impl& m = *impl_;
  BytesSource replies = m.cluster.source(m.flows.reply, 0);
  Worker w;
  Status failed = Status::kOk;
  std::string why;
  const Worker::InputId in = w.add(m.cluster.target(m.flows.request, 0), [&](RecordBatch batch) {
    for (std::span<const std::byte> rec : batch) {
      if (failed != Status::kOk) return;
      if (rec.size() < sizeof(MsgHeader))
        throw NamError("nam 2pc: a request shorter than its header");
      const size_t n = m.handle(rec);
      if (n == 0) continue;
      MsgHeader h;
      std::memcpy(&h, m.out.data(), sizeof(h));
      const Status s = w.push_to(replies, h.client, std::span<const std::byte>(m.out.data(), n));
      if (s != Status::kOk) failed = s, why = replies.error();
    }
  });
  const Status s = w.run();
  if (failed != Status::kOk) fail(failed, "answering a client", why, replies.lost_peer());
  if (s != Status::kEndOfFlow) fail(s, "serving requests", w.error(in), w.lost_peer(in));
  const Status c = w.close(replies);
  if (c != Status::kOk) fail(c, "closing the replies", replies.error(), replies.lost_peer());
}

// ------------------------------------------------------------ client

struct TwoPcClient::Impl {
  Impl(Cluster& c, const Layout& l, uint32_t id) : cluster(c), layout(l), client(id) {}
  struct Seen {
    uint32_t table;
    uint64_t key, cid;
    bool found;
  };
  struct Pending {
    uint32_t table;
    uint64_t key, expected;
    bool insert;
    size_t offset;
  };

  Cluster& cluster;
  Layout layout;
  uint32_t client;
  Worker w{};
  BytesSource req;
  Worker::InputId in{};
  std::vector<std::vector<std::byte>> replies;
  std::vector<size_t> reply_len;
  size_t received = 0;
  std::vector<std::byte> msg, arena;
  size_t arena_used = 0;
  std::vector<Seen> seen;
  std::vector<Pending> writes;
  uint64_t rts = 0, last_commit = 0, wait_for = 0;
  bool in_txn = false, retired = false;
  Outcome doomed = Outcome::kCommitted;
  TxnStats stats;

  void start(MsgType t, uint64_t ts, uint16_t count) {
    const MsgHeader h{t, 0, count, client, ts};
    std::memcpy(msg.data(), &h, sizeof(h));
  }
  void send(uint32_t server, size_t n) {
    const Status s = w.push_to(req, server, std::span<const std::byte>(msg.data(), n));
    if (s != Status::kOk)
      fail(s, "sending to memory server " + std::to_string(server), req.error(), req.lost_peer());
  }
  // Waits until `n` replies arrived since the last reset.
  void await(size_t n) {
    while (received < n) {
      const size_t work = w.poll();
      if (received >= n) break;
      if (w.status(in) != Status::kOk)
        fail(w.status(in), "waiting for an answer", w.error(in), w.lost_peer(in));
      w.idle(work);
    }
  }
  MsgHeader reply(size_t i) {
    MsgHeader h;
    std::memcpy(&h, replies[i].data(), sizeof(h));
    return h;
  }

  // READ of one record at rts into replies[0]; returns its status.
  uint8_t read_remote(uint32_t table, uint64_t key, uint64_t* cid) {
    if (key >= layout.tables[table].records) {
      throw NamError("nam: key " + std::to_string(key) + " is outside table '" +
                     layout.tables[table].name + "'");
    }
    start(kRead, rts, 1);
    const MsgEntry e{table, 0, key, 0};
    std::memcpy(msg.data() + sizeof(MsgHeader), &e, sizeof(e));
    received = 0;
    send(layout.server_of(key), sizeof(MsgHeader) + sizeof(e));
    await(1);
    const MsgHeader h = reply(0);
    *cid = load64(replies[0].data() + sizeof(MsgHeader));
    return h.status;
  }
  const Seen& observe(uint32_t table, uint64_t key, uint8_t* status) {
    uint64_t cid = 0;
    *status = read_remote(table, key, &cid);
    if (*status == 2 && doomed == Outcome::kCommitted) doomed = Outcome::kTooOld;
    const Seen s{table, key, cid, *status == 0};
    for (Seen& old : seen) {
      if (old.table == table && old.key == key) {
        if (old.cid != s.cid || old.found != s.found) doomed = Outcome::kTooOld;
        return old;
      }
    }
    seen.push_back(s);
    return seen.back();
  }
  void buffer(uint32_t table, uint64_t key, std::span<const std::byte> bytes, bool insert) {
    if (!in_txn) throw NamError("nam: write() outside a transaction");
    const uint32_t payload = layout.tables[table].payload_bytes;
    if (bytes.size() > payload)
      throw NamError("nam: a value does not fit table '" + layout.tables[table].name + "'");
    Pending* p = nullptr;
    for (Pending& x : writes) {
      if (x.table == table && x.key == key) p = &x;
    }
    if (p == nullptr) {
      if (writes.size() == kMaxWrites)
        throw NamError("nam: a transaction writes at most 16 records");
      Seen s{};
      bool known = false;
      for (const Seen& x : seen) {
        if (x.table == table && x.key == key) s = x, known = true;
      }
      if (!known) {
        uint8_t st;
        s = observe(table, key, &st);
      }
      if (insert && s.found && doomed == Outcome::kCommitted) doomed = Outcome::kConflict;
      writes.push_back(Pending{table, key, s.found ? s.cid : 0, insert, arena_used});
      arena_used += padded(payload);
      p = &writes.back();
    }
    std::memcpy(arena.data() + p->offset, bytes.data(), bytes.size());
    std::memset(arena.data() + p->offset + bytes.size(), 0, padded(payload) - bytes.size());
  }
};

TwoPcClient::TwoPcClient(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                         uint32_t client, uint32_t slot)
    : impl_(new Impl(cluster, layout, client)) {
  Impl& c = *impl_;
  c.req = cluster.source(flows.request, slot);
  const uint64_t max = max_message(layout);
  c.replies.assign(layout.memory_servers + 1, std::vector<std::byte>(max));
  c.msg.resize(max);
  c.arena.resize(max);
  c.seen.reserve(64);
  c.writes.reserve(kMaxWrites);
  c.in = c.w.add(cluster.target(flows.reply, slot), [&c](RecordBatch batch) {
    for (std::span<const std::byte> rec : batch) {
      if (c.received < c.replies.size()) {
        std::memcpy(c.replies[c.received].data(), rec.data(),
                    std::min(rec.size(), c.replies[c.received].size()));
        ++c.received;
      }
    }
  });
}

TwoPcClient::~TwoPcClient() {
  if (impl_ && !impl_->retired) impl_->req.abort();
}

const TxnStats& TwoPcClient::stats() const { return impl_->stats; }

void TwoPcClient::begin() {
  Impl& c = *impl_;
  if (c.in_txn) throw NamError("nam: begin() inside a transaction");
  c.seen.clear();
  c.writes.clear();
  c.arena_used = 0;
  c.doomed = Outcome::kCommitted;
  for (;;) {
    c.start(kBegin, 0, 0);
    c.received = 0;
    c.send(0, sizeof(MsgHeader));
    c.await(1);
    c.rts = c.reply(0).ts;
    // Read-your-writes, and a retry sees the commit it collided with.
    if (c.rts >= std::max(c.last_commit, c.wait_for)) break;
    std::this_thread::yield();
  }
  c.in_txn = true;
}

bool TwoPcClient::read(uint32_t table, uint64_t key, std::span<std::byte> out) {
  Impl& c = *impl_;
  if (!c.in_txn) throw NamError("nam: read() outside a transaction");
  const size_t n = std::min<size_t>(out.size(), c.layout.tables[table].payload_bytes);
  for (const auto& p : c.writes) {
    if (p.table == table && p.key == key) {
      std::memcpy(out.data(), c.arena.data() + p.offset, n);
      return true;
    }
  }
  uint8_t status = 0;
  c.observe(table, key, &status);
  if (status != 0) return false;
  std::memcpy(out.data(), c.replies[0].data() + sizeof(MsgHeader) + 8, n);
  return true;
}

void TwoPcClient::write(uint32_t table, uint64_t key, std::span<const std::byte> bytes) {
  impl_->buffer(table, key, bytes, false);
}
void TwoPcClient::insert(uint32_t table, uint64_t key, std::span<const std::byte> bytes) {
  impl_->buffer(table, key, bytes, true);
}

void TwoPcClient::abort() {
  if (!impl_->in_txn) throw NamError("nam: abort() outside a transaction");
  impl_->in_txn = false;
}

Outcome TwoPcClient::commit() {
  Impl& c = *impl_;
  if (!c.in_txn) throw NamError("nam: commit() outside a transaction");
  c.in_txn = false;
  if (c.doomed != Outcome::kCommitted) {
    (c.doomed == Outcome::kTooOld ? c.stats.too_old : c.stats.conflicts)++;
    return c.doomed;
  }
  if (c.writes.empty()) {
    ++c.stats.read_only;
    return Outcome::kCommitted;
  }
  // The commit timestamp.
  c.start(kGetTs, 0, 0);
  c.received = 0;
  c.send(0, sizeof(MsgHeader));
  c.await(1);
  if (c.reply(0).status != 0)
    throw NamError("nam 2pc: the timestamp space is exhausted (raise --max-timestamps)");
  const uint64_t ts = c.reply(0).ts;
  // Phase 1: PREPARE each participant's share.
  const uint32_t servers = c.layout.memory_servers;
  uint32_t participants = 0;
  c.received = 0;
  for (uint32_t s = 0; s < servers; ++s) {
    size_t n = sizeof(MsgHeader);
    uint16_t count = 0;
    for (const auto& p : c.writes) {
      if (c.layout.server_of(p.key) != s) continue;
      const MsgEntry e{p.table, p.insert ? 1u : 0u, p.key, p.expected};
      std::memcpy(c.msg.data() + n, &e, sizeof(e));
      n += sizeof(e);
      const uint64_t pb = padded(c.layout.tables[p.table].payload_bytes);
      std::memcpy(c.msg.data() + n, c.arena.data() + p.offset, pb);
      n += pb;
      ++count;
    }
    if (count == 0) continue;
    c.start(kPrepare, ts, count);
    c.send(s, n);
    ++participants;
  }
  c.await(participants);
  uint64_t yes_mask = 0;
  bool all_yes = true;
  for (uint32_t i = 0; i < participants; ++i) {
    const MsgHeader h = c.reply(i);
    if (h.status == 0) {
      yes_mask |= uint64_t{1} << h.count;
    } else {
      all_yes = false;
      c.wait_for = std::max(c.wait_for, h.ts);
    }
  }
  // Phase 2: COMMIT everywhere, or ABORT where it was prepared.
  c.received = 0;
  uint32_t sent = 0;
  for (uint32_t s = 0; s < servers; ++s) {
    if (!(yes_mask >> s & 1)) continue;
    size_t n = sizeof(MsgHeader);
    uint16_t count = 0;
    for (const auto& p : c.writes) {
      if (c.layout.server_of(p.key) != s) continue;
      const MsgEntry e{p.table, 0, p.key, p.expected};
      std::memcpy(c.msg.data() + n, &e, sizeof(e));
      n += sizeof(e);
      ++count;
    }
    c.start(all_yes ? kCommit : kAbort, ts, count);
    c.send(s, n);
    ++sent;
  }
  c.await(sent);
  // Done: the timestamp service may let readers past ts.
  c.start(kDone, ts, 0);
  c.send(0, sizeof(MsgHeader));
  if (!all_yes) {
    ++c.stats.conflicts;
    return Outcome::kConflict;
  }
  c.last_commit = ts;
  ++c.stats.commits;
  return Outcome::kCommitted;
}

void TwoPcClient::retire() {
  Impl& c = *impl_;
  if (c.retired) return;
  c.retired = true;
  const Status s = c.w.close(c.req);
  if (s != Status::kOk) fail(s, "closing the requests", c.req.error(), c.req.lost_peer());
  while (!c.w.done()) c.w.idle(c.w.poll());
}

}  // namespace sluice::nam
