// The set commands on a plain map (store.h: Op::kSAdd .. Op::kSDiffStore),
// for execute() and so for the Store. A set is an Item whose members are set
// (store.h, Item): std::set keeps them in byte order, the order SMEMBERS and
// the commands on several keys answer on every replica. Its last member goes
// with its key, as in Redis.
//
// SPOP and SRANDMEMBER choose members. Every replica must choose the same,
// so the choice is a function of the log alone: the gateway stamps a seed
// into the command (as it stamps the time), and the members chosen are
// picked from the set in byte order by splitmix64 from that seed.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <iterator>

#include "store.h"
#include "store_helpers.h"

namespace kv {

namespace {

using detail::done;
using detail::number;

// splitmix64: small, exactly specified, the same on every replica.
struct Chooser {
  uint64_t state;
  uint64_t below(uint64_t n) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % n;
  }
};

using detail::kChoiceBytes;

// SPOP's and SRANDMEMBER's members: without a count one, with a count >= 0
// at most that many distinct ones (in byte order), with a count < 0 that
// many with repeats, in the order chosen. Not ok past kChoiceBytes.
Result choose(const std::set<std::string>& members, const Command& c,
              std::vector<std::string>* chosen) {
  Chooser rng{static_cast<uint64_t>(number(c.value))};
  const uint64_t n = members.size();
  if (c.expected.empty()) {
    // The i-th member in byte order, walked to from the nearer end (no
    // table of all members: SPOP of a big set, one member at a time).
    const uint64_t i = rng.below(n);
    chosen->push_back(i < n / 2 ? *std::next(members.begin(), static_cast<std::ptrdiff_t>(i))
                                : *std::prev(members.end(), static_cast<std::ptrdiff_t>(n - i)));
    return done("");
  }
  std::vector<const std::string*> all;
  all.reserve(n);
  for (const std::string& m : members) all.push_back(&m);
  const int64_t count = number(c.expected);
  if (count < 0) {
    const uint64_t want = uint64_t(0) - uint64_t(count);
    size_t bytes = 0;
    for (uint64_t i = 0; i < want; ++i) {
      chosen->push_back(*all[rng.below(n)]);
      bytes += 4 + chosen->back().size();
      if (bytes > kChoiceBytes) {
        chosen->clear();
        return done("ERR the reply would take more than " + std::to_string(kChoiceBytes) + " bytes",
                    false);
      }
    }
    return done("");
  }
  const uint64_t k = std::min<uint64_t>(uint64_t(count), n);
  // A partial Fisher-Yates shuffle: the first k of `all` are the chosen.
  for (uint64_t i = 0; i < k; ++i) std::swap(all[i], all[i + rng.below(n - i)]);
  std::sort(all.begin(), all.begin() + k,
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (uint64_t i = 0; i < k; ++i) chosen->push_back(*all[i]);
  return done("");
}

// The set at `key` after lazy expiry, or null if absent; *wrong: it holds
// another type.
const std::set<std::string>* set_at(Keyspace& data, const std::string& key, int64_t now_ms,
                                    bool* wrong) {
  auto it = data.find(key);
  if (it != data.end() && detail::expired(it->second, now_ms)) {
    data.erase(it);
    return nullptr;
  }
  if (it == data.end()) return nullptr;
  if (!it->second.is_set()) *wrong = true;
  return &it->second.members.items();
}

// SINTER, SUNION, SDIFF (and their STORE forms, SINTERCARD) of `sets`
// (null: an absent key, an empty set).
std::set<std::string> combine(Op op, const std::vector<const std::set<std::string>*>& sets) {
  static const std::set<std::string> kEmpty;
  auto of = [](const std::set<std::string>* s) -> const std::set<std::string>& {
    return s ? *s : kEmpty;
  };
  std::set<std::string> out;
  if (op == Op::kSUnion || op == Op::kSUnionStore) {
    for (const auto* s : sets) out.insert(of(s).begin(), of(s).end());
    return out;
  }
  out = of(sets.front());
  for (size_t i = 1; i < sets.size() && !out.empty(); ++i) {
    const std::set<std::string>& s = of(sets[i]);
    for (auto m = out.begin(); m != out.end();) {
      const bool in = s.count(*m) != 0;
      const bool intersect = op == Op::kSInter || op == Op::kSInterStore || op == Op::kSInterCard;
      m = in != intersect ? out.erase(m) : std::next(m);
    }
  }
  return out;
}

std::string names_of(const std::set<std::string>& s) {
  return encode_names(std::vector<std::string>(s.begin(), s.end()));
}

// The commands on several keys (detail::is_set_keys_op).
Result execute_keys(Keyspace& data, const Command& c) {
  bool wrong = false;
  if (c.op == Op::kSMove) {
    const std::set<std::string>* from = set_at(data, c.key, c.now_ms, &wrong);
    const std::set<std::string>* to = set_at(data, c.value, c.now_ms, &wrong);
    if (from == nullptr) return done("0", false);  // (whatever the destination holds)
    if (wrong) return done(kWrongType, false);
    if (from == to) return done(from->count(c.expected) ? "1" : "0", from->count(c.expected) != 0);
    auto src = data.find(c.key);
    if (src->second.members.erase(c.expected) == 0) return done("0", false);
    if (src->second.members.empty()) data.erase(src);
    data[c.value].members.insert(c.expected);
    return done("1");
  }
  std::vector<std::string> keys;
  if (!decode_names(c.value, &keys) || keys.empty())
    return done("ERR malformed set command", false);
  std::vector<const std::set<std::string>*> sets;
  for (const std::string& k : keys) sets.push_back(set_at(data, k, c.now_ms, &wrong));
  if (wrong) return done(kWrongType, false);
  std::set<std::string> out = combine(c.op, sets);
  switch (c.op) {
    case Op::kSInterCard: {
      const int64_t limit = number(c.expected);
      const uint64_t n = out.size();
      return done(std::to_string(limit > 0 ? std::min<uint64_t>(n, uint64_t(limit)) : n));
    }
    case Op::kSInter:
    case Op::kSUnion:
    case Op::kSDiff:
      return done(names_of(out));
    default: {  // the STORE forms: the result replaces whatever c.key held
      const std::string n = std::to_string(out.size());
      data.erase(c.key);
      if (!out.empty()) data[c.key].members = Members(std::move(out));
      return done(n);
    }
  }
}

}  // namespace

namespace detail {

bool is_set_op(Op op) { return (op >= Op::kSAdd && op <= Op::kSDiffStore) || op == Op::kSScan; }
bool is_set_keys_op(Op op) { return op >= Op::kSMove && op <= Op::kSDiffStore; }
bool is_keys_op(Op op) {
  return is_set_keys_op(op) || op == Op::kLMove || op == Op::kLMPop || is_zset_keys_op(op);
}

std::vector<std::string> set_keys(const Command& c) {
  std::vector<std::string> keys{c.key};
  if (c.op == Op::kSMove || c.op == Op::kLMove) {
    keys.push_back(c.value);
  } else if (std::vector<std::string> more; decode_names(c.value, &more)) {
    keys.insert(keys.end(), more.begin(), more.end());
  }
  return keys;
}

Result execute_set(Keyspace& data, const Command& c) {
  if (is_set_keys_op(c.op)) return execute_keys(data, c);
  auto it = data.find(c.key);
  const bool present = it != data.end();
  Members* set = present ? &it->second.members : nullptr;
  std::vector<std::string> names;
  switch (c.op) {
    case Op::kSAdd: {
      if (!decode_names(c.value, &names) || names.empty()) return done("ERR malformed sadd", false);
      // (A new key is made only once the command is sure to write it.)
      if (!present) set = &data[c.key].members;
      size_t added = 0;
      for (std::string& m : names) added += set->insert(std::move(m)).second;
      return done(std::to_string(added));
    }
    case Op::kSRem: {
      if (!decode_names(c.value, &names)) return done("ERR malformed srem", false);
      if (!present) return done("0", false);
      size_t removed = 0;
      for (const std::string& m : names) removed += set->erase(m);
      if (set->empty()) data.erase(it);
      return done(std::to_string(removed), removed > 0);
    }
    case Op::kSCard:
      return done(std::to_string(present ? set->size() : 0));
    case Op::kSIsMember:
      return done("", present && set->count(c.expected) != 0);
    case Op::kSMIsMember: {
      if (!decode_names(c.value, &names)) return done("ERR malformed smismember", false);
      std::string out;
      for (const std::string& m : names) out += present && set->count(m) != 0 ? '1' : '0';
      return done(std::move(out));
    }
    case Op::kSMembers:
      return done(present ? names_of(set->items()) : encode_names({}));
    case Op::kSScan:
      return scan_one(c, nullptr, set ? &set->items() : nullptr);
    case Op::kSPop:
    case Op::kSRandMember: {
      if (!present) return done("", false);
      Result r = choose(set->items(), c, &names);
      if (!r.ok) return r;
      if (c.op == Op::kSPop) {
        for (const std::string& m : names) set->erase(m);
        if (set->empty()) data.erase(it);
      }
      return done(c.expected.empty() ? names.front() : encode_names(names));
    }
    default:
      return done("", false);
  }
}

}  // namespace detail

}  // namespace kv
