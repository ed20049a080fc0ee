// The RESP gateway's sorted-set commands (resp_gateway.h lists them), each
// one log entry (store_zsets.cc), and their answers. The arguments are
// checked here, in Redis 7.0's order and words, so that what reaches the
// log is well formed; the store parses scores and ranges again with the
// same functions (zset.h).
#include <cstdint>
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::wrong_args;

const std::string kNotInteger = "ERR value is not an integer or out of range";
const std::string kNotFloat = "ERR value is not a valid float";
const std::string kNotFloatRange = "ERR min or max is not a float";
const std::string kNotLexRange = "ERR min or max not valid string range item";
const std::string kSyntax = "ERR syntax error";

// A score as Redis 7.0 answers it: a bulk string in RESP2, a double in RESP3.
std::string score_reply(const std::string& text, bool resp3) {
  if (!resp3) return resp::bulk(text);
  std::string out(1, ',');  // (append: GCC 12 warns falsely on chains of string +)
  return out.append(text).append("\r\n");
}

// ZADD's and ZINCRBY's arguments (Redis's zaddGenericCommand): the options
// from args[2], then score and member pairs; ZINCRBY is ZADD with INCR.
// The error reply, or empty with the log entry's value and options.
std::string zadd_args(const std::vector<std::string>& args, bool zincrby, std::string* value,
                      std::string* options) {
  std::string flags = zincrby ? std::string(1, kZAddIncr) : "";
  size_t at = 2;
  for (; at < args.size(); ++at) {
    const std::string o = lower(args[at]);
    const char f = o == "nx"     ? kZAddNx
                   : o == "xx"   ? kZAddXx
                   : o == "ch"   ? kZAddCh
                   : o == "incr" ? kZAddIncr
                   : o == "gt"   ? kZAddGt
                   : o == "lt"   ? kZAddLt
                                 : '\0';
    if (f == '\0') break;
    flags += f;
  }
  auto has = [&flags](char f) { return flags.find(f) != std::string::npos; };
  const size_t elements = args.size() - at;
  if (elements == 0 || elements % 2 != 0) return resp::error(kSyntax);
  if (has(kZAddNx) && has(kZAddXx))
    return resp::error("ERR XX and NX options at the same time are not compatible");
  if ((has(kZAddGt) && has(kZAddNx)) || (has(kZAddLt) && has(kZAddNx)) ||
      (has(kZAddGt) && has(kZAddLt)))
    return resp::error("ERR GT, LT, and/or NX options at the same time are not compatible");
  if (has(kZAddIncr) && elements > 2)
    return resp::error("ERR INCR option supports a single increment-element pair");
  for (size_t j = at; j < args.size(); j += 2) {
    double score = 0;
    if (!parse_score(args[j], &score)) return resp::error(kNotFloat);
  }
  *value = encode_names(std::vector<std::string>(args.begin() + at, args.end()));
  *options = std::move(flags);
  return "";
}

// A range's bounds (Redis's order of checks: the bounds' kind decides the
// error): empty, or the error reply.
std::string check_bounds(const ZRange& q) {
  if (q.by == ZRange::kRank) {
    int64_t a = 0, b = 0;
    return parse_integer(q.min, &a) && parse_integer(q.max, &b) ? "" : resp::error(kNotInteger);
  }
  if (q.by == ZRange::kScore) {
    double a = 0, b = 0;
    bool ax = false, bx = false;
    return parse_score_bound(q.min, &a, &ax) && parse_score_bound(q.max, &b, &bx)
               ? ""
               : resp::error(kNotFloatRange);
  }
  LexBound a, b;
  return parse_lex_bound(q.min, &a) && parse_lex_bound(q.max, &b) ? "" : resp::error(kNotLexRange);
}

// The ZRANGE family's arguments (Redis's zrangeGenericCommand): the key at
// args[key_at], the two bounds after it, then the options. `by` and `rev`
// are the command's own (ZRANGEBYSCORE, ZREVRANGE...); `by_auto`,
// `rev_auto`: ZRANGE's and ZRANGESTORE's, which the options choose.
std::string zrange_args(const std::vector<std::string>& args, size_t key_at, ZRange::By by,
                        bool by_auto, bool rev, bool rev_auto, bool store, ZRange* q) {
  q->by = by;
  q->rev = rev;
  for (size_t j = key_at + 3; j < args.size(); ++j) {
    const size_t left = args.size() - j - 1;
    const std::string o = lower(args[j]);
    if (!store && o == "withscores") {
      q->with_scores = true;
    } else if (o == "limit" && left >= 2) {
      if (!parse_integer(args[j + 1], &q->offset) || !parse_integer(args[j + 2], &q->limit))
        return resp::error(kNotInteger);
      j += 2;
    } else if (rev_auto && o == "rev") {
      q->rev = true;
      rev_auto = false;
    } else if (by_auto && (o == "bylex" || o == "byscore")) {
      q->by = o == "bylex" ? ZRange::kLex : ZRange::kScore;
      by_auto = false;
    } else {
      return resp::error(kSyntax);
    }
  }
  if (q->limit != -1 && q->by == ZRange::kRank)
    return resp::error(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
  if (q->with_scores && q->by == ZRange::kLex)
    return resp::error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
  // (A REV range by score or member names the upper bound first.)
  const bool swap = q->rev && q->by != ZRange::kRank;
  q->min = args[key_at + (swap ? 2 : 1)];
  q->max = args[key_at + (swap ? 1 : 2)];
  return check_bounds(*q);
}

// The options after ZUNION's, ZINTER's, ZDIFF's, ZINTERCARD's and their
// STORE forms' keys, from args[at] (Redis's zunionInterDiffGenericCommand):
// into *z, or the error reply's text, which the store answers unless a key
// is of the wrong type (Redis looks at the keys first).
std::string combine_options(const std::vector<std::string>& args, size_t at, size_t keys,
                            bool store, ZCombine* z) {
  const bool diff = z->how == ZCombine::kDiff, card = z->how == ZCombine::kInterCard;
  for (size_t j = at; j < args.size();) {
    const size_t left = args.size() - j;
    const std::string o = lower(args[j]);
    if (!diff && !card && left >= keys + 1 && o == "weights") {
      for (size_t i = 0; i < keys; ++i) {
        double w = 0;
        if (!parse_score(args[j + 1 + i], &w)) return "ERR weight value is not a float";
        z->weights.push_back(args[j + 1 + i]);
      }
      j += keys + 1;
    } else if (!diff && !card && left >= 2 && o == "aggregate") {
      z->aggregate = lower(args[j + 1]);
      if (z->aggregate != "sum" && z->aggregate != "min" && z->aggregate != "max") {
        z->aggregate = "sum";
        return kSyntax;
      }
      j += 2;
    } else if (!store && !card && o == "withscores") {
      z->with_scores = true;
      ++j;
    } else if (card && left >= 2 && o == "limit") {
      if (!parse_integer(args[j + 1], &z->limit) || z->limit < 0) {
        z->limit = 0;
        return "ERR LIMIT can't be negative";
      }
      j += 2;
    } else {
      return kSyntax;
    }
  }
  return "";
}

}  // namespace

bool RespGateway::zset_command(Conn& c, const std::string& name,
                               const std::vector<std::string>& args, Client& client, size_t index,
                               Reply& r, int64_t now) {
  if (name.empty() || name[0] != 'Z') return false;
  auto send = [&](Op op, std::string value, std::string expected, Kind kind) {
    return submit_keyed(c, name, args, client, index, r, now,
                        {op, std::move(value), std::move(expected), kind});
  };
  auto names_from = [&args](size_t from) {
    return encode_names(std::vector<std::string>(args.begin() + from, args.end()));
  };
  auto arity = [&](size_t n, bool at_least) {
    return at_least ? args.size() >= n : args.size() == n;
  };
  if (name == "ZADD" || name == "ZINCRBY") {
    const bool incrby = name == "ZINCRBY";
    if (!arity(4, !incrby)) return r.answer(wrong_args(lower(name)));
    std::string value, options;
    if (std::string e = zadd_args(args, incrby, &value, &options); !e.empty())
      return r.answer(std::move(e));
    const bool incr = options.find(kZAddIncr) != std::string::npos;
    return send(Op::kZAdd, std::move(value), std::move(options),
                incr ? Kind::kZDouble : Kind::kZInt);
  }
  if (name == "ZREM" || name == "ZMSCORE") {
    if (!arity(3, true)) return r.answer(wrong_args(lower(name)));
    return name == "ZREM" ? send(Op::kZRem, names_from(2), "", Kind::kZInt)
                          : send(Op::kZScore, names_from(2), "", Kind::kZDoubles);
  }
  if (name == "ZSCORE" || name == "ZRANK" || name == "ZREVRANK") {
    if (!arity(3, false)) return r.answer(wrong_args(lower(name)));
    if (name == "ZSCORE") return send(Op::kZScore, names_from(2), "", Kind::kZDoubleOf);
    return send(Op::kZRank, name == "ZREVRANK" ? "rev" : "", args[2], Kind::kZRank);
  }
  if (name == "ZCARD") {
    if (!arity(2, false)) return r.answer(wrong_args("zcard"));
    return send(Op::kZCard, "", "", Kind::kZInt);
  }
  if (name == "ZCOUNT" || name == "ZLEXCOUNT" || name == "ZREMRANGEBYSCORE" ||
      name == "ZREMRANGEBYRANK" || name == "ZREMRANGEBYLEX") {
    if (!arity(4, false)) return r.answer(wrong_args(lower(name)));
    ZRange q;
    q.by = name == "ZREMRANGEBYRANK"                         ? ZRange::kRank
           : name == "ZLEXCOUNT" || name == "ZREMRANGEBYLEX" ? ZRange::kLex
                                                             : ZRange::kScore;
    q.min = args[2];
    q.max = args[3];
    if (std::string e = check_bounds(q); !e.empty()) return r.answer(std::move(e));
    const bool count = name == "ZCOUNT" || name == "ZLEXCOUNT";
    return send(count ? Op::kZCount : Op::kZRemRange, "", encode_zrange(q), Kind::kZInt);
  }
  if (name == "ZRANGE" || name == "ZREVRANGE" || name == "ZRANGEBYSCORE" ||
      name == "ZREVRANGEBYSCORE" || name == "ZRANGEBYLEX" || name == "ZREVRANGEBYLEX" ||
      name == "ZRANGESTORE") {
    const bool store = name == "ZRANGESTORE";
    if (!arity(store ? 5 : 4, true)) return r.answer(wrong_args(lower(name)));
    const bool plain = name == "ZRANGE" || store;
    const bool rev = name.rfind("ZREV", 0) == 0;
    const ZRange::By by = name.find("BYSCORE") != std::string::npos ? ZRange::kScore
                          : name.find("BYLEX") != std::string::npos ? ZRange::kLex
                                                                    : ZRange::kRank;
    ZRange q;
    if (std::string e = zrange_args(args, store ? 2 : 1, by, plain, rev, plain, store, &q);
        !e.empty())
      return r.answer(std::move(e));
    if (store)
      return send(Op::kZRangeStore, encode_names({args[2]}), encode_zrange(q), Kind::kZInt);
    r.zscores = q.with_scores;
    r.znested = q.with_scores;
    return send(Op::kZRange, "", encode_zrange(q), Kind::kZArray);
  }
  if (name == "ZUNION" || name == "ZINTER" || name == "ZDIFF" || name == "ZINTERCARD" ||
      name == "ZUNIONSTORE" || name == "ZINTERSTORE" || name == "ZDIFFSTORE") {
    const bool store = name.size() > 6 && name.substr(name.size() - 5) == "STORE";
    if (!arity(store ? 4 : 3, true)) return r.answer(wrong_args(lower(name)));
    ZCombine z;
    z.how = name.rfind("ZUNION", 0) == 0   ? ZCombine::kUnion
            : name == "ZINTERCARD"         ? ZCombine::kInterCard
            : name.rfind("ZINTER", 0) == 0 ? ZCombine::kInter
                                           : ZCombine::kDiff;
    const size_t at = store ? 2 : 1;
    int64_t keys = 0;
    if (!parse_integer(args[at], &keys)) return r.answer(resp::error(kNotInteger));
    if (keys < 1)
      return r.answer(
          resp::error("ERR at least 1 input key is needed for '" + lower(name) + "' command"));
    if (static_cast<uint64_t>(keys) > args.size() - (at + 1)) return r.answer(resp::error(kSyntax));
    const auto first = args.begin() + static_cast<std::ptrdiff_t>(at + 1);
    const std::vector<std::string> sources(first, first + keys);
    const std::string error = combine_options(args, at + 1 + keys, keys, store, &z);
    z.error = error;
    if (!error.empty()) z.weights.clear();  // (the store answers the error unless WRONGTYPE)
    const std::string value = encode_names(sources), expected = encode_zcombine(z);
    if (store) return send(Op::kZCombineStore, value, expected, Kind::kZInt);
    r.zscores = r.znested = z.with_scores;
    // (The log entry's key is the first source; the count is no key.)
    const std::vector<std::string> keyed{args[0], sources.front()};
    return submit_keyed(c, name, keyed, client, index, r, now,
                        {Op::kZCombine, value, expected,
                         z.how == ZCombine::kInterCard ? Kind::kZInt : Kind::kZArray});
  }
  if (name == "ZRANDMEMBER") {
    // (Redis's zrandmemberCommand: the count, then the syntax.)
    if (!arity(2, true)) return r.answer(wrong_args("zrandmember"));
    // A seed for this command alone (splitmix64's step; the store mixes it).
    const std::string seed = std::to_string(seeds_ += 0x9e3779b97f4a7c15ull);
    if (args.size() == 2) return send(Op::kZRandMember, seed, encode_names({"", ""}), Kind::kGet);
    int64_t n = 0;
    if (!parse_integer(args[2], &n)) return r.answer(resp::error(kNotInteger));
    if (n == INT64_MIN)
      return r.answer(
          resp::error("ERR value is out of range, value must between "
                      "-9223372036854775807 and 9223372036854775807"));
    if (args.size() > 4 || (args.size() == 4 && lower(args[3]) != "withscores"))
      return r.answer(resp::error(kSyntax));
    const bool with_scores = args.size() == 4;
    if (with_scores && (n < -INT64_MAX / 2 || n > INT64_MAX / 2))
      return r.answer(resp::error("ERR value is out of range"));
    // (Each member chosen takes at least 4 bytes of the store's reply.)
    if (n < 0 && uint64_t(-n) > options_.max_entry_bytes / 4)
      return r.answer(resp::error("ERR value is out of range: sluice-kv answers at most " +
                                  std::to_string(options_.max_entry_bytes) +
                                  " bytes in one reply (--max-value-bytes)"));
    r.zscores = r.znested = with_scores;
    return send(Op::kZRandMember, seed, encode_names({args[2], with_scores ? "1" : ""}),
                Kind::kZArray);
  }
  if (name == "ZSCAN") {
    if (!arity(3, true)) return r.answer(wrong_args("zscan"));
    ScanRequest q;
    std::string pattern;
    if (std::string e = scan_options(args, 2, "", &q, &pattern); !e.empty())
      return r.answer(std::move(e));
    return send(Op::kZScan, encode_scan_request(q), std::move(pattern), Kind::kScan);
  }
  if (name == "ZMPOP") {
    if (!arity(4, true)) return r.answer(wrong_args("zmpop"));
    std::vector<std::string> sources;
    std::string how;
    int64_t count = 1;
    if (std::string e = resp::mpop_args(args, 1, "min", "max", &sources, &how, &count); !e.empty())
      return r.answer(e);
    // (The log entry's key is the first key; the count is no key.)
    const std::vector<std::string> keyed{args[0], sources.front()};
    return submit_keyed(c, name, keyed, client, index, r, now,
                        {Op::kZMPop, encode_names(sources),
                         encode_names({how, std::to_string(count)}), Kind::kZMPop});
  }
  if (name == "ZPOPMIN" || name == "ZPOPMAX") {
    if (!arity(2, true)) return r.answer(wrong_args(lower(name)));
    if (args.size() > 3) return r.answer(resp::error(kSyntax));
    std::string count;
    if (args.size() == 3) {
      // (Redis's getPositiveLongFromObjectOrReply: one error for both; a
      // count of 0 still looks at the key's type.)
      int64_t n = 0;
      if (!parse_integer(args[2], &n) || n < 0)
        return r.answer(resp::error("ERR value is out of range, must be positive"));
      count = args[2];
    }
    r.zscores = true;
    r.znested = !count.empty();
    return send(Op::kZPop, name == "ZPOPMAX" ? "max" : "min", std::move(count), Kind::kZArray);
  }
  return false;
}

void RespGateway::fill_zset(Reply& r, const Result& result) {
  const std::string malformed = "ERR the store answered a malformed sorted set reply";
  if (!result.ok && result.value.rfind("ERR ", 0) == 0) {
    r.text = resp::error(result.value);
    return;
  }
  int64_t n = 0;
  std::vector<std::string> items;
  switch (r.kind) {
    case Kind::kZInt:
      r.text = parse_integer(result.value, &n) ? resp::integer(n) : resp::error(malformed);
      return;
    case Kind::kZRank:
      r.text = result.value.empty()              ? resp::null_reply(r.resp3)
               : parse_integer(result.value, &n) ? resp::integer(n)
                                                 : resp::error(malformed);
      return;
    case Kind::kZMPop:
    case Kind::kZBlockPop:
      // (None of its keys exists; a plain ZPOP of one, Reply::pop_key,
      // answers an empty list then.)
      if (!result.ok &&
          (result.value.empty() || (!r.pop_key.empty() && result.value.size() == 4))) {
        r.text = r.resp3 ? "_\r\n" : "*-1\r\n";
        return;
      }
      break;
    case Kind::kZDouble:
      r.text =
          result.value.empty() ? resp::null_reply(r.resp3) : score_reply(result.value, r.resp3);
      return;
    default:
      break;
  }
  if (!decode_names(result.value, &items)) {
    r.text = resp::error(malformed);
    return;
  }
  // (A plain ZPOP of one key, Reply::pop_key, answers its pairs alone.)
  if (!r.pop_key.empty()) items.insert(items.begin(), r.pop_key);
  if (r.kind == Kind::kZBlockPop) {
    // BZPOPMIN, BZPOPMAX: the key, the member and its score, flat.
    if (items.size() != 3) {
      r.text = resp::error(malformed);
      return;
    }
    r.text = resp::array_header(3) + resp::bulk(items[0]) + resp::bulk(items[1]) +
             score_reply(items[2], r.resp3);
    return;
  }
  if (r.kind == Kind::kZMPop) {
    // The key, then its pairs, each an array in RESP2 too (Redis's nested
    // reply); nothing popped: a null array.
    if (items.size() % 2 != 1) {
      r.text = resp::error(malformed);
      return;
    }
    r.text = resp::array_header(2) + resp::bulk(items[0]) + resp::array_header(items.size() / 2);
    for (size_t i = 1; i < items.size(); i += 2)
      r.text += resp::array_header(2) + resp::bulk(items[i]) + score_reply(items[i + 1], r.resp3);
    return;
  }
  if (r.kind == Kind::kZDoubleOf) {
    r.text = items.empty() || items[0].empty() ? resp::null_reply(r.resp3)
                                               : score_reply(items[0], r.resp3);
    return;
  }
  if (r.kind == Kind::kZDoubles) {
    r.text = resp::array_header(items.size());
    for (const std::string& s : items)
      r.text += s.empty() ? resp::null_reply(r.resp3) : score_reply(s, r.resp3);
    return;
  }
  // kZArray: members, or members and scores alternating (RESP3: the scores
  // as doubles, and with znested each pair an array of its own).
  const bool pairs = r.zscores && r.resp3 && r.znested;
  r.text = resp::array_header(pairs ? items.size() / 2 : items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const bool score = r.zscores && i % 2 == 1;
    if (pairs && !score) r.text += resp::array_header(2);
    r.text += score ? score_reply(items[i], r.resp3) : resp::bulk(items[i]);
  }
}

}  // namespace kv
