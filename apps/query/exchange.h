// apps/query/exchange.h: exchanges between workers, and the worker loop that drives them.
//
// A query runs on every process of a `sluice run` job with `threads` worker
// threads each; every worker runs the same plan on its partition. An
// exchange moves the rows of one pipeline between workers:
//   - shuffle by key: row r goes to worker reduce_hash(hash of its key columns)
//     (one 8-byte key column: sluice::route_key(key), as flows route);
//   - broadcast: every row to every worker;
//   - gather: every row to worker 0 of process 0.
// Rows travel as fixed-size records (the packed row, Batch::pack_row,
// rounded up to a width class of 8..512 bytes: a typed flow of Rec<N>),
// batched into segments of `batch_bytes` before they move.
//
// Two implementations with identical operators above them:
//   - kSluice: one sluice flow per exchange (a shuffle with explicit
//     targets, or a replicate flow), all driven by one sluice::Worker per
//     thread: the paper's worker loop
//       while (!w.done()) w.idle(w.poll() + do_local_work());
//     A worker delivers arrived batches to their pipelines, runs one batch
//     of local work when nothing arrived, and parks only when it has no
//     work; a push to a back-pressured flow keeps delivering inputs.
//   - kSockets: the paper's baseline (sockets.h): plain blocking TCP, one
//     connection per pair of processes, one sender thread per process.
//
//   Runtime rt(cluster, {.threads = 2});
//   ExchangeId x = rt.declare("x", ExchangeKind::kShuffle, schema, {"key"});
//   ... then on each worker thread `slot`:
//   QueryWorker w(rt, slot);
//   Scan scan(part); scan.to(w.sender(x));
//   Collect out(schema); w.receive(x, &out);
//   w.add_local(&scan);
//   w.run();     // throws PeerLostError (naming the rank) or QueryError on failure
//
// Thread safety: declare() on one thread, before the workers start, in the
// same order on every process. A QueryWorker belongs to its thread.
#pragma once

#include <sluice/sluice.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "batch.h"
#include "operators.h"

namespace sluice::query {

// A query that failed while running: a transport error, a timeout, a bad
// plan. A lost peer is a sluice::PeerLostError naming its rank instead.
struct QueryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ExchangeKind : uint8_t { kShuffle, kBroadcast, kGather };
// kNone is no exchange at all: the synthetic benchmark's compute-only
// baseline (every worker keeps its own rows; Runtime refuses it).
enum class ExchangeImpl : uint8_t { kSluice, kSockets, kNone };
const char* to_string(ExchangeImpl i);

struct RuntimeOptions {
  uint32_t threads = 1;          // worker threads per process
  uint32_t batch_bytes = 16384;  // rows are batched up to this many bytes before they move
  uint32_t ring_segments = 0;    // kSluice: segments per ring (0: the library's default)
  ExchangeImpl impl = ExchangeImpl::kSluice;
};

using ExchangeId = uint32_t;

// Per exchange, counted by every worker and summed by the caller.
struct ExchangeStats {
  uint64_t rows_sent = 0, rows_received = 0, bytes_received = 0;
  // When this worker's input of the exchange ended, in seconds from the
  // start of run(): when that stage was done here (0: it receives nothing).
  double ended_seconds = 0;
};

class SocketMesh;

class Runtime {
 public:
  // kSockets: connects to every other process (collective). Throws QueryError.
  Runtime(sluice::Cluster& cluster, RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Declares an exchange of rows of `schema`, shuffled by `keys` (kShuffle
  // only). Collective (kSluice: declares the flow). Throws PlanError on a
  // bad plan, sluice::Error from the declaration.
  ExchangeId declare(const std::string& name, ExchangeKind kind, const Schema& schema,
                     std::vector<std::string> keys = {});

  uint32_t rank() const { return rank_; }
  uint32_t world() const { return world_; }
  uint32_t threads() const { return options_.threads; }
  const RuntimeOptions& options() const { return options_; }
  sluice::Cluster& cluster() { return cluster_; }

  struct Exchange;  // exchange.cc
  Exchange& exchange(ExchangeId x) { return *exchanges_[x]; }
  size_t exchanges_count() const { return exchanges_.size(); }
  SocketMesh* mesh() { return mesh_.get(); }

 private:
  sluice::Cluster& cluster_;
  RuntimeOptions options_;
  uint32_t rank_, world_;
  std::vector<std::unique_ptr<Exchange>> exchanges_;
  std::unique_ptr<SocketMesh> mesh_;
};

// One worker thread's part of a query.
class QueryWorker {
 public:
  QueryWorker(Runtime& rt, uint32_t slot);
  ~QueryWorker();
  QueryWorker(const QueryWorker&) = delete;
  QueryWorker& operator=(const QueryWorker&) = delete;

  // The sink that sends rows into exchange x (this worker's source of it);
  // its finish() closes the source. Every worker is a source of every exchange.
  Sink* sender(ExchangeId x);
  // Whether this worker receives rows of x (gather: only worker 0 of process 0).
  bool receives(ExchangeId x) const;
  // Rows of x that arrive here go to `downstream`; finish() once every
  // source has closed. REQUIRES: receives(x).
  void receive(ExchangeId x, Sink* downstream);
  // Local work, run a batch at a time while no input has data.
  void add_local(LocalSource* source);
  // The worker loop, until every local source is done and every input has
  // ended. On failure it aborts this worker's sources, then throws
  // sluice::PeerLostError if a peer was lost (its rank), else QueryError.
  void run();

  const ExchangeStats& stats(ExchangeId x) const { return stats_[x]; }
  uint32_t slot() const { return slot_; }
  // Internals shared with the two implementations.
  struct Port;    // this worker's end of one exchange
  struct Driver;  // polls the inputs, idles
  // The first failure wins; `lost_rank`: the peer whose loss caused it.
  void fail(const std::string& why, std::optional<uint32_t> lost_rank = std::nullopt);
  bool failed() const { return !error_.empty(); }
  void deliver(ExchangeId x, const std::byte* recs, size_t n, uint32_t stride);
  void note_sent(ExchangeId x, uint64_t rows);

 private:
  Runtime& rt_;
  uint32_t slot_;
  std::unique_ptr<Driver> driver_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<std::unique_ptr<Sink>> senders_;
  std::vector<Sink*> downstream_;
  std::vector<Batch> inbox_;  // reused per delivery
  std::vector<bool> ended_;
  std::vector<LocalSource*> locals_;
  std::vector<ExchangeStats> stats_;
  std::chrono::steady_clock::time_point start_;
  std::string error_;
  std::optional<uint32_t> lost_rank_;  // the lost peer behind error_, if one was
};

// The record width class a row of `packed_bytes` travels in.
uint32_t record_stride(uint32_t packed_bytes);

}  // namespace sluice::query
