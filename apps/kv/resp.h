// apps/kv/resp.h: RESP2, the Redis serialization protocol, as far as the
// store's front end needs it: requests parsed incrementally from a
// connection's bytes (arrays of bulk strings, as redis-cli and
// redis-benchmark send them, and inline commands, as typed into telnet),
// and the replies.
//
// Limits (a request beyond them is a protocol error; the front end answers
// it and closes the connection): at most kMaxArgs arguments, bulk strings of
// at most `max_bulk` bytes (kMaxBulk by default; a longer one is refused
// from its header, before any of its bytes is buffered), inline lines of at
// most kMaxInline bytes.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kv::resp {

inline constexpr size_t kMaxArgs = 1024;
inline constexpr size_t kMaxBulk = 1 << 20;
inline constexpr size_t kMaxInline = 64 * 1024;

enum class Parsed : uint8_t {
  kIncomplete,  // more bytes needed
  kRequest,     // *args holds one request; *used bytes of `in` were taken
  kError,       // a protocol error, said in *error (the connection must close)
};

// Parses the first request in `in`; a bulk string longer than `max_bulk`
// is an error as soon as its header is read.
Parsed parse_request(std::string_view in, std::vector<std::string>* args, size_t* used,
                     std::string* error, size_t max_bulk = kMaxBulk);

// A reply, as a client reads it (kv_client.h).
struct Reply {
  enum class Kind : uint8_t { kSimple, kError, kInteger, kBulk, kNull, kArray };
  Kind kind = Kind::kNull;
  std::string text;          // kSimple, kError, kBulk
  int64_t integer = 0;       // kInteger
  std::vector<Reply> items;  // kArray
};

// Parses the first reply in `in` (kRequest: one reply is in *reply and
// *used bytes were taken). Arrays nest at most 8 deep and hold at most
// kMaxArgs items; bulk strings are at most kMaxBulk bytes.
Parsed parse_reply(std::string_view in, Reply* reply, size_t* used, std::string* error);

// Simple strings and errors are one line: a CR or LF in `s` (say, a
// client's own bytes quoted in an error) becomes a space, as Redis does, so
// that no text can forge a second reply.
std::string simple(std::string_view s);                         // +s
std::string error(std::string_view s);                          // -s
std::string integer(int64_t n);                                 // :n
std::string bulk(std::string_view s);                           // $len s
std::string null_bulk();                                        // $-1
std::string null_reply(bool resp3);                             // RESP3: _; RESP2: $-1
std::string array(const std::vector<std::string_view>& items);  // *n, items as bulk strings
std::string array_header(size_t n);                             // *n, the n items to follow

// What the front end's commands share: Redis's wrong argument count for
// command `name` (lower case, as Redis quotes it), its OOM error, and a
// command name in upper or lower case (ASCII).
std::string wrong_args(std::string_view name);
// Redis 7's error for an unknown command `args[0]` (args not empty):
// `-ERR unknown command 'FOO', with args beginning with: 'a' 'b' `, the
// name cut at 128 bytes, each argument quoted and followed by a space, and
// arguments added while fewer than 128 bytes of them are shown, the last
// cut so that they take at most 128 (each cut at a NUL byte too, as Redis's
// printf does). CR and LF become spaces (error()).
std::string unknown_command(const std::vector<std::string>& args);
std::string oom();
std::string upper(std::string s);
std::string lower(std::string s);

// The arguments LMPOP and ZMPOP share (and BLMPOP and BZMPOP after their
// timeout), from args[first]: numkeys key [key ...] END [COUNT n], END one
// of `a` and `b` (lower case), checked in Redis 7.0's order with its
// words. Fills *keys, *end (lower case) and *count (1 without COUNT);
// returns "" or the error reply (resp_args.cc).
std::string mpop_args(const std::vector<std::string>& args, size_t first, std::string_view a,
                      std::string_view b, std::vector<std::string>* keys, std::string* end,
                      int64_t* count);
// LMOVE's (BLMOVE's) wherefrom and whereto at args[at] and args[at + 1]
// into (*ends)[0] and [1] as 'L' or 'R'; "" or the error reply.
std::string move_ends(const std::vector<std::string>& args, size_t at, std::string* ends);

}  // namespace kv::resp
