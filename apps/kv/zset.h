// apps/kv/zset.h: sluice-kv's sorted sets (Redis's zsets): the value a key
// holds (ZSet, an Item's `zset`), the numbers and ranges their commands
// take, parsed and printed as Redis 7.0 does, and how the commands travel
// in a log entry (store.h, Op::kZAdd .. Op::kZRandMember; store_zsets.cc
// runs them, resp_zsets.cc makes them from RESP requests).
//
// A sorted set is two indexes of its members: by member (their scores) and
// by (score, member bytes), Redis's order, in which every range answers.
// Adding, removing or rescoring a member, finding where a score or a
// member range begins, a member's rank (ZRANK) and the member at a rank
// take O(log n) (the order is a tree that keeps its subtrees' sizes, as
// Redis's skiplist keeps its spans); a range then costs its length, and a
// count (ZCOUNT, ZLEXCOUNT) O(log n).
//
// Thread safety: none (values, and pure functions).
#pragma once

#include <cmath>
#include <cstdint>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kv {

using ZEntry = std::pair<double, std::string>;

// Redis's order of a sorted set's members: by score, then by the members'
// bytes (unsigned, as memcmp). Transparent: a bare double finds where that
// score begins (lower_bound) or ends (upper_bound).
struct ZOrder {
  using is_transparent = void;
  bool operator()(const ZEntry& a, const ZEntry& b) const {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  }
  bool operator()(const ZEntry& a, double s) const { return a.first < s; }
  bool operator()(double s, const ZEntry& a) const { return s < a.first; }
};

// A sorted set's members in Redis's order (ZOrder), each one's rank at
// hand: libstdc++'s policy-based red-black tree with subtree sizes
// (tree_order_statistics_node_update), behind the part of std::set's
// interface the store uses, and rank() and at(). Its reverse iterators
// are dereferenced with `*` (their `->` does not compile with the tree's
// iterators).
class ZIndex {
  using Tree = __gnu_pbds::tree<ZEntry, __gnu_pbds::null_type, ZOrder, __gnu_pbds::rb_tree_tag,
                                __gnu_pbds::tree_order_statistics_node_update>;

 public:
  using const_iterator = Tree::const_iterator;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  using value_type = ZEntry;

  const_iterator begin() const { return tree_.begin(); }
  const_iterator end() const { return tree_.end(); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  size_t size() const { return tree_.size(); }
  bool empty() const { return tree_.empty(); }
  void clear() { tree_.clear(); }
  bool insert(const ZEntry& e) { return tree_.insert(e).second; }
  bool erase(const ZEntry& e) { return tree_.erase(e); }
  const_iterator find(const ZEntry& e) const { return tree_.find(e); }
  const_iterator lower_bound(const ZEntry& e) const { return tree_.lower_bound(e); }
  // The first member of score `s` or more (every member is above "").
  const_iterator lower_bound(double s) const { return tree_.lower_bound(ZEntry{s, std::string()}); }
  // The first member of a score above `s`.
  const_iterator upper_bound(double s) const {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    return s == kInf ? end() : lower_bound(std::nextafter(s, kInf));
  }
  // How many members come before `it` (size() for end()).
  size_t rank(const_iterator it) const { return it == end() ? size() : tree_.order_of_key(*it); }
  // The member at `rank` (end() past the last).
  const_iterator at(size_t rank) const { return tree_.find_by_order(rank); }

 private:
  Tree tree_;
};

// A sorted set. Never NaN among its scores, nor -0: a member given -0 gets
// 0, as Redis 7.0 keeps a small sorted set (its listpack prints the score,
// and -0 as 0), though ZINCRBY and ZADD INCR answer the -0 they computed.
// Read `scores` and `order` freely; change them only through put, erase
// and clear, which keep the sizes the store counts (member_bytes,
// score_bytes) in O(1).
struct ZSet {
  std::unordered_map<std::string, double> scores;
  ZIndex order;

  bool empty() const { return order.empty(); }
  size_t size() const { return order.size(); }
  void clear() {
    scores.clear();
    order.clear();
    member_bytes_ = score_bytes_ = 0;
  }
  // The members' bytes, and their scores' as format_score prints them.
  uint64_t member_bytes() const { return member_bytes_; }
  uint64_t score_bytes() const { return score_bytes_; }
  // Adds `member` with `score` (-0: 0), or moves it to `score`.
  void put(const std::string& member, double score);
  // Removes `member`; false if it was not one.
  bool erase(const std::string& member);
  // Equal members with the same scores, bit for bit.
  friend bool operator==(const ZSet& a, const ZSet& b);

 private:
  uint64_t member_bytes_ = 0, score_bytes_ = 0;
};

// A score as ZADD and ZINCRBY take one (Redis's getDoubleFromObject):
// strtod's syntax over the whole text (so "inf", "-inf", "+1e3", hex),
// no leading space, no NaN, no overflow to infinity, no underflow to 0.
bool parse_score(std::string_view text, double* out);
// A bound of a score range (Redis's zslParseRange): "(" first makes it
// exclusive; the rest as strtod reads it up to a NUL, NaN refused (an
// empty text is 0, a too large one infinity).
bool parse_score_bound(std::string_view text, double* out, bool* exclusive);
// A score as Redis 7.0 prints it in a reply: "inf", "-inf", else printf's
// "%.17g" (1.1 is "1.1000000000000001", -0 "-0").
std::string format_score(double v);

// A bound of a lexicographic range (Redis's zslParseLexRangeItem): "-" below
// every member, "+" above every one, "[x" x inclusive, "(x" x exclusive.
struct LexBound {
  int infinite = 0;  // -1: "-", +1: "+", 0: `text`
  bool exclusive = false;
  std::string text;
};
bool parse_lex_bound(std::string_view text, LexBound* out);

// The operations (store.h, Op; store_zsets.cc runs them): zadd (ZADD,
// ZINCRBY: `value` the scores and members, `expected` the options), zrem
// and zscore (ZSCORE,
// ZMSCORE: `value` the members, encode_names), zcard, zcount (ZCOUNT,
// ZLEXCOUNT), zrange and zremrange (`expected` a ZRange), zrank (`expected`
// the member, `value` "rev" for ZREVRANK), zpop (`value` "min" or "max",
// `expected` the count, or empty for none), and on several keys, run on
// copies of them as rename is: zrangestore (`key` the destination, `value`
// the source, encode_names, `expected` a ZRange), zcombine (ZUNION, ZINTER,
// ZDIFF, ZINTERCARD: `key` the first source, `value` the sources,
// `expected` a ZCombine), zcombinestore (ZUNIONSTORE, ZINTERSTORE,
// ZDIFFSTORE: `key` the destination, `value` the sources, `expected` a
// ZCombine) and zmpop (ZMPOP: `key` the first key, `value` the keys,
// `expected` "min" or "max" and the count, encode_names); zscan (ZSCAN: `value`
// a ScanRequest, `expected` the MATCH pattern) pages through the members
// and their scores as hscan does through a hash (store.h); zrandmember
// (ZRANDMEMBER: `value` the seed the gateway stamped, in decimal,
// `expected` the count ("" for none) and "1" for WITHSCORES, encode_names)
// chooses as srandmember does (store_sets.cc): from the seed alone.
//
// Their results (store.h, Result) are Redis's answers: an error is
// not ok with Redis's text as value ("ERR ..." or kWrongType); otherwise
// a write's ok says whether it modified its key (WATCH's sense), a read's
// whether it found what it looked for (zscore's member, zrank's), and value
// holds the answer: a decimal (zadd's count, zrem, zcard, zcount,
// zremrange, zrangestore, zcombinestore, ZINTERCARD's zcombine), a score
// (format_score: zadd with INCR; empty there when it did nothing, Redis's
// null), a rank, or encode_names of
// members, of scores ("" for a member absent: zscore), or of members and
// scores alternating (zrange with_scores, zpop), or zmpop's: the key it
// popped from, then members and scores alternating (not ok and empty:
// none of its keys exists, Redis's null array); zrandmember without a
// count: ok = the key exists, value the member.

// Which members a range names and how it answers them: Op::kZRange's,
// Op::kZCount's, Op::kZRemRange's and Op::kZRangeStore's `expected`
// (encode_zrange). `min` and `max` are the texts the client gave, the
// lower bound first (the gateway swaps a REV range's); by rank they are
// the start and stop indices (negative from the end), counted from the
// highest score with `rev`.
struct ZRange {
  enum By : uint8_t { kRank = 0, kScore = 1, kLex = 2 };
  By by = kRank;
  bool rev = false;
  std::string min, max;
  int64_t offset = 0;
  int64_t limit = -1;  // LIMIT's count; negative: all
  bool with_scores = false;
};
std::string encode_zrange(const ZRange& q);
bool decode_zrange(std::string_view bytes, ZRange* out);

// ZADD's options (Op::kZAdd's `expected`, as letters): N NX, X XX, G GT,
// L LT, C CH, I INCR (ZINCRBY: "I"). Its `value` is the scores (as the
// client gave them) and members, alternating (encode_names).
inline constexpr char kZAddNx = 'N', kZAddXx = 'X', kZAddGt = 'G', kZAddLt = 'L', kZAddCh = 'C',
                      kZAddIncr = 'I';

// How zcombine and zcombinestore combine their sources (Redis's
// zunionInterDiffGenericCommand): sorted sets, and sets as members of
// score 1; an absent key an empty one.
struct ZCombine {
  enum How : uint8_t { kUnion = 0, kInter = 1, kDiff = 2, kInterCard = 3 };
  How how = kUnion;
  // The gateway's error for the options after the keys (Redis looks at the
  // keys' types first: WRONGTYPE wins), or empty.
  std::string error;
  std::vector<std::string> weights;  // one per source, as given; none: 1 each
  std::string aggregate = "sum";     // "sum", "min" or "max"
  bool with_scores = false;
  int64_t limit = 0;  // kInterCard: at most this many (0: no limit)
};
std::string encode_zcombine(const ZCombine& z);
bool decode_zcombine(std::string_view bytes, ZCombine* out);

}  // namespace kv
