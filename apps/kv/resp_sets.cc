// The RESP gateway's set commands (resp_gateway.h lists them), each one log
// entry (store_sets.cc), and their answers. SPOP and SRANDMEMBER carry a
// seed drawn here, so that every replica chooses the same members.
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::wrong_args;

// The members' answer: RESP3 has sets; RESP2 an array.
std::string set_header(size_t n, bool resp3) {
  if (!resp3) return resp::array_header(n);
  std::string out(1, '~');  // (append: GCC 12 warns falsely on chains of string +)
  return out.append(std::to_string(n)).append("\r\n");
}

}  // namespace

bool RespGateway::set_command(Conn& c, const std::string& name,
                              const std::vector<std::string>& args, Client& client, size_t index,
                              Reply& r, int64_t now) {
  if (name.empty() || name[0] != 'S') return false;
  auto send = [&](Op op, std::string value, std::string expected, Kind kind) {
    return submit_keyed(c, name, args, client, index, r, now,
                        {op, std::move(value), std::move(expected), kind});
  };
  auto names_from = [&args](size_t from) {
    return encode_names(std::vector<std::string>(args.begin() + from, args.end()));
  };
  if (name == "SADD" || name == "SREM" || name == "SMISMEMBER") {
    if (args.size() < 3) return r.answer(wrong_args(lower(name)));
    const Op op = name == "SADD" ? Op::kSAdd : name == "SREM" ? Op::kSRem : Op::kSMIsMember;
    return send(op, names_from(2), "", op == Op::kSMIsMember ? Kind::kSetFlags : Kind::kSetCount);
  }
  if (name == "SCARD" || name == "SMEMBERS") {
    if (args.size() != 2) return r.answer(wrong_args(lower(name)));
    return name == "SCARD" ? send(Op::kSCard, "", "", Kind::kSetCount)
                           : send(Op::kSMembers, "", "", Kind::kSetMembers);
  }
  if (name == "SISMEMBER") {
    if (args.size() != 3) return r.answer(wrong_args("sismember"));
    return send(Op::kSIsMember, "", args[2], Kind::kMsetNx);
  }
  if (name == "SPOP" || name == "SRANDMEMBER") {
    if (args.size() != 2 && args.size() != 3) return r.answer(wrong_args(lower(name)));
    const bool pop = name == "SPOP";
    // A seed for this command alone (splitmix64's step; the store mixes it).
    const std::string seed = std::to_string(seeds_ += 0x9e3779b97f4a7c15ull);
    const Op op = pop ? Op::kSPop : Op::kSRandMember;
    if (args.size() == 2) return send(op, seed, "", Kind::kGet);
    int64_t n = 0;
    if (!parse_integer(args[2], &n))
      return r.answer(resp::error("ERR value is not an integer or out of range"));
    if (pop && n < 0) return r.answer(resp::error("ERR value is out of range, must be positive"));
    // (Each member chosen takes at least 4 bytes of the store's reply.)
    if (n < 0 && (n == INT64_MIN || uint64_t(-n) > options_.max_entry_bytes / 4))
      return r.answer(resp::error("ERR value is out of range: sluice-kv answers at most " +
                                  std::to_string(options_.max_entry_bytes) +
                                  " bytes in one reply (--max-value-bytes)"));
    return send(op, seed, args[2], pop ? Kind::kSetMembers : Kind::kSetArray);
  }
  if (name == "SSCAN") {
    if (args.size() < 3) return r.answer(wrong_args("sscan"));
    ScanRequest q;
    std::string pattern;
    if (std::string error = scan_options(args, 2, "", &q, &pattern); !error.empty())
      return r.answer(std::move(error));
    return send(Op::kSScan, encode_scan_request(q), std::move(pattern), Kind::kScan);
  }
  if (name == "SMOVE") {
    if (args.size() != 4) return r.answer(wrong_args("smove"));
    return send(Op::kSMove, args[2], args[3], Kind::kMsetNx);
  }
  if (name == "SINTER" || name == "SUNION" || name == "SDIFF") {
    if (args.size() < 2) return r.answer(wrong_args(lower(name)));
    const Op op = name == "SINTER" ? Op::kSInter : name == "SUNION" ? Op::kSUnion : Op::kSDiff;
    return send(op, names_from(1), "", Kind::kSetMembers);
  }
  if (name == "SINTERSTORE" || name == "SUNIONSTORE" || name == "SDIFFSTORE") {
    if (args.size() < 3) return r.answer(wrong_args(lower(name)));
    const Op op = name == "SINTERSTORE"   ? Op::kSInterStore
                  : name == "SUNIONSTORE" ? Op::kSUnionStore
                                          : Op::kSDiffStore;
    return send(op, names_from(2), "", Kind::kSetCount);
  }
  if (name == "SINTERCARD") {
    if (args.size() < 3) return r.answer(wrong_args("sintercard"));
    int64_t keys = 0;
    if (!parse_integer(args[1], &keys) || keys <= 0)
      return r.answer(resp::error("ERR numkeys should be greater than 0"));
    if (uint64_t(keys) > args.size() - 2)
      return r.answer(resp::error("ERR Number of keys can't be greater than number of args"));
    std::string limit = "0";
    for (size_t i = 2 + keys; i < args.size(); i += 2) {
      int64_t n = 0;
      if (lower(args[i]) != "limit" || i + 1 >= args.size())
        return r.answer(resp::error("ERR syntax error"));
      if (!parse_integer(args[i + 1], &n) || n < 0)
        return r.answer(resp::error("ERR LIMIT can't be negative"));
      limit = args[i + 1];
    }
    // (The log entry's key is the first key; the count is no key.)
    const std::vector<std::string> first{args[0], args[2]};
    return submit_keyed(
        c, name, first, client, index, r, now,
        {Op::kSInterCard,
         encode_names(std::vector<std::string>(args.begin() + 2, args.begin() + 2 + keys)), limit,
         Kind::kSetCount});
  }
  return false;
}

void RespGateway::fill_set(Reply& r, const Result& result) {
  int64_t n = 0;
  if (r.kind == Kind::kSetCount && parse_integer(result.value, &n)) {
    r.text = resp::integer(n);
    return;
  }
  // (A reply or a stored set too long, a malformed entry.)
  if (r.kind == Kind::kSetCount || (!result.ok && !result.value.empty())) {
    r.text = resp::error(result.value);
    return;
  }
  if (r.kind == Kind::kSetFlags) {
    r.text = resp::array_header(result.value.size());
    for (char f : result.value) r.text += resp::integer(f == '1' ? 1 : 0);
    return;
  }
  std::vector<std::string> members;
  // (SPOP and SRANDMEMBER with a count of an absent key: empty.)
  if (result.ok && !decode_names(result.value, &members)) {
    r.text = resp::error("ERR the store answered a malformed set reply");
    return;
  }
  r.text = r.kind == Kind::kSetMembers ? set_header(members.size(), r.resp3)
                                       : resp::array_header(members.size());
  for (const std::string& m : members) r.text += resp::bulk(m);
}

}  // namespace kv
