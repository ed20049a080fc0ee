#include "store.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <span>

#include "wire.h"

namespace kv {

std::string sweep_result(const Swept& s) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put(s.next_deadline_ms);
  w.put<uint32_t>(static_cast<uint32_t>(s.keys.size()));
  for (const std::string& k : s.keys) w.str(k);
  return out;
}

bool parse_sweep_result(std::string_view value, Swept* out) {
  wire::Reader r{std::as_bytes(std::span<const char>(value.data(), value.size()))};
  Swept s;
  s.next_deadline_ms = r.get<int64_t>();
  const uint32_t n = r.get<uint32_t>();
  if (r.ok && n > (r.in.size() - r.pos) / 4) return false;
  for (uint32_t i = 0; r.ok && i < n; ++i) s.keys.push_back(r.str());
  if (!r.ok || r.pos != r.in.size()) return false;
  *out = std::move(s);
  return true;
}

bool parse_integer(std::string_view text, int64_t* out) {
  // Redis's rule: a decimal integer as it would print it (no sign but '-',
  // no leading zeros or spaces), within 64 bits.
  if (text.empty() || text.size() > 20) return false;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || std::to_string(v) != text)
    return false;
  *out = v;
  return true;
}

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Command noop_command() { return Command{}; }

namespace detail {

bool expired(const Item& e, int64_t now_ms) {
  return e.deadline_ms != 0 && e.deadline_ms <= now_ms;
}

}  // namespace detail

namespace {

using detail::expired;

// Whether an expire's conditions (Command::ttl_if) let it set `when` on a
// key whose deadline is `current` (0: none, which counts as later than any).
bool expire_allowed(uint8_t ttl_if, int64_t current, int64_t when) {
  if ((ttl_if & kIfNoDeadline) && current != 0) return false;
  if ((ttl_if & kIfDeadline) && current == 0) return false;
  if ((ttl_if & kIfLater) && (current == 0 || when <= current)) return false;
  if ((ttl_if & kIfEarlier) && current != 0 && when >= current) return false;
  return true;
}

// Gives the entry `it` the deadline c.ttl says; a deadline that has passed
// (at or before c.now_ms) removes the key, as Redis does with a SET EXAT or
// an EXPIREAT in the past.
void settle_deadline(Keyspace& data, Keyspace::iterator it, const Command& c) {
  switch (c.ttl) {
    case Ttl::kClear:
      it->second.deadline_ms = 0;
      break;
    case Ttl::kKeep:
      break;
    case Ttl::kSet:
      if (c.deadline_ms <= std::max<int64_t>(c.now_ms, 0)) {
        data.erase(it);
      } else {
        it->second.deadline_ms = c.deadline_ms;
      }
      break;
  }
}

}  // namespace

Result execute(Keyspace& data, const Command& c) {
  Result r;
  if (c.op == Op::kNoop) return r;
  switch (c.op) {
    case Op::kMulti:
    case Op::kRename:
    case Op::kRenameNx:
    case Op::kFlushAll:
    case Op::kWatch:
      return detail::execute_many(data, c);
    case Op::kDbSize:
    case Op::kKeys:
    case Op::kScan:
      return detail::read_keyspace(data, c, 0);
    default:
      break;
  }
  if (c.op == Op::kSweep) {
    // The keys expired at now_ms, earliest deadline first (then by key), as
    // many as the bounds take; the Store finds the same through its index.
    std::vector<std::pair<int64_t, std::string>> due;
    int64_t next = 0;
    for (const auto& [k, e] : data) {
      if (expired(e, c.now_ms)) due.emplace_back(e.deadline_ms, k);
    }
    std::sort(due.begin(), due.end());
    Swept swept;
    size_t bytes = 0;
    for (const auto& [deadline, k] : due) {
      if (swept.keys.size() == kSweepKeys ||
          (!swept.keys.empty() && bytes + k.size() > kSweepBytes))
        break;
      bytes += k.size();
      swept.keys.push_back(k);
      data.erase(k);
    }
    for (const auto& [k, e] : data) {
      if (e.deadline_ms != 0 && (next == 0 || e.deadline_ms < next)) next = e.deadline_ms;
    }
    swept.next_deadline_ms = next;
    r.ok = true;
    r.value = sweep_result(swept);
    return r;
  }
  // (They look at the expiry and types of all their keys themselves.)
  if (detail::is_keys_op(c.op)) {
    if (c.op == Op::kLMove) return detail::execute_list_move(data, c);
    if (c.op == Op::kLMPop) return detail::execute_list_mpop(data, c);
    return detail::is_zset_op(c.op) ? detail::execute_zset(data, c) : detail::execute_set(data, c);
  }
  // Lazy expiry: the command finds its key as it is at its own stamp.
  if (auto it = data.find(c.key); it != data.end() && expired(it->second, c.now_ms)) data.erase(it);
  if (auto it = data.find(c.key); it != data.end() && detail::wrong_type(c, it->second)) {
    r.value = kWrongType;
    return r;
  }
  if (detail::is_hash_op(c.op)) return detail::execute_hash(data, c);
  if (detail::is_list_op(c.op)) return detail::execute_list(data, c);
  if (detail::is_set_op(c.op)) return detail::execute_set(data, c);
  if (detail::is_zset_op(c.op)) return detail::execute_zset(data, c);
  switch (c.op) {
    case Op::kNoop:
    case Op::kSweep:
    case Op::kMulti:
    case Op::kRename:
    case Op::kRenameNx:
    case Op::kFlushAll:
    case Op::kWatch:
    case Op::kDbSize:
    case Op::kKeys:
    case Op::kScan:
      break;
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHGet:
    case Op::kHMGet:
    case Op::kHDel:
    case Op::kHLen:
    case Op::kHGetAll:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat:
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX:
    case Op::kLPop:
    case Op::kRPop:
    case Op::kLLen:
    case Op::kLRange:
    case Op::kLIndex:
    case Op::kLSet:
    case Op::kLRem:
    case Op::kLTrim:
    case Op::kSAdd:
    case Op::kSRem:
    case Op::kSCard:
    case Op::kSIsMember:
    case Op::kSMIsMember:
    case Op::kSMembers:
    case Op::kSPop:
    case Op::kSRandMember:
    case Op::kSMove:
    case Op::kSInter:
    case Op::kSUnion:
    case Op::kSDiff:
    case Op::kSInterCard:
    case Op::kSInterStore:
    case Op::kSUnionStore:
    case Op::kSDiffStore:
    case Op::kLInsert:
    case Op::kLPos:
    case Op::kLMove:
    case Op::kHScan:
    case Op::kSScan:
    case Op::kZAdd:
    case Op::kZRem:
    case Op::kZScore:
    case Op::kZCard:
    case Op::kZCount:
    case Op::kZRank:
    case Op::kZRange:
    case Op::kZRemRange:
    case Op::kZPop:
    case Op::kZRangeStore:
    case Op::kZCombine:
    case Op::kZCombineStore:
    case Op::kZScan:
    case Op::kZMPop:
    case Op::kZRandMember:
    case Op::kLMPop:
    case Op::kHRandField:
      break;
    case Op::kIncrByFloat:
    case Op::kSetRange:
      return detail::execute_string(data, c);
    case Op::kType: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second.type_name();
      }
      break;
    }
    case Op::kPut: {
      auto it = data.try_emplace(c.key).first;
      it->second.value = c.value;
      it->second.fields.clear();  // (a hash's, a list's or a set's SET: a string now)
      it->second.list.clear();
      it->second.members.clear();
      it->second.zset.clear();
      settle_deadline(data, it, c);
      r.ok = true;
      break;
    }
    case Op::kGet: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second.value;
      }
      break;
    }
    case Op::kDelete:
      r.ok = data.erase(c.key) > 0;
      break;
    case Op::kCas: {
      auto it = data.find(c.key);
      if (it != data.end() && it->second.value == c.expected) {
        it->second = Item{c.value, 0};  // a conditional SET: no deadline after it
        r.ok = true;
      }
      break;
    }
    case Op::kIncrBy: {
      auto it = data.find(c.key);
      int64_t now = 0, by = 0, sum = 0;
      if ((it != data.end() && !parse_integer(it->second.value, &now)) ||
          !parse_integer(c.value, &by)) {
        r.value = "not an integer";
      } else if (__builtin_add_overflow(now, by, &sum)) {
        r.value = "overflow";
      } else {
        r.value = std::to_string(sum);
        data[c.key].value = r.value;  // (keeps the deadline, as Redis's INCR does)
        r.ok = true;
      }
      break;
    }
    case Op::kAppend: {
      std::string& v = data[c.key].value;
      v += c.value;
      r.ok = true;
      r.value = std::to_string(v.size());
      break;
    }
    case Op::kSetNx: {
      const auto [it, added] = data.try_emplace(c.key, Item{c.value, 0});
      r.ok = added;
      if (added) {
        settle_deadline(data, it, c);
      } else {
        r.value = it->second.value;
      }
      break;
    }
    case Op::kGetSet:
    case Op::kGetDel:
    case Op::kSetXx: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = std::move(it->second.value);
        if (c.op == Op::kGetDel) {
          data.erase(it);
        } else {
          it->second.value = c.value;
          it->second.fields.clear();  // (SET XX of a hash, list or set: a string now)
          it->second.list.clear();
          it->second.members.clear();
          it->second.zset.clear();
          settle_deadline(data, it, c);
        }
      } else if (c.op == Op::kGetSet) {
        settle_deadline(data, data.emplace(c.key, Item{c.value, 0}).first, c);
      }
      break;
    }
    case Op::kExpire: {
      auto it = data.find(c.key);
      if (it == data.end()) break;
      if (c.ttl == Ttl::kClear) {
        r.ok = it->second.deadline_ms != 0;
        it->second.deadline_ms = 0;
      } else if (c.ttl == Ttl::kSet &&
                 expire_allowed(c.ttl_if, it->second.deadline_ms, c.deadline_ms)) {
        r.ok = true;
        settle_deadline(data, it, c);
      }
      break;
    }
    case Op::kTtl: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second.deadline_ms == 0 ? "-1" : std::to_string(it->second.deadline_ms);
      }
      break;
    }
    case Op::kGetEx: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second.value;
        settle_deadline(data, it, c);
      }
      break;
    }
  }
  return r;
}

uint64_t identity_hash(uint64_t client, uint64_t seq) {
  // splitmix64's finalizer over the two words.
  uint64_t z = client * 0x9e3779b97f4a7c15ull + seq + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void Store::record(uint64_t client, uint64_t seq, bool executed) {
  if (options_.keep_applied) applied_.emplace_back(client, seq);
  ++summary_.entries;
  summary_.chain = identity_hash(summary_.chain ^ client, seq + summary_.entries);
  if (executed) {
    ++summary_.executed;
    summary_.executed_sum += identity_hash(client, seq);
  }
}

uint64_t Store::entry_bytes(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? 0 : entry_bytes(it->first, it->second);
}

bool Store::too_large(const Command& c) const {
  // (Only a string is bounded as a whole: a hash, a list, a set or a sorted
  // set is bounded by maxmemory alone, each of its parts by the command
  // that wrote it.)
  if (options_.max_result_bytes == 0 || c.op != Op::kAppend) return false;
  uint64_t now = 0;
  if (auto it = data_.find(c.key); it != data_.end() && !detail::expired(it->second, c.now_ms))
    now = it->second.value.size();
  return c.key.size() + now + c.value.size() > options_.max_result_bytes;
}

bool Store::pop_too_long(const Command& c) const {
  if (options_.max_result_bytes == 0 || c.expected.empty() ||
      !(c.op == Op::kLPop || c.op == Op::kRPop || c.op == Op::kSPop || c.op == Op::kZPop))
    return false;
  auto it = data_.find(c.key);
  if (it == data_.end() || detail::expired(it->second, c.now_ms) ||
      c.key.size() + item_bytes(it->second) <= options_.max_result_bytes)
    return false;  // (it answers at most the whole item, which fits)
  // What it would answer, from a copy of the item (SPOP's choice from its
  // seed is the same on the copy).
  Keyspace one;
  one.emplace(it->first, it->second);
  return execute(one, c).value.size() > options_.max_result_bytes;
}

Keyspace Store::alone_after(const Command& c, bool keep_value) const {
  Keyspace one;
  if (auto it = data_.find(c.key); it != data_.end()) {
    Item& copy = one[it->first];
    copy.deadline_ms = it->second.deadline_ms;
    if (keep_value) {
      copy.value = it->second.value;
      copy.fields = it->second.fields;
      copy.list = it->second.list;
      copy.members = it->second.members;
      copy.zset = it->second.zset;
    }
  }
  execute(one, c);
  return one;
}

bool Store::over_limit(const Command& c) const {
  if (!detail::denied_when_full(c.op) || options_.maxmemory == 0) return false;
  // (The set commands on several keys: execute_keys counts all their keys.)
  if (detail::is_keys_op(c.op)) return false;
  // What the key's entry would take after the command: the command run on a
  // copy of the entry alone (only with a limit set; a put or getset, which
  // replaces the value, does not copy the old one).
  const uint64_t before = entry_bytes(c.key);
  uint64_t after = 0;
  if (sizes_by_parts(c.op)) {
    after = sizes_after(c).first;
  } else {
    const Keyspace one = alone_after(c, !(c.op == Op::kPut || c.op == Op::kGetSet));
    auto it = one.find(c.key);
    after = it == one.end() ? 0 : entry_bytes(it->first, it->second);
  }
  return after > before && used_bytes_ - before + after > options_.maxmemory;
}

Store::Store(const Store& other)
    : options_(other.options_),
      data_(other.data_),
      clients_(other.clients_),
      applied_(other.applied_),
      summary_(other.summary_),
      used_bytes_(other.used_bytes_),
      skipped_(other.skipped_),
      in_place_(other.in_place_),
      version_(other.version_),
      tombstones_(other.tombstones_),
      tomb_bytes_(other.tomb_bytes_),
      floor_(other.floor_) {
  for (auto it = data_.begin(); it != data_.end(); ++it) link(it, false);
  for (const auto& [k, v] : tombstones_) tomb_order_.emplace(v, std::string_view(k));
}

Store& Store::operator=(const Store& other) {
  if (this != &other) *this = Store(other);
  return *this;
}

void Store::unlink(Keyspace::iterator it) {
  used_bytes_ -= entry_bytes(it->first, it->second);
  if (it->second.deadline_ms != 0) by_deadline_.erase({it->second.deadline_ms, it->first});
  by_hash_.erase({key_hash(it->first), it->first});
}

void Store::link(Keyspace::iterator it, bool count) {
  if (count) used_bytes_ += entry_bytes(it->first, it->second);
  if (it->second.deadline_ms != 0)
    by_deadline_.emplace(it->second.deadline_ms, std::string_view(it->first));
  by_hash_.emplace(key_hash(it->first), std::string_view(it->first));
}

Result Store::execute_here(const Command& c) {
  switch (c.op) {
    case Op::kSweep:
      return sweep(c.now_ms);
    case Op::kMulti:
    case Op::kRename:
    case Op::kRenameNx:
      return execute_keys(c);
    case Op::kFlushAll:
      return flush_all();
    case Op::kWatch:
      return watch(c);
    case Op::kDbSize:
    case Op::kKeys:
    case Op::kScan:
      return read_keyspace(c);
    default:
      if (c.op == Op::kLMove || c.op == Op::kSMove) {
        if (std::optional<Result> r = move_here(c)) return std::move(*r);
      }
      if (detail::is_keys_op(c.op)) return execute_keys(c);
      break;
  }
  // The command touches c.key alone: take its entry out of the counts and
  // the index, run it, and put back what it left.
  bool existed = false;
  if (auto it = data_.find(c.key); it != data_.end()) {
    existed = true;
    unlink(it);
  }
  Result r = execute(data_, c);
  // A read of a hash, a list, a set or a sorted set longer than one reply
  // may carry (LRANGE 0 -1, HGETALL, SMEMBERS, ..., or fields named many
  // times, members chosen many times): an error instead. (The writes that
  // answer members, pops with a count, were refused before they ran if
  // their answer would be as long: pop_too_long.)
  if (!detail::writes(c, r)) refuse_long_reply(&r);
  auto it = data_.find(c.key);
  if (it != data_.end()) link(it);
  // (Removed by lazy expiry, or written: a modification, for WATCH.)
  if ((existed && it == data_.end()) || detail::writes(c, r)) modified(c.key, ++version_);
  return r;
}

void Store::refuse_long_reply(Result* r) const {
  if (options_.max_result_bytes == 0 || r->value.size() <= options_.max_result_bytes) return;
  const size_t bytes = r->value.size();
  r->ok = false;
  r->value = std::string(kLongReply) + std::to_string(bytes) + " bytes, more than the " +
             std::to_string(options_.max_result_bytes) + " a reply may (--max-value-bytes)";
}

std::string long_reply_error(uint64_t max_result_bytes) {
  return std::string(kLongReply) + "more than the " + std::to_string(max_result_bytes) +
         " bytes a reply may (--max-value-bytes); nothing was changed";
}

Result Store::sweep(int64_t now_ms) {
  // What execute() does for a sweep, through the index instead of a scan.
  Swept swept;
  size_t bytes = 0;
  while (!by_deadline_.empty() && swept.keys.size() < kSweepKeys) {
    const auto [deadline, key] = *by_deadline_.begin();
    if (deadline > now_ms || (!swept.keys.empty() && bytes + key.size() > kSweepBytes)) break;
    bytes += key.size();
    swept.keys.emplace_back(key);
    unlink(data_.find(swept.keys.back()));
    data_.erase(swept.keys.back());
  }
  if (!swept.keys.empty()) {
    ++version_;
    for (const std::string& k : swept.keys) modified(k, version_);
  }
  swept.next_deadline_ms = by_deadline_.empty() ? 0 : by_deadline_.begin()->first;
  Result r;
  r.ok = true;
  r.value = sweep_result(swept);
  return r;
}

Result Store::apply(const Command& c, Applied* what) {
  Applied dummy;
  Applied& how = what ? *what : dummy;
  if (c.is_noop()) {
    how = Applied::kNoop;
    record(0, 0, false);
    return {};
  }
  ClientState& cs = clients_[c.client];
  if (c.seq <= cs.seq) {
    // A retry that took effect before: its first result, if still kept.
    record(c.client, c.seq, false);
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
    record(0, 0, false);
    return {};
  }
  how = Applied::kExecuted;
  record(c.client, c.seq, true);
  cs.seq = c.seq;
  Result r;
  if (too_large(c)) {
    r.refused = true;
    r.value = kTooLarge;
  } else if (pop_too_long(c)) {
    r.value = long_reply_error(options_.max_result_bytes);
  } else if (over_limit(c)) {
    r.refused = true;
  } else {
    r = execute_here(c);
  }
  cs.results.push_back(std::move(r));
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

}  // namespace kv
