// The hash commands on a plain map (store.h: Op::kHSet .. Op::kHIncrByFloat),
// for execute() and so for the Store, and the encodings of their fields.
// A hash is an Item whose fields are set (store.h, Item): std::map keeps
// them in byte order of the field, which is the order HGETALL, HKEYS and
// HVALS answer on every replica.
#include <algorithm>
#include <bit>
#include <cmath>

#include "store.h"
#include "store_helpers.h"
#include "wire.h"

namespace kv {

namespace {

using wire::count;
using wire::reader;

using detail::done;

// HINCRBY and HINCRBYFLOAT on the field's value (absent: 0); the errors are
// incrby's and incrbyfloat's (store.h, Result).
Result increment(std::string* field, bool present, const Command& c) {
  if (c.op == Op::kHIncrBy) {
    int64_t now = 0, by = 0, sum = 0;
    if ((present && !parse_integer(*field, &now)) || !parse_integer(c.value, &by))
      return done("not an integer", false);
    if (__builtin_add_overflow(now, by, &sum)) return done("overflow", false);
    *field = std::to_string(sum);
    return done(*field);
  }
  double now = 0, by = 0;
  if ((present && !parse_float(*field, &now)) || !parse_float(c.value, &by))
    return done("not a float", false);
  if (!std::isfinite(now + by)) return done("nan or infinity", false);
  *field = format_float(now + by);
  return done(*field);
}

using detail::kChoiceBytes;

// HRANDFIELD's fields (and values), chosen from the seed in `c.value` alone
// by splitmix64, as SRANDMEMBER chooses members: without a count one; a
// count >= 0, at most that many distinct ones in field order; < 0, that
// many with repeats, in the order chosen. Not ok past kChoiceBytes.
Result random_fields(const Fields& fields, const Command& c) {
  std::vector<std::string> how;
  int64_t count = 1;
  if (!decode_names(c.expected, &how) || how.size() != 2 ||
      (!how[0].empty() && !parse_integer(how[0], &count)))
    return done("ERR malformed hrandfield", false);
  const bool with_values = !how[1].empty();
  uint64_t state = static_cast<uint64_t>(detail::number_or_zero(c.value));
  auto below = [&state](uint64_t n) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % n;
  };
  std::vector<const std::pair<const std::string, std::string>*> all;
  all.reserve(fields.size());
  for (const auto& f : fields) all.push_back(&f);
  const uint64_t n = all.size();
  if (how[0].empty()) return done(all[below(n)]->first);
  std::vector<std::string> out;
  size_t bytes = 0;
  auto emit = [&](const std::pair<const std::string, std::string>* f) {
    out.push_back(f->first);
    if (with_values) out.push_back(f->second);
    bytes += 8 + f->first.size() + (with_values ? f->second.size() : 0);
  };
  if (count < 0) {
    for (uint64_t i = 0, want = uint64_t(0) - uint64_t(count); i < want; ++i) {
      emit(all[below(n)]);
      if (bytes > kChoiceBytes)
        return done("ERR the reply would take more than " + std::to_string(kChoiceBytes) + " bytes",
                    false);
    }
    return done(encode_names(out));
  }
  const uint64_t k = std::min<uint64_t>(uint64_t(count), n);
  // A partial Fisher-Yates shuffle: the first k of `all` are the chosen.
  for (uint64_t i = 0; i < k && k < n; ++i) std::swap(all[i], all[i + below(n - i)]);
  std::sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (uint64_t i = 0; i < k; ++i) emit(all[i]);
  return done(encode_names(out));
}

}  // namespace

std::string encode_fields(const FieldValues& pairs) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put<uint32_t>(static_cast<uint32_t>(pairs.size()));
  for (const auto& [f, v] : pairs) {
    w.str(f);
    w.str(v);
  }
  return out;
}

bool decode_fields(std::string_view bytes, FieldValues* out) {
  wire::Reader r = reader(bytes);
  FieldValues pairs;
  for (uint32_t n = count(r, kFieldEncoding), i = 0; r.ok && i < n; ++i) {
    std::string f = r.str();
    pairs.emplace_back(std::move(f), r.str());
  }
  if (!r.ok || r.pos != bytes.size()) return false;
  *out = std::move(pairs);
  return true;
}

std::string encode_names(const std::vector<std::string>& names) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put<uint32_t>(static_cast<uint32_t>(names.size()));
  for (const std::string& n : names) w.str(n);
  return out;
}

bool decode_names(std::string_view bytes, std::vector<std::string>* out) {
  wire::Reader r = reader(bytes);
  std::vector<std::string> names;
  for (uint32_t n = count(r, 4), i = 0; r.ok && i < n; ++i) names.push_back(r.str());
  if (!r.ok || r.pos != bytes.size()) return false;
  *out = std::move(names);
  return true;
}

size_t item_bytes(const Item& e) {
  // (O(1): the items keep their bytes counted.)
  const size_t n = 4;
  if (e.is_list()) return n + e.list.size() * kElementEncoding + e.list.bytes();
  if (e.is_set()) return n + e.members.size() * kElementEncoding + e.members.bytes();
  if (e.is_zset())
    return n + e.zset.size() * 2 * kElementEncoding + e.zset.member_bytes() + e.zset.score_bytes();
  if (!e.is_hash()) return e.value.size();
  return n + e.fields.size() * kFieldEncoding + e.fields.bytes();
}

std::strong_ordering operator<=>(const Item& a, const Item& b) {
  if (auto c = a.value <=> b.value; c != 0) return c;
  if (auto c = a.deadline_ms <=> b.deadline_ms; c != 0) return c;
  if (auto c = a.fields <=> b.fields; c != 0) return c;
  if (auto c = a.list <=> b.list; c != 0) return c;
  if (auto c = a.members <=> b.members; c != 0) return c;
  // (A sorted set's scores by their bits: -0 and 0 differ, as in ==.)
  auto key = [](const ZEntry& z) {
    return std::make_pair(std::bit_cast<uint64_t>(z.first), z.second);
  };
  return std::lexicographical_compare_three_way(
      a.zset.order.begin(), a.zset.order.end(), b.zset.order.begin(), b.zset.order.end(),
      [&key](const ZEntry& x, const ZEntry& y) { return key(x) <=> key(y); });
}

namespace detail {

bool is_hash_op(Op op) {
  return (op >= Op::kHSet && op <= Op::kHIncrByFloat) || op == Op::kHScan || op == Op::kHRandField;
}

bool wrong_type(const Command& c, const Item& e) {
  if (is_hash_op(c.op)) return !e.is_hash();
  if (is_list_op(c.op)) return !e.is_list();
  if (is_set_op(c.op)) return !e.is_set();
  if (is_zset_op(c.op)) return !e.is_zset();
  switch (c.op) {
    case Op::kPut:  // (SET replaces whatever the key held)
    case Op::kDelete:
    case Op::kExpire:
    case Op::kTtl:
    case Op::kType:
      return false;
    case Op::kSetXx:  // SET XX replaces it too; SET XX GET reads it first
      return e.is_aggregate() && c.expected == "get";
    default:
      return e.is_aggregate();
  }
}

Result execute_hash(Keyspace& data, const Command& c) {
  auto it = data.find(c.key);
  const bool present = it != data.end();
  switch (c.op) {
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat: {
      FieldValues pairs;
      if (c.op != Op::kHSet) {
        pairs.emplace_back(c.expected, c.value);
      } else if (!decode_fields(c.value, &pairs) || pairs.empty()) {
        return done("ERR malformed hset", false);
      }
      // (A new key is made only once the command is sure to write it.)
      Item scratch;
      Item& item = present ? it->second : scratch;
      size_t added = 0;
      Result r;
      for (auto& [f, v] : pairs) {
        auto field = item.fields.find(f);
        const bool had = field != item.fields.end();
        if (c.op == Op::kHSetNx && had) return done("", false);
        if (c.op == Op::kHIncrBy || c.op == Op::kHIncrByFloat) {
          std::string now = had ? field->second : std::string();
          r = increment(&now, had, c);
          if (!r.ok) return r;
          v = std::move(now);
        }
        added += had ? 0 : 1;
        item.fields.insert_or_assign(std::move(f), std::move(v));
      }
      if (!present) data.emplace(c.key, std::move(scratch));
      if (c.op == Op::kHSet) return done(std::to_string(added));
      return c.op == Op::kHSetNx ? done("") : r;
    }
    case Op::kHGet: {
      if (!present) return done("", false);
      auto field = it->second.fields.find(c.expected);
      if (field == it->second.fields.end()) return done("", false);
      return done(field->second);
    }
    case Op::kHMGet: {
      std::vector<std::string> names;
      if (!decode_names(c.value, &names)) return done("ERR malformed hmget", false);
      std::vector<Result> values(names.size());
      for (size_t i = 0; i < names.size() && present; ++i) {
        auto field = it->second.fields.find(names[i]);
        if (field != it->second.fields.end()) values[i] = done(field->second);
      }
      return done(encode_results(values));
    }
    case Op::kHDel: {
      std::vector<std::string> names;
      if (!decode_names(c.value, &names)) return done("ERR malformed hdel", false);
      size_t removed = 0;
      for (size_t i = 0; i < names.size() && present; ++i)
        removed += it->second.fields.erase(names[i]);
      if (present && it->second.fields.empty()) data.erase(it);
      return done(std::to_string(removed), removed > 0);
    }
    case Op::kHLen:
      return done(std::to_string(present ? it->second.fields.size() : 0));
    case Op::kHGetAll: {
      FieldValues pairs;
      if (present) pairs.assign(it->second.fields.begin(), it->second.fields.end());
      return done(encode_fields(pairs));
    }
    case Op::kHRandField: {
      if (present) return random_fields(it->second.fields, c);
      // (Absent: null without a count, an empty array with one.)
      std::vector<std::string> how;
      if (decode_names(c.expected, &how) && !how.empty() && !how[0].empty())
        return done(encode_names({}));
      return done("", false);
    }
    case Op::kHScan:
      return scan_one(c, present ? &it->second.fields.items() : nullptr, nullptr);
    default:
      return done("", false);
  }
}

}  // namespace detail

}  // namespace kv
