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
  }
  return "?";
}

Command noop_command() { return Command{}; }

Result execute(std::map<std::string, std::string>& data, const Command& c) {
  Result r;
  switch (c.op) {
    case Op::kNoop:
      break;
    case Op::kPut:
      data[c.key] = c.value;
      r.ok = true;
      break;
    case Op::kGet: {
      auto it = data.find(c.key);
      if (it != data.end()) {
        r.ok = true;
        r.value = it->second;
      }
      break;
    }
    case Op::kDelete:
      r.ok = data.erase(c.key) > 0;
      break;
    case Op::kCas: {
      auto it = data.find(c.key);
      if (it != data.end() && it->second == c.expected) {
        it->second = c.value;
        r.ok = true;
      }
      break;
    }
  }
  return r;
}

Result Store::apply(const Command& c) {
  if (c.is_noop()) {
    applied_.emplace_back(0, 0);
    return {};
  }
  applied_.emplace_back(c.client, c.seq);
  ClientState& cs = clients_[c.client];
  // Clients have one operation outstanding and number them upwards, so any
  // seq at or below the last applied one is a retry already executed.
  if (c.seq <= cs.seq) return cs.result;
  cs.seq = c.seq;
  cs.result = execute(data_, c);
  return cs.result;
}

bool Store::already_applied(uint64_t client, uint64_t seq, Result* result) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || seq > it->second.seq) return false;
  if (seq == it->second.seq && result) *result = it->second.result;
  return seq == it->second.seq;
}

namespace {
uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t fnv_str(uint64_t h, const std::string& s) {
  uint64_t len = s.size();
  h = fnv(h, &len, sizeof len);
  return fnv(h, s.data(), s.size());
}
}  // namespace

uint64_t Store::digest() const {
  // std::map iterates in key order, so equal states hash equally whatever
  // order they were built in.
  uint64_t h = 14695981039346656037ull;
  for (const auto& [k, v] : data_) h = fnv_str(fnv_str(h, k), v);
  for (const auto& [client, cs] : clients_) {
    h = fnv(h, &client, sizeof client);
    h = fnv(h, &cs.seq, sizeof cs.seq);
    h = fnv(h, &cs.result.ok, sizeof cs.result.ok);
    h = fnv_str(h, cs.result.value);
  }
  return h;
}

}  // namespace kv
