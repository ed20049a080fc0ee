#include "codec.h"

#include <cstring>

#include "wire.h"

namespace kv {

using wire::Reader;
using Writer = wire::Writer<std::vector<std::byte>>;

void encode(const Message& m, std::vector<std::byte>& out) {
  out.clear();
  Writer w{out};
  w.put<uint8_t>(static_cast<uint8_t>(m.type));
  w.put(m.from);
  w.put(m.to);
  w.put(m.view);
  w.put(m.session);
  w.put(m.a);
  w.put(m.b);
  w.put(m.c);
  w.put<uint8_t>(m.flag);
  w.put<uint32_t>(static_cast<uint32_t>(m.entries.size()));
  for (const Entry& e : m.entries) {
    w.put(e.slot);
    w.put(e.ballot);
    w.put<uint8_t>(e.committed);
    w.put(e.session);
    w.put(e.msgnum);
    w.cmd(e.cmd);
    w.put<uint32_t>(static_cast<uint32_t>(e.cmds.size()));
    for (const Command& c : e.cmds) w.cmd(c);
  }
  w.put<uint32_t>(static_cast<uint32_t>(m.cmds.size()));
  for (const Command& c : m.cmds) w.cmd(c);
  w.put<uint32_t>(static_cast<uint32_t>(m.results.size()));
  for (const Result& r : m.results) {
    w.put<uint8_t>(static_cast<uint8_t>(r.ok | r.refused << 1));
    w.str(r.value);
  }
  w.str(m.blob);
}

bool decode(std::span<const std::byte> in, Message* m, std::string* why) {
  Reader r{in};
  uint8_t type = r.get<uint8_t>();
  if (type > static_cast<uint8_t>(MsgType::kFinished)) {
    *why = "unknown message type " + std::to_string(type);
    return false;
  }
  m->type = static_cast<MsgType>(type);
  m->from = r.get<uint32_t>();
  m->to = r.get<uint32_t>();
  m->view = r.get<uint64_t>();
  m->session = r.get<uint64_t>();
  m->a = r.get<uint64_t>();
  m->b = r.get<uint64_t>();
  m->c = r.get<uint64_t>();
  m->flag = r.get<uint8_t>() != 0;
  uint32_t n = r.get<uint32_t>();
  m->entries.clear();
  // Every entry takes at least 84 bytes: a count beyond what is left is bad.
  if (r.ok && n > (in.size() - r.pos) / 84) r.ok = false;
  for (uint32_t i = 0; r.ok && i < n; ++i) {
    Entry e;
    e.slot = r.get<uint64_t>();
    e.ballot = r.get<uint64_t>();
    e.committed = r.get<uint8_t>() != 0;
    e.session = r.get<uint64_t>();
    e.msgnum = r.get<uint64_t>();
    e.cmd = r.cmd();
    // A command takes at least 47 bytes (empty strings), a result 5.
    uint32_t k = r.get<uint32_t>();
    if (r.ok && k > (in.size() - r.pos) / 47) r.ok = false;
    if (r.ok) e.cmds.reserve(k);
    for (uint32_t j = 0; r.ok && j < k; ++j) e.cmds.push_back(r.cmd());
    m->entries.push_back(std::move(e));
  }
  n = r.get<uint32_t>();
  m->cmds.clear();
  if (r.ok && n > (in.size() - r.pos) / 47) r.ok = false;
  if (r.ok) m->cmds.reserve(n);
  for (uint32_t i = 0; r.ok && i < n; ++i) m->cmds.push_back(r.cmd());
  n = r.get<uint32_t>();
  m->results.clear();
  if (r.ok && n > (in.size() - r.pos) / 5) r.ok = false;
  if (r.ok) m->results.reserve(n);
  for (uint32_t i = 0; r.ok && i < n; ++i) {
    Result res;
    const uint8_t flags = r.get<uint8_t>();
    res.ok = (flags & 1) != 0;
    res.refused = (flags & 2) != 0;
    res.value = r.str();
    m->results.push_back(std::move(res));
  }
  m->blob = r.str();
  if (!r.ok || r.pos != in.size()) {
    *why = "malformed message of " + std::to_string(in.size()) +
           " bytes (truncated or trailing bytes)";
    return false;
  }
  return true;
}

}  // namespace kv
