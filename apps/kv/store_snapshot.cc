// The store's state as bytes and as one number: the snapshots replicas
// send each other (Store::snapshot, serialize, restore; their layout is
// below) and the digest replicas compare (Store::digest).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <span>

#include "store.h"
#include "wire.h"

namespace kv {

namespace {
uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t fnv_str(uint64_t h, const std::string& s) {
  uint64_t len = s.size();
  h = fnv(h, &len, sizeof len);
  return fnv(h, s.data(), s.size());
}
}  // namespace

uint64_t Store::digest() const {
  // std::map iterates in key order, so equal states hash equally whatever
  // order they were built in.
  uint64_t h = 14695981039346656037ull;
  for (const auto& [k, e] : data_) {
    h = fnv_str(fnv_str(h, k), e.value);
    h = fnv(h, &e.deadline_ms, sizeof e.deadline_ms);
    h = fnv(h, &e.version, sizeof e.version);
    for (const auto& [f, v] : e.fields) h = fnv_str(fnv_str(h, f), v);
    // (The count first: a hash and a list never hash alike.)
    const uint64_t elements = e.list.size();
    h = fnv(h, &elements, sizeof elements);
    for (const std::string& v : e.list) h = fnv_str(h, v);
    const uint64_t members = e.members.size();
    h = fnv(h, &members, sizeof members);
    for (const std::string& m : e.members) h = fnv_str(h, m);
    const uint64_t zmembers = e.zset.size();
    h = fnv(h, &zmembers, sizeof zmembers);
    for (const ZEntry& z : e.zset.order) {
      const auto bits = std::bit_cast<uint64_t>(z.first);
      h = fnv(fnv_str(h, z.second), &bits, sizeof bits);
    }
  }
  // The versions WATCH compares with are state too.
  h = fnv(h, &version_, sizeof version_);
  h = fnv(h, &floor_, sizeof floor_);
  for (const auto& [k, v] : tombstones_) {
    h = fnv_str(h, k);
    h = fnv(h, &v, sizeof v);
  }
  for (const auto& [client, cs] : clients_) {
    h = fnv(h, &client, sizeof client);
    h = fnv(h, &cs.seq, sizeof cs.seq);
    for (const Result& r : cs.results) {
      const uint8_t flags = static_cast<uint8_t>(r.ok | r.refused << 1);
      h = fnv(h, &flags, sizeof flags);
      h = fnv_str(h, r.value);
    }
  }
  return h;
}

namespace {

// "KVS9": keys with their deadlines, versions, hash fields, list elements,
// set members and sorted-set members and scores, the version, tombstones
// and max_result_bytes. "KVS8" (no sorted sets: each item without them),
// "KVS7" (no sets either: without its members), "KVS6" (no lists either:
// without its elements) and "KVS5" (no hashes either: without its fields)
// are still read; "KVS4" (no versions) and "KVS3" (no deadlines) are
// refused as not a store snapshot.
constexpr uint32_t kSnapshotMagic = 0x4b565339;
constexpr uint32_t kSnapshotMagicNoZsets = 0x4b565338;
constexpr uint32_t kSnapshotMagicNoSets = 0x4b565337;
constexpr uint32_t kSnapshotMagicNoLists = 0x4b565336;
constexpr uint32_t kSnapshotMagicNoHashes = 0x4b565335;

}  // namespace

// The layout of wire.h: the magic, the options (keep_applied as a byte,
// maxmemory, max_result_bytes), the version and floor, the tombstones (a
// u32 count, each a key and its version), then each part as a u32 count
// and its items (a key, its value, its deadline as an i64, 0 for none, its
// version, its fields as a u32 count and each field and its value, none
// but for a hash, its elements as a u32 count and each element, none but
// for a list, and its members as a u32 count and each member in byte
// order, none but for a set, and its sorted set's members as a u32 count
// and each member and its score (an IEEE double's bits, u64) in score
// order, none but for a sorted set; a client, its last seq and its kept results, each
// result's ok and refused as bits of a byte), the skip count, the applied summary (entries, chain,
// executed, executed_sum), and last the count and identities of the applied log (a client and a seq
// each; none unless keep_applied), which a Snapshot reads from the store when sent.
Snapshot Store::snapshot() const {
  Snapshot snap;
  std::string& out = snap.head_;
  wire::Writer<std::string> w{out};
  w.put(kSnapshotMagic);
  w.put<uint8_t>(options_.keep_applied);
  w.put(options_.maxmemory);
  w.put(options_.max_result_bytes);
  w.put(version_);
  w.put(floor_);
  w.put<uint32_t>(static_cast<uint32_t>(tombstones_.size()));
  for (const auto& [k, v] : tombstones_) {
    w.str(k);
    w.put(v);
  }
  w.put<uint32_t>(static_cast<uint32_t>(data_.size()));
  for (const auto& [k, e] : data_) {
    w.str(k);
    w.str(e.value);
    w.put(e.deadline_ms);
    w.put(e.version);
    w.put<uint32_t>(static_cast<uint32_t>(e.fields.size()));
    for (const auto& [f, v] : e.fields) {
      w.str(f);
      w.str(v);
    }
    w.put<uint32_t>(static_cast<uint32_t>(e.list.size()));
    for (const std::string& v : e.list) w.str(v);
    w.put<uint32_t>(static_cast<uint32_t>(e.members.size()));
    for (const std::string& m : e.members) w.str(m);
    w.put<uint32_t>(static_cast<uint32_t>(e.zset.size()));
    for (const ZEntry& z : e.zset.order) {
      w.str(z.second);
      w.put(std::bit_cast<uint64_t>(z.first));
    }
  }
  w.put<uint32_t>(static_cast<uint32_t>(clients_.size()));
  for (const auto& [client, cs] : clients_) {
    w.put(client);
    w.put(cs.seq);
    w.put<uint32_t>(static_cast<uint32_t>(cs.results.size()));
    for (const Result& r : cs.results) {
      w.put<uint8_t>(static_cast<uint8_t>(r.ok | r.refused << 1));
      w.str(r.value);
    }
  }
  w.put(skipped_);
  w.put(summary_.entries);
  w.put(summary_.chain);
  w.put(summary_.executed);
  w.put(summary_.executed_sum);
  w.put<uint32_t>(static_cast<uint32_t>(applied_.size()));
  snap.identities_ = applied_.size();
  return snap;
}

std::string Store::serialize() const {
  Snapshot snap = snapshot();
  return snap.bytes(*this, 0, snap.size());
}

std::string Snapshot::bytes(const Store& store, size_t offset, size_t n) const {
  std::string out;
  if (offset >= size()) return out;
  n = std::min(n, size() - offset);
  out.reserve(n);
  if (offset < head_.size()) {
    const size_t k = std::min(n, head_.size() - offset);
    out.append(head_, offset, k);
    offset += k;
    n -= k;
  }
  // The identities: each as wire.h writes a client and a seq.
  const auto& applied = store.applied();
  size_t at = offset - head_.size();
  while (n > 0) {
    const size_t i = at / kIdentityBytes, within = at % kIdentityBytes;
    char one[kIdentityBytes];
    const std::pair<uint64_t, uint64_t> id =
        i < applied.size() ? applied[i] : std::pair<uint64_t, uint64_t>{};
    std::memcpy(one, &id.first, 8);
    std::memcpy(one + 8, &id.second, 8);
    const size_t k = std::min(n, kIdentityBytes - within);
    out.append(one + within, k);
    at += k;
    n -= k;
  }
  return out;
}

bool Store::restore(std::string_view bytes, std::string* why) {
  wire::Reader r{std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))};
  // A count of items of at least `least` bytes each: more than what is left
  // is malformed (and no container is sized from it).
  auto count = [&r](size_t least) {
    const uint32_t n = r.get<uint32_t>();
    if (r.ok && n > (r.in.size() - r.pos) / least) r.ok = false;
    return r.ok ? n : 0;
  };
  Store s;
  const uint32_t magic = r.get<uint32_t>();
  if (magic != kSnapshotMagic && magic != kSnapshotMagicNoZsets && magic != kSnapshotMagicNoSets &&
      magic != kSnapshotMagicNoLists && magic != kSnapshotMagicNoHashes) {
    *why = "not a store snapshot of this version (bad magic: KVS5 to KVS9 are read)";
    return false;
  }
  const bool hashes = magic != kSnapshotMagicNoHashes;
  const bool lists = hashes && magic != kSnapshotMagicNoLists;
  const bool zsets = magic == kSnapshotMagic;
  const bool sets = zsets || magic == kSnapshotMagicNoZsets;
  s.options_.keep_applied = r.get<uint8_t>() != 0;
  s.options_.maxmemory = r.get<uint64_t>();
  s.options_.max_result_bytes = r.get<uint64_t>();
  s.version_ = r.get<uint64_t>();
  s.floor_ = r.get<uint64_t>();
  for (uint32_t n = count(12), i = 0; r.ok && i < n; ++i) {
    std::string k = r.str();
    const uint64_t v = r.get<uint64_t>();
    if (!r.ok) break;
    s.tomb_bytes_ += k.size();
    auto it = s.tombstones_.insert_or_assign(std::move(k), v).first;
    s.tomb_order_.emplace(v, std::string_view(it->first));
  }
  for (uint32_t n = count(zsets    ? 40
                          : sets   ? 36
                          : lists  ? 32
                          : hashes ? 28
                                   : 24),
                i = 0;
       r.ok && i < n; ++i) {
    std::string k = r.str();
    Item e;
    e.value = r.str();
    e.deadline_ms = r.get<int64_t>();
    e.version = r.get<uint64_t>();
    for (uint32_t m = hashes ? count(8) : 0, j = 0; r.ok && j < m; ++j) {
      std::string f = r.str();
      // (A field twice, or a hash that holds a value too, is malformed.)
      if (!e.fields.emplace(std::move(f), r.str()).second || !e.value.empty()) r.ok = false;
    }
    for (uint32_t m = lists ? count(4) : 0, j = 0; r.ok && j < m; ++j) {
      e.list.push_back(r.str());
      // (A list that holds a value or fields too is malformed.)
      if (!e.value.empty() || !e.fields.empty()) r.ok = false;
    }
    for (uint32_t m = sets ? count(4) : 0, j = 0; r.ok && j < m; ++j) {
      std::string member = r.str();
      // (Members out of byte order or twice, or a set that holds a value,
      // fields or elements too, are malformed.)
      if ((!e.members.empty() && member <= *e.members.rbegin()) || !e.value.empty() ||
          !e.fields.empty() || !e.list.empty())
        r.ok = false;
      e.members.insert(e.members.end(), std::move(member));
    }
    for (uint32_t m = zsets ? count(12) : 0, j = 0; r.ok && j < m; ++j) {
      std::string member = r.str();
      const double score = std::bit_cast<double>(r.get<uint64_t>());
      // (A NaN, a member twice or out of order, or a sorted set that holds
      // another type too, is malformed.)
      if (!r.ok || std::isnan(score) || e.is_hash() || e.is_list() || e.is_set() ||
          !e.value.empty() || e.zset.scores.count(member) != 0 ||
          (!e.zset.empty() && !ZOrder{}(*e.zset.order.rbegin(), ZEntry{score, member})))
        r.ok = false;
      if (r.ok) e.zset.put(member, score);
    }
    if (!r.ok) break;
    if (s.data_.count(k) != 0) {
      r.ok = false;  // (a key twice)
      break;
    }
    s.link(s.data_.emplace(std::move(k), std::move(e)).first);
  }
  for (uint32_t n = count(20), i = 0; r.ok && i < n; ++i) {
    ClientState& cs = s.clients_[r.get<uint64_t>()];
    cs.seq = r.get<uint64_t>();
    for (uint32_t m = count(5), j = 0; r.ok && j < m; ++j) {
      Result res;
      const uint8_t flags = r.get<uint8_t>();
      res.ok = (flags & 1) != 0;
      res.refused = (flags & 2) != 0;
      res.value = r.str();
      cs.results.push_back(std::move(res));
    }
  }
  s.skipped_ = r.get<uint64_t>();
  s.summary_.entries = r.get<uint64_t>();
  s.summary_.chain = r.get<uint64_t>();
  s.summary_.executed = r.get<uint64_t>();
  s.summary_.executed_sum = r.get<uint64_t>();
  const uint32_t applied = count(16);
  if (r.ok && applied != (s.options_.keep_applied ? s.summary_.entries : 0)) {
    *why = "store snapshot holds " + std::to_string(applied) + " applied identities for " +
           std::to_string(s.summary_.entries) + " applied entries";
    return false;
  }
  s.applied_.reserve(applied);
  for (uint32_t i = 0; r.ok && i < applied; ++i) {
    const uint64_t client = r.get<uint64_t>();
    s.applied_.emplace_back(client, r.get<uint64_t>());
  }
  if (!r.ok || r.pos != r.in.size()) {
    *why = "malformed store snapshot of " + std::to_string(bytes.size()) +
           " bytes (truncated or trailing bytes)";
    return false;
  }
  *this = std::move(s);
  return true;
}

}  // namespace kv
