// What a write of one key would leave, for the limits (too_large,
// over_limit): the writes that touch only what they name (the members of
// SADD and ZADD, the fields of HSET and its kin, an end of a list for the
// pushes) run on a copy of those parts of the item alone, and the rest is
// counted as it is: an item's sizes add up part by part (item_bytes,
// entry_bytes). So a write to a large set costs what it names, not a copy
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
        if (auto it = e.fields.find(f); it != e.fields.end()) copy.fields.insert(*it);
      };
      if (c.op == Op::kHSet) {
        FieldValues pairs;
        if (decode_fields(c.value, &pairs))
          for (const auto& [f, v] : pairs) take(f);
      } else {
        take(c.expected);
      }
      if (copy.fields.empty()) copy.fields.insert(*e.fields.begin());
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

}  // namespace kv
