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

Result Store::apply(const Command& c, Applied* what) {
  Applied dummy;
  Applied& how = what ? *what : dummy;
  if (c.is_noop()) {
    how = Applied::kNoop;
    applied_.emplace_back(0, 0);
    return {};
  }
  ClientState& cs = clients_[c.client];
  if (c.seq <= cs.seq) {
    // A retry that took effect before: its first result, if still kept.
    applied_.emplace_back(c.client, c.seq);
    const uint64_t back = cs.seq - c.seq;
    if (back >= cs.results.size()) {
      how = Applied::kForgotten;
      return {};
    }
    how = Applied::kDuplicate;
    return cs.results[cs.results.size() - 1 - back];
  }
  if (c.seq != cs.seq + 1) {
    // Its predecessor is not in the log yet (lost on the way); executing
    // this one first would reorder the client's commands.
    how = Applied::kSkipped;
    ++skipped_;
    applied_.emplace_back(0, 0);
    return {};
  }
  how = Applied::kExecuted;
  applied_.emplace_back(c.client, c.seq);
  cs.seq = c.seq;
  cs.results.push_back(execute(data_, c));
  if (cs.results.size() > kClientWindow) cs.results.pop_front();
  return cs.results.back();
}

bool Store::already_applied(uint64_t client, uint64_t seq, Result* result) const {
  auto it = clients_.find(client);
  if (it == clients_.end() || seq > it->second.seq) return false;
  const uint64_t back = it->second.seq - seq;
  const std::deque<Result>& kept = it->second.results;
  if (back >= kept.size()) return false;
  if (result) *result = kept[kept.size() - 1 - back];
  return true;
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
    for (const Result& r : cs.results) {
      h = fnv(h, &r.ok, sizeof r.ok);
      h = fnv_str(h, r.value);
    }
  }
  return h;
}

}  // namespace kv
