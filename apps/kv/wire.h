// apps/kv/wire.h: the little-endian byte layout the store's messages
// (codec.cc) and snapshots (Store::serialize) are written in: fixed-size
// values as they are, strings and commands with a u32 length. Reader checks
// every length against what is left and sets ok = false instead of reading
// past the end. Not part of the library's interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "store.h"

namespace kv::wire {

template <class Out>  // std::vector<std::byte> or std::string
struct Writer {
  Out& out;
  void bytes(const void* p, size_t n) {
    size_t at = out.size();
    out.resize(at + n);
    if (n != 0) std::memcpy(out.data() + at, p, n);
  }
  template <class T>
  void put(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void cmd(const Command& c) {
    put<uint8_t>(static_cast<uint8_t>(c.op));
    put(c.client);
    put(c.seq);
    str(c.key);
    str(c.value);
    str(c.expected);
    put(c.now_ms);
    put(c.deadline_ms);
    put<uint8_t>(static_cast<uint8_t>(c.ttl));
    put(c.ttl_if);
  }
};

struct Reader {
  std::span<const std::byte> in;
  size_t pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (!ok || in.size() - pos < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    if (!ok || in.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in.data() + pos), n);
    pos += n;
    return s;
  }
  Command cmd() {
    Command c;
    uint8_t op = get<uint8_t>();
    if (op > static_cast<uint8_t>(kLastOp)) ok = false;
    c.op = static_cast<Op>(op);
    c.client = get<uint64_t>();
    c.seq = get<uint64_t>();
    c.key = str();
    c.value = str();
    c.expected = str();
    c.now_ms = get<int64_t>();
    c.deadline_ms = get<int64_t>();
    const uint8_t ttl = get<uint8_t>();
    if (ttl > static_cast<uint8_t>(kLastTtl)) ok = false;
    c.ttl = static_cast<Ttl>(ttl);
    c.ttl_if = get<uint8_t>();
    if ((c.ttl_if & ~kAllTtlIf) != 0) ok = false;
    return c;
  }
};

// A Reader of a string's bytes.
inline Reader reader(std::string_view bytes) {
  return Reader{std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))};
}

// A u32 count of items of at least `least` bytes each: more than what is
// left is malformed (r.ok = false, 0), so no container is sized from it.
inline uint32_t count(Reader& r, size_t least) {
  const uint32_t n = r.get<uint32_t>();
  if (r.ok && n > (r.in.size() - r.pos) / least) r.ok = false;
  return r.ok ? n : 0;
}

}  // namespace kv::wire
