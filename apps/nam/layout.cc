#include "layout.h"

#include <sluice/errors.h>
#include <sluice/hash.h>

#include <cstring>

namespace sluice::nam {

uint64_t Layout::version_bytes(uint32_t table) const {
  return 16 + (uint64_t{tables.at(table).payload_bytes} + 7) / 8 * 8;
}

uint64_t Layout::slot_bytes(uint32_t table) const {
  return header_bytes() + versions * version_bytes(table);
}

uint64_t Layout::region_bytes(uint32_t table, uint32_t server) const {
  const uint64_t n = tables.at(table).records;
  const uint64_t mine = n / memory_servers + (server < n % memory_servers ? 1 : 0);
  return std::max<uint64_t>(mine, 1) * slot_bytes(table);
}

uint32_t Layout::find_table(const std::string& name) const {
  for (uint32_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name == name) return t;
  }
  throw Error(ErrorCode::kInvalidArgument, "nam: no table named '" + name + "'");
}

uint64_t version_checksum(uint64_t cid, uint32_t table, uint64_t key,
                          std::span<const std::byte> payload) {
  uint64_t h = hash64(cid ^ 0x6e616d7665727331ull);
  h = hash64(h ^ (uint64_t{table} << 48) ^ key);
  h = hash64(h ^ hash_bytes(payload));
  return h | 1;
}

uint64_t overflow_checksum(uint64_t seq, uint64_t prev, uint64_t until, uint64_t cid,
                           uint32_t table, uint64_t key, std::span<const std::byte> payload) {
  const uint64_t v = version_checksum(cid, table, key, payload);
  return hash64(v ^ hash64(seq ^ 0x6f766572666c6f77ull) ^ hash64(prev * 0x9e3779b97f4a7c15ull) ^
                hash64(until + 0x756e74696cull)) |
         1;
}

namespace {
uint64_t log_checksum(uint64_t ts, uint64_t count, std::span<const std::byte> entries) {
  return hash64(hash64(ts ^ 0x6c6f67ull) ^ count ^ hash_bytes(entries)) | 1;
}
}  // namespace

void encode_log(uint64_t ts, std::span<const LogEntry> entries, std::span<std::byte> out) {
  const uint64_t count = entries.size();
  std::byte* p = out.data();
  for (size_t i = 0; i < entries.size(); ++i) {
    const uint64_t t = entries[i].table;
    std::memcpy(p + 24 + 16 * i, &t, 8);
    std::memcpy(p + 24 + 16 * i + 8, &entries[i].key, 8);
  }
  const uint64_t sum = log_checksum(ts, count, std::span<const std::byte>(p + 24, 16 * count));
  std::memcpy(p, &ts, 8);
  std::memcpy(p + 8, &count, 8);
  std::memcpy(p + 16, &sum, 8);
}

bool decode_log(std::span<const std::byte> in, uint64_t* ts, std::vector<LogEntry>* entries) {
  uint64_t count = 0, sum = 0;
  std::memcpy(ts, in.data(), 8);
  std::memcpy(&count, in.data() + 8, 8);
  std::memcpy(&sum, in.data() + 16, 8);
  if (count > kMaxWrites || 24 + 16 * count > in.size()) return false;
  if (sum != log_checksum(*ts, count, in.subspan(24, 16 * count))) return false;
  entries->clear();
  for (uint64_t i = 0; i < count; ++i) {
    LogEntry e;
    uint64_t t = 0;
    std::memcpy(&t, in.data() + 24 + 16 * i, 8);
    std::memcpy(&e.key, in.data() + 24 + 16 * i + 8, 8);
    e.table = static_cast<uint32_t>(t);
    entries->push_back(e);
  }
  return true;
}

void load_record(const Layout& layout, uint32_t table, uint64_t key,
                 std::span<const std::byte> payload, std::byte* slot) {
  const uint64_t cid = 0;
  const uint64_t sum = version_checksum(cid, table, key, payload);
  std::byte* v = slot + layout.version_offset(table, 0);
  std::memcpy(v, &cid, 8);
  std::memcpy(v + 8, &sum, 8);
  std::memcpy(v + 16, payload.data(), payload.size());
}

}  // namespace sluice::nam
