// The RESP gateway (apps/kv/resp_gateway.h) in this process, against a
// hostile client, with no replicas behind it: its commands that go to the
// log are never answered, so a reply can wait for ever at the head of a
// connection while the replies the gateway makes itself (ECHO) pile up
// behind it. Those finished replies are unsent replies as much as the
// ones written out: they count toward --client-output-buffer-limit and
// --maxmemory-clients.
#include "resp_gateway.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "resp.h"

namespace kv {
namespace {

using Clock = std::chrono::steady_clock;

std::string request(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

// A non-blocking connection to the gateway on 127.0.0.1:port.
class Socket {
 public:
  explicit Socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (ok_) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  // Sends what it can of `pending` (consumed from the front).
  void send_some(std::string* pending) {
    if (pending->empty() || closed_) return;
    const ssize_t n = ::send(fd_, pending->data(), pending->size(), MSG_NOSIGNAL);
    if (n > 0) pending->erase(0, static_cast<size_t>(n));
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) closed_ = true;
  }
  // Reads what has arrived (never more than it must: the test's client
  // reads nothing unless asked); true once the gateway closed it.
  bool read_closed() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        got_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed_ = true;
      return closed_;
    }
  }
  const std::string& got() const { return got_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool closed_ = false;
  std::string got_;
};

class RespGatewayTest : public ::testing::Test {
 protected:
  // A gateway with `options` and one client of the log, whom nothing answers.
  void start(GatewayOptions options) {
    options.port = 0;
    gateway_ = std::make_unique<RespGateway>(options);
    clients_.add(std::make_unique<Client>(Config{}, Protocol::kMultiPaxos, 0,
                                          std::vector<Command>{}, 40, 256));
  }
  // `first` (a GET, never answered, or MULTI) and then `echoes` ECHOs of
  // 64 KiB, written while the gateway polls, never read: whether the
  // gateway closed the connection before `deadline`.
  bool closed_while_pipelining(Socket& hostile, int echoes, Clock::duration deadline,
                               const std::vector<std::string>& first = {"GET", "k"}) {
    std::string pending = request(first);
    const std::string echo = request({"ECHO", std::string(64 * 1024, 'e')});
    for (int i = 0; i < echoes; ++i) pending += echo;
    const auto until = Clock::now() + deadline;
    while (Clock::now() < until) {
      hostile.send_some(&pending);
      gateway_->poll(clients_);
      if (gateway_->stats().evicted > 0) return true;
    }
    return false;
  }

  // A generous output limit and all clients' buffers at most 2 MiB.
  static GatewayOptions evicting() {
    GatewayOptions o;
    o.output_buffer_limit = size_t{64} << 20;
    o.maxmemory_clients = size_t{2} << 20;
    return o;
  }

  std::unique_ptr<RespGateway> gateway_;
  ClientGroup clients_;
};

// 4,095 ECHOs of 64 KiB behind a GET that waits: their replies, ready
// behind it, pass a 1 MiB --client-output-buffer-limit, and the client is
// closed long before it wrote them all (they used to sit there uncounted,
// up to 4,095 of them, 256 MiB, until the GET was answered).
TEST_F(RespGatewayTest, RepliesReadyBehindAWaitingOneCountTowardTheOutputLimit) {
  GatewayOptions o;
  o.output_buffer_limit = size_t{1} << 20;
  o.maxmemory_clients = 0;
  start(o);
  Socket hostile(gateway_->port());
  ASSERT_TRUE(hostile.ok());
  EXPECT_TRUE(closed_while_pipelining(hostile, 4095, std::chrono::seconds(20)))
      << "the gateway never closed a client holding 4,095 ready replies of 64 KiB";
  // (It wrote nothing: the first reply never came.)
  for (int i = 0; i < 100 && !hostile.read_closed(); ++i) gateway_->poll(clients_);
  EXPECT_TRUE(hostile.read_closed());
  EXPECT_EQ(hostile.got(), "");
}

// The same replies count in --maxmemory-clients: with a generous output
// limit, the client holding them is the one closed once all clients'
// buffers pass 2 MiB; a quiet client stays and is served.
TEST_F(RespGatewayTest, RepliesReadyBehindAWaitingOneCountInMaxmemoryClients) {
  start(evicting());
  Socket quiet(gateway_->port());
  Socket hostile(gateway_->port());
  ASSERT_TRUE(quiet.ok() && hostile.ok());
  EXPECT_TRUE(closed_while_pipelining(hostile, 4095, std::chrono::seconds(20)))
      << "the gateway never evicted a client holding 4,095 ready replies of 64 KiB";
  EXPECT_EQ(gateway_->stats().evicted, 1u);
  std::string ping = request({"PING"});
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until && quiet.got().empty()) {
    quiet.send_some(&ping);
    gateway_->poll(clients_);
    EXPECT_FALSE(quiet.read_closed());
  }
  EXPECT_EQ(quiet.got(), "+PONG\r\n");
}

// ECHOs queued in MULTI: their answers, kept for EXEC's array, count in
// --maxmemory-clients too (they counted 32 bytes each).
TEST_F(RespGatewayTest, AnswersQueuedInMultiCountInMaxmemoryClients) {
  start(evicting());
  Socket hostile(gateway_->port());
  ASSERT_TRUE(hostile.ok());
  EXPECT_TRUE(closed_while_pipelining(hostile, 4095, std::chrono::seconds(20), {"MULTI"}))
      << "the gateway never evicted a client with 4,095 ECHOs of 64 KiB queued";
}

// UNWATCH queued in MULTI is bounded as any queued command: past 4,096
// queued, refused (and EXEC would abort), where it used to queue without
// end.
TEST_F(RespGatewayTest, UnwatchQueuedInMultiIsBoundedAsAnyCommand) {
  start(GatewayOptions{});
  Socket client(gateway_->port());
  ASSERT_TRUE(client.ok());
  std::string pending = request({"MULTI"});
  for (int i = 0; i < 4100; ++i) pending += request({"UNWATCH"});
  pending += request({"DISCARD"});
  const auto until = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < until && client.got().find("+OK\r\n", 5) == std::string::npos) {
    client.send_some(&pending);
    gateway_->poll(clients_);
    client.read_closed();
  }
  const std::string& got = client.got();
  size_t queued = 0;
  for (size_t at = got.find("+QUEUED"); at != std::string::npos; at = got.find("+QUEUED", at + 1))
    ++queued;
  EXPECT_EQ(queued, kMaxPendingReplies);
  EXPECT_NE(got.find("-ERR the transaction would take more than one log entry may"),
            std::string::npos)
      << got.substr(got.size() > 300 ? got.size() - 300 : 0);
  EXPECT_EQ(got.substr(got.size() - 5), "+OK\r\n");
}

// An MGET's values count in --maxmemory-clients as its keys' answers come,
// not only once all have: the log answers 99 of an MGET's 100 reads with
// values of 64 KiB (6.2 MiB held for the reply) and not the last, and the
// client is evicted under a 2 MiB limit (the values sat uncounted until
// the reply was whole: up to the store's longest reply per MGET).
TEST_F(RespGatewayTest, AnMgetsValuesCountInMaxmemoryClientsAsTheyCome) {
  start(evicting());
  Socket hostile(gateway_->port());
  ASSERT_TRUE(hostile.ok());
  std::vector<std::string> mget = {"MGET"};
  for (int i = 0; i < 100; ++i) mget.push_back("k" + std::to_string(i));
  std::string pending = request(mget);
  // The gateway hands the MGET's reads to the log's client, which sends them.
  std::vector<Command> sent;
  uint64_t now_ms = 1;
  const auto until = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < until && sent.size() < 100) {
    hostile.send_some(&pending);
    gateway_->poll(clients_);
    Outbox out;
    clients_.tick(++now_ms, out);
    for (const Message& m : out) {
      if (m.type == MsgType::kRequest) sent.insert(sent.end(), m.cmds.begin(), m.cmds.end());
    }
  }
  ASSERT_EQ(sent.size(), 100u);
  Message reply;
  reply.type = MsgType::kReply;
  reply.to = static_cast<uint32_t>(sent[0].client);  // (the identity's low half: the client's id)
  for (size_t i = 0; i + 1 < sent.size(); ++i) {
    reply.cmds.push_back(sent[i]);
    reply.results.push_back(Result{true, std::string(64 * 1024, 'v')});
  }
  Outbox ignored;
  clients_.receive(reply, ignored);
  for (int i = 0; i < 100 && gateway_->stats().evicted == 0; ++i) gateway_->poll(clients_);
  EXPECT_EQ(gateway_->stats().evicted, 1u)
      << "a client holding 99 of its MGET's values of 64 KiB was not evicted under 2 MiB";
  for (int i = 0; i < 100 && !hostile.read_closed(); ++i) gateway_->poll(clients_);
  EXPECT_TRUE(hostile.read_closed());
}

}  // namespace
}  // namespace kv
