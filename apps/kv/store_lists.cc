// The list commands on a plain map (store.h: Op::kLPush .. Op::kLTrim,
// Op::kLInsert, Op::kLPos, and Op::kLMove on two keys), for
// execute() and so for the Store. A list is an Item whose elements are set
// (store.h, Item), head first; its last element goes with its key, as in
// Redis. Indices are Redis's: 0 the head, -1 the tail.
#include <algorithm>

#include "store.h"
#include "store_helpers.h"

namespace kv {

namespace {

using detail::done;
using detail::expired;
using detail::number;

// LRANGE's and LTRIM's range of a list of `len` elements, as Redis takes
// it: [*first, *last] within the list, or empty (false).
bool range_of(int64_t start, int64_t stop, int64_t len, int64_t* first, int64_t* last) {
  if (start < 0) start += len;
  if (stop < 0) stop += len;
  start = std::max<int64_t>(start, 0);
  if (start > stop || start >= len) return false;
  *first = start;
  *last = std::min(stop, len - 1);
  return true;
}

// LPOS on `list` (null: absent), as Redis 7's: the matches of c.value
// from the rank-th one on (rank < 0: from the tail), at most `count` of
// them (0: all; absent: the first alone), among the first `maxlen`
// elements looked at (0: all).
Result position(const Elements* list, const Command& c) {
  std::vector<std::string> opts;
  if (!decode_names(c.expected, &opts) || opts.size() != 3)
    return done("ERR malformed lpos", false);
  const int64_t rank = number(opts[0]), maxlen = number(opts[2]);
  const bool counted = !opts[1].empty();
  const int64_t count = counted ? number(opts[1]) : 1;
  std::vector<std::string> found;
  if (list != nullptr && rank != 0) {
    const int64_t len = static_cast<int64_t>(list->size());
    int64_t skip = rank > 0 ? rank - 1 : -(rank + 1);
    for (int64_t looked = 0; looked < len && (maxlen == 0 || looked < maxlen); ++looked) {
      const int64_t i = rank > 0 ? looked : len - 1 - looked;
      if ((*list)[i] != c.value) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      found.push_back(std::to_string(i));
      if (count != 0 && static_cast<int64_t>(found.size()) == count) break;
    }
  }
  if (counted) return done(encode_names(found));
  if (found.empty()) return done("", false);
  return done(std::move(found.front()));
}

}  // namespace

namespace detail {

Result result_of(std::string value, bool ok) {
  Result r;
  r.ok = ok;
  r.value = std::move(value);
  return r;
}

int64_t number_or_zero(const std::string& text) {
  int64_t n = 0;
  return parse_integer(text, &n) ? n : 0;
}

bool is_list_op(Op op) {
  return (op >= Op::kLPush && op <= Op::kLTrim) || op == Op::kLInsert || op == Op::kLPos;
}

Result execute_list_move(Keyspace& data, const Command& c) {
  // (As SMOVE: lazy expiry of both keys, then their types.)
  bool wrong = false;
  for (const std::string* k : {&c.key, &c.value}) {
    auto it = data.find(*k);
    if (it != data.end() && expired(it->second, c.now_ms)) data.erase(it);
  }
  auto src = data.find(c.key);
  if (src == data.end()) return done("", false);  // (whatever the destination holds)
  if (auto dst = data.find(c.value); dst != data.end() && !dst->second.is_list()) wrong = true;
  if (!src->second.is_list() || wrong || c.expected.size() != 2)
    return done(c.expected.size() != 2 ? "ERR malformed lmove" : kWrongType, false);
  Elements& from = src->second.list;
  std::string v = c.expected[0] == 'L' ? from.pop_front() : from.pop_back();
  Elements& to = data[c.value].list;  // (the source itself, if the same key)
  if (c.expected[1] == 'L') {
    to.push_front(v);
  } else {
    to.push_back(v);
  }
  if (auto it = data.find(c.key); it->second.list.empty()) data.erase(it);
  return done(std::move(v));
}

Result execute_list_mpop(Keyspace& data, const Command& c) {
  // (Redis's mpopGenericCommand: the first of its keys that exists decides,
  // WRONGTYPE if it holds another type; as ZMPOP, store_zsets.cc.)
  std::vector<std::string> keys, how;
  int64_t count = 0;
  if (!decode_names(c.value, &keys) || !decode_names(c.expected, &how) || how.size() != 2 ||
      (how[0] != "left" && how[0] != "right") || !parse_integer(how[1], &count) || count < 1)
    return done("ERR malformed lmpop", false);
  for (const std::string& k : keys) {
    auto it = data.find(k);
    if (it != data.end() && expired(it->second, c.now_ms)) {
      data.erase(it);
      continue;
    }
    if (it == data.end()) continue;
    if (!it->second.is_list()) return done(kWrongType, false);
    Elements& list = it->second.list;
    std::vector<std::string> out{k};
    for (int64_t n = count; n > 0 && !list.empty(); --n)
      out.push_back(how[0] == "left" ? list.pop_front() : list.pop_back());
    if (list.empty()) data.erase(it);
    return done(encode_names(out));
  }
  return done("", false);
}

Result execute_list(Keyspace& data, const Command& c) {
  auto it = data.find(c.key);
  const bool present = it != data.end();
  Elements* list = present ? &it->second.list : nullptr;
  const int64_t len = present ? static_cast<int64_t>(list->size()) : 0;
  switch (c.op) {
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX: {
      std::vector<std::string> values;
      if (!decode_names(c.value, &values) || values.empty())
        return done("ERR malformed push", false);
      if (!present && (c.op == Op::kLPushX || c.op == Op::kRPushX)) return done("0", false);
      // (A new key is made only once the command is sure to write it.)
      if (!present) list = &data[c.key].list;
      const bool head = c.op == Op::kLPush || c.op == Op::kLPushX;
      for (std::string& v : values) {
        if (head) {
          list->push_front(std::move(v));
        } else {
          list->push_back(std::move(v));
        }
      }
      return done(std::to_string(list->size()));
    }
    case Op::kLPop:
    case Op::kRPop: {
      if (!present) return done("", false);
      const bool head = c.op == Op::kLPop;
      auto pop = [&] { return head ? list->pop_front() : list->pop_back(); };
      std::string out;
      if (c.expected.empty()) {
        out = pop();
      } else {
        std::vector<std::string> values;
        for (int64_t n = std::max<int64_t>(number(c.expected), 0); n > 0 && !list->empty(); --n)
          values.push_back(pop());
        out = encode_names(values);
      }
      if (list->empty()) data.erase(it);
      return done(std::move(out));
    }
    case Op::kLLen:
      return done(std::to_string(len));
    case Op::kLRange: {
      std::vector<std::string> values;
      int64_t first = 0, last = -1;
      if (present && range_of(number(c.expected), number(c.value), len, &first, &last))
        values.assign(list->begin() + first, list->begin() + last + 1);
      return done(encode_names(values));
    }
    case Op::kLIndex:
    case Op::kLSet: {
      if (!present) return c.op == Op::kLIndex ? done("", false) : done("ERR no such key", false);
      int64_t i = number(c.expected);
      if (i < 0) i += len;
      if (i < 0 || i >= len)
        return c.op == Op::kLIndex ? done("", false) : done("ERR index out of range", false);
      if (c.op == Op::kLIndex) return done((*list)[i]);
      list->set(i, c.value);
      return done("");
    }
    case Op::kLRem: {
      if (!present) return done("0", false);
      const int64_t want = number(c.expected);
      // (Counted in uint64: |INT64_MIN| does not fit an int64.)
      const uint64_t most = want == 0  ? UINT64_MAX
                            : want > 0 ? uint64_t(want)
                                       : uint64_t(0) - uint64_t(want);
      uint64_t removed = 0;
      Elements::Deque all = list->release(), kept;
      if (want >= 0) {
        for (std::string& v : all) {
          if (removed < most && v == c.value) {
            ++removed;
          } else {
            kept.push_back(std::move(v));
          }
        }
      } else {
        for (auto v = all.rbegin(); v != all.rend(); ++v) {
          if (removed < most && *v == c.value) {
            ++removed;
          } else {
            kept.push_front(std::move(*v));
          }
        }
      }
      *list = Elements(std::move(kept));
      if (list->empty()) data.erase(it);
      return done(std::to_string(removed), removed > 0);
    }
    case Op::kLTrim: {
      if (!present) return done("", false);
      int64_t first = 0, last = -1;
      if (!range_of(number(c.expected), number(c.value), len, &first, &last)) {
        data.erase(it);
        return done("");
      }
      list->erase(list->begin() + last + 1, list->end());
      list->erase(list->begin(), list->begin() + first);
      return done("", first > 0 || last < len - 1);
    }
    case Op::kLInsert: {
      std::vector<std::string> pe;
      if (!decode_names(c.value, &pe) || pe.size() != 2)
        return done("ERR malformed linsert", false);
      if (!present) return done("0", false);
      auto at = std::find(list->begin(), list->end(), pe[0]);
      if (at == list->end()) return done("-1", false);
      list->insert(c.expected == "after" ? at + 1 : at, std::move(pe[1]));
      return done(std::to_string(list->size()));
    }
    case Op::kLPos:
      return position(list, c);
    default:
      return done("", false);
  }
}

}  // namespace detail

}  // namespace kv
