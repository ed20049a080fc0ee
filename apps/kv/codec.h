// apps/kv/codec.h: Message <-> bytes, for carrying protocol messages in the
// byte records of sluice flows.
//
// Layout (wire.h: little-endian, no padding): type u8, from u32, to u32,
// view u64, session u64, a u64, b u64, c u64, flag u8, the command, the
// result (ok u8, value),
// entry count u32, then per entry: slot u64, ballot u64, committed u8,
// session u64, msgnum u64, command; then the batch: a u32 count of commands
// and each command, a u32 count of results and each result; then the blob
// (a u32 length and its bytes). A command is
// op u8, client u64, seq u64, then key, value and expected, each as a u32
// length and its bytes, then now_ms i64, deadline_ms i64, ttl u8 and
// ttl_if u8 (47 bytes with empty strings); a result is ok u8 and its value.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "message.h"

namespace kv {

// Appends the encoding of `m` to `out` (cleared first).
void encode(const Message& m, std::vector<std::byte>& out);
// Decodes one message; false (with *why) on a truncated or malformed record.
bool decode(std::span<const std::byte> in, Message* m, std::string* why);

}  // namespace kv
