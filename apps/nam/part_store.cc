#include "part_store.h"

#include <algorithm>
#include <cmath>

namespace sluice::nam::olap {

Remote::Remote(Cluster& cluster, const std::string& name, uint32_t servers,
               std::chrono::milliseconds op_timeout)
    : name_(name), op_timeout_(op_timeout) {
  for (uint32_t s = 0; s < servers; ++s) {
    regions_.push_back(cluster.open_region(name, s, Clock::now() + std::chrono::seconds(60)));
  }
}

void Remote::fail(uint32_t server, const char* what, Status st) {
  throw OlapError(std::string(to_string(st)) + ": " + what + " of region " + name_ +
                  " on memory server rank " + std::to_string(server) +
                  " failed: " + regions_[server].error());
}

// Every operation has a deadline: a handle whose owner died must fail, not
// wait forever (see the open gap in docs/nam.md).
void Remote::read(uint32_t server, uint64_t offset, void* out, size_t bytes) {
  ++operations_;
  const Status st = regions_[server].read(offset, std::span(static_cast<std::byte*>(out), bytes),
                                          Clock::now() + op_timeout_);
  if (st != Status::kOk) fail(server, "read", st);
}

void Remote::write(uint32_t server, uint64_t offset, const void* in, size_t bytes) {
  ++operations_;
  const Status st = regions_[server].write(
      offset, std::span(static_cast<const std::byte*>(in), bytes), Clock::now() + op_timeout_);
  if (st != Status::kOk) fail(server, "write", st);
}

uint64_t Remote::fetch_add(uint32_t server, uint64_t offset, uint64_t delta) {
  ++operations_;
  const auto previous = regions_[server].fetch_add(offset, delta, Clock::now() + op_timeout_);
  if (!previous) fail(server, "fetch_add", previous.status());
  return *previous;
}

void fetch_share(Remote& input, uint64_t rows, const Team& team, std::vector<Tuple>& out) {
  out.clear();
  for (uint32_t m = 0; m < team.servers; ++m) {
    const Range slice = server_slice(rows, m, team.servers);
    const Range mine = worker_share(slice, team.index, team.size());
    const size_t at = out.size();
    out.resize(at + mine.size());
    constexpr uint64_t kBlock = (1 << 20) / sizeof(Tuple);
    for (uint64_t r = mine.lo; r < mine.hi; r += kBlock) {
      const uint64_t n = std::min(kBlock, mine.hi - r);
      input.read(m, (r - slice.lo) * sizeof(Tuple), out.data() + at + (r - mine.lo),
                 n * sizeof(Tuple));
    }
  }
}

void presize_share(uint64_t rows, const Team& team, std::vector<Tuple>& out) {
  uint64_t n = 0;
  for (uint32_t m = 0; m < team.servers; ++m)
    n += worker_share(server_slice(rows, m, team.servers), team.index, team.size()).size();
  out.assign(n, Tuple{});
}

StoreLayout make_store_layout(uint32_t servers, uint32_t writers, uint32_t partitions,
                              uint32_t relations, uint32_t record_bytes, uint32_t chunk_bytes,
                              uint64_t records, double space_factor) {
  StoreLayout l;
  l.servers = servers;
  l.writers = writers;
  l.partitions = partitions;
  l.relations = relations;
  l.record_bytes = record_bytes;
  l.chunk_bytes = chunk_bytes;
  if (chunk_bytes < StoreLayout::kChunkHeader + record_bytes || chunk_bytes % 8 != 0) {
    throw OlapError("--buffer-bytes " + std::to_string(chunk_bytes) +
                    " must be a multiple of 8 that holds a 16-byte header and a record");
  }
  // A server holds ceil(P / M) partitions at most: its share of the input
  // if keys spread evenly over the partitions.
  const double per_server = std::ceil(static_cast<double>(records) * l.local_partitions() /
                                      partitions / l.records_per_chunk() * space_factor);
  // Every writer may leave one partly filled chunk per list it has here.
  l.pool_chunks = static_cast<uint64_t>(per_server) +
                  static_cast<uint64_t>(writers) * relations * l.local_partitions() + 16;
  return l;
}

PartitionWriter::PartitionWriter(const StoreLayout& layout, Remote& store, uint32_t writer,
                                 bool background)
    : layout_(layout),
      store_(store),
      writer_(writer),
      per_chunk_(layout.records_per_chunk()),
      background_(background),
      spares_(background ? 32 : 0),
      arena_((static_cast<size_t>(layout.relations) * layout.partitions + spares_) *
             layout.chunk_bytes),
      current_(static_cast<size_t>(layout.relations) * layout.partitions),
      fill_(current_.size(), 0),
      last_(current_.size(), 0),
      jobs_(spares_ + 2),
      free_(spares_ + 1) {
  for (size_t b = 0; b < current_.size(); ++b) current_[b] = static_cast<uint32_t>(b);
  if (!background_) return;
  for (uint32_t k = 0; k < spares_; ++k) free_[k] = static_cast<uint32_t>(current_.size() + k);
  free_tail_.store(spares_);
  thread_ = std::thread([this] { shipper(); });
}

PartitionWriter::~PartitionWriter() { stop(); }

void PartitionWriter::stop() {
  if (!thread_.joinable()) return;
  // There is always room for the stop: at most spares_ + 1 jobs are in
  // flight (the one being handed off, if hand_off threw in its wait).
  const uint64_t t = jobs_tail_.load(std::memory_order_relaxed);
  jobs_[t % jobs_.size()] = Job{kStop, 0, 0};
  jobs_tail_.store(t + 1, std::memory_order_release);
  jobs_tail_.notify_one();
  thread_.join();
}

void PartitionWriter::ship(const Job& job) {
  if (job.fill == 0) return;
  const uint32_t partition = job.list % layout_.partitions;
  const uint32_t server = layout_.server_of(partition);
  const uint64_t chunk = store_.fetch_add(server, StoreLayout::kPoolCursor, 1);
  if (chunk >= layout_.pool_chunks) {
    throw OlapError("memory server rank " + std::to_string(server) +
                    " is out of partition space (" + std::to_string(layout_.pool_chunks) +
                    " chunks of " + std::to_string(layout_.chunk_bytes) +
                    " bytes): raise --space-factor");
  }
  std::byte* buf = arena_.data() + static_cast<size_t>(job.buffer) * layout_.chunk_bytes;
  const uint64_t header[2] = {last_[job.list], job.fill};
  std::memcpy(buf, header, sizeof(header));
  store_.write(server, layout_.chunk_offset(chunk), buf,
               StoreLayout::kChunkHeader + static_cast<size_t>(job.fill) * layout_.record_bytes);
  last_[job.list] = chunk + 1;
  ++chunks_;
}

void PartitionWriter::shipper() {
  for (;;) {
    const uint64_t h = jobs_head_.load(std::memory_order_relaxed);
    uint64_t t = jobs_tail_.load(std::memory_order_acquire);
    while (t == h) {
      jobs_tail_.wait(t, std::memory_order_acquire);
      t = jobs_tail_.load(std::memory_order_acquire);
    }
    const Job job = jobs_[h % jobs_.size()];
    jobs_head_.store(h + 1, std::memory_order_release);
    if (job.buffer == kStop) return;
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        ship(job);
      } catch (const std::exception& e) {
        error_ = e.what();
        failed_.store(true, std::memory_order_release);
      }
    }
    const uint64_t ft = free_tail_.load(std::memory_order_relaxed);
    free_[ft % free_.size()] = job.buffer;
    free_tail_.store(ft + 1, std::memory_order_release);
  }
}

void PartitionWriter::hand_off(size_t list) {
  const Job job{current_[list], static_cast<uint32_t>(list), fill_[list]};
  fill_[list] = 0;
  if (!background_) {
    ship(job);
    return;
  }
  if (failed_.load(std::memory_order_acquire)) throw OlapError(error_);
  const uint64_t t = jobs_tail_.load(std::memory_order_relaxed);
  jobs_[t % jobs_.size()] = job;
  jobs_tail_.store(t + 1, std::memory_order_release);
  jobs_tail_.notify_one();
  // A spare to go on with; only when every one is in flight is there a wait
  // (yielding: the shipper needs the core more than we do).
  const uint64_t h = free_head_.load(std::memory_order_relaxed);
  while (free_tail_.load(std::memory_order_acquire) == h) {
    if (failed_.load(std::memory_order_acquire)) throw OlapError(error_);
    std::this_thread::yield();
  }
  current_[list] = free_[h % free_.size()];
  free_head_.store(h + 1, std::memory_order_release);
}

void PartitionWriter::finish() {
  for (size_t b = 0; b < current_.size(); ++b) {
    if (fill_[b] != 0) hand_off(b);
  }
  stop();
  if (failed_.load(std::memory_order_acquire)) throw OlapError(error_);
  for (uint32_t r = 0; r < layout_.relations; ++r) {
    for (uint32_t p = 0; p < layout_.partitions; ++p) {
      const uint64_t head = last_[static_cast<size_t>(r) * layout_.partitions + p];
      if (head == 0) continue;  // the region starts zeroed
      store_.write(layout_.server_of(p),
                   layout_.heads_offset(r, layout_.local_of(p)) + uint64_t{writer_} * 8, &head,
                   sizeof(head));
    }
  }
}

template <class T>
void read_partition(const StoreLayout& layout, Remote& store, uint32_t relation, uint32_t partition,
                    std::vector<T>& out, std::vector<std::byte>& scratch) {
  const uint32_t server = layout.server_of(partition);
  std::vector<uint64_t> heads(layout.writers);
  store.read(server, layout.heads_offset(relation, layout.local_of(partition)), heads.data(),
             heads.size() * 8);
  scratch.resize(layout.chunk_bytes);
  for (uint64_t next : heads) {
    while (next != 0) {
      if (next > layout.pool_chunks) {
        throw OlapError("corrupt partition list on memory server rank " + std::to_string(server));
      }
      store.read(server, layout.chunk_offset(next - 1), scratch.data(), scratch.size());
      uint64_t header[2];
      std::memcpy(header, scratch.data(), sizeof(header));
      if (header[1] > layout.records_per_chunk()) {
        throw OlapError("corrupt chunk on memory server rank " + std::to_string(server));
      }
      const size_t at = out.size();
      out.resize(at + header[1]);
      std::memcpy(out.data() + at, scratch.data() + StoreLayout::kChunkHeader,
                  header[1] * sizeof(T));
      next = header[0];
    }
  }
}

template void read_partition<Tuple>(const StoreLayout&, Remote&, uint32_t, uint32_t,
                                    std::vector<Tuple>&, std::vector<std::byte>&);
template void read_partition<Partial>(const StoreLayout&, Remote&, uint32_t, uint32_t,
                                      std::vector<Partial>&, std::vector<std::byte>&);

}  // namespace sluice::nam::olap
