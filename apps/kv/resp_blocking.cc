// The RESP gateway's blocking commands: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH,
// BLMPOP, BZPOPMIN, BZPOPMAX and BZMPOP. Each is tried as its
// non-blocking form through the log (LMPOP with a count of 1, LMOVE,
// LMPOP, ZMPOP with a count of 1, ZMPOP), so every replica decides it as
// any command; one that finds nothing parks its connection here (blocked_)
// and is tried again when this gateway completes a command that wrote one
// of its keys, and at least every kBlockRetryMs (a write through another
// gateway is seen then), until its timeout (0: none) answers a null array.
// Inside MULTI each is its non-blocking form, answered at once, as in
// Redis. A parked connection's later requests wait unread, as a blocked
// Redis client's do; its disconnection unparks it; at most
// GatewayOptions::max_blocked connections are parked at once (one more
// that would park is answered an error).
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::wrong_args;

// A parked command is tried again at least this often; with many parked
// the period grows, so that all of them together try at most about
// 1,000 times a second.
constexpr int64_t kBlockRetryMs = 100;

std::string null_array(bool resp3) { return resp3 ? "_\r\n" : "*-1\r\n"; }

// A timeout in seconds as Redis 7.0 takes one (getTimeoutFromObjectOrReply:
// a long double, times 1000 cast to an integer of ms, so 0.0009 is 0,
// forever; past 64 bits the cast gives the most negative one on x86, so
// "inf" is negative): the error reply, or empty and *ms.
std::string parse_timeout(const std::string& text, int64_t* ms) {
  const std::string not_float = resp::error("ERR timeout is not a float or out of range");
  if (text.empty() || text.size() >= 5 * 1024 || std::isspace(static_cast<unsigned char>(text[0])))
    return not_float;
  errno = 0;
  char* end = nullptr;
  const long double v = std::strtold(text.c_str(), &end);
  if (*end != '\0' || std::isnan(v) ||
      (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || v == 0)))
    return not_float;
  const long double t = std::trunc(v * 1000.0L);
  if (!(t >= -9.2e18L && t <= 9.2e18L) || t < 0) return resp::error("ERR timeout is negative");
  *ms = static_cast<int64_t>(t);
  return {};
}

// The keys a command writes (or may), for wake(): its key, a move's or a
// rename's other key, the keys of a command on several, a transaction's.
void written_keys(const Command& c, std::vector<std::string>* out) {
  if (c.op == Op::kMulti) {
    Transaction t;
    if (decode_transaction(c.value, &t))
      for (const Command& sub : t.cmds) written_keys(sub, out);
    return;
  }
  out->push_back(c.key);
  if (c.op == Op::kRename || c.op == Op::kRenameNx) out->push_back(c.value);
  if (detail::is_keys_op(c.op))
    for (std::string& k : detail::set_keys(c)) out->push_back(std::move(k));
}

}  // namespace

bool RespGateway::blocking_command(Conn& c, const std::string& name,
                                   const std::vector<std::string>& args, Client& client,
                                   size_t index, Reply& r, int64_t now) {
  if (name.empty() || name[0] != 'B') return false;
  const bool pop = name == "BLPOP" || name == "BRPOP";
  const bool zpop = name == "BZPOPMIN" || name == "BZPOPMAX";
  const bool mpop = name == "BLMPOP" || name == "BZMPOP";
  const bool move = name == "BLMOVE" || name == "BRPOPLPUSH";
  if (!pop && !zpop && !mpop && !move) return false;
  Command cmd;
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  Kind kind = Kind::kGet;
  if (pop || zpop) {
    // (Redis: the timeout first, then the keys in order.)
    if (args.size() < 3) return r.answer(wrong_args(lower(name)));
    if (std::string e = parse_timeout(args.back(), &timeout_ms); !e.empty()) return r.answer(e);
    keys.assign(args.begin() + 1, args.end() - 1);
    cmd.op = pop ? Op::kLMPop : Op::kZMPop;
    const std::string end =
        pop ? (name == "BLPOP" ? "left" : "right") : (name == "BZPOPMIN" ? "min" : "max");
    cmd.expected = encode_names({end, "1"});
    kind = pop ? Kind::kBlockPop : Kind::kZBlockPop;
  } else if (move) {
    const bool lmove = name == "BLMOVE";
    if (args.size() != (lmove ? 6u : 4u)) return r.answer(wrong_args(lower(name)));
    std::string ends = "RL";
    if (lmove) {
      if (std::string e = resp::move_ends(args, 3, &ends); !e.empty()) return r.answer(e);
    }
    if (std::string e = parse_timeout(args.back(), &timeout_ms); !e.empty()) return r.answer(e);
    keys = {args[1]};
    cmd.op = Op::kLMove;
    cmd.value = args[2];
    cmd.expected = ends;
  } else {
    // BLMPOP and BZMPOP timeout numkeys key [key ...] LEFT|RIGHT (MIN|MAX)
    // [COUNT n]: LMPOP's and ZMPOP's checks, then the timeout.
    const bool list = name == "BLMPOP";
    if (args.size() < 5) return r.answer(wrong_args(lower(name)));
    std::string end;
    int64_t count = 1;
    if (std::string e = resp::mpop_args(args, 2, list ? "left" : "min", list ? "right" : "max",
                                        &keys, &end, &count);
        !e.empty())
      return r.answer(e);
    if (std::string e = parse_timeout(args[1], &timeout_ms); !e.empty()) return r.answer(e);
    cmd.op = list ? Op::kLMPop : Op::kZMPop;
    cmd.expected = encode_names({end, std::to_string(count)});
    kind = list ? Kind::kListMPop : Kind::kZMPop;
  }
  if (cmd.op != Op::kLMove) cmd.value = encode_names(keys);
  if (keys.size() == 1 && cmd.op != Op::kLMove) {
    // One key: its plain pop, which copies nothing (Reply::pop_key).
    std::vector<std::string> how;
    decode_names(cmd.expected, &how);
    const bool list = cmd.op == Op::kLMPop;
    cmd.op = list ? (how[0] == "left" ? Op::kLPop : Op::kRPop) : Op::kZPop;
    cmd.value = list ? "" : how[0];
    cmd.expected = how[1];
    r.pop_key = keys.front();
  }
  cmd.key = keys.front();
  cmd.now_ms = now;
  size_t bytes = cmd.key.size() + cmd.value.size() + cmd.expected.size();
  if (bytes > options_.max_entry_bytes)
    return r.refuse(resp::error("ERR sluice-kv takes keys and values of at most " +
                                std::to_string(options_.max_entry_bytes) +
                                " bytes in all in one command (--max-value-bytes); this " +
                                lower(name) + " takes " + std::to_string(bytes)));
  r.kind = kind;
  if (r.kind == Kind::kZBlockPop) r.zscores = true;
  if (c.queuing) {
    // In MULTI: the non-blocking form, which answers null when it finds
    // nothing (BLMOVE a null bulk, the others a null array), as Redis's.
    submit(c, client, index, r, std::move(cmd));
    return true;
  }
  Blocked& b = blocked_[c.id];
  b.conn = &c;
  b.index = index;
  b.reply = &r;
  b.cmd = cmd;
  b.keys = keys;
  b.deadline_ms = timeout_ms == 0 ? 0 : now + timeout_ms;
  b.trying = true;
  for (const std::string& k : keys) blocked_keys_.emplace(k, c.id);
  r.blocked_conn = c.id;
  submit(c, client, index, r, std::move(cmd));
  return true;
}

bool RespGateway::parked(Reply& r, const Result& result) {
  auto it = blocked_.find(r.blocked_conn);
  if (it == blocked_.end()) return false;
  Blocked& b = it->second;
  b.trying = false;
  // (ZPOP of an absent key answers an empty list of members.)
  const bool empty = !result.ok && !result.refused &&
                     (result.value.empty() || (b.cmd.op == Op::kZPop && result.value.size() == 4));
  if (!empty || b.conn->gone) {
    unblock(r.blocked_conn);
    r.blocked_conn = 0;
    return false;  // (fill() answers what it found, or an error)
  }
  if (!b.parked) {
    if (parked_ >= options_.max_blocked) {
      unblock(r.blocked_conn);
      r.blocked_conn = 0;
      r.text = resp::error("ERR sluice-kv parks at most " + std::to_string(options_.max_blocked) +
                           " blocked clients per gateway (--max-blocked-clients): try again "
                           "later");
      r.ready = true;
      count_finished(r);
      return true;
    }
    b.parked = true;
    ++parked_;
  }
  const int64_t period = std::max<int64_t>(kBlockRetryMs, static_cast<int64_t>(parked_));
  b.next_try_ms = wall_clock_ms() + period;
  return true;
}

void RespGateway::unblock(uint64_t id) {
  auto it = blocked_.find(id);
  if (it == blocked_.end()) return;
  for (const std::string& k : it->second.keys) {
    auto [from, to] = blocked_keys_.equal_range(k);
    for (auto at = from; at != to; ++at) {
      if (at->second == id) {
        blocked_keys_.erase(at);
        break;
      }
    }
  }
  if (it->second.parked) --parked_;
  // (Its later requests, which waited unread, are read now: see read().)
  it->second.conn->readable = true;
  blocked_.erase(it);
}

void RespGateway::wake(const Command& cmd, const Result& result) {
  // (A command that found nothing or failed wrote nothing: a try of a
  // parked command among them.)
  if (!result.ok && cmd.op != Op::kMulti) return;
  std::vector<std::string> keys;
  written_keys(cmd, &keys);
  for (const std::string& k : keys) {
    auto [from, to] = blocked_keys_.equal_range(k);
    for (auto at = from; at != to; ++at)
      if (auto b = blocked_.find(at->second); b != blocked_.end()) b->second.woken = true;
  }
}

size_t RespGateway::retry_blocked(ClientGroup& clients) {
  if (blocked_.empty()) return 0;
  const int64_t now = wall_clock_ms();
  const int64_t period = std::max<int64_t>(kBlockRetryMs, static_cast<int64_t>(parked_));
  size_t work = 0;
  for (auto it = blocked_.begin(); it != blocked_.end();) {
    Blocked& b = it->second;
    const uint64_t id = it->first;
    ++it;  // (unblock erases the entry)
    if (b.trying) continue;
    if (b.conn->gone || stopping_ || (b.deadline_ms != 0 && now >= b.deadline_ms)) {
      // Its time is up (or its connection, or the gateway's): a null
      // array, as Redis answers a timeout.
      Reply& r = *b.reply;
      r.text = null_array(r.resp3);
      r.ready = true;
      count_finished(r);
      r.blocked_conn = 0;
      unblock(id);
      ++work;
      continue;
    }
    if (!b.woken && now < b.next_try_ms) continue;
    Command cmd = b.cmd;
    cmd.now_ms = now;
    b.trying = true;
    b.woken = false;
    b.next_try_ms = now + period;
    submit(*b.conn, clients.client(b.index), b.index, *b.reply, std::move(cmd));
    ++work;
  }
  return work;
}

}  // namespace kv
