// The store's reads of the whole keyspace, each one log entry (linearizable
// as GET is): dbsize, keys (a glob pattern) and scan (a cursor over the
// keys in the order of a 64-bit hash of each, so that a key present for the
// whole iteration is returned at least once however keys come and go).
#include <charconv>
#include <set>
#include <span>

#include "store.h"
#include "wire.h"

namespace kv {

namespace {

using HashIndex = std::set<std::pair<uint64_t, std::string_view>>;

// One pattern element at p[*at] against `ch`; *at moves past it.
bool match_one(std::string_view p, size_t* at, unsigned char ch) {
  size_t i = *at;
  switch (p[i]) {
    case '?':
      *at = i + 1;
      return true;
    case '\\':
      if (i + 1 < p.size()) {
        *at = i + 2;
        return static_cast<unsigned char>(p[i + 1]) == ch;
      }
      *at = i + 1;
      return ch == '\\';
    case '[': {
      ++i;
      const bool negate = i < p.size() && p[i] == '^';
      if (negate) ++i;
      bool hit = false;
      // (An unterminated class ends with the pattern, as in Redis.)
      while (i < p.size() && p[i] != ']') {
        if (p[i] == '\\' && i + 1 < p.size()) {
          hit |= static_cast<unsigned char>(p[i + 1]) == ch;
          i += 2;
        } else if (i + 2 < p.size() && p[i + 1] == '-') {
          auto lo = static_cast<unsigned char>(p[i]), hi = static_cast<unsigned char>(p[i + 2]);
          if (lo > hi) std::swap(lo, hi);
          hit |= ch >= lo && ch <= hi;
          i += 3;
        } else {
          hit |= static_cast<unsigned char>(p[i]) == ch;
          ++i;
        }
      }
      *at = i < p.size() ? i + 1 : i;
      return hit != negate;
    }
    default:
      *at = i + 1;
      return static_cast<unsigned char>(p[i]) == ch;
  }
}

bool live(const Keyspace& data, std::string_view key, int64_t now_ms) {
  auto it = data.find(std::string(key));
  return it != data.end() && !detail::expired(it->second, now_ms);
}

Result page_result(const KeysPage& page) {
  Result r;
  r.ok = true;
  r.value = encode_keys(page);
  return r;
}

// SCAN's walk, HSCAN's and SSCAN's too: from q.cursor on in `index`'s hash
// order, COUNT names (the pattern and TYPE filter what was visited, as in
// Redis), or kScanBytes of them; never stopping inside a run of names of
// one hash, so the next cursor, that run's successor's hash (0: the end),
// skips no name. `visit` sees each name visited.
template <typename Visit>
uint64_t walk(const HashIndex& index, const ScanRequest& q, Visit visit) {
  size_t visited = 0, bytes = 0;
  uint64_t last = 0;
  auto it = index.lower_bound({q.cursor, std::string_view()});
  for (; it != index.end(); ++it) {
    if (visited != 0 && it->first != last && (visited >= q.count || bytes >= kScanBytes)) break;
    last = it->first;
    ++visited;
    bytes += it->second.size();
    visit(it->second);
  }
  return it == index.end() ? 0 : it->first;
}

// dbsize, keys and scan over `data`, with `index` its keys by hash.
Result read(const Keyspace& data, const HashIndex& index, size_t expired, const Command& c,
            uint64_t max_result_bytes) {
  Result r;
  switch (c.op) {
    case Op::kDbSize:
      r.ok = true;
      r.value = std::to_string(data.size() - expired);
      return r;
    case Op::kKeys: {
      KeysPage page;
      size_t bytes = 12;
      for (const auto& [k, e] : data) {
        if (detail::expired(e, c.now_ms) || !glob_match(c.key, k)) continue;
        bytes += 4 + k.size();
        if (max_result_bytes != 0 && bytes > max_result_bytes) {
          r.value = "ERR KEYS would answer more than " + std::to_string(max_result_bytes) +
                    " bytes of key names, more than one reply may hold (--max-value-bytes); "
                    "use SCAN";
          return r;
        }
        page.keys.push_back(k);
      }
      return page_result(page);
    }
    case Op::kScan: {
      ScanRequest q;
      if (!decode_scan_request(c.value, &q)) {
        r.value = "ERR invalid cursor";
        return r;
      }
      KeysPage page;
      // (TYPE: only keys of that type; a name of no type, none.)
      auto of_type = [&](std::string_view k) {
        if (q.type.empty()) return true;
        auto e = data.find(std::string(k));
        return e != data.end() && q.type == e->second.type_name();
      };
      page.cursor = walk(index, q, [&](std::string_view k) {
        if (glob_match(c.key, k) && live(data, k, c.now_ms) && of_type(k))
          page.keys.emplace_back(k);
      });
      return page_result(page);
    }
    default:
      return r;
  }
}

size_t expired_count(const Keyspace& data, int64_t now_ms) {
  size_t n = 0;
  for (const auto& [k, e] : data) n += detail::expired(e, now_ms) ? 1 : 0;
  return n;
}

}  // namespace

bool glob_match(std::string_view p, std::string_view s) {
  // Backtracking to the last '*' only: each other element takes one byte.
  size_t pi = 0, si = 0, star = std::string_view::npos, resume = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      resume = si;
      continue;
    }
    size_t next = pi;
    if (pi < p.size() && match_one(p, &next, static_cast<unsigned char>(s[si]))) {
      pi = next;
      ++si;
      continue;
    }
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    si = ++resume;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

uint64_t key_hash(std::string_view key) {
  // FNV-1a, then splitmix64's finalizer (FNV alone clusters short keys).
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : key) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

std::string encode_scan_request(const ScanRequest& s) {
  return std::to_string(s.cursor) + " " + std::to_string(s.count) + " " + s.type;
}

bool decode_scan_request(std::string_view text, ScanRequest* out) {
  ScanRequest s;
  const char* p = text.data();
  const char* end = p + text.size();
  auto number = [&](uint64_t* v) {
    const auto [next, ec] = std::from_chars(p, end, *v);
    if (ec != std::errc() || next == end || *next != ' ') return false;
    p = next + 1;
    return true;
  };
  if (!number(&s.cursor) || !number(&s.count) || s.count == 0) return false;
  s.type.assign(p, end);
  *out = std::move(s);
  return true;
}

std::string encode_keys(const KeysPage& page) {
  std::string out;
  wire::Writer<std::string> w{out};
  w.put(page.cursor);
  w.put<uint32_t>(static_cast<uint32_t>(page.keys.size()));
  for (const std::string& k : page.keys) w.str(k);
  return out;
}

bool decode_keys(std::string_view bytes, KeysPage* out) {
  wire::Reader r{std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))};
  KeysPage page;
  page.cursor = r.get<uint64_t>();
  const uint32_t n = r.get<uint32_t>();
  if (r.ok && n > (r.in.size() - r.pos) / 4) return false;
  for (uint32_t i = 0; r.ok && i < n; ++i) page.keys.push_back(r.str());
  if (!r.ok || r.pos != bytes.size()) return false;
  *out = std::move(page);
  return true;
}

namespace detail {

Result scan_one(const Command& c, const std::map<std::string, std::string>* fields,
                const std::set<std::string>* members) {
  ScanRequest q;
  if (!decode_scan_request(c.value, &q)) return detail::result_of("ERR invalid cursor", false);
  HashIndex index;
  if (fields != nullptr)
    for (const auto& [f, v] : *fields) index.emplace(key_hash(f), std::string_view(f));
  if (members != nullptr)
    for (const std::string& m : *members) index.emplace(key_hash(m), std::string_view(m));
  KeysPage page;
  page.cursor = walk(index, q, [&](std::string_view name) {
    if (!glob_match(c.expected, name)) return;
    page.keys.emplace_back(name);
    if (fields != nullptr && q.type != "novalues")
      page.keys.push_back(fields->find(page.keys.back())->second);
  });
  return page_result(page);
}

Result read_keyspace(const Keyspace& data, const Command& c, uint64_t max_result_bytes) {
  HashIndex index;
  if (c.op == Op::kScan)
    for (const auto& [k, e] : data) index.emplace(key_hash(k), std::string_view(k));
  return read(data, index, expired_count(data, c.now_ms), c, max_result_bytes);
}

}  // namespace detail

Result Store::read_keyspace(const Command& c) const {
  // Expired keys not yet removed (sweeps keep them few) are not counted;
  // a read removes none (sweeps do).
  size_t expired = 0;
  if (c.op == Op::kDbSize) {
    for (auto it = by_deadline_.begin(); it != by_deadline_.end() && it->first <= c.now_ms; ++it)
      ++expired;
  }
  return read(data_, by_hash_, expired, c, options_.max_result_bytes);
}

}  // namespace kv
