// The sorted-set commands on a plain map (store.h: Op::kZAdd ..
// Op::kZRandMember), for execute() and so for the Store, and zset.h's
// numbers, ranges and encodings. A sorted set is an Item whose zset is set;
// its last member goes with its key, as in Redis.
//
// The answers are Redis 7.0's, which for a small sorted set (at most 128
// members, zset-max-listpack-entries) come from a walk of its listpack:
// a range begins at the first member in it, counted from the lowest score
// (REV: the highest) and runs while its members stay in it; LIMIT's offset
// skips members without looking at them. For score ranges and for the
// lexicographic ones of a set whose members share one score (the only use
// Redis documents) that is the members in range, found in O(log n). A
// lexicographic range of a set with several scores is answered as that walk
// answers it (O(n)); Redis's skip list, for a larger set, may answer
// differently.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>

#include "store.h"
#include "store_helpers.h"

namespace kv {

void ZSet::put(const std::string& member, double score) {
  if (score == 0) score = 0;  // (-0 is kept as 0, as Redis's listpack keeps it)
  auto [it, added] = scores.try_emplace(member, score);
  if (added) {
    member_bytes_ += member.size();
  } else {
    order.erase(ZEntry{it->second, member});
    score_bytes_ -= format_score(it->second).size();
    it->second = score;
  }
  score_bytes_ += format_score(score).size();
  order.insert(ZEntry{score, member});
}

bool ZSet::erase(const std::string& member) {
  auto it = scores.find(member);
  if (it == scores.end()) return false;
  order.erase(ZEntry{it->second, member});
  member_bytes_ -= member.size();
  score_bytes_ -= format_score(it->second).size();
  scores.erase(it);
  return true;
}

bool operator==(const ZSet& a, const ZSet& b) {
  return std::equal(a.order.begin(), a.order.end(), b.order.begin(), b.order.end(),
                    [](const ZEntry& x, const ZEntry& y) {
                      return std::bit_cast<uint64_t>(x.first) == std::bit_cast<uint64_t>(y.first) &&
                             x.second == y.second;
                    });
}

bool parse_score(std::string_view text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (static_cast<size_t>(end - s.c_str()) != s.size() || std::isnan(v)) return false;
  if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL || v == 0)) return false;
  *out = v;
  return true;
}

bool parse_score_bound(std::string_view text, double* out, bool* exclusive) {
  // (Up to a NUL, as Redis's C string: what follows one is not looked at.)
  const std::string s(text);
  const char* p = s.c_str();
  *exclusive = *p == '(';
  if (*exclusive) ++p;
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (*end != '\0' || std::isnan(v)) return false;
  *out = v;
  return true;
}

std::string format_score(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%.17g", v);
  return std::string(buf, static_cast<size_t>(n));
}

bool parse_lex_bound(std::string_view text, LexBound* out) {
  if (text.empty()) return false;
  LexBound b;
  switch (text[0]) {
    case '+':
    case '-':
      if (text.size() != 1) return false;
      b.infinite = text[0] == '+' ? 1 : -1;
      b.exclusive = true;
      break;
    case '(':
    case '[':
      b.exclusive = text[0] == '(';
      b.text.assign(text.substr(1));
      break;
    default:
      return false;
  }
  *out = std::move(b);
  return true;
}

std::string encode_zrange(const ZRange& q) {
  return encode_names({std::to_string(q.by), q.rev ? "1" : "", q.min, q.max,
                       std::to_string(q.offset), std::to_string(q.limit),
                       q.with_scores ? "1" : ""});
}

bool decode_zrange(std::string_view bytes, ZRange* out) {
  std::vector<std::string> f;
  int64_t by = 0;
  ZRange q;
  if (!decode_names(bytes, &f) || f.size() != 7 || !parse_integer(f[0], &by) || by < 0 ||
      by > ZRange::kLex || !parse_integer(f[4], &q.offset) || !parse_integer(f[5], &q.limit))
    return false;
  q.by = static_cast<ZRange::By>(by);
  q.rev = !f[1].empty();
  q.min = std::move(f[2]);
  q.max = std::move(f[3]);
  q.with_scores = !f[6].empty();
  *out = std::move(q);
  return true;
}

std::string encode_zcombine(const ZCombine& z) {
  std::vector<std::string> f{std::to_string(z.how), z.error, z.aggregate, z.with_scores ? "1" : "",
                             std::to_string(z.limit)};
  f.insert(f.end(), z.weights.begin(), z.weights.end());
  return encode_names(f);
}

bool decode_zcombine(std::string_view bytes, ZCombine* out) {
  std::vector<std::string> f;
  int64_t how = 0;
  ZCombine z;
  if (!decode_names(bytes, &f) || f.size() < 5 || !parse_integer(f[0], &how) || how < 0 ||
      how > ZCombine::kInterCard || !parse_integer(f[4], &z.limit) || z.limit < 0 ||
      (f[2] != "sum" && f[2] != "min" && f[2] != "max"))
    return false;
  z.how = static_cast<ZCombine::How>(how);
  z.error = std::move(f[1]);
  z.aggregate = std::move(f[2]);
  z.with_scores = !f[3].empty();
  z.weights.assign(std::make_move_iterator(f.begin() + 5), std::make_move_iterator(f.end()));
  *out = std::move(z);
  return true;
}

namespace {

using detail::done;
Result error(std::string text) { return detail::result_of(std::move(text), false); }
const std::string kMalformed = "ERR malformed sorted set command";
const std::string kNaN = "ERR resulting score is not a number (NaN)";

using Order = ZIndex;
using ZIt = Order::const_iterator;

// A score or a lexicographic range (ZRange::kScore, kLex), parsed: which
// members are at or above its lower bound and at or below its upper one,
// and where it begins from either end, as Redis's listpack walk finds it.
class Span {
 public:
  bool parse(const ZRange& q) {
    by_ = q.by;
    if (by_ == ZRange::kScore)
      return parse_score_bound(q.min, &min_, &minex_) && parse_score_bound(q.max, &max_, &maxex_);
    return parse_lex_bound(q.min, &lmin_) && parse_lex_bound(q.max, &lmax_);
  }
  bool gte_min(const ZEntry& e) const {
    if (by_ == ZRange::kScore) return minex_ ? e.first > min_ : e.first >= min_;
    if (lmin_.infinite != 0) return lmin_.infinite < 0;
    return lmin_.exclusive ? e.second > lmin_.text : e.second >= lmin_.text;
  }
  bool lte_max(const ZEntry& e) const {
    if (by_ == ZRange::kScore) return maxex_ ? e.first < max_ : e.first <= max_;
    if (lmax_.infinite != 0) return lmax_.infinite > 0;
    return lmax_.exclusive ? e.second < lmax_.text : e.second <= lmax_.text;
  }
  // The first member in range from the lowest score (end(): none).
  ZIt first(const Order& o) const {
    if (!may_hold(o)) return o.end();
    ZIt it;
    if (by_ == ZRange::kScore) {
      it = minex_ ? o.upper_bound(min_) : o.lower_bound(min_);
    } else if (one_score(o)) {
      it = lmin_.infinite != 0 ? o.begin() : o.lower_bound(ZEntry{o.begin()->first, lmin_.text});
      while (it != o.end() && !gte_min(*it)) ++it;  // (past an exclusive bound's member)
    } else {
      it = std::find_if(o.begin(), o.end(), [this](const ZEntry& e) { return gte_min(e); });
    }
    return it != o.end() && lte_max(*it) ? it : o.end();
  }
  // The first member in range from the highest score (end(): none).
  ZIt last(const Order& o) const {
    if (!may_hold(o)) return o.end();
    ZIt it;  // one past it
    if (by_ == ZRange::kScore) {
      it = maxex_ ? o.lower_bound(max_) : o.upper_bound(max_);
    } else if (one_score(o)) {
      it = lmax_.infinite != 0 ? o.end() : o.lower_bound(ZEntry{o.begin()->first, lmax_.text});
      while (it != o.end() && lte_max(*it)) ++it;  // (an inclusive bound's member)
    } else {
      auto r = std::find_if(o.rbegin(), o.rend(), [this](const ZEntry& e) { return lte_max(e); });
      it = r.base();
    }
    if (it == o.begin()) return o.end();
    --it;
    return gte_min(*it) ? it : o.end();
  }

 private:
  // Redis's zzlIsInRange and zzlIsInLexRange: the range is not empty, the
  // highest member is at or above its lower bound and the lowest at or
  // below its upper one.
  bool may_hold(const Order& o) const {
    if (o.empty()) return false;
    if (by_ == ZRange::kScore) {
      if (min_ > max_ || (min_ == max_ && (minex_ || maxex_))) return false;
    } else {
      const int cmp = lex_compare();
      if (cmp > 0 || (cmp == 0 && (lmin_.exclusive || lmax_.exclusive))) return false;
    }
    return gte_min(*o.rbegin()) && lte_max(*o.begin());
  }
  // Redis's sdscmplex of the two bounds ("-" below all, "+" above all).
  int lex_compare() const {
    if (lmin_.infinite != 0 && lmin_.infinite == lmax_.infinite) return 0;
    if (lmin_.infinite < 0 || lmax_.infinite > 0) return -1;
    if (lmin_.infinite > 0 || lmax_.infinite < 0) return 1;
    const int c = lmin_.text.compare(lmax_.text);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  static bool one_score(const Order& o) { return o.begin()->first == (*o.rbegin()).first; }

  ZRange::By by_ = ZRange::kScore;
  double min_ = 0, max_ = 0;
  bool minex_ = false, maxex_ = false;
  LexBound lmin_, lmax_;
};

// The member at `rank` (0: the lowest score).
ZIt at_rank(const Order& o, int64_t rank) { return o.at(static_cast<size_t>(rank)); }

// Redis's sanitised rank range: [*start, *end] within [0, n), false if
// empty.
bool rank_range(int64_t n, int64_t start, int64_t end, int64_t* s, int64_t* e) {
  if (start < 0) start = n + start;
  if (end < 0) end = n + end;
  if (start < 0) start = 0;
  if (start > end || start >= n) return false;
  *s = start;
  *e = std::min(end, n - 1);
  return true;
}

// The members `q` names in the order it answers them. False: `q` is
// malformed (the gateway parsed it already).
bool select(const Order& o, const ZRange& q, std::vector<ZIt>* out) {
  const auto n = static_cast<int64_t>(o.size());
  if (q.by == ZRange::kRank) {
    int64_t start = 0, end = 0, s = 0, e = 0;
    if (!parse_integer(q.min, &start) || !parse_integer(q.max, &end)) return false;
    if (!rank_range(n, start, end, &s, &e)) return true;
    ZIt it = at_rank(o, q.rev ? n - 1 - s : s);
    for (int64_t i = s; i <= e; ++i) {
      out->push_back(it);
      if (i < e) it = q.rev ? std::prev(it) : std::next(it);
    }
    return true;
  }
  Span span;
  if (!span.parse(q)) return false;
  if (q.offset < 0 || (q.offset > 0 && q.offset >= n)) return true;
  ZIt it = q.rev ? span.last(o) : span.first(o);
  if (it == o.end()) return true;
  // LIMIT's offset skips members without looking at them (Redis's walk).
  for (int64_t skip = q.offset; skip > 0 && it != o.end(); --skip)
    it = q.rev ? (it == o.begin() ? o.end() : std::prev(it)) : std::next(it);
  // (A negative limit: no limit.)
  uint64_t left = q.limit < 0 ? UINT64_MAX : static_cast<uint64_t>(q.limit);
  for (; it != o.end() && left != 0; --left) {
    if (q.rev ? !span.gte_min(*it) : !span.lte_max(*it)) break;
    out->push_back(it);
    it = q.rev ? (it == o.begin() ? o.end() : std::prev(it)) : std::next(it);
  }
  return true;
}

std::string members_of(const std::vector<ZIt>& its, bool with_scores) {
  std::vector<std::string> out;
  out.reserve(its.size() * (with_scores ? 2 : 1));
  for (ZIt it : its) {
    out.push_back(it->second);
    if (with_scores) out.push_back(format_score(it->first));
  }
  return encode_names(out);
}

// ZADD and ZINCRBY (Redis's zaddGenericCommand after its parsing).
Result zadd(Keyspace& data, const Command& c) {
  std::vector<std::string> args;
  if (!decode_names(c.value, &args) || args.empty() || args.size() % 2 != 0)
    return error(kMalformed);
  auto has = [&c](char f) { return c.expected.find(f) != std::string::npos; };
  const bool nx = has(kZAddNx), xx = has(kZAddXx), gt = has(kZAddGt), lt = has(kZAddLt),
             ch = has(kZAddCh), incr = has(kZAddIncr);
  std::vector<double> scores(args.size() / 2);
  for (size_t j = 0; j < scores.size(); ++j)
    if (!parse_score(args[2 * j], &scores[j])) return error(kMalformed);
  auto it = data.find(c.key);
  if (it == data.end()) {
    if (xx) return done(incr ? "" : "0", false);  // (no key, XX: nothing to do)
    it = data.try_emplace(c.key).first;
  }
  ZSet& z = it->second.zset;
  uint64_t added = 0, updated = 0, processed = 0;
  double score = 0;
  for (size_t j = 0; j < scores.size(); ++j) {
    const std::string& member = args[2 * j + 1];
    double s = scores[j];
    auto f = z.scores.find(member);
    if (f != z.scores.end()) {
      if (nx) continue;
      const double current = f->second;
      if (incr) {
        s += current;
        if (std::isnan(s)) {
          if (z.empty()) data.erase(it);
          return error(kNaN);
        }
      }
      if ((lt && s >= current) || (gt && s <= current)) continue;
      ++processed;
      score = s;
      if (s != current) {
        z.put(member, s);
        ++updated;
      }
    } else if (!xx) {
      z.put(member, s);
      ++added;
      ++processed;
      score = s;
    }
  }
  if (z.empty()) data.erase(it);
  const bool modified = added + updated > 0;
  if (incr) return done(processed > 0 ? format_score(score) : "", modified);
  return done(std::to_string(ch ? added + updated : added), modified);
}

// The sorted set at `key` after lazy expiry, or null if absent; *wrong:
// it holds another type.
const ZSet* zset_at(Keyspace& data, const std::string& key, int64_t now_ms, bool* wrong) {
  auto it = data.find(key);
  if (it != data.end() && detail::expired(it->second, now_ms)) {
    data.erase(it);
    return nullptr;
  }
  if (it == data.end()) return nullptr;
  if (!it->second.is_zset()) *wrong = true;
  return &it->second.zset;
}

// ZRANGESTORE: the range of the source replaces whatever the destination
// held (none: the destination is removed), its type not looked at.
Result range_store(Keyspace& data, const Command& c) {
  std::vector<std::string> sources;
  ZRange q;
  if (!decode_names(c.value, &sources) || sources.size() != 1 || !decode_zrange(c.expected, &q))
    return error(kMalformed);
  bool wrong = false;
  zset_at(data, c.key, c.now_ms, &wrong);  // (lazy expiry of the destination)
  wrong = false;
  const ZSet* src = zset_at(data, sources[0], c.now_ms, &wrong);
  if (wrong) return error(kWrongType);
  ZSet out;
  if (src != nullptr) {
    std::vector<ZIt> its;
    if (!select(src->order, q, &its)) return error(kMalformed);
    for (ZIt it : its) out.put(it->second, it->first);
  }
  const std::string n = std::to_string(out.size());
  data.erase(c.key);
  if (!out.empty()) data[c.key].zset = std::move(out);
  return done(n);
}

// One source of a zcombine: a sorted set, a set (members of score 1) or
// nothing (an absent key), and its weight.
struct Source {
  const ZSet* zset = nullptr;
  const std::set<std::string>* set = nullptr;
  double weight = 1;
  size_t size() const { return zset ? zset->size() : set ? set->size() : 0; }
  template <typename F>
  void each(F f) const {
    if (zset)
      for (const ZEntry& e : zset->order) f(e.second, e.first);
    if (set)
      for (const std::string& m : *set) f(m, 1.0);
  }
  bool find(const std::string& m, double* score) const {
    if (zset) {
      auto it = zset->scores.find(m);
      if (it == zset->scores.end()) return false;
      *score = it->second;
      return true;
    }
    *score = 1;
    return set != nullptr && set->count(m) != 0;
  }
};

using detail::kChoiceBytes;

// ZRANDMEMBER's members (and scores), chosen from `seed` alone by
// splitmix64, as SRANDMEMBER's (store_sets.cc): a count >= 0, at most that
// many distinct ones in score order (all of them from the highest score
// once it reaches the set's size, as Redis 7.0 answers); < 0, that many
// with repeats, in the order chosen. False past kChoiceBytes.
bool random_members(const ZSet& z, int64_t seed, int64_t count, bool with_scores,
                    std::vector<std::string>* out) {
  uint64_t state = static_cast<uint64_t>(seed);
  auto below = [&state](uint64_t n) {
    uint64_t x = (state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (x ^ (x >> 31)) % n;
  };
  std::vector<const ZEntry*> all;
  all.reserve(z.size());
  for (const ZEntry& e : z.order) all.push_back(&e);
  const uint64_t n = all.size();
  auto emit = [&](const ZEntry* e) {
    out->push_back(e->second);
    if (with_scores) out->push_back(format_score(e->first));
  };
  if (count < 0) {
    size_t bytes = 0;
    for (uint64_t i = 0, want = uint64_t(0) - uint64_t(count); i < want; ++i) {
      emit(all[below(n)]);
      bytes += 8 + out->back().size() + (with_scores ? (*out)[out->size() - 2].size() : 0);
      if (bytes > kChoiceBytes) return false;
    }
    return true;
  }
  if (uint64_t(count) >= n) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) emit(*it);
    return true;
  }
  // A partial Fisher-Yates shuffle: the first `count` of `all` are chosen.
  const auto k = static_cast<uint64_t>(count);
  for (uint64_t i = 0; i < k; ++i) std::swap(all[i], all[i + below(n - i)]);
  std::sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k),
            [](const ZEntry* a, const ZEntry* b) { return ZOrder{}(*a, *b); });
  for (uint64_t i = 0; i < k; ++i) emit(all[i]);
  return true;
}

// Pops `count` members from `it`'s sorted set, the lowest scores first (or
// the highest), removing the key once empty: the members and scores.
std::vector<std::string> pop(Keyspace& data, Keyspace::iterator it, bool max, uint64_t count) {
  ZSet& z = it->second.zset;
  std::vector<std::string> out;
  const uint64_t k = std::min<uint64_t>(count, z.size());
  for (uint64_t i = 0; i < k; ++i) {
    const ZEntry e = max ? *z.order.rbegin() : *z.order.begin();
    out.push_back(e.second);
    out.push_back(format_score(e.first));
    z.erase(e.second);
  }
  if (z.empty()) data.erase(it);
  return out;
}

// ZMPOP (Redis's genericZpopCommand over several keys): the first of its
// keys that exists decides, WRONGTYPE if it holds another type.
Result mpop(Keyspace& data, const Command& c) {
  std::vector<std::string> keys, how;
  int64_t count = 0;
  if (!decode_names(c.value, &keys) || !decode_names(c.expected, &how) || how.size() != 2 ||
      (how[0] != "min" && how[0] != "max") || !parse_integer(how[1], &count) || count < 1)
    return error(kMalformed);
  for (const std::string& k : keys) {
    auto it = data.find(k);
    if (it != data.end() && detail::expired(it->second, c.now_ms)) {
      data.erase(it);
      continue;
    }
    if (it == data.end()) continue;
    if (!it->second.is_zset()) return error(kWrongType);
    std::vector<std::string> out{k};
    for (std::string& s : pop(data, it, how[0] == "max", static_cast<uint64_t>(count)))
      out.push_back(std::move(s));
    return done(encode_names(out));
  }
  return done("", false);
}

// Redis's zunionInterAggregate: a sum that makes NaN (inf - inf) is 0.
void aggregate(const std::string& how, double* target, double v) {
  if (how == "sum") {
    *target += v;
    if (std::isnan(*target)) *target = 0;
  } else if (how == "min") {
    *target = v < *target ? v : *target;
  } else {
    *target = v > *target ? v : *target;
  }
}

// ZUNION, ZINTER, ZDIFF, ZINTERCARD and the STORE forms (Redis's
// zunionInterDiffGenericCommand after its parsing): the union and the
// intersection take the sources from the smallest (a stable order, as
// glibc's qsort is), which decides the order of a sum's additions.
Result combine(Keyspace& data, const Command& c) {
  std::vector<std::string> keys;
  ZCombine z;
  if (!decode_names(c.value, &keys) || keys.empty() || !decode_zcombine(c.expected, &z) ||
      (!z.weights.empty() && z.weights.size() != keys.size()))
    return error(kMalformed);
  const bool store = c.op == Op::kZCombineStore;
  bool wrong = false;
  if (store) zset_at(data, c.key, c.now_ms, &wrong);  // (lazy expiry of the destination)
  std::vector<Source> src(keys.size());
  wrong = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = data.find(keys[i]);
    if (it != data.end() && detail::expired(it->second, c.now_ms)) {
      data.erase(it);
      it = data.end();
    }
    if (it == data.end()) continue;
    if (it->second.is_zset()) {
      src[i].zset = &it->second.zset;
    } else if (it->second.is_set()) {
      src[i].set = &it->second.members.items();
    } else {
      wrong = true;
    }
  }
  if (wrong) return error(kWrongType);
  if (!z.error.empty()) return error(z.error);
  for (size_t i = 0; i < z.weights.size(); ++i)
    if (!parse_score(z.weights[i], &src[i].weight)) return error(kMalformed);
  if (z.how != ZCombine::kDiff)
    std::stable_sort(src.begin(), src.end(),
                     [](const Source& a, const Source& b) { return a.size() < b.size(); });
  std::vector<ZEntry> out;
  uint64_t card = 0;
  if (z.how == ZCombine::kUnion) {
    std::unordered_map<std::string, double> acc;
    for (const Source& s : src) {
      s.each([&](const std::string& m, double score) {
        double v = s.weight * score;
        if (std::isnan(v)) v = 0;
        auto [it, added] = acc.try_emplace(m, v);
        if (!added) aggregate(z.aggregate, &it->second, v);
      });
    }
    for (auto& [m, score] : acc) out.emplace_back(score, m);
  } else if (z.how == ZCombine::kDiff) {
    src.front().each([&](const std::string& m, double score) {
      double ignored = 0;
      for (size_t j = 1; j < src.size(); ++j)
        if (src[j].find(m, &ignored)) return;
      out.emplace_back(score, m);
    });
  } else if (src.front().size() > 0) {
    bool full = false;
    src.front().each([&](const std::string& m, double first) {
      if (full) return;
      double score = src.front().weight * first;
      if (std::isnan(score)) score = 0;
      for (size_t j = 1; j < src.size(); ++j) {
        double v = 0;
        if (!src[j].find(m, &v)) return;
        aggregate(z.aggregate, &score, v * src[j].weight);
      }
      ++card;
      if (z.how == ZCombine::kInterCard) {
        full = z.limit != 0 && card >= static_cast<uint64_t>(z.limit);
      } else {
        out.emplace_back(score, m);
      }
    });
  }
  if (z.how == ZCombine::kInterCard) return done(std::to_string(card));
  std::sort(out.begin(), out.end(), ZOrder{});
  if (!store) {
    std::vector<std::string> names;
    for (const ZEntry& e : out) {
      names.push_back(e.second);
      if (z.with_scores) names.push_back(format_score(e.first));
    }
    return done(encode_names(names));
  }
  const std::string n = std::to_string(out.size());
  data.erase(c.key);
  if (!out.empty()) {
    ZSet& dst = data[c.key].zset;
    for (const ZEntry& e : out) dst.put(e.second, e.first);
  }
  return done(n);
}

}  // namespace

namespace detail {

bool is_zset_op(Op op) { return op >= Op::kZAdd && op <= Op::kZRandMember; }
bool is_zset_keys_op(Op op) {
  return op == Op::kZRangeStore || op == Op::kZCombine || op == Op::kZCombineStore ||
         op == Op::kZMPop;
}

Result execute_zset(Keyspace& data, const Command& c) {
  if (c.op == Op::kZRangeStore) return range_store(data, c);
  if (c.op == Op::kZCombine || c.op == Op::kZCombineStore) return combine(data, c);
  if (c.op == Op::kZMPop) return mpop(data, c);
  if (c.op == Op::kZAdd) return zadd(data, c);
  auto it = data.find(c.key);
  const bool present = it != data.end();
  ZSet* z = present ? &it->second.zset : nullptr;
  std::vector<std::string> names;
  switch (c.op) {
    case Op::kZRem: {
      if (!decode_names(c.value, &names)) return error(kMalformed);
      if (!present) return done("0", false);
      size_t removed = 0;
      for (const std::string& m : names) removed += z->erase(m);
      if (z->empty()) data.erase(it);
      return done(std::to_string(removed), removed > 0);
    }
    case Op::kZScore: {
      if (!decode_names(c.value, &names)) return error(kMalformed);
      bool any = false;
      for (std::string& m : names) {
        const auto f = present ? z->scores.find(m) : decltype(z->scores.end()){};
        const bool found = present && f != z->scores.end();
        any |= found;
        m = found ? format_score(f->second) : "";
      }
      return done(encode_names(names), any);
    }
    case Op::kZCard:
      return done(std::to_string(present ? z->size() : 0));
    case Op::kZRank: {
      auto f = present ? z->scores.find(c.expected) : decltype(z->scores.end()){};
      if (!present || f == z->scores.end()) return done("", false);
      const size_t rank = z->order.rank(z->order.find(ZEntry{f->second, f->first}));
      return done(std::to_string(c.value == "rev" ? z->size() - 1 - rank : rank));
    }
    case Op::kZCount:
    case Op::kZRange:
    case Op::kZRemRange: {
      ZRange q;
      if (!decode_zrange(c.expected, &q)) return error(kMalformed);
      if (c.op == Op::kZCount) q.limit = -1, q.offset = 0, q.rev = false;
      if (c.op == Op::kZCount && q.by == ZRange::kScore) {
        // The members of a score range are contiguous in the order: its
        // count is the difference of its ends' ranks.
        Span span;
        if (!span.parse(q)) return error(kMalformed);
        if (!present) return done("0");
        const ZIt lo = span.first(z->order);
        if (lo == z->order.end()) return done("0");
        const ZIt hi = span.last(z->order);
        return done(std::to_string(z->order.rank(hi) - z->order.rank(lo) + 1));
      }
      std::vector<ZIt> its;
      static const Order kNone;
      if (!select(present ? z->order : kNone, q, &its)) return error(kMalformed);
      if (c.op == Op::kZCount) return done(std::to_string(its.size()));
      if (c.op == Op::kZRange) return done(members_of(its, q.with_scores));
      std::vector<std::string> gone;
      for (ZIt i : its) gone.push_back(i->second);
      for (const std::string& m : gone) z->erase(m);
      if (present && z->empty()) data.erase(it);
      return done(std::to_string(gone.size()), !gone.empty());
    }
    case Op::kZRandMember: {
      std::vector<std::string> how;
      int64_t count = 1;
      if (!decode_names(c.expected, &how) || how.size() != 2 ||
          (!how[0].empty() && !parse_integer(how[0], &count)))
        return error(kMalformed);
      if (!present) return how[0].empty() ? done("", false) : done(encode_names({}));
      std::vector<std::string> out;
      if (!random_members(*z, number_or_zero(c.value), count, !how[1].empty(), &out))
        return error("ERR the reply would take more than " + std::to_string(kChoiceBytes) +
                     " bytes");
      return how[0].empty() ? done(std::move(out.front())) : done(encode_names(out));
    }
    case Op::kZScan: {
      // (As HSCAN's page of a hash: each member and its score.)
      std::map<std::string, std::string> members;
      if (present)
        for (const ZEntry& e : z->order) members.emplace(e.second, format_score(e.first));
      return scan_one(c, present ? &members : nullptr, nullptr);
    }
    case Op::kZPop: {
      int64_t count = 1;
      if (!c.expected.empty() && (!parse_integer(c.expected, &count) || count < 0))
        return error(kMalformed);
      if (!present) return done(encode_names({}), false);
      const std::vector<std::string> out =
          pop(data, it, c.value == "max", static_cast<uint64_t>(count));
      return done(encode_names(out), !out.empty());
    }
    default:
      return error(kMalformed);
  }
}

}  // namespace detail

}  // namespace kv
