// python/src/alltoallv.h: MPI's Alltoallv over a flow of byte records, on
// the public sluice API alone: every rank sends one buffer of any size to
// every rank (of the job, or of a membership view) and receives one from
// each. A buffer travels as a header record (its length) and then records
// of up to a segment's payload, which its target reassembles in order (the
// records of one source reach one target in push order); a sending thread
// pushes while the calling thread consumes, so that full rings never stop
// both. sluice.Cluster.alltoallv and sluice.dataframe (Arrow IPC streams)
// use it: among the job's ranks, every call goes over one Exchange that
// the Cluster keeps; in a membership view, each call declares its own.
#pragma once

#include <sluice/sluice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::python {

// A received buffer: `size` bytes, uninitialized before they arrive.
struct ReceivedBuffer {
  std::unique_ptr<std::byte[]> data;
  size_t size = 0;
};

// What one alltoallv call is.
struct AlltoallvSpec {
  std::string name;            // the flow's name: the same on every rank, new per call
  uint32_t segment_bytes = 0;  // 0: 64 KiB
  std::optional<View> view;    // among this view's members only
};

// One flow that carries any number of alltoallv calls among the job's
// ranks, one after the other: declaring a flow takes milliseconds (the
// registry's round trips and the rings' set-up), an exchange of small
// buffers over a declared one tens of microseconds. A call is over on a
// rank when a whole buffer came from every rank, so no call needs the
// flow's end; a rank a call ahead (it had what it needed and went on) may
// send the next call's buffers while this one still receives: they are
// kept, copied, for the next call. Every rank taking part makes the same
// calls in the same order, as MPI's collectives. After a failed call the
// exchange is broken (a peer may be a call ahead or behind for good):
// the caller drops it and the next call declares a new one.
class Exchange {
 public:
  // Declares flow `spec.name` among the ranks of the job or of spec.view
  // (throws as alltoallv does) and opens this rank's source and target.
  Exchange(Cluster& cluster, const AlltoallvSpec& spec);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // One call: sends[i] to the i-th rank of ranks(), one buffer back from
  // each. Throws as alltoallv does (and is broken() afterwards).
  std::vector<ReceivedBuffer> run(std::span<const std::span<const std::byte>> sends,
                                  Deadline deadline);
  // The end of the exchange on this rank: its source's end goes to every
  // rank (a failure there is not an error: the job is being left) and,
  // with `drain`, what comes until every source's end (or the deadline)
  // is consumed. The handles are destroyed after it.
  void finish(Deadline deadline, bool drain);

  bool broken() const { return broken_; }
  const std::vector<uint32_t>& ranks() const { return ranks_; }

 private:
  struct Call;
  void receive(Call& call, uint32_t from, std::span<const std::byte> rec);

  std::string name_;
  std::vector<uint32_t> ranks_;
  uint32_t me_ = 0;
  size_t chunk_ = 0;
  DeclaredFlow flow_;
  Source<Bytes> out_;
  Target<Bytes> in_;
  // Records of the next call that came during this one, per source.
  std::vector<std::vector<std::vector<std::byte>>> early_;
  bool broken_ = false;
};

// This rank's part of an all-to-all: sends[i] goes to the i-th rank taking
// part (every rank of the job, or the view's members, increasing; `ranks`
// says which, so sends.size() must equal it) and the result's i-th buffer
// came from that rank. A collective: every rank taking part calls it with
// the same spec. Throws PeerLostError, Error(kTimeout) at the deadline,
// Error(kViewChanged), Error(kInvalidArgument) on a bad count of buffers.
// Declares a flow of its own for the call (an Exchange of one call).
std::vector<ReceivedBuffer> alltoallv(Cluster& cluster, const AlltoallvSpec& spec,
                                      std::span<const std::span<const std::byte>> sends,
                                      Deadline deadline);

// The ranks an alltoallv with `spec` exchanges among, in order.
std::vector<uint32_t> alltoallv_ranks(const Cluster& cluster, const AlltoallvSpec& spec);

}  // namespace sluice::python
