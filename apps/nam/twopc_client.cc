// The 2PC baseline's client (twopc.h): each client thread is the
// coordinator of its own transactions.
#include <signal.h>
#include <sluice/job.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "twopc.h"
#include "twopc_wire.h"

namespace sluice::nam {

using namespace twopc_wire;

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
  Source<Bytes> req;
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
  KillPoint kill = KillPoint::kNone;
  uint64_t kill_countdown = 0;

  // Names a lost memory server as such (a PeerLost of the reply flow can
  // only be one: the servers are its sources).
  [[noreturn]] void failed(Status s, const std::string& what, const std::string& error,
                           std::optional<LostPeer> peer) {
    if (s == Status::kPeerLost && peer && peer->rank < layout.memory_servers) {
      throw PeerLostError(peer->rank, "nam 2pc: memory server rank " + std::to_string(peer->rank) +
                                          " is lost (" + what + "): " + error);
    }
    fail(s, what, error, peer);
  }
  void maybe_kill(KillPoint at, uint64_t ts) {
    if (kill != at || kill_countdown == 0 || --kill_countdown != 0) return;
    std::fprintf(stderr, "nam test hook: client %u kills itself %s (timestamp %llu)\n", client,
                 at == KillPoint::kPrepared
                     ? "after every participant voted yes, before any COMMIT"
                     : "after one participant committed, before the others heard",
                 static_cast<unsigned long long>(ts));
    std::fflush(stderr);
    ::raise(SIGKILL);
  }

  // Opens this client's ends: endpoint `slot` of the request and reply flows.
  void open(const ShuffleSpec<Bytes>& request, const ShuffleSpec<Bytes>& reply, uint32_t slot) {
    req = cluster.source(request, slot);
    const uint64_t max = max_message(layout);
    replies.assign(layout.memory_servers + 1, std::vector<std::byte>(max));
    msg.resize(max);
    arena.resize(max);
    seen.reserve(64);
    writes.reserve(kMaxWrites);
    in = w.add(cluster.target(reply, slot), [this](RecordBatch batch) {
      for (std::span<const std::byte> rec : batch) {
        if (received < replies.size()) {
          std::memcpy(replies[received].data(), rec.data(),
                      std::min(rec.size(), replies[received].size()));
          ++received;
        }
      }
    });
  }

  void start(MsgType t, uint64_t ts, uint16_t count) {
    const MsgHeader h{t, 0, count, client, ts};
    std::memcpy(msg.data(), &h, sizeof(h));
  }
  void send(uint32_t server, size_t n) {
    const Status s = w.push_to(req, server, std::span<const std::byte>(msg.data(), n));
    if (s != Status::kOk)
      failed(s, "sending to memory server " + std::to_string(server), req.error(), req.lost_peer());
  }
  // Waits until `n` replies arrived since the last reset.
  void await(size_t n) {
    while (received < n) {
      const size_t work = w.poll();
      if (received >= n) break;
      if (w.status(in) != Status::kOk)
        failed(w.status(in), "waiting for an answer", w.error(in), w.lost_peer(in));
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
                         uint32_t client, uint32_t slot, KillPoint kill, uint64_t kill_on_commit)
    : impl_(new Impl(cluster, layout, client)) {
  Impl& c = *impl_;
  c.kill = kill;
  c.kill_countdown = kill_on_commit;
  const size_t k =
      static_cast<size_t>(std::find(flows.compute.begin(), flows.compute.end(), cluster.rank()) -
                          flows.compute.begin());
  if (k == flows.compute.size())
    throw NamError("nam 2pc: rank " + std::to_string(cluster.rank()) + " is no compute rank");
  c.open(flows.request[k], flows.reply[k], slot);
}

TwoPcClient::TwoPcClient(Cluster& cluster, const Layout& layout, const SlotFlows& flows,
                         uint32_t client)
    : impl_(new Impl(cluster, layout, client)) {
  impl_->open(flows.request, flows.reply, 0);
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
  // The commit timestamp. Refused while the window of timestamps past the
  // watermark is full (a dead client's timestamp is being resolved): ask again.
  const auto refused_since = Clock::now();
  for (;;) {
    c.start(kGetTs, 0, 0);
    c.received = 0;
    c.send(0, sizeof(MsgHeader));
    c.await(1);
    if (c.reply(0).status == 0) break;
    if (Clock::now() - refused_since > std::chrono::seconds(60)) {
      throw NamError(
          "nam 2pc: no commit timestamp for 60 s: an unfinished timestamp holds the window");
    }
    std::this_thread::yield();
  }
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
  if (all_yes) {
    // Every participant voted yes, no COMMIT is out (`sluice run --kill-at`).
    sluice::kill_point("nam-2pc-prepared");
    c.maybe_kill(KillPoint::kPrepared, ts);
  }
  // Phase 2: COMMIT everywhere, or ABORT where it was prepared.
  c.received = 0;
  uint32_t sent = 0;
  for (uint32_t s = 0; s < servers; ++s) {
    if (!(yes_mask >> s & 1)) continue;
    if (c.kill == KillPoint::kPartialCommit && all_yes && sent == 1 && participants > 1) {
      // Test hook: the first participant's COMMIT is in (its answer came).
      c.await(1);
      c.maybe_kill(KillPoint::kPartialCommit, ts);
    }
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
