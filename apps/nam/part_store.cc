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
  uint64_t previous = 0;
  const Status st =
      regions_[server].fetch_add(offset, delta, &previous, Clock::now() + op_timeout_);
  if (st != Status::kOk) fail(server, "fetch_add", st);
  return previous;
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
  const double per_server =
      std::ceil(static_cast<double>(records) / servers / l.records_per_chunk() * space_factor);
  // Every writer may leave one partly filled chunk per list it has here.
  l.pool_chunks = static_cast<uint64_t>(per_server) +
                  static_cast<uint64_t>(writers) * relations * l.local_partitions() + 16;
  return l;
}

PartitionWriter::PartitionWriter(const StoreLayout& layout, Remote& store, uint32_t writer)
    : layout_(layout),
      store_(store),
      writer_(writer),
      per_chunk_(layout.records_per_chunk()),
      buffers_(static_cast<size_t>(layout.relations) * layout.partitions * layout.chunk_bytes),
      fill_(static_cast<size_t>(layout.relations) * layout.partitions, 0),
      last_(fill_.size(), 0) {}

void PartitionWriter::ship(uint32_t relation, uint32_t partition) {
  const size_t b = static_cast<size_t>(relation) * layout_.partitions + partition;
  if (fill_[b] == 0) return;
  const uint32_t server = layout_.server_of(partition);
  const uint64_t chunk = store_.fetch_add(server, StoreLayout::kPoolCursor, 1);
  if (chunk >= layout_.pool_chunks) {
    throw OlapError("memory server rank " + std::to_string(server) +
                    " is out of partition space (" + std::to_string(layout_.pool_chunks) +
                    " chunks of " + std::to_string(layout_.chunk_bytes) +
                    " bytes): raise --space-factor");
  }
  std::byte* buf = buffers_.data() + b * layout_.chunk_bytes;
  const uint64_t header[2] = {last_[b], fill_[b]};
  std::memcpy(buf, header, sizeof(header));
  store_.write(server, layout_.chunk_offset(chunk), buf,
               StoreLayout::kChunkHeader + static_cast<size_t>(fill_[b]) * layout_.record_bytes);
  last_[b] = chunk + 1;
  fill_[b] = 0;
  ++chunks_;
}

void PartitionWriter::finish() {
  for (uint32_t r = 0; r < layout_.relations; ++r) {
    for (uint32_t p = 0; p < layout_.partitions; ++p) ship(r, p);
  }
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
