// apps/nam/part_store.h: partitions on the memory servers, written and read
// with one-sided operations only (the RDMA radix join's and the RDMA
// aggregation's "remote software-managed buffers", paper section 5.2-5.3).
//
// Every memory server exposes one region per algorithm run:
//
//   [0]   pool cursor: chunks handed out so far (fetch_add)
//   [8]   claim cursor: partitions taken for the second phase (server 0's is used)
//   [64]  heads[relation][local partition][writer]: each writer's last chunk
//         of that partition, as chunk number + 1 (0: none)
//   pool  chunks of chunk_bytes: [next chunk + 1 | record count | records]
//
// Partition p lives on memory server p % M. A writer (one compute thread)
// keeps one chunk-sized buffer per (relation, partition) in its own memory;
// a full buffer is shipped with one fetch_add on its server's pool cursor
// (which reserves the chunk) and one write of the whole buffer. The chunk
// names the writer's previous chunk of the partition, so each writer leaves
// one list per partition and no two writers touch the same word; at the end
// it writes its list heads (finish()). Space is shared by all partitions of
// a server, so a skewed partition needs no estimate of its own; only the
// server's total is sized in advance (--space-factor), and running out is an
// error saying so, never lost data.
//
// After every writer finished (a barrier), any thread reads a partition by
// reading its heads and walking the lists.
//
// Errors: every remote failure throws OlapError naming the memory server,
// the operation and sluice's status ("PeerLost: ..." when the server is gone).
//
// Thread safety: Remote, PartitionWriter: one thread each (they own that
// thread's region handles). StoreLayout is a value.
#pragma once

#include <sluice/sluice.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "olap.h"

namespace sluice::nam::olap {

// One thread's handles to the region `name` on every memory server.
class Remote {
 public:
  // Opens the region on ranks 0 .. servers-1 (waiting until they exposed it).
  Remote(Cluster& cluster, const std::string& name, uint32_t servers,
         std::chrono::milliseconds op_timeout = std::chrono::seconds(30));
  void read(uint32_t server, uint64_t offset, void* out, size_t bytes);
  void write(uint32_t server, uint64_t offset, const void* in, size_t bytes);
  uint64_t fetch_add(uint32_t server, uint64_t offset, uint64_t delta);
  // How the operations travel ("shm", "ofi", "ofi (emulated atomics)", ...).
  const char* path() const { return regions_.front().path(); }
  uint64_t operations() const { return operations_; }

 private:
  [[noreturn]] void fail(uint32_t server, const char* what, Status st);
  std::string name_;
  std::vector<RemoteRegion> regions_;
  std::chrono::milliseconds op_timeout_;
  uint64_t operations_ = 0;
};

struct StoreLayout {
  uint32_t servers = 1, writers = 1, partitions = 1, relations = 1;
  uint32_t record_bytes = 16, chunk_bytes = 2048;
  uint64_t pool_chunks = 0;  // per server

  static constexpr uint64_t kPoolCursor = 0, kClaimCursor = 8, kHeads = 64, kChunkHeader = 16;
  uint32_t server_of(uint32_t p) const { return p % servers; }
  uint32_t local_of(uint32_t p) const { return p / servers; }
  uint32_t local_partitions() const { return (partitions + servers - 1) / servers; }
  uint32_t records_per_chunk() const {
    return static_cast<uint32_t>((chunk_bytes - kChunkHeader) / record_bytes);
  }
  uint64_t heads_offset(uint32_t relation, uint32_t local) const {
    return kHeads + (static_cast<uint64_t>(relation) * local_partitions() + local) * writers * 8;
  }
  uint64_t pool_offset() const { return (heads_offset(relations, 0) + 63) / 64 * 64; }
  uint64_t chunk_offset(uint64_t chunk) const { return pool_offset() + chunk * chunk_bytes; }
  uint64_t bytes() const { return chunk_offset(pool_chunks); }
};

// A layout whose pool holds, on each server, its partitions' share of
// `records` records (all relations) if they spread evenly over the
// partitions, times `space_factor`, plus one partly filled chunk per writer,
// relation and partition. Throws OlapError on a
// chunk too small for one record.
StoreLayout make_store_layout(uint32_t servers, uint32_t writers, uint32_t partitions,
                              uint32_t relations, uint32_t record_bytes, uint32_t chunk_bytes,
                              uint64_t records, double space_factor);

// One compute thread's buffers, shipped into the store.
//
// Background shipping (the default; the paper copies the buffers with
// selectively signalled RDMA writes while partitioning goes on): a full
// buffer is handed to a shipper thread of this writer through a
// single-producer ring, and the partitioning thread takes a spare buffer
// and goes on; the shipper does the fetch_add and the write and returns the
// buffer. The partitioning thread only waits when every spare is in flight.
// RemoteRegion has no asynchronous write, so a thread stands in for the
// NIC. Inline shipping does both in the partitioning thread.
class PartitionWriter {
 public:
  PartitionWriter(const StoreLayout& layout, Remote& store, uint32_t writer, bool background);
  // Stops the shipper (after an exception: what is in flight may or may not
  // have been written; the run has failed anyway).
  ~PartitionWriter();
  PartitionWriter(const PartitionWriter&) = delete;
  PartitionWriter& operator=(const PartitionWriter&) = delete;

  // Appends a record to (relation, partition); hands the buffer over when
  // full. No allocation, no lock, no system call except the shipping.
  template <class T>
  void add(uint32_t relation, uint32_t partition, const T& record) {
    const size_t b = static_cast<size_t>(relation) * layout_.partitions + partition;
    std::byte* buf = arena_.data() + static_cast<size_t>(current_[b]) * layout_.chunk_bytes;
    std::memcpy(buf + StoreLayout::kChunkHeader + fill_[b] * sizeof(T), &record, sizeof(T));
    if (++fill_[b] == per_chunk_) hand_off(b);
  }
  // Ships every partly filled buffer, waits for the shipper, then writes
  // this writer's list heads. Throws OlapError if any shipping failed.
  void finish();
  uint64_t chunks() const { return chunks_; }

 private:
  struct Job {
    uint32_t buffer, list, fill;
  };
  static constexpr uint32_t kStop = ~0u;
  void hand_off(size_t list);
  void ship(const Job& job);  // fetch_add + write; the list's head moves on
  void shipper();
  void stop();

  StoreLayout layout_;
  Remote& store_;
  uint32_t writer_;
  uint32_t per_chunk_;
  bool background_;
  uint32_t spares_;
  std::vector<std::byte> arena_;   // chunk images: one per list, then the spares
  std::vector<uint32_t> current_;  // each list's buffer in the arena
  std::vector<uint32_t> fill_;     // records in it
  std::vector<uint64_t> last_;     // each list's head: chunk + 1, 0 none (the shipper's)
  uint64_t chunks_ = 0;
  // Full buffers to ship (partitioning thread -> shipper) and spare buffers
  // (back): single-producer single-consumer rings.
  std::vector<Job> jobs_;
  std::vector<uint32_t> free_;
  std::atomic<uint64_t> jobs_head_{0}, jobs_tail_{0}, free_head_{0}, free_tail_{0};
  std::atomic<bool> failed_{false};
  std::string error_;  // written by the shipper before failed_
  std::thread thread_;
};

// Appends every record of (relation, partition) to `out` (records of
// layout.record_bytes bytes, as T). `scratch` is reused between calls.
template <class T>
void read_partition(const StoreLayout& layout, Remote& store, uint32_t relation, uint32_t partition,
                    std::vector<T>& out, std::vector<std::byte>& scratch);

// The compute threads of a job: every compute rank's --threads slots, in
// rank-major order; `index` is this thread's place among them.
struct Team {
  Cluster* cluster = nullptr;
  uint32_t servers = 1;           // memory servers: ranks 0 .. servers-1
  std::vector<Endpoint> workers;  // the compute threads
  uint32_t index = 0, slot = 0;
  uint32_t size() const { return static_cast<uint32_t>(workers.size()); }
  // A barrier of the compute threads only (the memory servers take no part).
  void barrier(const std::string& name) const {
    cluster->barrier(name, workers, slot, Clock::now() + std::chrono::seconds(300));
  }
};

// What one thread of one algorithm run measured and produced.
struct ThreadStats {
  uint64_t a = 0, b = 0, c = 0;  // join: matches, checksum; aggregation: groups, rows, checksum
  double seconds = 0, fetch = 0, partition = 0, finish = 0;  // wall time and its phases
  uint64_t remote_ops = 0, flow_records = 0, chunks = 0;
  std::string error;  // empty: fine
  std::string path;   // how the one-sided operations travelled
};

// Reads this thread's share of every memory server's slice of a relation of
// `rows` rows (region `input`, 16-byte rows) into `out`, in reads of at most
// 1 MiB.
void fetch_share(Remote& input, uint64_t rows, const Team& team, std::vector<Tuple>& out);

// Sizes `out` for this thread's share of a relation of `rows` rows and
// touches it, so that the timed fetch_share() into it neither allocates nor
// takes page faults (setup, before a run's start barrier).
void presize_share(uint64_t rows, const Team& team, std::vector<Tuple>& out);

// Takes the next unclaimed partition number (fetch_add on server 0's claim
// cursor); >= layout.partitions when none is left.
inline uint32_t claim_partition(Remote& store) {
  return static_cast<uint32_t>(store.fetch_add(0, StoreLayout::kClaimCursor, 1));
}

extern template void read_partition<Tuple>(const StoreLayout&, Remote&, uint32_t, uint32_t,
                                           std::vector<Tuple>&, std::vector<std::byte>&);
extern template void read_partition<Partial>(const StoreLayout&, Remote&, uint32_t, uint32_t,
                                             std::vector<Partial>&, std::vector<std::byte>&);

}  // namespace sluice::nam::olap
