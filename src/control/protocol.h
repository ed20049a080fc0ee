// The registry wire format: small framed messages over TCP, spoken by
// RegistryServer, RegistryClient and the observer of registry_observer.h,
// and by nothing else.
//
// Every frame is a 16-byte header followed by `length` payload bytes. All
// integers are little-endian, whatever the host.
//
//   byte  0        4          6          8              12             16
//         +--------+----------+----------+--------------+--------------+---------
//         | magic  | version  | type     | request id   | length       | payload
//         | u32    | u16      | u16      | u32          | u32          | length B
//         +--------+----------+----------+--------------+--------------+---------
//   magic = 0x534C4345 ("ECLS" on the wire, "SLCE" as a number)
//   version = sluice::kProtocolVersion of the sender
//   request id: chosen by the client, echoed in the reply; 0 in server-initiated
//   frames (PEER_EVENT), in HEARTBEAT (both ways) and in LEAVE
//   length <= kMaxPayload (1 MiB); a larger length is a protocol error
//
// Payload fields are encoded back to back with Writer and read with Reader:
// u8, u32, u64 (i64 as its two's-complement u64) little-endian; a string is a
// u32 byte count followed by the bytes; a list is a u32 count followed by the
// elements. Messages (-> reply):
//
//   HELLO     u32 rank, u32 world_size, str host, u32 pid, str secret
//             -> WELCOME | ERROR. Rank kNoRank with world_size 0: an
//             observer (registry_observer.h), which may send only GET,
//             HEARTBEAT and LEAVE and is never one of the job's ranks.
//   WELCOME   u32 heartbeat_ms, u32 n, n x PEER_EVENT body (every rank the
//             registry has seen, including the new one)
//   ERROR     u8 code (sluice::ErrorCode), u32 rank (kNoRank unless a peer was
//             lost), str text. Its layout never changes between versions so
//             that a peer of another version can still read why it was refused.
//   OK        (empty)
//   DECLARE   str name, str canonical spec, u32 n, n x u32 participant rank,
//             u64 timeout_ms (0: no limit) -> OK | ERROR
//   PUT       str key, str value -> OK
//   GET       str key, i64 owner_rank (-1: none), u64 timeout_ms,
//             u32 owner_incarnation (0xFFFFFFFF: any) -> VALUE | ERROR
//   VALUE     str value
//   BARRIER   str name, u64 timeout_ms, u64 n, n x u64 member, u64 self
//             -> OK (u64 generation: the caller's call counted from 0, the
//             same for every member it met) | ERROR
//   ERASE     str key, u8 prefix (0: the key itself, 1: every key that starts
//             with `key`) -> OK (u64 number of keys erased). A GET waiting
//             for an erased key keeps waiting (the key may be put again).
//   UNDECLARE str name, u64 timeout_ms -> OK | ERROR: the caller is done with
//             flow `name`. Answered once every participant has undeclared
//             (or is lost); the registry then forgets the declaration and
//             erases every key under "flow/<name>/" before it answers, so a
//             new DECLARE of the name starts from nothing. A timed-out
//             UNDECLARE still counts.
//   HEARTBEAT (empty) -> HEARTBEAT (request id 0): the registry answers
//             every one, so a client can tell that the registry is alive
//   LEAVE     (empty), no reply; the registry then closes the connection
//   PEER_EVENT (server -> client, request id 0)
//             u32 rank, u8 state (PeerState), str reason, str host, u32 pid,
//             u32 incarnation (how many times the rank joined again after it died),
//             u64 epoch (the membership view's epoch after the event: 0 for
//             the job as launched, one more at every loss, departure and
//             rejoin; a WELCOME's entries carry the current one)
//   GATHER    str name, u64 epoch, u64 timeout_ms, str value -> GATHERED |
//             ERROR: the n-th call of `name` in view `epoch` (counted per
//             rank and view; a failed call does not count). Answered once
//             every member of the view (every rank not lost) made its n-th
//             call; ERROR kViewChanged at once if `epoch` is not the
//             current view, or when the view changes before then.
//   GATHERED  u64 epoch, u32 n, n x { u32 rank, str value } (rank order)
//   COUNTERS  (client -> server, request id 0, no reply; sent with every
//             HEARTBEAT and once before LEAVE) the rank's flow endpoints'
//             counters (observe/endpoint_counters.h), for the registry's
//             Prometheus endpoint:
//             u16 format (kCountersFormat), u32 n (<= kMaxReportedEndpoints),
//             n x { str flow (<= 255 B), u8 role (1 source, 2 target),
//             u32 rank, u32 slot, u32 peers, u32 record_size, u8 state (1 open,
//             2 closing, 3 ended, 4 failed, 5 aborted), str cause (<= 255 B),
//             u64 opened_ns, u64 segments, u64 bytes, u64 credit_waits,
//             u64 credit_wait_ns, u64 parks
//             [format 2 adds: u64 ops, u64 op_timeouts, u64 op_failures,
//             u32 ring_segments, u64 ring_fill, u64 park_ns,
//             u8 m (<= 16), m x { u32 rank, u32 slot, u64 heard_ns, u8 ended
//             (0 or 1) } (the first peers of the endpoint); and role 3, a
//             region handle] }.
//             The format has its own number so that the report can grow
//             without a new protocol version; the registry reads formats 1
//             and 2. A report the registry cannot
//             read is logged and counted, never fatal to the rank: telemetry
//             must not fail a job.
//
// Decoders never read out of bounds, never throw and reject trailing bytes:
// everything here may come from a hostile peer.
//
// Thread safety: Writer, Reader and FrameParser are values used by one thread;
// the free functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/errors.h"
#include "sluice/version.h"

namespace sluice::control {

inline constexpr uint32_t kFrameMagic = 0x534C4345;  // "SLCE"
inline constexpr size_t kHeaderSize = 16;
inline constexpr uint32_t kMaxPayload = 1u << 20;
// ERROR.rank when the error is not about a lost peer.
inline constexpr uint32_t kNoRank = 0xFFFFFFFFu;
// HELLO's rank of a process that joins a running job as a new member: the
// registry gives it the lowest rank number no process holds (a vacancy of
// an elastic job, or a rank that left), as that number's next incarnation.
inline constexpr uint32_t kJoinRank = 0xFFFFFFFEu;

// Header field offsets (see the diagram above).
inline constexpr size_t kMagicOffset = 0;
inline constexpr size_t kVersionOffset = 4;
inline constexpr size_t kTypeOffset = 6;
inline constexpr size_t kRequestIdOffset = 8;
inline constexpr size_t kLengthOffset = 12;
static_assert(kVersionOffset == kMagicOffset + sizeof(uint32_t));
static_assert(kTypeOffset == kVersionOffset + sizeof(uint16_t));
static_assert(kRequestIdOffset == kTypeOffset + sizeof(uint16_t));
static_assert(kLengthOffset == kRequestIdOffset + sizeof(uint32_t));
static_assert(kHeaderSize == kLengthOffset + sizeof(uint32_t));
static_assert(sizeof(kProtocolVersion) == 2, "the header carries the version as a u16");

enum class MsgType : uint16_t {
  kHello = 1,
  kWelcome = 2,
  kError = 3,
  kOk = 4,
  kDeclare = 5,
  kPut = 6,
  kGet = 7,
  kValue = 8,
  kBarrier = 9,
  kHeartbeat = 10,
  kLeave = 11,
  kPeerEvent = 12,
  kErase = 13,
  kUndeclare = 14,
  kCounters = 15,
  kGather = 16,
  kGathered = 17,
};
// "HELLO", "PEER_EVENT", ... or "type 99" for an unknown value.
std::string to_string(MsgType type);

// Same numbering as PeerTable::State.
enum class PeerState : uint8_t { kAlive = 0, kLeft = 1, kDied = 2 };

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t request_id = 0;
  uint32_t length = 0;
};

// Writes exactly kHeaderSize bytes to `out`.
void encode_header(const FrameHeader& header, uint8_t* out);
// Reads exactly kHeaderSize bytes from `in`; no validation.
FrameHeader decode_header(const uint8_t* in);

// Header plus payload, ready to send.
std::string make_frame(MsgType type, uint32_t request_id, std::string_view payload,
                       uint16_t version = kProtocolVersion);

// Appends little-endian fields to a byte string.
class Writer {
 public:
  void u8(uint8_t v);
  void u16(uint16_t v);
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s);
  const std::string& bytes() const { return buf_; }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

// Reads fields from a byte string it does not own. Every read checks the
// remaining length; after the first failed read every later read fails too,
// so a decoder may check ok() once at the end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool u8(uint8_t* v);
  bool u16(uint16_t* v);
  bool u32(uint32_t* v);
  bool u64(uint64_t* v);
  bool i64(int64_t* v);
  bool str(std::string* s);
  size_t remaining() const { return ok_ ? data_.size() - pos_ : 0; }
  bool ok() const { return ok_; }
  // True if every read succeeded and every byte was consumed.
  bool done() const { return ok_ && pos_ == data_.size(); }

 private:
  bool take(size_t n, const char** p);
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Message bodies. encode() returns the payload; decode() returns false on any
// malformed input (short, oversized counts, trailing bytes, bad enum values).
struct HelloMsg {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string host;
  uint32_t pid = 0;
  std::string secret;
  std::string fence;  // control/fence.h's identity of the process (empty: none)
};
struct PeerEventMsg {
  uint32_t rank = 0;
  PeerState state = PeerState::kAlive;
  std::string reason;
  std::string host;
  uint32_t pid = 0;
  uint32_t incarnation = 0;  // times the rank joined again after it died
  uint64_t epoch = 0;        // the membership view's epoch after this event
  std::string fence;         // the process's fence identity (control/fence.h), if it sent one
};
struct WelcomeMsg {
  uint32_t heartbeat_ms = 0;
  std::vector<PeerEventMsg> peers;
  // The rank this connection joined as: the one its HELLO named, or for a
  // spare the rank whose place it takes; kNoRank for an observer.
  uint32_t rank = kNoRank;
};
struct ErrorMsg {
  ErrorCode code = ErrorCode::kInternal;
  uint32_t rank = kNoRank;
  std::string text;
};
// A DECLARE's epoch when the declaration is not scoped to a view.
inline constexpr uint64_t kUnscopedEpoch = ~uint64_t{0};
struct DeclareMsg {
  std::string name;
  std::string canonical;
  std::vector<uint32_t> participants;
  uint64_t timeout_ms = 0;
  // A view-scoped declaration (Cluster::declare(view, spec)): it agrees only
  // within view `epoch`, and fails with kViewChanged for every participant
  // if the view is not current or changes before all declared.
  uint64_t epoch = kUnscopedEpoch;
};
struct PutMsg {
  std::string key;
  std::string value;
};
// A GET's owner_incarnation when any incarnation of the owner will do.
inline constexpr uint32_t kAnyIncarnation = 0xFFFFFFFFu;
struct GetMsg {
  std::string key;
  int64_t owner_rank = -1;
  uint64_t timeout_ms = 0;
  // The owner's incarnation the caller waits for (a flow pinned to it):
  // once another one joined, the key will never be put by this one.
  uint32_t owner_incarnation = kAnyIncarnation;
};
struct ValueMsg {
  std::string value;
};
// A barrier call. `members` empty: every rank (as endpoint (rank, 0)).
// Otherwise the endpoints (rank << 32 | slot) that meet, `self` among them.
struct BarrierMsg {
  std::string name;
  uint64_t timeout_ms = 0;
  std::vector<uint64_t> members;
  uint64_t self = 0;
};
inline constexpr size_t kMaxBarrierMembers = 1u << 20;
// The OK payload of a completed BARRIER.
struct BarrierDoneMsg {
  uint64_t generation = 0;
};
struct EraseMsg {
  std::string key;
  bool prefix = false;  // on the wire a u8, 0 or 1 (anything else is malformed)
};
// The OK payload of an ERASE.
struct ErasedMsg {
  uint64_t count = 0;
};
struct UndeclareMsg {
  std::string name;
  uint64_t timeout_ms = 0;
};
// A view-scoped allgather call: the caller's contribution to the n-th
// gather `name` among the members of view `epoch`.
struct GatherMsg {
  std::string name;
  uint64_t epoch = 0;
  uint64_t timeout_ms = 0;
  std::string value;
};
// Its answer: every member's value, in rank order.
struct GatheredMsg {
  uint64_t epoch = 0;
  std::vector<uint32_t> ranks;
  std::vector<std::string> values;
};

// COUNTERS: one endpoint's counters, as observe/endpoint_counters.h keeps them.
inline constexpr uint16_t kCountersFormat = 2;
inline constexpr uint8_t kMaxReportedPeers = 16;
struct PeerCounters {
  uint32_t rank = 0, slot = 0;
  uint64_t heard_ns = 0;  // CLOCK_REALTIME of a target's last segment from it; 0: never
  uint8_t ended = 0;      // a target got its END
};
inline constexpr uint32_t kMaxReportedEndpoints = 1024;
inline constexpr size_t kMaxCountersText = 255;  // flow name, cause
struct EndpointCounters {
  std::string flow;
  uint8_t role = 1;   // 1 source, 2 target, 3 region handle (format 2)
  uint32_t rank = 0;  // the endpoint is (rank, slot)
  uint32_t slot = 0;
  uint32_t peers = 0;
  uint32_t record_size = 0;  // 0: byte records (no record count)
  uint8_t state = 1;         // 1 open, 2 closing, 3 ended, 4 failed, 5 aborted
  std::string cause;
  uint64_t opened_ns = 0, segments = 0, bytes = 0, credit_waits = 0, credit_wait_ns = 0, parks = 0;
  // Format 2 (zero and empty in a format 1 report).
  uint64_t ops = 0, op_timeouts = 0, op_failures = 0;
  uint32_t ring_segments = 0;  // a flow endpoint's segments per ring
  uint64_t ring_fill = 0;      // a source's: segments of a ring not yet consumed, last seen
  uint64_t park_ns = 0;        // time its thread spent parked
  std::vector<PeerCounters> peer_detail;
};
struct CountersMsg {
  uint16_t format = kCountersFormat;
  std::vector<EndpointCounters> endpoints;
};

std::string encode(const HelloMsg& m);
std::string encode(const PeerEventMsg& m);
std::string encode(const WelcomeMsg& m);
std::string encode(const ErrorMsg& m);
// A list of ranks as messages of both sides print it: "1,3,4", or "(none)".
std::string rank_list_text(const std::vector<uint32_t>& ranks);

std::string encode(const DeclareMsg& m);
std::string encode(const PutMsg& m);
std::string encode(const GetMsg& m);
std::string encode(const ValueMsg& m);
std::string encode(const BarrierMsg& m);
std::string encode(const BarrierDoneMsg& m);
std::string encode(const EraseMsg& m);
std::string encode(const ErasedMsg& m);
std::string encode(const UndeclareMsg& m);
std::string encode(const GatherMsg& m);
std::string encode(const GatheredMsg& m);
[[nodiscard]] bool decode(std::string_view payload, HelloMsg* m);
[[nodiscard]] bool decode(std::string_view payload, PeerEventMsg* m);
[[nodiscard]] bool decode(std::string_view payload, WelcomeMsg* m);
[[nodiscard]] bool decode(std::string_view payload, ErrorMsg* m);
[[nodiscard]] bool decode(std::string_view payload, DeclareMsg* m);
[[nodiscard]] bool decode(std::string_view payload, PutMsg* m);
[[nodiscard]] bool decode(std::string_view payload, GetMsg* m);
[[nodiscard]] bool decode(std::string_view payload, ValueMsg* m);
[[nodiscard]] bool decode(std::string_view payload, BarrierMsg* m);
[[nodiscard]] bool decode(std::string_view payload, BarrierDoneMsg* m);
[[nodiscard]] bool decode(std::string_view payload, EraseMsg* m);
[[nodiscard]] bool decode(std::string_view payload, ErasedMsg* m);
[[nodiscard]] bool decode(std::string_view payload, UndeclareMsg* m);
[[nodiscard]] bool decode(std::string_view payload, GatherMsg* m);
[[nodiscard]] bool decode(std::string_view payload, GatheredMsg* m);
std::string encode(const CountersMsg& m);
// *problem (if given) says what is wrong, e.g. "endpoint 3 of 10: role 7 is
// neither 1 (source) nor 2 (target)".
[[nodiscard]] bool decode(std::string_view payload, CountersMsg* m, std::string* problem = nullptr);

struct Frame {
  FrameHeader header;
  std::string payload;
};

// Cuts a byte stream into frames. Validates each header as early as the bytes
// allow (the magic after 4 bytes, the version after 6, the length after 16) so
// that garbage is rejected without waiting for more of it. Its buffer never
// holds more than one frame plus what the caller appended since.
class FrameParser {
 public:
  enum class Result { kNeedMore, kFrame, kBad };
  // check_version: reject frames of another protocol version, with a message
  // worded for the registry's side (the registry checks; the client reads
  // ERROR frames of any version so it can report why it was refused).
  explicit FrameParser(bool check_version = true) : check_version_(check_version) {}
  void append(const char* data, size_t n);
  // kFrame: *out holds the next frame. kBad: *code and *problem say what is
  // wrong (e.g. "protocol version mismatch: the client speaks version 2, the
  // registry speaks version 1"); the stream cannot be resynchronised afterwards.
  Result next(Frame* out, ErrorCode* code, std::string* problem);
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  bool check_version_;
};

}  // namespace sluice::control
