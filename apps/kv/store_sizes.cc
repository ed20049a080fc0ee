// The sizes the store's limits count. Every item keeps the bytes of its
// strings counted (item_parts.h, zset.h), so entry_bytes() and item_bytes()
// are O(1); counts_agree() and sizes_agree() check those counts against a
// walk, for the tests.
//
// What a write of one key would leave, for maxmemory (over_limit; a
// collection's size in a reply no longer bounds it): the writes that touch only what they name (the
// members of SADD and ZADD, the fields of HSET and its kin, an end of a list for the pushes) run on
// a copy of those parts of the item alone, and the rest is counted as it is: an item's sizes add up
// part by part (item_bytes, entry_bytes). So a write to a large set costs what it names, not a copy
// of the set.
#include "store.h"

namespace kv {

bool Store::sizes_by_parts(Op op) {
  switch (op) {
    case Op::kSAdd:
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat:
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX:
    case Op::kZAdd:
      return true;
    default:
      return false;
  }
}

namespace {

// Copies into `copy` the parts of `e` that `c` names, and one more where
// none is named, so that the copy holds an item of the same type. False
// where `c` writes another type than `e` is (WRONGTYPE: copy it all).
bool copy_named(const Command& c, const Item& e, Item& copy) {
  copy.deadline_ms = e.deadline_ms;
  switch (c.op) {
    case Op::kSAdd: {
      if (!e.is_set()) return false;
      std::vector<std::string> names;
      if (decode_names(c.value, &names))
        for (const std::string& m : names)
          if (e.members.count(m) != 0) copy.members.insert(m);
      if (copy.members.empty()) copy.members.insert(*e.members.begin());
      return true;
    }
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat: {
      if (!e.is_hash()) return false;
      auto take = [&](const std::string& f) {
        if (auto it = e.fields.find(f); it != e.fields.end())
          copy.fields.emplace(it->first, it->second);
      };
      if (c.op == Op::kHSet) {
        FieldValues pairs;
        if (decode_fields(c.value, &pairs))
          for (const auto& [f, v] : pairs) take(f);
      } else {
        take(c.expected);
      }
      if (copy.fields.empty())
        copy.fields.emplace(e.fields.begin()->first, e.fields.begin()->second);
      return true;
    }
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX:
      if (!e.is_list()) return false;
      copy.list.push_back(e.list.front());
      return true;
    case Op::kZAdd: {
      if (!e.is_zset()) return false;
      std::vector<std::string> args;
      if (decode_names(c.value, &args)) {
        for (size_t j = 1; j < args.size(); j += 2) {
          auto f = e.zset.scores.find(args[j]);
          if (f != e.zset.scores.end()) copy.zset.put(f->first, f->second);
        }
      }
      if (copy.zset.empty())
        copy.zset.put(e.zset.order.begin()->second, e.zset.order.begin()->first);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

std::pair<uint64_t, uint64_t> Store::sizes_after(const Command& c) const {
  Keyspace one;
  uint64_t entry = 0, item = 0;  // before, of what is not copied
  auto it = data_.find(c.key);
  if (it != data_.end() && !detail::expired(it->second, c.now_ms)) {
    const Item& e = it->second;
    Item& copy = one[it->first];
    if (!copy_named(c, e, copy)) {
      copy = e;  // (WRONGTYPE: nothing changes)
    } else {
      entry = entry_bytes(it->first, e) - entry_bytes(it->first, copy);
      item = item_bytes(e) - item_bytes(copy);
    }
  }
  execute(one, c);
  auto after = one.find(c.key);
  if (after == one.end()) return {0, 0};
  return {entry + entry_bytes(after->first, after->second), item + item_bytes(after->second)};
}

namespace {

// entry_bytes() and item_bytes() of `e` by a walk of its strings, as they
// were computed before the items kept counts.
std::pair<uint64_t, uint64_t> walked_sizes(const std::string& key, const Item& e) {
  uint64_t entry = Store::kEntryOverhead + key.size() + e.value.size() +
                   (e.deadline_ms != 0 ? Store::kDeadlineOverhead : 0);
  uint64_t fields = 0, elements = 0, members = 0, zmembers = 0, scores = 0;
  for (const auto& [f, v] : e.fields.items()) fields += f.size() + v.size();
  for (const std::string& v : e.list.items()) elements += v.size();
  for (const std::string& m : e.members.items()) members += m.size();
  for (const auto& [score, m] : e.zset.order) {
    zmembers += m.size();
    scores += format_score(score).size();
  }
  entry += e.fields.size() * Store::kFieldOverhead + fields +
           e.list.size() * Store::kElementOverhead + elements +
           e.members.size() * Store::kMemberOverhead + members +
           e.zset.size() * Store::kZMemberOverhead + 2 * zmembers;
  uint64_t item = e.value.size();
  if (e.is_list()) item = 4 + e.list.size() * kElementEncoding + elements;
  if (e.is_set()) item = 4 + e.members.size() * kElementEncoding + members;
  if (e.is_zset()) item = 4 + e.zset.size() * 2 * kElementEncoding + zmembers + scores;
  if (e.is_hash()) item = 4 + e.fields.size() * kFieldEncoding + fields;
  return {entry, item};
}

}  // namespace

bool Store::counts_agree(const Keyspace& data, std::string* why) {
  for (const auto& [k, e] : data) {
    const auto [entry, item] = walked_sizes(k, e);
    const char* what = e.zset.scores.size() != e.zset.size() ? "the sorted set's two indexes"
                       : entry_bytes(k, e) != entry          ? "entry_bytes"
                       : item_bytes(e) != item               ? "item_bytes"
                                                             : nullptr;
    if (what != nullptr) {
      if (why != nullptr)
        *why = std::string("key '") + k + "' (" + e.type_name() + "): " + what + " " +
               std::to_string(entry_bytes(k, e)) + "/" + std::to_string(item_bytes(e)) +
               " counted, " + std::to_string(entry) + "/" + std::to_string(item) + " walked";
      return false;
    }
  }
  return true;
}

bool Store::sizes_agree(std::string* why) const {
  if (!counts_agree(data_, why)) return false;
  uint64_t walked = 0;
  for (const auto& [k, e] : data_) walked += walked_sizes(k, e).first;
  if (walked == used_bytes_) return true;
  if (why != nullptr)
    *why = "used_bytes " + std::to_string(used_bytes_) + ", walked " + std::to_string(walked);
  return false;
}

}  // namespace kv
