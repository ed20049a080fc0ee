#include "control/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace sluice::control {
namespace {

TEST(ProtocolTest, HeaderIsSixteenLittleEndianBytes) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kBarrier);
  h.request_id = 0x01020304;
  h.length = 0x0A0B0C0D;
  uint8_t b[kHeaderSize];
  encode_header(h, b);
  // clang-format off
  const uint8_t expected[kHeaderSize] = {
      0x45, 0x43, 0x4C, 0x53,                          // magic "SLCE" as a LE u32
      kProtocolVersion & 0xFF, kProtocolVersion >> 8,  // version
      9, 0,                                            // type BARRIER
      0x04, 0x03, 0x02, 0x01,                          // request id
      0x0D, 0x0C, 0x0B, 0x0A};                         // length
  // clang-format on
  EXPECT_EQ(0, std::memcmp(b, expected, kHeaderSize));
  const FrameHeader back = decode_header(b);
  EXPECT_EQ(back.magic, kFrameMagic);
  EXPECT_EQ(back.version, kProtocolVersion);
  EXPECT_EQ(back.type, h.type);
  EXPECT_EQ(back.request_id, h.request_id);
  EXPECT_EQ(back.length, h.length);
}

TEST(ProtocolTest, RoundTripsEveryMessage) {
  HelloMsg hello{3, 8, "node7", 4242, "s3cret"};
  HelloMsg hello2;
  ASSERT_TRUE(decode(encode(hello), &hello2));
  EXPECT_EQ(hello2.rank, 3u);
  EXPECT_EQ(hello2.world_size, 8u);
  EXPECT_EQ(hello2.host, "node7");
  EXPECT_EQ(hello2.pid, 4242u);
  EXPECT_EQ(hello2.secret, "s3cret");

  WelcomeMsg welcome{5000,
                     {{0, PeerState::kAlive, "", "a", 1}, {2, PeerState::kDied, "gone", "b", 2}}};
  WelcomeMsg welcome2;
  ASSERT_TRUE(decode(encode(welcome), &welcome2));
  EXPECT_EQ(welcome2.heartbeat_ms, 5000u);
  ASSERT_EQ(welcome2.peers.size(), 2u);
  EXPECT_EQ(welcome2.peers[1].rank, 2u);
  EXPECT_EQ(welcome2.peers[1].state, PeerState::kDied);
  EXPECT_EQ(welcome2.peers[1].reason, "gone");
  EXPECT_EQ(welcome2.peers[1].host, "b");

  ErrorMsg error{ErrorCode::kPeerLost, 7, "rank 7 died"};
  ErrorMsg error2;
  ASSERT_TRUE(decode(encode(error), &error2));
  EXPECT_EQ(error2.code, ErrorCode::kPeerLost);
  EXPECT_EQ(error2.rank, 7u);
  EXPECT_EQ(error2.text, "rank 7 died");

  DeclareMsg declare{"orders", "record_size=16\nmode=shuffle\n", {0, 1, 5}, 1234};
  DeclareMsg declare2;
  ASSERT_TRUE(decode(encode(declare), &declare2));
  EXPECT_EQ(declare2.name, "orders");
  EXPECT_EQ(declare2.canonical, declare.canonical);
  EXPECT_EQ(declare2.participants, declare.participants);
  EXPECT_EQ(declare2.timeout_ms, 1234u);

  GetMsg get{"k", -1, 99};
  GetMsg get2;
  ASSERT_TRUE(decode(encode(get), &get2));
  EXPECT_EQ(get2.key, "k");
  EXPECT_EQ(get2.owner_rank, -1);
  EXPECT_EQ(get2.timeout_ms, 99u);

  PutMsg put{"k", std::string("v\0v", 3)};
  PutMsg put2;
  ASSERT_TRUE(decode(encode(put), &put2));
  EXPECT_EQ(put2.value, put.value);

  BarrierMsg barrier{"b", 0};
  BarrierMsg barrier2;
  ASSERT_TRUE(decode(encode(barrier), &barrier2));
  EXPECT_EQ(barrier2.name, "b");

  PeerEventMsg event{4, PeerState::kLeft, "left the job", "h", 9};
  PeerEventMsg event2;
  ASSERT_TRUE(decode(encode(event), &event2));
  EXPECT_EQ(event2.state, PeerState::kLeft);
  EXPECT_EQ(event2.pid, 9u);

  EraseMsg erase{"flow/q/", true};
  EraseMsg erase2;
  ASSERT_TRUE(decode(encode(erase), &erase2));
  EXPECT_EQ(erase2.key, "flow/q/");
  EXPECT_TRUE(erase2.prefix);
  ErasedMsg erased{7};
  ErasedMsg erased2;
  ASSERT_TRUE(decode(encode(erased), &erased2));
  EXPECT_EQ(erased2.count, 7u);
  UndeclareMsg undeclare{"q", 250};
  UndeclareMsg undeclare2;
  ASSERT_TRUE(decode(encode(undeclare), &undeclare2));
  EXPECT_EQ(undeclare2.name, "q");
  EXPECT_EQ(undeclare2.timeout_ms, 250u);
}

TEST(ProtocolTest, EraseWithAPrefixFlagOtherThanZeroOrOneIsMalformed) {
  Writer w;
  w.str("k");
  w.u8(2);
  EraseMsg m;
  EXPECT_FALSE(decode(w.bytes(), &m));
}

TEST(ProtocolTest, ReaderRejectsLengthsBeyondTheBuffer) {
  Writer w;
  w.u32(0xFFFFFFFFu);  // a string claiming 4 GiB
  w.u8('x');
  Reader r(w.bytes());
  std::string s;
  EXPECT_FALSE(r.str(&s));
  EXPECT_FALSE(r.ok());
  uint8_t b;
  EXPECT_FALSE(r.u8(&b)) << "reads after a failure must fail too";
}

TEST(ProtocolTest, DecodersRejectTruncatedAndTrailingBytes) {
  const std::string hello = encode(HelloMsg{1, 2, "h", 3, "s"});
  HelloMsg m;
  for (size_t n = 0; n < hello.size(); ++n) {
    EXPECT_FALSE(decode(std::string_view(hello).substr(0, n), &m)) << "truncated to " << n;
  }
  EXPECT_FALSE(decode(hello + "x", &m));
  ErrorMsg e;
  Writer w;
  w.u8(200);  // not an ErrorCode
  w.u32(kNoRank);
  w.str("x");
  EXPECT_FALSE(decode(w.bytes(), &e));
}

TEST(ProtocolTest, DecodersRejectHugeCountsWithoutAllocating) {
  Writer w;
  w.str("f");
  w.str("spec");
  w.u32(0x40000000u);  // a billion participants in a few bytes
  w.u64(0);
  DeclareMsg d;
  EXPECT_FALSE(decode(w.bytes(), &d));
  Writer w2;
  w2.u32(0);
  w2.u32(0xFFFFFFFFu);
  WelcomeMsg welcome;
  EXPECT_FALSE(decode(w2.bytes(), &welcome));
}

TEST(ProtocolTest, DecodersSurviveRandomBytes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    HelloMsg a;
    WelcomeMsg b;
    ErrorMsg c;
    DeclareMsg d;
    PutMsg e;
    GetMsg f;
    ValueMsg g;
    BarrierMsg h;
    PeerEventMsg k;
    (void)decode(bytes, &a);
    (void)decode(bytes, &b);
    (void)decode(bytes, &c);
    (void)decode(bytes, &d);
    (void)decode(bytes, &e);
    (void)decode(bytes, &f);
    (void)decode(bytes, &g);
    (void)decode(bytes, &h);
    (void)decode(bytes, &k);
  }
}

TEST(FrameParserTest, SplitsAStreamFedOneByteAtATime) {
  const std::string stream = make_frame(MsgType::kPut, 1, encode(PutMsg{"a", "b"})) +
                             make_frame(MsgType::kHeartbeat, 0, "") +
                             make_frame(MsgType::kGet, 2, encode(GetMsg{"a", 3, 0}));
  FrameParser parser;
  std::vector<Frame> frames;
  for (char ch : stream) {
    parser.append(&ch, 1);
    Frame f;
    ErrorCode code;
    std::string problem;
    FrameParser::Result res;
    while ((res = parser.next(&f, &code, &problem)) == FrameParser::Result::kFrame) {
      frames.push_back(f);
    }
    ASSERT_EQ(res, FrameParser::Result::kNeedMore) << problem;
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].header.type, static_cast<uint16_t>(MsgType::kPut));
  EXPECT_EQ(frames[1].payload, "");
  EXPECT_EQ(frames[2].header.request_id, 2u);
  GetMsg g;
  ASSERT_TRUE(decode(frames[2].payload, &g));
  EXPECT_EQ(g.owner_rank, 3);
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(FrameParserTest, RejectsBadMagicAfterFourBytes) {
  FrameParser parser;
  parser.append("GET ", 4);
  Frame f;
  ErrorCode code;
  std::string problem;
  EXPECT_EQ(parser.next(&f, &code, &problem), FrameParser::Result::kBad);
  EXPECT_EQ(code, ErrorCode::kProtocol);
  EXPECT_NE(problem.find("bad magic"), std::string::npos) << problem;
}

TEST(FrameParserTest, RejectsOtherVersionsNamingBoth) {
  const std::string frame = make_frame(MsgType::kHeartbeat, 0, "", kProtocolVersion + 1);
  FrameParser parser;
  parser.append(frame.data(), frame.size());
  Frame f;
  ErrorCode code;
  std::string problem;
  EXPECT_EQ(parser.next(&f, &code, &problem), FrameParser::Result::kBad);
  EXPECT_NE(problem.find("version " + std::to_string(kProtocolVersion + 1)), std::string::npos)
      << problem;
  EXPECT_NE(problem.find("version " + std::to_string(kProtocolVersion)), std::string::npos)
      << problem;

  FrameParser lenient(/*check_version=*/false);
  lenient.append(frame.data(), frame.size());
  EXPECT_EQ(lenient.next(&f, &code, &problem), FrameParser::Result::kFrame);
}

TEST(FrameParserTest, RejectsPayloadsOverOneMebibyteBeforeTheyArrive) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPut);
  h.length = kMaxPayload + 1;
  uint8_t b[kHeaderSize];
  encode_header(h, b);
  FrameParser parser;
  parser.append(reinterpret_cast<const char*>(b), sizeof b);
  Frame f;
  ErrorCode code;
  std::string problem;
  EXPECT_EQ(parser.next(&f, &code, &problem), FrameParser::Result::kBad);
  EXPECT_NE(problem.find("exceeds"), std::string::npos) << problem;

  h.length = kMaxPayload;  // exactly the limit is allowed
  encode_header(h, b);
  FrameParser ok;
  ok.append(reinterpret_cast<const char*>(b), sizeof b);
  EXPECT_EQ(ok.next(&f, &code, &problem), FrameParser::Result::kNeedMore);
}

}  // namespace
}  // namespace sluice::control
