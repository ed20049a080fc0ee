#include "store.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "wire.h"

namespace kv {

const char* op_name(Op op) {
  switch (op) {
    case Op::kNoop:
      return "noop";
    case Op::kPut:
      return "put";
    case Op::kGet:
      return "get";
    case Op::kDelete:
      return "delete";
    case Op::kCas:
      return "cas";
  }
  return "?";
}

Command noop_command() { return Command{}; }

Result execute(std::map<std::string, std::string>& data, const Command& c) {
  Result r;
  switch (c.op) {
    case Op::kNoop:
      break;
    case Op::kPut:
      data[c.key] = c.value;
      r.ok = true;
      break;
    case Op::kGet: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second;
      }
      break;
    }
    case Op::kDelete:
      r.ok = data.erase(c.key) > 0;
      break;
    case Op::kCas: {
      auto it = data.find(c.key);
      if (it != data.end() && it->second == c.expected) {
        it->second = c.value;
        r.ok = true;
      }
      break;
    }
  }
  return r;
}

Result Store::apply(const Command& c, Applied* what) {
  Applied dummy;
  Applied& how = what ? *what : dummy;
  if (c.is_noop()) {
    how = Applied::kNoop;
    applied_.emplace_back(0, 0);
    return {};
  }
  ClientState& cs = clients_[c.client];
  if (c.seq <= cs.seq) {
    // A retry that took effect before: its first result, if still kept.
    applied_.emplace_back(c.client, c.seq);
    const uint64_t back = cs.seq - c.seq;
    if (back >= cs.results.size()) {
      how = Applied::kForgotten;
      return {};
    }
    how = Applied::kDuplicate;
    return cs.results[cs.results.size() - 1 - back];
  }
  if (c.seq != cs.seq + 1) {
    // Its predecessor is not in the log yet (lost on the way); executing
    // this one first would reorder the client's commands.
    how = Applied::kSkipped;
    ++skipped_;
    applied_.emplace_back(0, 0);
    return {};
  }
  how = Applied::kExecuted;
  applied_.emplace_back(c.client, c.seq);
  cs.seq = c.seq;
  cs.results.push_back(execute(data_, c));
  if (cs.results.size() > kClientWindow) cs.results.pop_front();
  return cs.results.back();
}

bool Store::already_applied(uint64_t client, uint64_t seq, Result* result) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || seq > it->second.seq) return false;
  const uint64_t back = it->second.seq - seq;
  const std::deque<Result>& kept = it->second.results;
  if (back >= kept.size()) return false;
  if (result) *result = kept[kept.size() - 1 - back];
  return true;
}

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
  for (const auto& [k, v] : data_) h = fnv_str(fnv_str(h, k), v);
  for (const auto& [client, cs] : clients_) {
    h = fnv(h, &client, sizeof client);
    h = fnv(h, &cs.seq, sizeof cs.seq);
    for (const Result& r : cs.results) {
      h = fnv(h, &r.ok, sizeof r.ok);
      h = fnv_str(h, r.value);
    }
  }
  return h;
}

namespace {

constexpr uint32_t kSnapshotMagic = 0x4b565332;  // "KVS2"

}  // namespace

// The layout of wire.h: the magic, then each part as a u32 count and its
// items (a key and its value; a client, its last seq and its kept results),
// the skip count, and last the applied log's count and identities (a client
// and a seq each), which a Snapshot reads from the store when sent.
Snapshot Store::snapshot() const {
  Snapshot snap;
  std::string& out = snap.head_;
  wire::Writer<std::string> w{out};
  w.put(kSnapshotMagic);
  w.put<uint32_t>(static_cast<uint32_t>(data_.size()));
  for (const auto& [k, v] : data_) {
    w.str(k);
    w.str(v);
  }
  w.put<uint32_t>(static_cast<uint32_t>(clients_.size()));
  for (const auto& [client, cs] : clients_) {
    w.put(client);
    w.put(cs.seq);
    w.put<uint32_t>(static_cast<uint32_t>(cs.results.size()));
    for (const Result& r : cs.results) {
      w.put<uint8_t>(r.ok);
      w.str(r.value);
    }
  }
  w.put(skipped_);
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
  if (r.get<uint32_t>() != kSnapshotMagic) {
    *why = "not a store snapshot (bad magic)";
    return false;
  }
  for (uint32_t n = count(8), i = 0; r.ok && i < n; ++i) {
    std::string k = r.str();
    s.data_[std::move(k)] = r.str();
  }
  for (uint32_t n = count(20), i = 0; r.ok && i < n; ++i) {
    ClientState& cs = s.clients_[r.get<uint64_t>()];
    cs.seq = r.get<uint64_t>();
    for (uint32_t m = count(5), j = 0; r.ok && j < m; ++j) {
      Result res;
      res.ok = r.get<uint8_t>() != 0;
      res.value = r.str();
      cs.results.push_back(std::move(res));
    }
  }
  s.skipped_ = r.get<uint64_t>();
  const uint32_t applied = count(16);
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
