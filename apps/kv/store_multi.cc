// The store's commands on several keys at once, each one log entry applied
// atomically: transactions (Op::kMulti: EXEC, MSET, MSETNX), rename,
// renamenx and flushall; watch, and the versions and tombstones a
// transaction's conditions are decided with (store.h, Transaction).
#include <algorithm>
#include <optional>
#include <set>

#include "store.h"
#include "wire.h"

namespace kv {

namespace {

// A transaction's command as it is encoded: only what it does (client, seq
// and now_ms are the transaction's).
void put_command(wire::Writer<std::string>& w, const Command& c) {
  w.put<uint8_t>(static_cast<uint8_t>(c.op));
  w.str(c.key);
  w.str(c.value);
  w.str(c.expected);
  w.put(c.deadline_ms);
  w.put<uint8_t>(static_cast<uint8_t>(c.ttl));
  w.put(c.ttl_if);
}

using wire::count;
using wire::reader;

constexpr size_t kResultOverhead = 5;  // a result's flags and length
// The most a reply of one of multi_here's commands takes: an integer, a
// score or a float, or an error (WRONGTYPE's is the longest, 65 bytes).
constexpr uint64_t kSmallReply = 128;

// (Built from a std::string: GCC 12 warns falsely on assigning a literal.)
Result failed(std::string text) {
  Result r;
  r.value = std::move(text);
  return r;
}
const std::string kMalformed = "ERR malformed transaction";

// The keys a command touches (a transaction's: all of its commands').
void keys_of(const Command& c, std::set<std::string>* keys) {
  keys->insert(c.key);
  if (c.op == Op::kRename || c.op == Op::kRenameNx) keys->insert(c.value);
  if (detail::is_keys_op(c.op))
    for (std::string& k : detail::set_keys(c)) keys->insert(std::move(k));
}

constexpr std::string_view kNoSuchKey = "no such key";

// Rename on a plain map: the value moves with its deadline, replacing what
// the target held (renamenx: only onto an absent target).
Result rename(Keyspace& data, const Command& c) {
  Result r;
  for (const std::string* k : {&c.key, &c.value}) {
    auto it = data.find(*k);
    if (it != data.end() && detail::expired(it->second, c.now_ms)) data.erase(it);
  }
  auto from = data.find(c.key);
  if (from == data.end()) return failed(std::string(kNoSuchKey));
  if (c.key == c.value) {
    r.ok = c.op == Op::kRename;  // (RENAMENX onto itself answers 0)
    return r;
  }
  if (c.op == Op::kRenameNx && data.count(c.value) != 0) return r;
  Item moved = std::move(from->second);
  data.erase(from);
  data.insert_or_assign(c.value, std::move(moved));
  r.ok = true;
  return r;
}

}  // namespace

bool transaction_may_hold(Op op) {
  switch (op) {
    case Op::kNoop:
    case Op::kSweep:
    case Op::kMulti:
    case Op::kWatch:
    case Op::kDbSize:  // (the transaction runs on copies of the keys it names)
    case Op::kKeys:
    case Op::kScan:
      return false;
    default:
      return op <= kLastOp;
  }
}

std::string encode_transaction(const Transaction& t) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put<uint32_t>(static_cast<uint32_t>(t.conditions.size()));
  for (const TxCondition& c : t.conditions) {
    w.put<uint8_t>(c.kind);
    w.str(c.key);
    w.put(c.watch_seq);
  }
  w.put<uint32_t>(static_cast<uint32_t>(t.cmds.size()));
  for (const Command& c : t.cmds) put_command(w, c);
  return out;
}

bool decode_transaction(std::string_view bytes, Transaction* out) {
  wire::Reader r = reader(bytes);
  Transaction t;
  for (uint32_t n = count(r, 13), i = 0; r.ok && i < n; ++i) {
    TxCondition c;
    const uint8_t kind = r.get<uint8_t>();
    if (kind > TxCondition::kAbsent) r.ok = false;
    c.kind = static_cast<TxCondition::Kind>(kind);
    c.key = r.str();
    c.watch_seq = r.get<uint64_t>();
    t.conditions.push_back(std::move(c));
  }
  for (uint32_t n = count(r, 23), i = 0; r.ok && i < n; ++i) {
    Command c;
    const uint8_t op = r.get<uint8_t>();
    if (op > static_cast<uint8_t>(kLastOp) || !transaction_may_hold(static_cast<Op>(op)))
      r.ok = false;
    c.op = static_cast<Op>(op);
    c.key = r.str();
    c.value = r.str();
    c.expected = r.str();
    c.deadline_ms = r.get<int64_t>();
    const uint8_t ttl = r.get<uint8_t>();
    if (ttl > static_cast<uint8_t>(kLastTtl)) r.ok = false;
    c.ttl = static_cast<Ttl>(ttl);
    c.ttl_if = r.get<uint8_t>();
    if ((c.ttl_if & ~kAllTtlIf) != 0) r.ok = false;
    t.cmds.push_back(std::move(c));
  }
  if (!r.ok || r.pos != bytes.size()) return false;
  *out = std::move(t);
  return true;
}

std::string encode_results(const std::vector<Result>& results) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put<uint32_t>(static_cast<uint32_t>(results.size()));
  for (const Result& r : results) {
    w.put<uint8_t>(static_cast<uint8_t>(r.ok | r.refused << 1));
    w.str(r.value);
  }
  return out;
}

bool decode_results(std::string_view bytes, std::vector<Result>* out) {
  wire::Reader r = reader(bytes);
  std::vector<Result> results;
  for (uint32_t n = count(r, kResultOverhead), i = 0; r.ok && i < n; ++i) {
    Result res;
    const uint8_t flags = r.get<uint8_t>();
    res.ok = (flags & 1) != 0;
    res.refused = (flags & 2) != 0;
    res.value = r.str();
    results.push_back(std::move(res));
  }
  if (!r.ok || r.pos != bytes.size()) return false;
  *out = std::move(results);
  return true;
}

namespace detail {

Result execute_many(Keyspace& data, const Command& c) {
  Result r;
  switch (c.op) {
    case Op::kRename:
    case Op::kRenameNx:
      return rename(data, c);
    case Op::kFlushAll:
      r.ok = true;
      r.value = std::to_string(data.size());
      data.clear();
      return r;
    case Op::kWatch:
      // (No versions here: see execute() in store.h.)
      if (auto it = data.find(c.key); it != data.end() && expired(it->second, c.now_ms))
        data.erase(it);
      r = failed(std::string(1, '0'));
      r.ok = true;
      return r;
    case Op::kMulti: {
      Transaction t;
      if (!decode_transaction(c.value, &t)) return failed(kMalformed);
      for (const TxCondition& cond : t.conditions) {
        if (cond.kind != TxCondition::kAbsent) continue;
        auto it = data.find(cond.key);
        if (it != data.end() && !expired(it->second, c.now_ms)) return r;
      }
      std::vector<Result> results;
      for (Command& sub : t.cmds) {
        sub.client = c.client;
        sub.seq = c.seq;
        sub.now_ms = c.now_ms;
        results.push_back(execute(data, sub));
      }
      r.ok = true;
      r.value = encode_results(results);
      return r;
    }
    default:
      return r;
  }
}

}  // namespace detail

void Store::drop_tombstone(const std::string& key) {
  auto it = tombstones_.find(key);
  if (it == tombstones_.end()) return;
  tomb_order_.erase({it->second, it->first});
  tomb_bytes_ -= it->first.size();
  tombstones_.erase(it);
}

void Store::modified(const std::string& key, uint64_t v) {
  if (auto it = data_.find(key); it != data_.end()) {
    it->second.version = v;
    drop_tombstone(key);
    return;
  }
  drop_tombstone(key);
  auto it = tombstones_.emplace(key, v).first;
  tomb_order_.emplace(v, std::string_view(it->first));
  tomb_bytes_ += key.size();
  // Bounded: the oldest go, and the floor remembers the newest of them.
  while (tomb_bytes_ > kTombstoneBytes || tombstones_.size() > kTombstones) {
    const auto [oldest, name] = *tomb_order_.begin();
    floor_ = std::max(floor_, oldest);
    drop_tombstone(std::string(name));
  }
}

bool Store::condition_holds(const Command& c, const TxCondition& cond) const {
  auto it = data_.find(cond.key);
  const bool live = it != data_.end() && !detail::expired(it->second, c.now_ms);
  if (cond.kind == TxCondition::kAbsent) return !live;
  // The watch's result, among its client's kept ones. (apply() has moved
  // the client's seq to this transaction's and keeps its result only once
  // it has run: the results end at seq - 1.) No longer kept: it may have
  // changed.
  auto cs = clients_.find(c.client);
  if (cs == clients_.end() || cond.watch_seq >= cs->second.seq) return false;
  const uint64_t back = cs->second.seq - 1 - cond.watch_seq;
  const std::deque<Result>& kept = cs->second.results;
  int64_t w = 0;
  if (back >= kept.size() || !parse_integer(kept[kept.size() - 1 - back].value, &w)) return false;
  const auto since = static_cast<uint64_t>(w);
  if (it != data_.end()) {
    // Present at the watch (which removed it if it had expired then), so a
    // deadline passed since is a modification.
    return it->second.version <= since && live;
  }
  auto t = tombstones_.find(cond.key);
  return t != tombstones_.end() ? t->second <= since : floor_ <= since;
}

Result Store::watch(const Command& c) {
  // As a read of the key (lazy expiry first), then the version.
  if (auto it = data_.find(c.key); it != data_.end() && detail::expired(it->second, c.now_ms)) {
    unlink(it);
    data_.erase(it);
    modified(c.key, ++version_);
  }
  Result r;
  r.ok = true;
  r.value = std::to_string(version_);
  return r;
}

Result Store::flush_all() {
  Result r;
  r.ok = true;
  r.value = std::to_string(data_.size());
  data_.clear();
  by_deadline_.clear();
  by_hash_.clear();
  used_bytes_ = 0;
  tombstones_.clear();
  tomb_order_.clear();
  tomb_bytes_ = 0;
  floor_ = ++version_;  // every key, present or not, was modified now
  return r;
}

std::optional<Result> Store::move_here(const Command& c) {
  // What execute_keys would refuse after running it: past maxmemory (LMOVE;
  // SMOVE always runs, as in Redis), only a move that makes the destination
  // a new key grows the data (an element or a member only changes
  // collections), by that key's entry at most; a reply longer than
  // max_result_bytes, only LMOVE's element, which could not be longer than
  // the command that pushed it (checked anyway).
  if (options_.maxmemory != 0 && detail::denied_when_full(c.op) &&
      used_bytes_ + kEntryOverhead + c.value.size() > options_.maxmemory)
    return std::nullopt;
  if (c.op == Op::kLMove && options_.max_result_bytes != 0) {
    auto src = data_.find(c.key);
    if (src != data_.end() && src->second.is_list() && !src->second.list.empty() &&
        c.expected.size() == 2 &&
        (c.expected[0] == 'L' ? src->second.list.front() : src->second.list.back()).size() >
            options_.max_result_bytes)
      return std::nullopt;
  }
  // Both keys (one, if the same) out of the counts and the indexes, the
  // move run in place (lazy expiry of either key included), and what is
  // left of them back in; modified as execute_keys decides.
  const bool same = c.key == c.value;
  const std::string* keys[2] = {&c.key, &c.value};
  bool existed[2] = {false, false};
  for (int i = 0; i < (same ? 1 : 2); ++i) {
    if (auto it = data_.find(*keys[i]); it != data_.end()) {
      existed[i] = true;
      unlink(it);
    }
  }
  Result r = execute(data_, c);
  uint64_t v = 0;
  for (int i = 0; i < (same ? 1 : 2); ++i) {
    auto it = data_.find(*keys[i]);
    if (it != data_.end()) link(it);
    if ((r.ok && !same) || (existed[i] && it == data_.end())) {
      if (v == 0) v = ++version_;
      modified(*keys[i], v);
    }
  }
  return r;
}

std::optional<Result> Store::multi_here(const Command& c, const Transaction& t) {
  // What execute_keys would refuse after running it on copies: the
  // replies, past max_result_bytes (each of these is small); the data,
  // past maxmemory (each command's growth, from a copy of what it names
  // alone, plus its key and an entry's overhead, in case an earlier
  // command's EXPIRE removed the key it writes; a growth a command
  // computed alone may miss, as an integer that gains a digit, is within
  // the kSmallReply each adds too). Neither can be, or the transaction
  // runs on copies.
  // The commands it may hold: writes that touch only the members, fields
  // or ends they name, whose growth sizes_after() tells without copying
  // their item, and EXPIRE and the counts; each answers a small reply.
  auto runs_in_place = [](Op op) {
    switch (op) {
      case Op::kExpire:
      case Op::kLLen:
      case Op::kSCard:
      case Op::kHLen:
      case Op::kZCard:
        return true;
      default:
        return sizes_by_parts(op);
    }
  };
  uint64_t replies = 0, growth = 0;
  bool grows = false;
  for (const Command& sub : t.cmds) {
    if (!runs_in_place(sub.op)) return std::nullopt;
    replies += kResultOverhead + kSmallReply;
    grows |= detail::denied_when_full(sub.op);
  }
  if (options_.max_result_bytes != 0 && replies > options_.max_result_bytes) return std::nullopt;
  if (options_.maxmemory != 0 && grows) {
    for (Command sub : t.cmds) {
      if (!detail::denied_when_full(sub.op)) continue;
      sub.now_ms = c.now_ms;
      const uint64_t before = entry_bytes(sub.key), after = sizes_after(sub).first;
      growth +=
          (after > before ? after - before : 0) + kEntryOverhead + sub.key.size() + kSmallReply;
      if (used_bytes_ + growth > options_.maxmemory) return std::nullopt;
    }
  }
  // Each command as one outside a transaction (execute_here): its key out
  // of the counts and the indexes, run in place, back in. The keys it
  // modified carry one new version, as execute_keys commits them.
  std::set<std::string> changed;
  std::vector<Result> results;
  results.reserve(t.cmds.size());
  for (Command sub : t.cmds) {
    sub.client = c.client;
    sub.seq = c.seq;
    sub.now_ms = c.now_ms;
    bool existed = false;
    if (auto it = data_.find(sub.key); it != data_.end()) {
      existed = true;
      unlink(it);
    }
    Result one = execute(data_, sub);
    auto it = data_.find(sub.key);
    if (it != data_.end()) link(it);
    // (Removed by lazy expiry or by its EXPIRE, or written.)
    if ((existed && it == data_.end()) || detail::writes(sub, one)) changed.insert(sub.key);
    results.push_back(std::move(one));
  }
  const uint64_t v = changed.empty() ? version_ : ++version_;
  for (const std::string& k : changed) modified(k, v);
  ++in_place_;
  Result r;
  r.ok = true;
  r.value = encode_results(results);
  return r;
}

Result Store::execute_keys(const Command& c) {
  // Run on copies of the keys it touches, then commit the copies or not: a
  // transaction takes effect whole or not at all.
  Result r;
  Transaction t;
  if (c.op == Op::kMulti) {
    if (!decode_transaction(c.value, &t)) return failed(kMalformed);
    for (const TxCondition& cond : t.conditions)
      if (!condition_holds(c, cond)) return r;
    if (options_.multi_in_place) {
      if (std::optional<Result> here = multi_here(c, t)) return std::move(*here);
    }
  } else {
    t.cmds.push_back(c);
  }
  std::set<std::string> keys;
  bool flushes = false, denied_when_full_op = false;
  for (const Command& sub : t.cmds) {
    if (sub.op == Op::kFlushAll) {
      flushes = true;
    } else {
      keys_of(sub, &keys);
    }
    denied_when_full_op |= detail::denied_when_full(sub.op);
  }
  Keyspace copy;
  uint64_t before = 0;
  for (const std::string& k : keys) {
    if (auto it = data_.find(k); it != data_.end()) {
      before += entry_bytes(it->first, it->second);
      copy.emplace(it->first, it->second);
    }
  }
  // Which keys a command modified (store.h, Transaction); all, after a flushall.
  std::set<std::string> changed;
  std::vector<Result> results;
  size_t result_bytes = 0;
  for (Command sub : t.cmds) {
    sub.client = c.client;
    sub.seq = c.seq;
    sub.now_ms = c.now_ms;
    Result one = execute(copy, sub);
    if (sub.op == Op::kRename || sub.op == Op::kRenameNx || sub.op == Op::kSMove ||
        sub.op == Op::kLMove) {
      if (one.ok && sub.key != sub.value) changed.insert({sub.key, sub.value});
    } else if (sub.op == Op::kZMPop || sub.op == Op::kLMPop) {
      // (It popped from the key its answer names, maybe not its first.)
      std::vector<std::string> popped;
      if (one.ok && decode_names(one.value, &popped) && !popped.empty()) changed.insert(popped[0]);
    } else if (sub.op != Op::kFlushAll && detail::writes(sub, one)) {
      changed.insert(sub.key);
    }
    result_bytes += kResultOverhead + one.value.size();
    results.push_back(std::move(one));
  }
  uint64_t after = 0;
  for (const auto& [k, e] : copy) after += entry_bytes(k, e);
  // A key it removed (a delete, a rename's source, lazy expiry of either
  // key) was modified too.
  for (const std::string& k : keys)
    if (copy.count(k) == 0 && data_.count(k) != 0) changed.insert(k);
  const uint64_t used = flushes ? after : used_bytes_ - before + after;
  if (denied_when_full_op && options_.maxmemory != 0 && used > options_.maxmemory &&
      used > used_bytes_) {
    r.refused = true;
    return r;
  }
  if (c.op == Op::kMulti && options_.max_result_bytes != 0 &&
      result_bytes > options_.max_result_bytes) {
    r.value = "ERR the transaction's replies would take " + std::to_string(result_bytes) +
              " bytes, more than the " + std::to_string(options_.max_result_bytes) +
              " a reply may (--max-value-bytes); nothing was run";
    return r;
  }
  if (c.op != Op::kMulti && options_.max_result_bytes != 0 &&
      results.front().value.size() > options_.max_result_bytes) {
    // (SUNION of big sets, LMPOP of many elements: nothing is committed.)
    refuse_long_reply(&results.front());
    return results.front();
  }
  if (options_.max_result_bytes != 0) {
    for (const std::string& k : changed) {
      // (A string, which an APPEND grew: the other types are bounded by
      // maxmemory alone.)
      auto it = copy.find(k);
      if (it != copy.end() && !it->second.is_aggregate() &&
          k.size() + item_bytes(it->second) > options_.max_result_bytes) {
        // (append: GCC 12 warns falsely on chains of string +)
        r.value.append("ERR ").append(kTooLarge).append(" (--max-value-bytes): key '");
        r.value.append(k).append("' would hold ");
        r.value.append(std::to_string(item_bytes(it->second))).append(" bytes; nothing was run");
        return r;
      }
    }
  }
  // Commit (a new version only if something was modified).
  const uint64_t v = flushes || !changed.empty() ? ++version_ : version_;
  if (flushes) {
    flush_all();
    version_ = v;
    floor_ = v;
  }
  for (const std::string& k : keys) {
    if (auto it = data_.find(k); it != data_.end()) {
      unlink(it);
      data_.erase(it);
    }
    auto n = copy.find(k);
    if (n != copy.end()) {
      link(data_.emplace(k, std::move(n->second)).first);
    }
    if (flushes || changed.count(k) != 0) modified(k, v);
  }
  if (c.op != Op::kMulti) return results.front();
  r.ok = true;
  r.value = encode_results(results);
  return r;
}

}  // namespace kv
