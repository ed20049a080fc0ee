// libFuzzer target: the registry's frame decoder (control/protocol.h), which
// reads whatever a peer sends. The input is cut into the chunks a socket
// might deliver (the first byte picks the chunk size) and fed to FrameParser;
// every frame's payload then goes through every message decoder, whatever its
// type says. Besides ASan/UBSan findings it checks two properties: the parser
// never holds more than one frame plus the last chunk, and a payload that
// decodes re-encodes to exactly the same bytes (decoders reject trailing and
// non-canonical bytes, so two different payloads never mean the same thing).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control/protocol.h"

namespace {

using namespace sluice::control;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_control_frame: %s\n", what);
    std::abort();
  }
}

template <class Msg>
void round_trip(std::string_view payload) {
  Msg m;
  if (decode(payload, &m))
    require(encode(m) == payload, "a decoded payload re-encodes differently");
}

void decode_all(const Frame& f) {
  const std::string_view p = f.payload;
  require(p.size() == f.header.length, "payload length differs from the header's");
  (void)to_string(static_cast<MsgType>(f.header.type));
  round_trip<HelloMsg>(p);
  round_trip<PeerEventMsg>(p);
  round_trip<WelcomeMsg>(p);
  round_trip<ErrorMsg>(p);
  round_trip<DeclareMsg>(p);
  round_trip<PutMsg>(p);
  round_trip<GetMsg>(p);
  round_trip<ValueMsg>(p);
  round_trip<BarrierMsg>(p);
  round_trip<BarrierDoneMsg>(p);
  round_trip<EraseMsg>(p);
  round_trip<ErasedMsg>(p);
  round_trip<UndeclareMsg>(p);
  round_trip<CountersMsg>(p);
  // The header re-encodes too.
  uint8_t raw[kHeaderSize];
  encode_header(f.header, raw);
  const FrameHeader back = decode_header(raw);
  require(back.magic == f.header.magic && back.version == f.header.version &&
              back.type == f.header.type && back.request_id == f.header.request_id &&
              back.length == f.header.length,
          "a header does not survive encode/decode");
}

void parse(const uint8_t* data, size_t size, size_t chunk, bool check_version) {
  FrameParser parser(check_version);
  size_t off = 0;
  bool bad = false;
  while (off < size && !bad) {
    const size_t n = std::min(chunk, size - off);
    parser.append(reinterpret_cast<const char*>(data + off), n);
    off += n;
    for (;;) {
      Frame f;
      sluice::ErrorCode code = sluice::ErrorCode::kInternal;
      std::string problem;
      const FrameParser::Result r = parser.next(&f, &code, &problem);
      if (r == FrameParser::Result::kNeedMore) break;
      if (r == FrameParser::Result::kBad) {
        require(code == sluice::ErrorCode::kProtocol && !problem.empty(),
                "a bad frame without a protocol error and a reason");
        bad = true;  // the stream cannot be resynchronised: a peer is dropped here
        break;
      }
      decode_all(f);
    }
    require(parser.buffered() <= kHeaderSize + kMaxPayload + n, "the parser holds too much");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // Chunk sizes 1..256, and "everything at once" for 0.
  const size_t chunk = data[0] == 0 ? size : data[0];
  parse(data + 1, size - 1, chunk, /*check_version=*/true);
  parse(data + 1, size - 1, chunk, /*check_version=*/false);
  // The bare payload through every decoder, without a frame around it.
  Frame f;
  f.payload.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  f.header.length = static_cast<uint32_t>(f.payload.size());
  decode_all(f);
  return 0;
}
