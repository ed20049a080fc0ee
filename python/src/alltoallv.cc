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

}  // namespace

std::vector<uint32_t> alltoallv_ranks(const Cluster& cluster, const AlltoallvSpec& spec) {
  if (spec.view) return spec.view->members;
  std::vector<uint32_t> all(cluster.world_size());
  for (uint32_t r = 0; r < all.size(); ++r) all[r] = r;
  return all;
}

std::vector<ReceivedBuffer> alltoallv(Cluster& cluster, const AlltoallvSpec& s,
                                      std::span<const std::span<const std::byte>> sends,
                                      Deadline deadline) {
  const std::vector<uint32_t> ranks = alltoallv_ranks(cluster, s);
  const auto mine = std::find(ranks.begin(), ranks.end(), cluster.rank());
  if (mine == ranks.end()) {
    throw Error(ErrorCode::kInvalidArgument, "alltoallv '" + s.name +
                                                 "': this rank is not a member of view " +
                                                 std::to_string(s.view ? s.view->epoch : 0));
  }
  const auto n = static_cast<uint32_t>(ranks.size());
  if (sends.size() != n) {
    throw Error(ErrorCode::kInvalidArgument,
                "alltoallv '" + s.name + "': " + std::to_string(sends.size()) +
                    " buffers to send, one for each of the " + std::to_string(n) + " ranks");
  }
  const auto me = static_cast<uint32_t>(mine - ranks.begin());
  std::vector<Endpoint> eps;
  for (uint32_t r : ranks) eps.push_back(Endpoint{r, 0});
  auto spec = shuffle<Bytes>(s.name)
                  .sources(eps)
                  .targets(eps)
                  .explicit_targets()
                  .type_tag("sluice.python.alltoallv")
                  .segment_bytes(s.segment_bytes != 0 ? s.segment_bytes : kDefaultSegmentBytes);
  const size_t chunk = spec.spec().max_record_bytes();
  DeclaredFlow flow = declare_in(cluster, s.view, "alltoallv '" + s.name + "'", spec);
  Source<Bytes> out = cluster.source(spec, 0);
  Target<Bytes> in = cluster.target(spec, 0);

  // The sending thread: to every rank, starting with the next one (so that
  // not every rank writes to the first at once), a header and the chunks.
  Status sent = Status::kOk;
  std::string send_error;
  std::optional<LostPeer> send_peer;
  std::thread sender([&] {
    for (uint32_t k = 1; k <= n && sent == Status::kOk; ++k) {
      const uint32_t t = (me + k) % n;
      const std::span<const std::byte> buf = sends[t];
      const uint64_t len = buf.size();
      std::byte header[kHeaderBytes];
      std::memcpy(header, &len, sizeof(len));
      sent = out.push_to(t, header, deadline);
      for (size_t at = 0; at < buf.size() && sent == Status::kOk; at += chunk)
        sent = out.push_to(t, buf.subspan(at, std::min(chunk, buf.size() - at)), deadline);
    }
    if (sent == Status::kOk) sent = out.close(deadline);
    if (sent != Status::kOk) {
      send_error = out.error();
      send_peer = out.lost_peer();
    }
  });

  // This thread: every source's header, then its bytes, in order.
  std::vector<ReceivedBuffer> got(n);
  std::vector<size_t> filled(n, 0);
  std::vector<char> started(n, 0);
  Status recv = Status::kOk;
  std::string recv_error;
  for (;;) {
    Result<RecordBatch> batch = in.consume(deadline);
    if (!batch) {
      recv = batch.status();
      break;
    }
    const uint32_t from = in.last_source();
    for (std::span<const std::byte> rec : *batch) {
      if (!started[from]) {
        uint64_t len = 0;
        if (rec.size() != kHeaderBytes) {
          recv_error = "a buffer's first record is not its length";
          break;
        }
        std::memcpy(&len, rec.data(), sizeof(len));
        // (No exception may leave this loop while the sending thread runs.)
        got[from].data.reset(
            len > kMaxBuffer ? nullptr : new (std::nothrow) std::byte[std::max<uint64_t>(len, 1)]);
        if (got[from].data == nullptr) {
          recv_error = "rank " + std::to_string(ranks[from]) + " announced a buffer of " +
                       std::to_string(len) + " bytes, which cannot be allocated";
          break;
        }
        got[from].size = len;
        started[from] = 1;
        continue;
      }
      if (rec.size() > got[from].size - filled[from]) {
        recv_error = "more bytes than the buffer's length";
        break;
      }
      std::memcpy(got[from].data.get() + filled[from], rec.data(), rec.size());
      filled[from] += rec.size();
    }
    if (!recv_error.empty()) break;
  }
  if (recv != Status::kEndOfFlow || !recv_error.empty()) {
    // Ending the target lets the peers' pushes to it fail rather than wait.
    const std::string error = recv_error.empty() ? in.error() : recv_error;
    const std::optional<LostPeer> peer = in.lost_peer();
    in = Target<Bytes>();
    sender.join();
    if (!recv_error.empty()) {
      throw Error(ErrorCode::kProtocol, "alltoallv '" + s.name + "': " + recv_error);
    }
    throw_status(recv, "alltoallv '" + s.name + "': " + error, peer);
  }
  sender.join();
  if (sent != Status::kOk)
    throw_status(sent, "alltoallv '" + s.name + "': " + send_error, send_peer);
  for (uint32_t i = 0; i < n; ++i) {
    if (!started[i] || filled[i] != got[i].size) {
      throw Error(ErrorCode::kProtocol, "alltoallv '" + s.name + "': rank " +
                                            std::to_string(ranks[i]) + "'s buffer ended early");
    }
  }
  return got;
}

}  // namespace sluice::python
