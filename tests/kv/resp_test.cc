// The RESP2 codec (apps/kv/resp.h): requests as redis-cli and
// redis-benchmark send them, byte by byte and pipelined; inline commands;
// and the protocol errors that close a connection (garbage, a bulk length
// of 1 GiB, too many arguments).
#include "resp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kv::resp {
namespace {

TEST(RespTest, AnArrayOfBulkStringsParsesAtOnceAndByteByByte) {
  const std::string req = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva\r\nl\r\n";
  std::vector<std::string> args;
  size_t used = 0;
  std::string error;
  ASSERT_EQ(parse_request(req, &args, &used, &error), Parsed::kRequest) << error;
  EXPECT_EQ(used, req.size());
  EXPECT_EQ(args, (std::vector<std::string>{"SET", "key", "va\r\nl"}));
  for (size_t n = 0; n < req.size(); ++n) {
    EXPECT_EQ(parse_request(req.substr(0, n), &args, &used, &error), Parsed::kIncomplete) << n;
  }
}

TEST(RespTest, PipelinedRequestsComeOneAtATime) {
  const std::string one = "*1\r\n$4\r\nPING\r\n";
  const std::string two = "*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
  const std::string both = one + two;
  std::vector<std::string> args;
  size_t used = 0;
  std::string error;
  ASSERT_EQ(parse_request(both, &args, &used, &error), Parsed::kRequest);
  EXPECT_EQ(args, std::vector<std::string>{"PING"});
  ASSERT_EQ(used, one.size());
  ASSERT_EQ(parse_request(std::string_view(both).substr(used), &args, &used, &error),
            Parsed::kRequest);
  EXPECT_EQ(args, (std::vector<std::string>{"GET", ""}));
  EXPECT_EQ(used, two.size());
}

TEST(RespTest, InlineCommandsSplitOnSpacesAndHonourQuotes) {
  std::vector<std::string> args;
  size_t used = 0;
  std::string error;
  ASSERT_EQ(parse_request("set k \"a b\\\"c\"\r\nrest", &args, &used, &error), Parsed::kRequest);
  EXPECT_EQ(args, (std::vector<std::string>{"set", "k", "a b\"c"}));
  EXPECT_EQ(used, 16u);
  EXPECT_EQ(parse_request("PING", &args, &used, &error), Parsed::kIncomplete);
  EXPECT_EQ(parse_request("get \"open\r\n", &args, &used, &error), Parsed::kError);
}

TEST(RespTest, GarbageAndOversizedRequestsAreProtocolErrors) {
  std::vector<std::string> args;
  size_t used = 0;
  std::string error;
  EXPECT_EQ(parse_request("*x\r\n", &args, &used, &error), Parsed::kError);
  EXPECT_NE(error.find("invalid multibulk length"), std::string::npos) << error;
  EXPECT_EQ(parse_request("*1\r\n+OK\r\n", &args, &used, &error), Parsed::kError);
  EXPECT_NE(error.find("expected '$'"), std::string::npos) << error;
  // A 1 GiB bulk string is refused from its header, before any of its bytes.
  EXPECT_EQ(parse_request("*2\r\n$3\r\nGET\r\n$1073741824\r\n", &args, &used, &error),
            Parsed::kError);
  EXPECT_NE(error.find("invalid bulk length"), std::string::npos) << error;
  EXPECT_EQ(parse_request("*1\r\n$-5\r\n", &args, &used, &error), Parsed::kError);
  EXPECT_EQ(parse_request("*100000\r\n", &args, &used, &error), Parsed::kError);
  EXPECT_EQ(parse_request("*1\r\n$3\r\nabcXY", &args, &used, &error), Parsed::kError);
  EXPECT_NE(error.find("CRLF"), std::string::npos) << error;
  // A header that never ends is not waited for forever.
  EXPECT_EQ(parse_request("*" + std::string(100, '1'), &args, &used, &error), Parsed::kError);
  EXPECT_EQ(parse_request(std::string(kMaxInline + 1, 'a'), &args, &used, &error), Parsed::kError);
}

// A bulk string over the server's limit is refused from its header, before
// any of its bytes has come, and the error names the length and the limit.
TEST(RespTest, ABulkOverTheLimitIsRefusedFromItsHeader) {
  std::vector<std::string> args;
  size_t used = 0;
  std::string error;
  EXPECT_EQ(parse_request("*2\r\n$3\r\nSET\r\n$1025\r\n", &args, &used, &error, 1024),
            Parsed::kError);
  EXPECT_NE(error.find("1025 bytes is over the limit of 1024"), std::string::npos) << error;
  EXPECT_EQ(parse_request("*2\r\n$3\r\nSET\r\n$1024\r\n", &args, &used, &error, 1024),
            Parsed::kIncomplete);
}

// Error and status replies are one line whatever text they carry: a
// client's CR LF quoted back cannot forge a second reply.
TEST(RespTest, ErrorRepliesCannotCarryALineBreak) {
  EXPECT_EQ(error("ERR unknown command 'FOO\r\n+INJECTED\r\n:7'"),
            "-ERR unknown command 'FOO  +INJECTED  :7'\r\n");
  EXPECT_EQ(simple("a\nb"), "+a b\r\n");
  Reply r;
  size_t used = 0;
  std::string why;
  const std::string one = error("x\r\n-y\n");
  ASSERT_EQ(parse_reply(one, &r, &used, &why), Parsed::kRequest);
  EXPECT_EQ(used, one.size()) << "one reply, nothing left over";
}

// An unknown command's error is Redis 7's: each argument quoted and
// followed by a space, the arguments shown cut near 128 bytes (the one that
// crosses it cut to fit, then no more), the name at 128, each at a NUL as
// Redis's printf cuts it, and CR LF scrubbed.
TEST(RespTest, AnUnknownCommandIsQuotedBackAsRedis7Does) {
  EXPECT_EQ(unknown_command({"FOO", "a", "b"}),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
  EXPECT_EQ(unknown_command({"FOO"}), "-ERR unknown command 'FOO', with args beginning with: \r\n");
  EXPECT_EQ(unknown_command({"FOO", ""}),
            "-ERR unknown command 'FOO', with args beginning with: '' \r\n");
  EXPECT_EQ(unknown_command({"F\r\nOO", "a\r\n+OK", "b\n"}),
            "-ERR unknown command 'F  OO', with args beginning with: 'a  +OK' 'b ' \r\n");
  EXPECT_EQ(unknown_command({"FOO", std::string("a\0b", 3), "c"}),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'c' \r\n");
  // 100 bytes, then 25 of the next (128 - 103 shown), then none.
  const std::string a(100, 'a'), b(40, 'b');
  EXPECT_EQ(unknown_command({"FOO", a, b, "c"}),
            "-ERR unknown command 'FOO', with args beginning with: '" + a + "' '" +
                std::string(25, 'b') + "' \r\n");
  EXPECT_EQ(unknown_command({std::string(200, 'X')}),
            "-ERR unknown command '" + std::string(128, 'X') + "', with args beginning with: \r\n");
}

TEST(RespTest, RepliesAreEncodedAsRedisDoes) {
  EXPECT_EQ(simple("OK"), "+OK\r\n");
  EXPECT_EQ(error("ERR no"), "-ERR no\r\n");
  EXPECT_EQ(integer(-3), ":-3\r\n");
  EXPECT_EQ(bulk("a\r\nb"), "$4\r\na\r\nb\r\n");
  EXPECT_EQ(null_bulk(), "$-1\r\n");
  EXPECT_EQ(array({"x", ""}), "*2\r\n$1\r\nx\r\n$0\r\n\r\n");
}

}  // namespace
}  // namespace kv::resp
