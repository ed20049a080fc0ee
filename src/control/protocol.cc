#include "control/protocol.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace sluice::control {
namespace {

// Explicit byte shifts rather than memcpy so the wire stays little-endian on
// any host.
void put_le(uint8_t* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* in, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

void encode_peer(Writer* w, const PeerEventMsg& m) {
  w->u32(m.rank);
  w->u8(static_cast<uint8_t>(m.state));
  w->str(m.reason);
  w->str(m.host);
  w->u32(m.pid);
  w->u32(m.incarnation);
  w->u64(m.epoch);
  w->str(m.fence);
}
bool decode_peer(Reader* r, PeerEventMsg* m) {
  uint8_t state = 0;
  if (!r->u32(&m->rank) || !r->u8(&state) || !r->str(&m->reason) || !r->str(&m->host) ||
      !r->u32(&m->pid) || !r->u32(&m->incarnation) || !r->u64(&m->epoch) || !r->str(&m->fence)) {
    return false;
  }
  if (state > static_cast<uint8_t>(PeerState::kDied)) return false;
  m->state = static_cast<PeerState>(state);
  return true;
}

}  // namespace

std::string rank_list_text(const std::vector<uint32_t>& ranks) {
  std::string s;
  for (uint32_t r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s.empty() ? "(none)" : s;
}

std::string to_string(MsgType type) {
  switch (type) {
    case MsgType::kHello:
      return "HELLO";
    case MsgType::kWelcome:
      return "WELCOME";
    case MsgType::kError:
      return "ERROR";
    case MsgType::kOk:
      return "OK";
    case MsgType::kDeclare:
      return "DECLARE";
    case MsgType::kPut:
      return "PUT";
    case MsgType::kGet:
      return "GET";
    case MsgType::kValue:
      return "VALUE";
    case MsgType::kBarrier:
      return "BARRIER";
    case MsgType::kHeartbeat:
      return "HEARTBEAT";
    case MsgType::kLeave:
      return "LEAVE";
    case MsgType::kPeerEvent:
      return "PEER_EVENT";
    case MsgType::kErase:
      return "ERASE";
    case MsgType::kUndeclare:
      return "UNDECLARE";
    case MsgType::kCounters:
      return "COUNTERS";
    case MsgType::kGather:
      return "GATHER";
    case MsgType::kGathered:
      return "GATHERED";
  }
  return log::cat("type ", static_cast<unsigned>(type));
}

void encode_header(const FrameHeader& h, uint8_t* out) {
  put_le(out + kMagicOffset, h.magic, 4);
  put_le(out + kVersionOffset, h.version, 2);
  put_le(out + kTypeOffset, h.type, 2);
  put_le(out + kRequestIdOffset, h.request_id, 4);
  put_le(out + kLengthOffset, h.length, 4);
}

FrameHeader decode_header(const uint8_t* in) {
  FrameHeader h;
  h.magic = static_cast<uint32_t>(get_le(in + kMagicOffset, 4));
  h.version = static_cast<uint16_t>(get_le(in + kVersionOffset, 2));
  h.type = static_cast<uint16_t>(get_le(in + kTypeOffset, 2));
  h.request_id = static_cast<uint32_t>(get_le(in + kRequestIdOffset, 4));
  h.length = static_cast<uint32_t>(get_le(in + kLengthOffset, 4));
  return h;
}

std::string make_frame(MsgType type, uint32_t request_id, std::string_view payload,
                       uint16_t version) {
  FrameHeader h;
  h.version = version;
  h.type = static_cast<uint16_t>(type);
  h.request_id = request_id;
  h.length = static_cast<uint32_t>(payload.size());
  std::string frame(kHeaderSize + payload.size(), '\0');
  encode_header(h, reinterpret_cast<uint8_t*>(frame.data()));
  std::memcpy(frame.data() + kHeaderSize, payload.data(), payload.size());
  return frame;
}

void Writer::u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
void Writer::u16(uint16_t v) {
  uint8_t b[2];
  put_le(b, v, 2);
  buf_.append(reinterpret_cast<const char*>(b), 2);
}
void Writer::u32(uint32_t v) {
  uint8_t b[4];
  put_le(b, v, 4);
  buf_.append(reinterpret_cast<const char*>(b), 4);
}
void Writer::u64(uint64_t v) {
  uint8_t b[8];
  put_le(b, v, 8);
  buf_.append(reinterpret_cast<const char*>(b), 8);
}
void Writer::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.append(s.data(), s.size());
}

bool Reader::take(size_t n, const char** p) {
  // Compared against what is left, never pos_ + n, so a huge n cannot wrap.
  if (!ok_ || n > data_.size() - pos_) {
    ok_ = false;
    return false;
  }
  *p = data_.data() + pos_;
  pos_ += n;
  return true;
}
bool Reader::u8(uint8_t* v) {
  const char* p;
  if (!take(1, &p)) return false;
  *v = static_cast<uint8_t>(*p);
  return true;
}
bool Reader::u16(uint16_t* v) {
  const char* p;
  if (!take(2, &p)) return false;
  *v = static_cast<uint16_t>(get_le(reinterpret_cast<const uint8_t*>(p), 2));
  return true;
}
bool Reader::u32(uint32_t* v) {
  const char* p;
  if (!take(4, &p)) return false;
  *v = static_cast<uint32_t>(get_le(reinterpret_cast<const uint8_t*>(p), 4));
  return true;
}
bool Reader::u64(uint64_t* v) {
  const char* p;
  if (!take(8, &p)) return false;
  *v = get_le(reinterpret_cast<const uint8_t*>(p), 8);
  return true;
}
bool Reader::i64(int64_t* v) {
  uint64_t u;
  if (!u64(&u)) return false;
  *v = static_cast<int64_t>(u);
  return true;
}
bool Reader::str(std::string* s) {
  uint32_t n;
  const char* p;
  if (!u32(&n) || !take(n, &p)) return false;
  s->assign(p, n);
  return true;
}

std::string encode(const HelloMsg& m) {
  Writer w;
  w.u32(m.rank);
  w.u32(m.world_size);
  w.str(m.host);
  w.u32(m.pid);
  w.str(m.secret);
  w.str(m.fence);
  return w.take();
}
bool decode(std::string_view payload, HelloMsg* m) {
  Reader r(payload);
  r.u32(&m->rank) && r.u32(&m->world_size) && r.str(&m->host) && r.u32(&m->pid) &&
      r.str(&m->secret) && r.str(&m->fence);
  return r.done();
}

std::string encode(const PeerEventMsg& m) {
  Writer w;
  encode_peer(&w, m);
  return w.take();
}
bool decode(std::string_view payload, PeerEventMsg* m) {
  Reader r(payload);
  return decode_peer(&r, m) && r.done();
}

std::string encode(const WelcomeMsg& m) {
  Writer w;
  w.u32(m.heartbeat_ms);
  w.u32(static_cast<uint32_t>(m.peers.size()));
  for (const PeerEventMsg& p : m.peers) encode_peer(&w, p);
  w.u32(m.rank);
  return w.take();
}
bool decode(std::string_view payload, WelcomeMsg* m) {
  Reader r(payload);
  uint32_t n = 0;
  if (!r.u32(&m->heartbeat_ms) || !r.u32(&n)) return false;
  m->peers.clear();
  // Each entry takes at least 29 bytes; checking the count against what is
  // left keeps a hostile count from making us loop (or allocate) for nothing.
  constexpr size_t kMinPeerBytes = 4 + 1 + 4 + 4 + 4 + 4 + 8 + 4;
  if (n > r.remaining() / kMinPeerBytes) return false;
  m->peers.resize(n);
  for (PeerEventMsg& p : m->peers) {
    if (!decode_peer(&r, &p)) return false;
  }
  return r.u32(&m->rank) && r.done();
}

std::string encode(const ErrorMsg& m) {
  Writer w;
  w.u8(static_cast<uint8_t>(m.code));
  w.u32(m.rank);
  w.str(m.text);
  return w.take();
}
bool decode(std::string_view payload, ErrorMsg* m) {
  Reader r(payload);
  uint8_t code = 0;
  r.u8(&code) && r.u32(&m->rank) && r.str(&m->text);
  if (!r.done() || code > static_cast<uint8_t>(ErrorCode::kViewChanged)) return false;
  m->code = static_cast<ErrorCode>(code);
  return true;
}

std::string encode(const DeclareMsg& m) {
  Writer w;
  w.str(m.name);
  w.str(m.canonical);
  w.u32(static_cast<uint32_t>(m.participants.size()));
  for (uint32_t p : m.participants) w.u32(p);
  w.u64(m.timeout_ms);
  w.u64(m.epoch);
  return w.take();
}
bool decode(std::string_view payload, DeclareMsg* m) {
  Reader r(payload);
  uint32_t n = 0;
  if (!r.str(&m->name) || !r.str(&m->canonical) || !r.u32(&n)) return false;
  if (n > r.remaining() / sizeof(uint32_t)) return false;
  m->participants.resize(n);
  for (uint32_t& p : m->participants) r.u32(&p);
  r.u64(&m->timeout_ms) && r.u64(&m->epoch);
  return r.done();
}

std::string encode(const PutMsg& m) {
  Writer w;
  w.str(m.key);
  w.str(m.value);
  return w.take();
}
bool decode(std::string_view payload, PutMsg* m) {
  Reader r(payload);
  r.str(&m->key) && r.str(&m->value);
  return r.done();
}

std::string encode(const GetMsg& m) {
  Writer w;
  w.str(m.key);
  w.i64(m.owner_rank);
  w.u64(m.timeout_ms);
  w.u32(m.owner_incarnation);
  return w.take();
}
bool decode(std::string_view payload, GetMsg* m) {
  Reader r(payload);
  r.str(&m->key) && r.i64(&m->owner_rank) && r.u64(&m->timeout_ms) && r.u32(&m->owner_incarnation);
  return r.done();
}

std::string encode(const ValueMsg& m) {
  Writer w;
  w.str(m.value);
  return w.take();
}
bool decode(std::string_view payload, ValueMsg* m) {
  Reader r(payload);
  r.str(&m->value);
  return r.done();
}

std::string encode(const BarrierMsg& m) {
  Writer w;
  w.str(m.name);
  w.u64(m.timeout_ms);
  w.u64(m.members.size());
  for (uint64_t e : m.members) w.u64(e);
  w.u64(m.self);
  return w.take();
}
bool decode(std::string_view payload, BarrierMsg* m) {
  Reader r(payload);
  uint64_t n = 0;
  if (!(r.str(&m->name) && r.u64(&m->timeout_ms) && r.u64(&n))) return false;
  // Bounded before anything is reserved: the count comes off the wire.
  if (n > kMaxBarrierMembers || n * 8 > payload.size()) return false;
  m->members.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.u64(&m->members[i])) return false;
  }
  r.u64(&m->self);
  return r.done();
}

std::string encode(const BarrierDoneMsg& m) {
  Writer w;
  w.u64(m.generation);
  return w.take();
}
bool decode(std::string_view payload, BarrierDoneMsg* m) {
  Reader r(payload);
  r.u64(&m->generation);
  return r.done();
}

std::string encode(const EraseMsg& m) {
  Writer w;
  w.str(m.key);
  w.u8(m.prefix ? 1 : 0);
  return w.take();
}
bool decode(std::string_view payload, EraseMsg* m) {
  Reader r(payload);
  uint8_t prefix = 0;
  r.str(&m->key) && r.u8(&prefix);
  m->prefix = prefix == 1;
  return r.done() && prefix <= 1;
}

std::string encode(const ErasedMsg& m) {
  Writer w;
  w.u64(m.count);
  return w.take();
}
bool decode(std::string_view payload, ErasedMsg* m) {
  Reader r(payload);
  r.u64(&m->count);
  return r.done();
}

std::string encode(const UndeclareMsg& m) {
  Writer w;
  w.str(m.name);
  w.u64(m.timeout_ms);
  return w.take();
}
bool decode(std::string_view payload, UndeclareMsg* m) {
  Reader r(payload);
  r.str(&m->name) && r.u64(&m->timeout_ms);
  return r.done();
}

std::string encode(const GatherMsg& m) {
  Writer w;
  w.str(m.name);
  w.u64(m.epoch);
  w.u64(m.timeout_ms);
  w.str(m.value);
  return w.take();
}
bool decode(std::string_view payload, GatherMsg* m) {
  Reader r(payload);
  r.str(&m->name) && r.u64(&m->epoch) && r.u64(&m->timeout_ms) && r.str(&m->value);
  return r.done();
}

std::string encode(const GatheredMsg& m) {
  Writer w;
  w.u64(m.epoch);
  w.u32(static_cast<uint32_t>(m.ranks.size()));
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    w.u32(m.ranks[i]);
    w.str(m.values[i]);
  }
  return w.take();
}
bool decode(std::string_view payload, GatheredMsg* m) {
  Reader r(payload);
  uint32_t n = 0;
  if (!r.u64(&m->epoch) || !r.u32(&n)) return false;
  // An entry takes at least 8 bytes (rank, empty value): a hostile count
  // cannot make us allocate more than the payload justifies.
  if (n > r.remaining() / 8) return false;
  m->ranks.resize(n);
  m->values.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (!r.u32(&m->ranks[i]) || !r.str(&m->values[i])) return false;
  }
  return r.done();
}

// The largest report fits in one frame, so a rank never has to split it.
static_assert(6 + kMaxReportedEndpoints * (2 * (4 + kMaxCountersText) + 2 + 4 * 4 + 6 * 8) <=
              kMaxPayload);

std::string encode(const CountersMsg& m) {
  Writer w;
  w.u16(m.format);
  w.u32(static_cast<uint32_t>(m.endpoints.size()));
  for (const EndpointCounters& e : m.endpoints) {
    // Cut to the limits the decoder enforces, so an encoded report always decodes.
    w.str(std::string_view(e.flow).substr(0, kMaxCountersText));
    w.u8(e.role);
    w.u32(e.rank);
    w.u32(e.slot);
    w.u32(e.peers);
    w.u32(e.record_size);
    w.u8(e.state);
    w.str(std::string_view(e.cause).substr(0, kMaxCountersText));
    for (uint64_t v :
         {e.opened_ns, e.segments, e.bytes, e.credit_waits, e.credit_wait_ns, e.parks}) {
      w.u64(v);
    }
    if (m.format < 2) continue;
    for (uint64_t v : {e.ops, e.op_timeouts, e.op_failures}) w.u64(v);
    w.u32(e.ring_segments);
    w.u64(e.ring_fill);
    w.u64(e.park_ns);
    const size_t peers = std::min<size_t>(e.peer_detail.size(), kMaxReportedPeers);
    w.u8(static_cast<uint8_t>(peers));
    for (size_t i = 0; i < peers; ++i) {
      const PeerCounters& p = e.peer_detail[i];
      w.u32(p.rank);
      w.u32(p.slot);
      w.u64(p.heard_ns);
      w.u8(p.ended != 0 ? 1 : 0);
    }
  }
  return w.take();
}

bool decode(std::string_view payload, CountersMsg* m, std::string* problem) {
  std::string ignored;
  std::string& why = problem != nullptr ? *problem : ignored;
  Reader r(payload);
  uint32_t n = 0;
  if (!r.u16(&m->format) || !r.u32(&n)) {
    why = log::cat("a report of ", payload.size(), " bytes is too short for its header");
    return false;
  }
  if (m->format != 1 && m->format != 2) {
    why = log::cat("report format ", m->format, ", this registry reads formats 1 and ",
                   kCountersFormat);
    return false;
  }
  // The smallest entry: two empty strings, two u8, four u32, six u64.
  constexpr size_t kMinEntry = 4 + 1 + 4 * 4 + 1 + 4 + 6 * 8;
  if (n > kMaxReportedEndpoints || n > r.remaining() / kMinEntry) {
    why = log::cat("it claims ", n, " endpoints (at most ", kMaxReportedEndpoints, ") in ",
                   r.remaining(), " bytes");
    return false;
  }
  m->endpoints.assign(n, EndpointCounters{});
  for (uint32_t i = 0; i < n; ++i) {
    EndpointCounters& e = m->endpoints[i];
    if (!r.str(&e.flow) || e.flow.size() > kMaxCountersText) {
      why = log::cat("endpoint ", i, " of ", n, ": its flow name is cut short or longer than ",
                     kMaxCountersText, " bytes");
      return false;
    }
    r.u8(&e.role) && r.u32(&e.rank) && r.u32(&e.slot) && r.u32(&e.peers) && r.u32(&e.record_size) &&
        r.u8(&e.state) && r.str(&e.cause) && r.u64(&e.opened_ns) && r.u64(&e.segments) &&
        r.u64(&e.bytes) && r.u64(&e.credit_waits) && r.u64(&e.credit_wait_ns) && r.u64(&e.parks);
    if (!r.ok()) {
      why = log::cat("endpoint ", i, " of ", n, " (flow '", e.flow, "') is cut short");
      return false;
    }
    if (m->format >= 2) {
      uint8_t peers = 0;
      r.u64(&e.ops) && r.u64(&e.op_timeouts) && r.u64(&e.op_failures) && r.u32(&e.ring_segments) &&
          r.u64(&e.ring_fill) && r.u64(&e.park_ns) && r.u8(&peers);
      if (!r.ok() || peers > kMaxReportedPeers) {
        why = log::cat("endpoint ", i, " of ", n, " (flow '", e.flow,
                       "'): its operation counts or peer count are cut short, or it describes "
                       "more than ",
                       unsigned{kMaxReportedPeers}, " peers");
        return false;
      }
      e.peer_detail.assign(peers, PeerCounters{});
      for (PeerCounters& p : e.peer_detail) {
        r.u32(&p.rank) && r.u32(&p.slot) && r.u64(&p.heard_ns) && r.u8(&p.ended);
        if (!r.ok() || p.ended > 1) {
          why = log::cat("endpoint ", i, " of ", n, " (flow '", e.flow,
                         "'): a peer is cut short or its ended flag is neither 0 nor 1");
          return false;
        }
      }
    }
    const uint8_t max_role = m->format >= 2 ? 3 : 2;
    if (e.role < 1 || e.role > max_role) {
      why = log::cat("endpoint ", i, " of ", n, ": role ", unsigned{e.role},
                     " is not 1 (source), 2 (target)", max_role == 3 ? " or 3 (region)" : "");
      return false;
    }
    if (e.state < 1 || e.state > 5) {
      why = log::cat("endpoint ", i, " of ", n, ": state ", unsigned{e.state},
                     " is not one of 1 (open) .. 5 (aborted)");
      return false;
    }
    if (e.cause.size() > kMaxCountersText) {
      why = log::cat("endpoint ", i, " of ", n, ": its cause is longer than ", kMaxCountersText,
                     " bytes");
      return false;
    }
  }
  if (!r.done()) {
    why = log::cat(r.remaining(), " bytes follow the last of its ", n, " endpoints");
    return false;
  }
  return true;
}

void FrameParser::append(const char* data, size_t n) {
  // Drop consumed bytes before growing, so the buffer stays near one frame.
  if (pos_ > 0 && (pos_ == buf_.size() || pos_ >= 64 * 1024)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

FrameParser::Result FrameParser::next(Frame* out, ErrorCode* code, std::string* problem) {
  const size_t avail = buf_.size() - pos_;
  const auto* p = reinterpret_cast<const uint8_t*>(buf_.data() + pos_);
  if (avail >= kVersionOffset) {
    const auto magic = static_cast<uint32_t>(get_le(p + kMagicOffset, 4));
    if (magic != kFrameMagic) {
      *code = ErrorCode::kProtocol;
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", magic);
      *problem = log::cat("bad magic ", hex, " (expected 0x534c4345 \"SLCE\"): the peer does not",
                          " speak the sluice control protocol");
      return Result::kBad;
    }
  }
  if (check_version_ && avail >= kTypeOffset) {
    const auto version = static_cast<uint16_t>(get_le(p + kVersionOffset, 2));
    if (version != kProtocolVersion) {
      *code = ErrorCode::kProtocol;
      *problem = log::cat("protocol version mismatch: the client speaks version ", version,
                          ", the registry speaks version ", kProtocolVersion,
                          "; use the same sluice release on every rank and for the registry");
      return Result::kBad;
    }
  }
  if (avail < kHeaderSize) return Result::kNeedMore;
  const FrameHeader h = decode_header(p);
  if (h.length > kMaxPayload) {
    *code = ErrorCode::kProtocol;
    *problem = log::cat("frame payload of ", h.length, " bytes exceeds the limit of ", kMaxPayload,
                        " bytes (1 MiB)");
    return Result::kBad;
  }
  if (avail < kHeaderSize + h.length) return Result::kNeedMore;
  out->header = h;
  out->payload.assign(buf_.data() + pos_ + kHeaderSize, h.length);
  pos_ += kHeaderSize + h.length;
  return Result::kFrame;
}

}  // namespace sluice::control
