#include "alltoallv.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

#include "declare.h"

namespace sluice::python {
namespace {

constexpr uint32_t kDefaultSegmentBytes = 64 * 1024;
constexpr size_t kHeaderBytes = sizeof(uint64_t);   // a buffer's first record: its length
constexpr uint64_t kMaxBuffer = uint64_t{1} << 40;  // a length past it is garbage, not data

// A failed call's Status, what error() said and the lost rank, as the
// exception the module translates.
[[noreturn]] void throw_status(Status s, const std::string& what,
                               const std::optional<LostPeer>& peer) {
  if (s == Status::kPeerLost) {
    if (peer) throw PeerLostError(peer->rank, what);
    throw Error(ErrorCode::kPeerLost, what);
  }
  if (s == Status::kTimeout) throw Error(ErrorCode::kTimeout, what);
  if (s == Status::kViewChanged) throw Error(ErrorCode::kViewChanged, what);
  if (s == Status::kInvalid) throw Error(ErrorCode::kInvalidArgument, what);
  throw Error(ErrorCode::kInternal, std::string(to_string(s)) + ": " + what);
}

// A call's buffers must be one for each rank taking part.
void check_count(const std::string& name, size_t sends, size_t ranks) {
  if (sends == ranks) return;
  throw Error(ErrorCode::kInvalidArgument, "alltoallv '" + name + "': " + std::to_string(sends) +
                                               " buffers to send, one for each of the " +
                                               std::to_string(ranks) + " ranks");
}

}  // namespace

std::vector<uint32_t> alltoallv_ranks(const Cluster& cluster, const AlltoallvSpec& spec) {
  if (spec.view) return spec.view->members;
  std::vector<uint32_t> all(cluster.world_size());
  for (uint32_t r = 0; r < all.size(); ++r) all[r] = r;
  return all;
}

// One call's state on the receiving side.
struct Exchange::Call {
  explicit Call(uint32_t n) : got(n), filled(n, 0), started(n, 0) {}
  std::vector<ReceivedBuffer> got;
  std::vector<size_t> filled;
  std::vector<char> started;
  uint32_t complete = 0;  // sources whose whole buffer is here
  std::string error;      // a protocol error, naming what was wrong
  bool done(uint32_t from) const { return started[from] && filled[from] == got[from].size; }
};

Exchange::Exchange(Cluster& cluster, const AlltoallvSpec& s)
    : name_(s.name), ranks_(alltoallv_ranks(cluster, s)) {
  const auto mine = std::find(ranks_.begin(), ranks_.end(), cluster.rank());
  if (mine == ranks_.end()) {
    throw Error(ErrorCode::kInvalidArgument, "alltoallv '" + s.name +
                                                 "': this rank is not a member of view " +
                                                 std::to_string(s.view ? s.view->epoch : 0));
  }
  me_ = static_cast<uint32_t>(mine - ranks_.begin());
  std::vector<Endpoint> eps;
  for (uint32_t r : ranks_) eps.push_back(Endpoint{r, 0});
  auto spec = shuffle<Bytes>(s.name)
                  .sources(eps)
                  .targets(eps)
                  .explicit_targets()
                  .type_tag("sluice.python.alltoallv")
                  .segment_bytes(s.segment_bytes != 0 ? s.segment_bytes : kDefaultSegmentBytes);
  chunk_ = spec.spec().max_record_bytes();
  flow_ = declare_in(cluster, s.view, "alltoallv '" + s.name + "'", spec);
  out_ = cluster.source(spec, 0);
  in_ = cluster.target(spec, 0);
  early_.resize(ranks_.size());
}

Exchange::~Exchange() = default;

void Exchange::receive(Call& call, uint32_t from, std::span<const std::byte> rec) {
  if (call.done(from)) {  // the next call's, from a rank a call ahead
    early_[from].emplace_back(rec.begin(), rec.end());
    return;
  }
  if (!call.started[from]) {
    uint64_t len = 0;
    if (rec.size() != kHeaderBytes) {
      call.error = "a buffer's first record is not its length";
      return;
    }
    std::memcpy(&len, rec.data(), sizeof(len));
    // (No exception may leave the receiving loop while the sending thread runs.)
    call.got[from].data.reset(
        len > kMaxBuffer ? nullptr : new (std::nothrow) std::byte[std::max<uint64_t>(len, 1)]);
    if (call.got[from].data == nullptr) {
      call.error = "rank " + std::to_string(ranks_[from]) + " announced a buffer of " +
                   std::to_string(len) + " bytes, which cannot be allocated";
      return;
    }
    call.got[from].size = len;
    call.started[from] = 1;
  } else {
    if (rec.size() > call.got[from].size - call.filled[from]) {
      call.error = "more bytes than the buffer's length";
      return;
    }
    std::memcpy(call.got[from].data.get() + call.filled[from], rec.data(), rec.size());
    call.filled[from] += rec.size();
  }
  if (call.done(from)) ++call.complete;
}

std::vector<ReceivedBuffer> Exchange::run(std::span<const std::span<const std::byte>> sends,
                                          Deadline deadline) {
  const auto n = static_cast<uint32_t>(ranks_.size());
  if (broken_) {
    throw Error(ErrorCode::kInternal, "alltoallv '" + name_ + "': a call on it failed before");
  }
  check_count(name_, sends.size(), n);
  broken_ = true;  // until the call succeeds

  // The sending thread: to every rank, starting with the next one (so that
  // not every rank writes to the first at once), a header and the chunks;
  // then what is left in partly filled segments is published.
  Status sent = Status::kOk;
  std::string send_error;
  std::optional<LostPeer> send_peer;
  std::thread sender([&] {
    for (uint32_t k = 1; k <= n && sent == Status::kOk; ++k) {
      const uint32_t t = (me_ + k) % n;
      const std::span<const std::byte> buf = sends[t];
      const uint64_t len = buf.size();
      std::byte header[kHeaderBytes];
      std::memcpy(header, &len, sizeof(len));
      sent = out_.push_to(t, header, deadline);
      for (size_t at = 0; at < buf.size() && sent == Status::kOk; at += chunk_)
        sent = out_.push_to(t, buf.subspan(at, std::min(chunk_, buf.size() - at)), deadline);
    }
    if (sent == Status::kOk) sent = out_.flush(deadline);
    if (sent != Status::kOk) {
      send_error = out_.error();
      send_peer = out_.lost_peer();
    }
  });

  // This thread: first what came early, then every source's header and
  // bytes, in order, until a whole buffer is here from every rank.
  Call call(n);
  for (uint32_t from = 0; from < n; ++from) {
    std::vector<std::vector<std::byte>> early = std::move(early_[from]);
    early_[from].clear();
    for (const std::vector<std::byte>& rec : early) {
      if (call.error.empty()) receive(call, from, rec);
    }
  }
  Status recv = Status::kOk;
  while (call.error.empty() && call.complete < n) {
    Result<RecordBatch> batch = in_.consume(deadline);
    if (!batch) {
      recv = batch.status();
      break;
    }
    const uint32_t from = in_.last_source();
    for (std::span<const std::byte> rec : *batch) {
      receive(call, from, rec);
      if (!call.error.empty()) break;
    }
  }
  if (recv != Status::kOk || !call.error.empty()) {
    // Ending the target lets the peers' pushes to it fail rather than wait.
    const std::string error =
        call.error.empty() ? (recv == Status::kEndOfFlow ? "a rank's source ended" : in_.error())
                           : call.error;
    const std::optional<LostPeer> peer = in_.lost_peer();
    in_ = Target<Bytes>();
    sender.join();
    if (!call.error.empty() || recv == Status::kEndOfFlow) {
      throw Error(ErrorCode::kProtocol, "alltoallv '" + name_ + "': " + error);
    }
    throw_status(recv, "alltoallv '" + name_ + "': " + error, peer);
  }
  sender.join();
  if (sent != Status::kOk)
    throw_status(sent, "alltoallv '" + name_ + "': " + send_error, send_peer);
  broken_ = false;
  return std::move(call.got);
}

void Exchange::finish(Deadline deadline, bool drain) {
  if (!broken_ && out_.close(deadline) == Status::kOk && drain) {
    for (;;) {
      Result<RecordBatch> batch = in_.consume(deadline);
      if (!batch) break;  // every source's end, or a failure: either way, done
    }
  }
  out_ = Source<Bytes>();
  in_ = Target<Bytes>();
  flow_ = DeclaredFlow();
}

std::vector<ReceivedBuffer> alltoallv(Cluster& cluster, const AlltoallvSpec& s,
                                      std::span<const std::span<const std::byte>> sends,
                                      Deadline deadline) {
  check_count(s.name, sends.size(), alltoallv_ranks(cluster, s).size());  // before declaring
  Exchange exchange(cluster, s);
  std::vector<ReceivedBuffer> got = exchange.run(sends, deadline);
  // Every rank had every buffer: the ends come at once.
  exchange.finish(deadline, true);
  return got;
}

}  // namespace sluice::python
