// The operations' properties the store and its reference share: their
// names (the history's and the logs'), which of them Redis refuses past
// maxmemory, and when one counts as modifying its key (Transaction, WATCH).
#include "store.h"

namespace kv {

const char* op_name(Op op) {
  switch (op) {
    case Op::kNoop:
      return "noop";
    case Op::kPut:
      return "put";
    case Op::kGet:
      return "get";
    case Op::kDelete:
      return "delete";
    case Op::kCas:
      return "cas";
    case Op::kIncrBy:
      return "incrby";
    case Op::kAppend:
      return "append";
    case Op::kSetNx:
      return "setnx";
    case Op::kGetSet:
      return "getset";
    case Op::kGetDel:
      return "getdel";
    case Op::kSetXx:
      return "setxx";
    case Op::kExpire:
      return "expire";
    case Op::kTtl:
      return "ttl";
    case Op::kGetEx:
      return "getex";
    case Op::kSweep:
      return "sweep";
    case Op::kMulti:
      return "multi";
    case Op::kRename:
      return "rename";
    case Op::kRenameNx:
      return "renamenx";
    case Op::kFlushAll:
      return "flushall";
    case Op::kWatch:
      return "watch";
    case Op::kDbSize:
      return "dbsize";
    case Op::kKeys:
      return "keys";
    case Op::kScan:
      return "scan";
    case Op::kIncrByFloat:
      return "incrbyfloat";
    case Op::kSetRange:
      return "setrange";
    case Op::kType:
      return "type";
    case Op::kHSet:
      return "hset";
    case Op::kHSetNx:
      return "hsetnx";
    case Op::kHGet:
      return "hget";
    case Op::kHMGet:
      return "hmget";
    case Op::kHDel:
      return "hdel";
    case Op::kHLen:
      return "hlen";
    case Op::kHGetAll:
      return "hgetall";
    case Op::kHIncrBy:
      return "hincrby";
    case Op::kHIncrByFloat:
      return "hincrbyfloat";
    case Op::kLPush:
      return "lpush";
    case Op::kRPush:
      return "rpush";
    case Op::kLPushX:
      return "lpushx";
    case Op::kRPushX:
      return "rpushx";
    case Op::kLPop:
      return "lpop";
    case Op::kRPop:
      return "rpop";
    case Op::kLLen:
      return "llen";
    case Op::kLRange:
      return "lrange";
    case Op::kLIndex:
      return "lindex";
    case Op::kLSet:
      return "lset";
    case Op::kLRem:
      return "lrem";
    case Op::kLTrim:
      return "ltrim";
    case Op::kSAdd:
      return "sadd";
    case Op::kSRem:
      return "srem";
    case Op::kSCard:
      return "scard";
    case Op::kSIsMember:
      return "sismember";
    case Op::kSMIsMember:
      return "smismember";
    case Op::kSMembers:
      return "smembers";
    case Op::kSPop:
      return "spop";
    case Op::kSRandMember:
      return "srandmember";
    case Op::kSMove:
      return "smove";
    case Op::kSInter:
      return "sinter";
    case Op::kSUnion:
      return "sunion";
    case Op::kSDiff:
      return "sdiff";
    case Op::kSInterCard:
      return "sintercard";
    case Op::kSInterStore:
      return "sinterstore";
    case Op::kSUnionStore:
      return "sunionstore";
    case Op::kSDiffStore:
      return "sdiffstore";
    case Op::kLInsert:
      return "linsert";
    case Op::kLPos:
      return "lpos";
    case Op::kLMove:
      return "lmove";
    case Op::kHScan:
      return "hscan";
    case Op::kSScan:
      return "sscan";
    case Op::kZAdd:
      return "zadd";
    case Op::kZRem:
      return "zrem";
    case Op::kZScore:
      return "zscore";
    case Op::kZCard:
      return "zcard";
    case Op::kZCount:
      return "zcount";
    case Op::kZRank:
      return "zrank";
    case Op::kZRange:
      return "zrange";
    case Op::kZRemRange:
      return "zremrange";
    case Op::kZPop:
      return "zpop";
    case Op::kZRangeStore:
      return "zrangestore";
    case Op::kZCombine:
      return "zcombine";
    case Op::kZCombineStore:
      return "zcombinestore";
    case Op::kZScan:
      return "zscan";
    case Op::kZMPop:
      return "zmpop";
    case Op::kZRandMember:
      return "zrandmember";
    case Op::kLMPop:
      return "lmpop";
    case Op::kHRandField:
      return "hrandfield";
  }
  return "?";
}

namespace detail {

bool denied_when_full(Op op) {
  switch (op) {
    case Op::kPut:
    case Op::kCas:
    case Op::kIncrBy:
    case Op::kIncrByFloat:
    case Op::kAppend:
    case Op::kSetRange:
    case Op::kSetNx:
    case Op::kGetSet:
    case Op::kSetXx:
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat:
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX:
    case Op::kLSet:
    case Op::kLInsert:
    case Op::kLMove:
    case Op::kSAdd:
    case Op::kSInterStore:
    case Op::kSUnionStore:
    case Op::kSDiffStore:
    case Op::kZAdd:
    case Op::kZRangeStore:
    case Op::kZCombineStore:
      return true;
    default:
      return false;
  }
}

bool writes(const Command& c, const Result& r) {
  switch (c.op) {
    case Op::kPut:
    case Op::kGetSet:
    case Op::kAppend:
      return !r.refused && (r.ok || r.value != kWrongType);
    case Op::kHSet:
    case Op::kHSetNx:
    case Op::kHIncrBy:
    case Op::kHIncrByFloat:
    case Op::kHDel:
    case Op::kLPush:
    case Op::kRPush:
    case Op::kLPushX:
    case Op::kRPushX:
    case Op::kLSet:
    case Op::kLRem:
    case Op::kLTrim:
    case Op::kLInsert:
    case Op::kLMove:
    case Op::kSRem:
    case Op::kSMove:
    case Op::kCas:
    case Op::kIncrBy:
    case Op::kIncrByFloat:
    case Op::kSetNx:
    case Op::kSetXx:
    case Op::kGetDel:
    case Op::kDelete:
    case Op::kExpire:
    case Op::kZAdd:  // (ok: it modified the key; store_zsets.cc)
    case Op::kZRem:
    case Op::kZRemRange:
    case Op::kZPop:
    case Op::kZMPop:
    case Op::kLMPop:
      return r.ok;
    case Op::kSetRange:
      return r.ok && !c.value.empty();
    case Op::kGetEx:
      return r.ok && c.ttl != Ttl::kKeep;
    case Op::kLPop:
    case Op::kRPop:
    case Op::kSPop:
      return r.ok && c.expected != "0";
    case Op::kSAdd:  // (as Redis: adding only members it holds modifies nothing)
    case Op::kSInterStore:
    case Op::kSUnionStore:
    case Op::kSDiffStore:
    case Op::kZRangeStore:
    case Op::kZCombineStore:
      return r.ok && r.value != "0";
    default:
      return false;
  }
}

}  // namespace detail

}  // namespace kv
