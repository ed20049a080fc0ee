// python/src/alltoallv.h: MPI's Alltoallv over one flow of byte records, on
// the public sluice API alone: every rank sends one buffer of any size to
// every rank (of the job, or of a membership view) and receives one from
// each. A buffer travels as a header record (its length) and then records
// of up to a segment's payload, which its target reassembles in order (the
// records of one source reach one target in push order); a sending thread
// pushes while the calling thread consumes, so that full rings never stop
// both. sluice.Cluster.alltoallv and sluice.dataframe (Arrow IPC streams)
// use it.
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

// This rank's part of an all-to-all: sends[i] goes to the i-th rank taking
// part (every rank of the job, or the view's members, increasing; `ranks`
// says which, so sends.size() must equal it) and the result's i-th buffer
// came from that rank. A collective: every rank taking part calls it with
// the same spec. Throws PeerLostError, Error(kTimeout) at the deadline,
// Error(kViewChanged), Error(kInvalidArgument) on a bad count of buffers.
std::vector<ReceivedBuffer> alltoallv(Cluster& cluster, const AlltoallvSpec& spec,
                                      std::span<const std::span<const std::byte>> sends,
                                      Deadline deadline);

// The ranks an alltoallv with `spec` exchanges among, in order.
std::vector<uint32_t> alltoallv_ranks(const Cluster& cluster, const AlltoallvSpec& spec);

}  // namespace sluice::python
