#include "twopc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "twopc_wire.h"

namespace sluice::nam {

using namespace twopc_wire;

TwoPcFlows two_pc_flows(const Cluster& cluster, const Layout& layout, uint32_t clients_per_rank) {
  std::vector<uint32_t> servers;
  TwoPcFlows f;
  f.memory_servers = layout.memory_servers;
  f.clients_per_rank = clients_per_rank;
  for (uint32_t r = 0; r < cluster.world_size(); ++r)
    (r < layout.memory_servers ? servers : f.compute).push_back(r);
  const uint32_t segment = static_cast<uint32_t>((max_message(layout) + 64 + 63) / 64 * 64);
  for (uint32_t c : f.compute) {
    const std::string tag = "nam-2pc-" + std::to_string(c);
    f.request.emplace_back(tag + "-request");
    f.request.back()
        .sources(cluster.ranks({c}, clients_per_rank))
        .targets(cluster.ranks(servers))
        .explicit_targets()
        .optimize(Optimize::kLatency)
        .segment_bytes(segment);
    f.reply.emplace_back(tag + "-reply");
    f.reply.back()
        .sources(cluster.ranks(servers))
        .targets(cluster.ranks({c}, clients_per_rank))
        .explicit_targets()
        .optimize(Optimize::kLatency)
        .segment_bytes(segment);
  }
  f.peer.sources(cluster.ranks(servers))
      .targets(cluster.ranks(servers))
      .explicit_targets()
      .optimize(Optimize::kLatency)
      .segment_bytes(segment);
  return f;
}

std::vector<DeclaredFlow> declare_two_pc(Cluster& cluster, const TwoPcFlows& flows,
                                         std::vector<std::string>* lost_at_setup) {
  std::vector<DeclaredFlow> out;
  const uint32_t rank = cluster.rank();
  if (lost_at_setup != nullptr) lost_at_setup->assign(flows.compute.size(), "");
  for (size_t k = 0; k < flows.compute.size(); ++k) {
    if (rank < flows.memory_servers || rank == flows.compute[k]) {
      try {
        out.push_back(cluster.declare(flows.request[k]));
        out.push_back(cluster.declare(flows.reply[k]));
      } catch (const PeerLostError& e) {
        // A compute rank that died while the job started (sluice run
        // --kill, unannounced): its clients never begin, and a memory server
        // goes on without them.
        if (rank >= flows.memory_servers || lost_at_setup == nullptr ||
            e.rank() != flows.compute[k])
          throw;
        (*lost_at_setup)[k] = e.what();
      }
    }
  }
  if (rank < flows.memory_servers && flows.memory_servers > 1)
    out.push_back(cluster.declare(flows.peer));
  return out;
}

// ------------------------------------------------------------ server

namespace {

// What a server knows of a client's last transaction here.
enum Phase : uint8_t { kIdle = 0, kPrepared, kCommittedHere, kAbortedHere };

struct ClientTxn {
  uint64_t ts = 0;
  Phase phase = kIdle;
  uint16_t count = 0;
  MsgEntry entries[kMaxWrites];
};

// One client's line of a REPORT (its state here) or a DECIDE (the verdict
// on timestamp ts: 1 commit, 0 abort).
struct PeerEntry {
  uint64_t ts;
  uint64_t state;
};

}  // namespace

struct ResourceManager::Impl {
  Impl(Cluster& c, const Layout& l, const TwoPcFlows& f, std::vector<std::byte*> t,
       std::vector<std::string> lost)
      : cluster(c),
        layout(l),
        flows(f),
        tables(std::move(t)),
        me(c.rank()),
        ranks(static_cast<uint32_t>(f.compute.size())),
        lost_at_setup(std::move(lost)) {
    lost_at_setup.resize(ranks);
  }
  Cluster& cluster;
  Layout layout;
  TwoPcFlows flows;
  std::vector<std::byte*> tables;
  uint32_t me;
  uint32_t ranks;  // compute ranks
  // Per compute rank: why its ends could not be declared or opened (it was
  // lost while the job started); empty if they were.
  std::vector<std::string> lost_at_setup;
  // Server 0: the timestamp service.
  uint64_t issued = 0, watermark = 0;
  std::vector<uint8_t> done;
  std::vector<uint64_t> outstanding;  // per client: its timestamp not yet DONE (0: none)
  std::vector<std::byte> out, peer_msg;
  std::vector<ClientTxn> txns;  // per client
  // Termination, per compute rank: its requests ended here (abnormally), a
  // decision arrived and was applied here; server 0: reports and RESOLVEDs
  // received, the verdict per client being assembled.
  std::vector<uint8_t> ended, lost, decided, finished;
  std::vector<uint32_t> reports, resolved;
  std::vector<uint8_t> any_lost;
  std::vector<PeerEntry> verdict;  // per client (server 0)
  TwoPcRecovery recovery;
  // The flows' ends (set by serve()).
  Worker* w = nullptr;
  std::vector<Source<Bytes>>* replies = nullptr;
  std::vector<uint8_t> reply_dead;
  Source<Bytes>* peer = nullptr;
  // A memory server is lost: the first failure that says so. The server
  // then stops serving but keeps its flows until every client has given up
  // (so clients learn of the loss from the dead server's end, not from
  // this one's teardown), and serve() throws it.
  struct Loss {
    Status status = Status::kOk;
    std::string what, error;
    std::optional<LostPeer> peer;
  } loss;

  std::byte* slot(uint32_t t, uint64_t key) { return tables[t] + layout.slot_offset(t, key); }

  // Drops the version with commit id c and restores the header to the newest
  // remaining one; false if the record was not locked by c.
  bool roll_back(uint32_t t, uint64_t key, uint64_t c) {
    std::byte* s = slot(t, key);
    if (load64(s) != (kLockBit | c)) return false;
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
    return true;
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

  void mark_done(uint64_t ts) {
    if (ts > watermark && ts <= issued) done[ts % done.size()] = 1;
    while (watermark < issued && done[(watermark + 1) % done.size()]) ++watermark;
  }

  // Handles one request; returns the reply's length (0: no reply).
  size_t handle(std::span<const std::byte> rec) {
    MsgHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    if (h.client >= layout.clients) {
      throw NamError("nam 2pc: server " + std::to_string(me) + " got a request of client " +
                     std::to_string(h.client) + ", which does not exist");
    }
    MsgHeader r{h.type, 0, static_cast<uint16_t>(me), h.client, 0};
    size_t n = sizeof(r);
    const std::byte* p = rec.data() + sizeof(h);
    ClientTxn& txn = txns[h.client];
    switch (h.type) {
      case kBegin:
        r.ts = watermark;
        break;
      case kGetTs:
        // Every client has at most one timestamp outstanding, so a window
        // of done flags past the watermark suffices; a full window (a dead
        // client's timestamp not yet resolved) is refused, and the client
        // asks again.
        if (issued - watermark >= done.size() - 1) {
          r.status = 1;
          break;
        }
        r.ts = ++issued;
        done[r.ts % done.size()] = 0;
        outstanding[h.client] = r.ts;
        break;
      case kDone:
        if (outstanding[h.client] == h.ts) outstanding[h.client] = 0;
        mark_done(h.ts);
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
        if (h.count > kMaxWrites) throw NamError("nam 2pc: a PREPARE of more than 16 records");
        const std::byte* q = p;
        txn.ts = h.ts;
        txn.phase = kPrepared;
        txn.count = 0;
        for (uint16_t i = 0; i < h.count; ++i) {
          MsgEntry e;
          std::memcpy(&e, q, sizeof(e));
          uint64_t seen = 0;
          if (!prepare(e, q + sizeof(e), h.ts, &seen)) {
            // Undo this request's earlier records, then say no.
            for (uint16_t j = 0; j < txn.count; ++j)
              roll_back(txn.entries[j].table, txn.entries[j].key, h.ts);
            txn.phase = kAbortedHere;
            txn.count = 0;
            r.status = 1;
            r.ts = seen & ~kLockBit;
            break;
          }
          txn.entries[txn.count++] = e;
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
        if (txn.ts == h.ts) txn.phase = h.type == kCommit ? kCommittedHere : kAbortedHere;
        break;
      default:
        throw NamError("nam 2pc: server " + std::to_string(me) + " got a malformed request (type " +
                       std::to_string(h.type) + ")");
    }
    std::memcpy(out.data(), &r, sizeof(r));
    return n;
  }

  // ---- termination (cooperative, coordinated by server 0)

  void note_loss(Status s, const std::string& what, const std::string& error,
                 std::optional<LostPeer> peer_info) {
    if (loss.status == Status::kOk) loss = Loss{s, what, error, std::move(peer_info)};
  }
  [[noreturn]] void server_lost(Status s, const std::string& what, const std::string& error,
                                std::optional<LostPeer> peer_info) {
    const uint32_t who = peer_info ? peer_info->rank : 0;
    if (s == Status::kPeerLost || peer_info) {
      throw PeerLostError(who, "nam 2pc: memory server rank " + std::to_string(me) + ": " + what +
                                   ": memory server rank " + std::to_string(who) +
                                   " is lost: " + error);
    }
    fail(s, what, error, peer_info);
  }

  // A message to server `to` on the peer flow (or, to itself, at once).
  void to_server(uint32_t to, uint8_t type, uint32_t rank_index, uint8_t status,
                 const std::vector<PeerEntry>* entries) {
    const uint16_t count = entries ? static_cast<uint16_t>(entries->size()) : 0;
    const MsgHeader h{type, status, count, rank_index, me};
    std::vector<std::byte> msg(sizeof(h) + count * sizeof(PeerEntry));
    std::memcpy(msg.data(), &h, sizeof(h));
    if (count) std::memcpy(msg.data() + sizeof(h), entries->data(), count * sizeof(PeerEntry));
    if (to == me) {
      on_peer(msg);
      return;
    }
    if (loss.status != Status::kOk) return;
    const Status s = w->push_to(*peer, to, std::span<const std::byte>(msg));
    if (s != Status::kOk)
      note_loss(s, "telling memory server " + std::to_string(to), peer->error(), peer->lost_peer());
  }

  uint32_t first_client(uint32_t k) const { return k * flows.clients_per_rank; }

  // Compute rank k's requests ended here (abnormally: `was_lost`): report
  // its clients' last transactions to server 0.
  void rank_ended(uint32_t k, bool was_lost) {
    ended[k] = 1;
    lost[k] = was_lost;
    std::vector<PeerEntry> e;
    for (uint32_t j = first_client(k); j < first_client(k) + flows.clients_per_rank; ++j)
      e.push_back(PeerEntry{txns[j].ts, txns[j].phase});
    to_server(0, kReport, k, was_lost ? 1 : 0, &e);
  }

  void on_peer(std::span<const std::byte> rec) {
    MsgHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    const uint32_t k = h.client;
    if (k >= ranks || rec.size() < sizeof(h) + h.count * sizeof(PeerEntry))
      throw NamError("nam 2pc: a malformed message between memory servers");
    std::vector<PeerEntry> e(h.count);
    if (h.count) std::memcpy(e.data(), rec.data() + sizeof(h), h.count * sizeof(PeerEntry));
    switch (h.type) {
      case kReport: {  // server 0: one server's view of rank k
        any_lost[k] |= h.status;
        for (uint32_t i = 0; i < e.size(); ++i) {
          PeerEntry& v = verdict[first_client(k) + i];
          if (e[i].state == kIdle) continue;
          if (e[i].ts > v.ts) v = PeerEntry{e[i].ts, 0};
          if (e[i].ts == v.ts && e[i].state == kCommittedHere) v.state = 1;
        }
        if (++reports[k] < layout.memory_servers) return;
        std::vector<PeerEntry> d(verdict.begin() + first_client(k),
                                 verdict.begin() + first_client(k) + flows.clients_per_rank);
        for (uint32_t s = 0; s < layout.memory_servers; ++s) to_server(s, kDecide, k, 0, &d);
        return;
      }
      case kDecide: {  // every server: apply the verdict on rank k's clients
        for (uint32_t i = 0; i < e.size(); ++i) {
          uint64_t forward = 0, back = 0;
          const uint32_t j = first_client(k) + i;
          ClientTxn& t = txns[j];
          if (t.phase != kPrepared || t.ts != e[i].ts) continue;
          for (uint16_t x = 0; x < t.count; ++x) {
            const MsgEntry& m = t.entries[x];
            if (e[i].state == 1) {
              if (load64(slot(m.table, m.key)) == (kLockBit | t.ts)) {
                store64(slot(m.table, m.key), t.ts);
                ++forward;
              }
            } else if (roll_back(m.table, m.key, t.ts)) {
              ++back;
            }
          }
          t.phase = e[i].state == 1 ? kCommittedHere : kAbortedHere;
          ++recovery.clients_resolved;
          std::fprintf(stderr,
                       "nam 2pc: memory server rank %u: client %u (compute rank %u, requests "
                       "ended %s) held timestamp %llu prepared here: %s, %llu records\n",
                       me, j, flows.compute[k], lost[k] ? "abnormally" : "cleanly",
                       static_cast<unsigned long long>(t.ts),
                       e[i].state == 1 ? "committed by another server, rolled forward"
                                       : "committed nowhere, rolled back",
                       static_cast<unsigned long long>(e[i].state == 1 ? forward : back));
          recovery.rolled_forward += forward;
          recovery.rolled_back += back;
        }
        if (lost[k]) ++recovery.ranks_lost;
        decided[k] = 1;
        to_server(0, kResolved, k, 0, nullptr);
        return;
      }
      case kResolved:  // server 0: once every server applied it, pass the timestamps
        if (++resolved[k] < layout.memory_servers) return;
        for (uint32_t j = first_client(k); j < first_client(k) + flows.clients_per_rank; ++j) {
          if (outstanding[j] != 0) mark_done(outstanding[j]);
          outstanding[j] = 0;
        }
        finished[k] = 1;
        return;
      default:
        throw NamError("nam 2pc: a malformed message between memory servers (type " +
                       std::to_string(h.type) + ")");
    }
  }

  bool all(const std::vector<uint8_t>& v) const {
    return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; });
  }
};

ResourceManager::ResourceManager(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                                 std::vector<std::byte*> tables,
                                 std::vector<std::string> lost_at_setup)
    : impl_(new Impl(cluster, layout, flows, std::move(tables), std::move(lost_at_setup))) {
  Impl& m = *impl_;
  if (m.me == 0) {
    m.done.assign(std::max<uint64_t>(1 << 16, 4ull * layout.clients), 0);
    m.verdict.assign(layout.clients, PeerEntry{0, 0});
  }
  m.outstanding.assign(layout.clients, 0);
  m.out.resize(max_message(layout));
  m.txns.assign(layout.clients, ClientTxn{});
  for (auto* v : {&m.ended, &m.lost, &m.decided, &m.finished, &m.any_lost, &m.reply_dead})
    v->assign(m.ranks, 0);
  m.reports.assign(m.ranks, 0);
  m.resolved.assign(m.ranks, 0);
}
ResourceManager::~ResourceManager() = default;

const TwoPcRecovery& ResourceManager::recovery() const { return impl_->recovery; }

void ResourceManager::serve() {
  Impl& m = *impl_;
  const uint32_t servers = m.layout.memory_servers;
  // The sources outlive the worker that drives them.
  std::vector<Source<Bytes>> replies;
  Source<Bytes> peer;
  Worker w;
  std::vector<Worker::InputId> inputs;
  m.w = &w;
  m.replies = &replies;
  m.peer = &peer;
  // A compute rank lost while the ends open (it died while the job
  // started) is one whose requests ended before they began.
  auto open_lost = [&m](uint32_t k, const PeerLostError& e) {
    if (e.rank() != m.flows.compute[k]) return false;
    m.lost_at_setup[k] = e.what();
    return true;
  };
  for (uint32_t k = 0; k < m.ranks; ++k) {
    replies.emplace_back();
    if (!m.lost_at_setup[k].empty()) continue;
    try {
      replies[k] = m.cluster.source(m.flows.reply[k], 0);
    } catch (const PeerLostError& e) {
      if (!open_lost(k, e)) throw;
    }
  }
  std::vector<char> opened(m.ranks, 0);
  inputs.assign(m.ranks, Worker::InputId{});
  for (uint32_t k = 0; k < m.ranks; ++k) {
    if (!m.lost_at_setup[k].empty()) continue;
    Target<Bytes> target;
    try {
      target = m.cluster.target(m.flows.request[k], 0);
    } catch (const PeerLostError& e) {
      if (!open_lost(k, e)) throw;
      continue;
    }
    opened[k] = 1;
    inputs[k] = w.add(std::move(target), [&m, &w, &replies, k](RecordBatch batch) {
      for (std::span<const std::byte> rec : batch) {
        if (m.loss.status != Status::kOk) return;  // serving no more
        if (rec.size() < sizeof(MsgHeader))
          throw NamError("nam 2pc: a request shorter than its header");
        const size_t n = m.handle(rec);
        if (n == 0 || m.reply_dead[k]) continue;
        MsgHeader h;
        std::memcpy(&h, m.out.data(), sizeof(h));
        const Status s = w.push_to(replies[k], h.client % m.flows.clients_per_rank,
                                   std::span<const std::byte>(m.out.data(), n));
        // A compute rank that is gone: its requests end too, and the
        // termination protocol resolves what it left.
        if (s != Status::kOk) m.reply_dead[k] = 1;
      }
    });
  }
  Worker::InputId peer_in = 0;
  if (servers > 1) {
    peer = m.cluster.source(m.flows.peer, 0);
    peer_in = w.add(m.cluster.target(m.flows.peer, 0), [&m](RecordBatch batch) {
      for (std::span<const std::byte> rec : batch) {
        if (rec.size() < sizeof(MsgHeader))
          throw NamError("nam 2pc: a malformed message between memory servers");
        m.on_peer(rec);
      }
    });
  }
  for (uint32_t k = 0; k < m.ranks; ++k) {
    if (m.lost_at_setup[k].empty()) continue;
    std::fprintf(stderr,
                 "nam 2pc: memory server rank %u: compute rank %u was lost before its requests "
                 "began: %s\n",
                 m.me, m.flows.compute[k], m.lost_at_setup[k].c_str());
    m.reply_dead[k] = 1;
    replies[k].abort();
    m.rank_ended(k, true);
  }
  bool closed = false;
  Clock::time_point lost_at{};
  for (;;) {
    const size_t work = w.poll();
    if (m.loss.status != Status::kOk) {
      // Wait (up to 30 s) until every client has given up, then fail.
      if (lost_at == Clock::time_point{}) lost_at = Clock::now();
      bool clients_gone = true;
      for (uint32_t k = 0; k < m.ranks; ++k)
        clients_gone = clients_gone && (opened[k] == 0 || w.status(inputs[k]) != Status::kOk);
      if (clients_gone || Clock::now() - lost_at > std::chrono::seconds(30))
        m.server_lost(m.loss.status, m.loss.what, m.loss.error, m.loss.peer);
      w.idle(work);
      continue;
    }
    for (uint32_t k = 0; k < m.ranks; ++k) {
      if (m.ended[k]) continue;
      const Status st = w.status(inputs[k]);
      if (st == Status::kOk) continue;
      if (st == Status::kEndOfFlow) {
        const Status c = m.reply_dead[k] ? Status::kOk : w.close(replies[k]);
        if (c != Status::kOk) m.reply_dead[k] = 1;
      } else {
        std::fprintf(stderr,
                     "nam 2pc: memory server rank %u: the requests of compute rank %u ended: %s: "
                     "%s\n",
                     m.me, m.flows.compute[k], sluice::to_string(st), w.error(inputs[k]).c_str());
        m.reply_dead[k] = 1;
        replies[k].abort();
      }
      m.rank_ended(k, st != Status::kEndOfFlow);
    }
    if (servers > 1) {
      const Status ps = w.status(peer_in);
      if (ps != Status::kOk && ps != Status::kEndOfFlow) {
        m.note_loss(ps, "between memory servers", w.error(peer_in), w.lost_peer(peer_in));
        continue;
      }
    }
    const bool settled = m.all(m.ended) && m.all(m.decided) && (m.me != 0 || m.all(m.finished));
    if (settled && !closed) {
      closed = true;
      if (servers > 1) {
        const Status c = w.close(peer);
        if (c != Status::kOk) {
          m.note_loss(c, "closing the peer flow", peer.error(), peer.lost_peer());
          continue;
        }
      }
    }
    if (closed && (servers == 1 || w.status(peer_in) == Status::kEndOfFlow)) break;
    w.idle(work);
  }
  // Over ofi, the last replies and END travel while the worker is driven.
  while (!w.done()) w.idle(w.poll());
  m.w = nullptr;
}

}  // namespace sluice::nam
