#include "sockets.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace sluice::query {

namespace {

struct Header {
  uint32_t exchange, slot, kind, bytes;
};

std::string errno_text() { return std::strerror(errno); }

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The address this host reaches the registry from (no packet is sent: a
// UDP connect only picks the route); 127.0.0.1 if that cannot be told.
std::string local_address(const std::string& registry) {
  const size_t colon = registry.rfind(':');
  const std::string host = registry.substr(0, colon);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  std::string ip = "127.0.0.1";
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) == 0 && res != nullptr) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf) != nullptr) ip = buf;
    }
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(res);
  }
  return ip;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

SocketMesh::SocketMesh(sluice::Cluster& cluster, const RuntimeOptions& options)
    : rank_(cluster.rank()),
      world_(cluster.world_size()),
      threads_(options.threads),
      batch_bytes_(options.batch_bytes),
      fds_(cluster.world_size(), -1) {
  for (uint32_t s = 0; s < threads_; ++s) mailboxes_.push_back(std::make_unique<Mailbox>());
  // Listens on the one address the peers are told (the one this host
  // reaches the registry from: 127.0.0.1 for a job on one host), never on
  // every interface.
  const std::string host = local_address(cluster.options().registry);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  socklen_t len = sizeof addr;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw QueryError("sockets exchange: this host's address '" + host + "' is not IPv4");
  }
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, static_cast<int>(world_) + 8) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw QueryError("sockets exchange: cannot listen on " + host + ": " + errno_text());
  }
  const std::string me = host + ":" + std::to_string(ntohs(addr.sin_port));
  const std::vector<std::string> peers = cluster.allgather("query.sockets", me);

  // Connect to every lower rank (their listeners are up: they published
  // after listen), then accept every higher one. Each side says its rank first.
  for (uint32_t r = 0; r < rank_; ++r) {
    const std::string& p = peers[r];
    const size_t colon = p.rfind(':');
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(std::stoi(p.substr(colon + 1))));
    if (::inet_pton(AF_INET, p.substr(0, colon).c_str(), &to.sin_addr) != 1) {
      throw QueryError("sockets exchange: rank " + std::to_string(r) +
                       " published a bad address '" + p + "'");
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
        !write_all(fd, &rank_, sizeof rank_)) {
      throw QueryError("sockets exchange: cannot connect to rank " + std::to_string(r) + " at " +
                       p + ": " + errno_text());
    }
    set_nodelay(fd);
    fds_[r] = fd;
  }
  for (uint32_t n = rank_ + 1; n < world_; ++n) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    uint32_t who = 0;
    if (fd < 0 || !read_all(fd, &who, sizeof who) || who <= rank_ || who >= world_ ||
        fds_[who] != -1) {
      throw QueryError("sockets exchange: a bad connection while waiting for the higher ranks");
    }
    set_nodelay(fd);
    fds_[who] = fd;
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  sender_ = std::thread([this] { sender_loop(); });
  for (uint32_t r = 0; r < world_; ++r)
    if (fds_[r] >= 0) receivers_.emplace_back([this, r] { receiver_loop(r); });
}

SocketMesh::~SocketMesh() {
  {
    std::lock_guard<std::mutex> g(out_m_);
    stopping_ = true;
  }
  out_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  // Our side is done sending; the receivers end when the peers are done too.
  for (int fd : fds_)
    if (fd >= 0) ::shutdown(fd, SHUT_WR);
  for (auto& t : receivers_) t.join();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void SocketMesh::post(uint32_t slot, Frame f) {
  Mailbox& box = *mailboxes_[slot];
  {
    std::lock_guard<std::mutex> g(box.m);
    box.frames.push_back(std::move(f));
  }
  box.cv.notify_one();
}

void SocketMesh::send(uint32_t rank, uint32_t slot, Frame f) {
  if (rank == rank_) return post(slot, std::move(f));
  std::unique_lock<std::mutex> g(out_m_);
  out_cv_.wait(g, [&] { return out_.size() < 64 || stopping_; });
  out_.push_back({rank, slot, std::move(f)});
  g.unlock();
  out_cv_.notify_all();
}

void SocketMesh::sender_loop() {
  for (;;) {
    std::unique_lock<std::mutex> g(out_m_);
    out_cv_.wait(g, [&] { return !out_.empty() || stopping_; });
    if (out_.empty()) return;
    Out o = std::move(out_.front());
    out_.pop_front();
    g.unlock();
    out_cv_.notify_all();
    const Header h{o.frame.exchange, o.slot, o.frame.kind,
                   static_cast<uint32_t>(o.frame.data.size())};
    // A failed write means the peer is gone; its receiver side reports it.
    if (write_all(fds_[o.rank], &h, sizeof h) && !o.frame.data.empty()) {
      write_all(fds_[o.rank], o.frame.data.data(), o.frame.data.size());
    }
  }
}

void SocketMesh::receiver_loop(uint32_t peer) {
  const int fd = fds_[peer];
  for (;;) {
    Header h{};
    if (!read_all(fd, &h, sizeof h) || h.slot >= threads_ || h.bytes > (64u << 20)) break;
    Frame f;
    f.exchange = h.exchange;
    f.source_rank = peer;
    f.kind = h.kind;
    f.data.resize(h.bytes);
    if (h.bytes != 0 && !read_all(fd, f.data.data(), h.bytes)) break;
    post(h.slot, std::move(f));
  }
  for (uint32_t s = 0; s < threads_; ++s) {
    Frame gone;
    gone.kind = 2;
    gone.source_rank = peer;
    post(s, std::move(gone));
  }
}

namespace {

class SocketPort final : public QueryWorker::Port {
 public:
  SocketPort(SocketMesh& mesh, ExchangeId x, const Runtime::Exchange& ex, uint32_t batch_bytes)
      : mesh_(mesh),
        x_(x),
        broadcast_(ex.kind == ExchangeKind::kBroadcast),
        stride_(ex.stride),
        limit_(std::max(batch_bytes, ex.stride)),
        targets_(ex.targets),
        bufs_(ex.targets.size()) {
    for (auto& b : bufs_) b.reserve(limit_);
  }
  bool send(const std::byte* recs, const uint32_t* targets, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      const std::byte* r = recs + i * stride_;
      if (broadcast_) {
        for (uint32_t t = 0; t < bufs_.size(); ++t) add(t, r);
      } else {
        add(targets[i], r);
      }
    }
    return true;
  }
  bool close() override {
    if (closed_) return true;
    closed_ = true;
    for (uint32_t t = 0; t < bufs_.size(); ++t) {
      if (!bufs_[t].empty()) flush(t);
      Frame end;
      end.exchange = x_;
      end.source_rank = mesh_.rank();
      end.kind = 1;
      mesh_.send(targets_[t].rank, targets_[t].slot, std::move(end));
    }
    return true;
  }
  void abort() override { closed_ = true; }

 private:
  void add(uint32_t t, const std::byte* r) {
    std::vector<std::byte>& b = bufs_[t];
    b.insert(b.end(), r, r + stride_);
    if (b.size() + stride_ > limit_) flush(t);
  }
  void flush(uint32_t t) {
    Frame f;
    f.exchange = x_;
    f.source_rank = mesh_.rank();
    f.data = std::move(bufs_[t]);
    bufs_[t] = {};
    bufs_[t].reserve(limit_);
    mesh_.send(targets_[t].rank, targets_[t].slot, std::move(f));
  }
  SocketMesh& mesh_;
  ExchangeId x_;
  bool broadcast_;
  uint32_t stride_, limit_;
  std::vector<sluice::Endpoint> targets_;
  std::vector<std::vector<std::byte>> bufs_;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<SocketDriver> SocketMesh::driver(QueryWorker& qw, uint32_t slot) {
  return std::make_unique<SocketDriver>(*this, qw, slot, 0);
}

std::unique_ptr<QueryWorker::Port> SocketMesh::open(SocketDriver& d, ExchangeId x,
                                                    const Runtime::Exchange& ex) {
  bool target = false;
  for (const sluice::Endpoint& e : ex.targets) target |= e.rank == rank_ && e.slot == d.slot();
  if (target) d.add_input(x, ex.stride, ex.num_sources);
  return std::make_unique<SocketPort>(*this, x, ex, batch_bytes_);
}

SocketDriver::SocketDriver(SocketMesh& mesh, QueryWorker& qw, uint32_t slot, size_t exchanges)
    : mesh_(mesh), qw_(qw), slot_(slot), inputs_(exchanges) {}

void SocketDriver::add_input(ExchangeId x, uint32_t stride, uint32_t sources) {
  if (inputs_.size() <= x) inputs_.resize(x + 1);
  Input& in = inputs_[x];
  in.active = true;
  in.stride = stride;
  in.sources = sources;
}

size_t SocketDriver::poll() {
  Mailbox& box = mesh_.mailbox(slot_);
  {
    std::lock_guard<std::mutex> g(box.m);
    taken_.swap(box.frames);
  }
  size_t work = 0;
  while (!taken_.empty()) {
    Frame f = std::move(taken_.front());
    taken_.pop_front();
    ++work;
    if (f.kind == 2) {
      if (gone_.size() <= f.source_rank) gone_.resize(f.source_rank + 1, false);
      gone_[f.source_rank] = true;
      continue;
    }
    if (f.exchange >= inputs_.size() || !inputs_[f.exchange].active) continue;
    Input& in = inputs_[f.exchange];
    if (f.kind == 1) {
      ++in.ended;
      if (in.ended_by_rank.size() <= f.source_rank) in.ended_by_rank.resize(f.source_rank + 1, 0);
      ++in.ended_by_rank[f.source_rank];
      continue;
    }
    qw_.deliver(f.exchange, f.data.data(), f.data.size() / in.stride, in.stride);
  }
  return work;
}

void SocketDriver::idle(size_t work) {
  if (work != 0) {
    rounds_ = 0;
    return;
  }
  if (++rounds_ < 64) return std::this_thread::yield();
  Mailbox& box = mesh_.mailbox(slot_);
  std::unique_lock<std::mutex> g(box.m);
  box.cv.wait_for(g, std::chrono::milliseconds(1), [&] { return !box.frames.empty(); });
}

InputState SocketDriver::state(ExchangeId x, std::string* why, std::optional<uint32_t>* lost_rank) {
  if (x >= inputs_.size() || !inputs_[x].active) return InputState::kEnded;
  const Input& in = inputs_[x];
  if (in.ended == in.sources) return InputState::kEnded;
  for (uint32_t r = 0; r < gone_.size(); ++r) {
    const uint32_t ended = r < in.ended_by_rank.size() ? in.ended_by_rank[r] : 0;
    if (gone_[r] && ended < mesh_.threads()) {
      *why = "PeerLost: rank " + std::to_string(r) +
             " closed its connection before it finished sending";
      *lost_rank = r;
      return InputState::kFailed;
    }
  }
  return InputState::kOpen;
}

}  // namespace sluice::query
