#include "exchange.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "exchange_internal.h"
#include "sockets.h"

namespace sluice::query {

const char* to_string(ExchangeImpl i) {
  return i == ExchangeImpl::kSluice ? "sluice" : i == ExchangeImpl::kSockets ? "sockets" : "none";
}

uint32_t record_stride(uint32_t packed_bytes) {
  for (uint32_t w : {8u, 16u, 24u, 32u, 48u, 64u, 96u, 128u, 192u, 256u, 384u, 512u})
    if (packed_bytes <= w) return w;
  throw PlanError(
      "a row of " + std::to_string(packed_bytes) +
      " packed bytes is wider than an exchange record (512 bytes): project fewer columns");
}

namespace {

// A record of one width class: the unit a typed flow moves.
template <uint32_t N>
struct Rec {
  alignas(8) std::byte b[N];
};

// The sluice implementation of one exchange on one process: its flow, and
// the ports of its workers.
template <uint32_t N>
class SluiceFlow final : public FlowHolder {
 public:
  SluiceFlow(sluice::Cluster& cluster, const Runtime::Exchange& x, const RuntimeOptions& opt)
      : broadcast_(x.kind == ExchangeKind::kBroadcast),
        shuffle_(sluice::shuffle<Rec<N>>(x.name)),
        replicate_(sluice::replicate<Rec<N>>(x.name)) {
    const auto sources = cluster.all_ranks(opt.threads);
    if (broadcast_) {
      replicate_.sources(sources).targets(x.targets).segment_bytes(opt.batch_bytes);
      if (opt.ring_segments != 0) replicate_.ring_segments(opt.ring_segments);
      declared_ = cluster.declare(replicate_);
    } else {
      shuffle_.sources(sources).targets(x.targets).explicit_targets().segment_bytes(
          opt.batch_bytes);
      if (opt.ring_segments != 0) shuffle_.ring_segments(opt.ring_segments);
      declared_ = cluster.declare(shuffle_);
    }
  }

  std::unique_ptr<QueryWorker::Port> open(sluice::Cluster& cluster, QueryWorker& qw,
                                          sluice::Worker& w, ExchangeId x, bool is_target,
                                          sluice::Worker::InputId* input) override {
    auto handler = [&qw, x](std::span<const Rec<N>> recs) {
      qw.deliver(x, recs.empty() ? nullptr : recs.data()->b, recs.size(), N);
    };
    if (broadcast_) {
      auto port = std::make_unique<Port<sluice::Source<Rec<N>>>>(
          w, cluster.source(replicate_, qw.slot()), true);
      if (is_target) *input = w.add(cluster.target(replicate_, qw.slot()), handler);
      return port;
    }
    auto port = std::make_unique<Port<sluice::Source<Rec<N>>>>(
        w, cluster.source(shuffle_, qw.slot()), false);
    if (is_target) *input = w.add(cluster.target(shuffle_, qw.slot()), handler);
    return port;
  }

 private:
  template <class S>
  struct Port final : QueryWorker::Port {
    Port(sluice::Worker& w, S s, bool broadcast)
        : w_(w), src_(std::move(s)), broadcast_(broadcast) {}
    // One run per batch (Source::push / push_to of spans): the flow's
    // fields and rings are read once per run, not once per row. `recs` is
    // the sender's vector of packed rows, N bytes each (aligned like Rec<N>).
    bool send(const std::byte* recs, const uint32_t* targets, size_t n) override {
      const std::span<const Rec<N>> run(reinterpret_cast<const Rec<N>*>(recs), n);
      const sluice::Status st = broadcast_
                                    ? w_.push(src_, run)
                                    : w_.push_to(src_, std::span<const uint32_t>(targets, n), run);
      return st == sluice::Status::kOk || failed(st);
    }
    bool close() override {
      const sluice::Status st = w_.close(src_);
      return st == sluice::Status::kOk || failed(st);
    }
    void abort() override { src_.abort(); }
    bool failed(sluice::Status st) {
      why = std::string(sluice::to_string(st)) + ": " + src_.error();
      if (auto lost = src_.lost_peer()) lost_rank = lost->rank;
      return false;
    }
    sluice::Worker& w_;
    S src_;
    bool broadcast_;
  };

  bool broadcast_;
  sluice::ShuffleSpec<Rec<N>> shuffle_;
  sluice::ReplicateSpec<Rec<N>> replicate_;
  sluice::DeclaredFlow declared_;
};

template <uint32_t N>
std::unique_ptr<FlowHolder> make_flow(sluice::Cluster& c, const Runtime::Exchange& x,
                                      const RuntimeOptions& o) {
  return std::make_unique<SluiceFlow<N>>(c, x, o);
}

std::unique_ptr<FlowHolder> make_sluice_flow(sluice::Cluster& c, const Runtime::Exchange& x,
                                             const RuntimeOptions& o) {
  switch (x.stride) {
    case 8:
      return make_flow<8>(c, x, o);
    case 16:
      return make_flow<16>(c, x, o);
    case 24:
      return make_flow<24>(c, x, o);
    case 32:
      return make_flow<32>(c, x, o);
    case 48:
      return make_flow<48>(c, x, o);
    case 64:
      return make_flow<64>(c, x, o);
    case 96:
      return make_flow<96>(c, x, o);
    case 128:
      return make_flow<128>(c, x, o);
    case 192:
      return make_flow<192>(c, x, o);
    case 256:
      return make_flow<256>(c, x, o);
    case 384:
      return make_flow<384>(c, x, o);
    default:
      return make_flow<512>(c, x, o);
  }
}

// The sluice worker loop's driver: one sluice::Worker for all inputs.
class SluiceDriver final : public QueryWorker::Driver {
 public:
  explicit SluiceDriver(sluice::IdleStrategy idle) : w(idle) {}
  size_t poll() override { return w.poll(); }
  void idle(size_t work) override { w.idle(work); }
  InputState state(ExchangeId x, std::string* why, std::optional<uint32_t>* lost_rank) override {
    const auto it = inputs.find(x);
    if (it == inputs.end()) return InputState::kEnded;
    const sluice::Status st = w.status(it->second);
    if (st == sluice::Status::kOk) return InputState::kOpen;
    if (st == sluice::Status::kEndOfFlow) return InputState::kEnded;
    *why = std::string(sluice::to_string(st)) + ": " + w.error(it->second);
    if (auto lost = w.lost_peer(it->second)) *lost_rank = lost->rank;
    return InputState::kFailed;
  }
  sluice::Worker w;
  std::map<ExchangeId, sluice::Worker::InputId> inputs;
};

}  // namespace

// The sender of one exchange on one worker: packs rows, routes them, hands
// them to the port a batch at a time.
class Sender final : public Sink {
 public:
  Sender(QueryWorker& qw, ExchangeId x, const Runtime::Exchange& ex, QueryWorker::Port* port)
      : qw_(qw),
        x_(x),
        kind_(ex.kind),
        stride_(ex.stride),
        num_targets_(ex.targets.size()),
        port_(port),
        schema_(ex.schema) {
    if (kind_ == ExchangeKind::kShuffle) enc_ = std::make_unique<KeyEncoder>(ex.schema, ex.keys);
    key_.resize(enc_ ? enc_->bytes() : 0);
  }
  void push(const Batch& b) override {
    if (qw_.failed()) return;
    const size_t n = b.rows();
    recs_.assign(n * stride_, std::byte{0});
    targets_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      b.pack_row(i, recs_.data() + i * stride_);
      targets_[i] = kind_ == ExchangeKind::kShuffle
                        ? sluice::reduce_hash(enc_->encode(b, i, key_.data()), num_targets_)
                        : 0;
    }
    if (!port_->send(recs_.data(), targets_.data(), n))
      return qw_.fail(port_->why, port_->lost_rank);
    qw_.note_sent(x_, n);
  }
  void finish() override {
    if (qw_.failed()) return;
    if (!port_->close()) qw_.fail(port_->why, port_->lost_rank);
  }

 private:
  QueryWorker& qw_;
  ExchangeId x_;
  ExchangeKind kind_;
  uint32_t stride_, num_targets_;
  QueryWorker::Port* port_;
  Schema schema_;
  std::unique_ptr<KeyEncoder> enc_;
  std::vector<std::byte> key_, recs_;
  std::vector<uint32_t> targets_;
};

Runtime::Runtime(sluice::Cluster& cluster, RuntimeOptions options)
    : cluster_(cluster), options_(options), rank_(cluster.rank()), world_(cluster.world_size()) {
  if (options_.threads == 0) throw PlanError("--threads must be at least 1");
  if (options_.batch_bytes < 512 || options_.batch_bytes % 64 != 0) {
    throw PlanError("the batch size must be a multiple of 64 bytes, at least 512 (got " +
                    std::to_string(options_.batch_bytes) + ")");
  }
  if (options_.impl == ExchangeImpl::kNone) {
    throw PlanError("exchange 'none' is only the synthetic benchmark's compute-only baseline");
  }
  if (options_.impl == ExchangeImpl::kSockets)
    mesh_ = std::make_unique<SocketMesh>(cluster, options_);
}

Runtime::~Runtime() = default;

ExchangeId Runtime::declare(const std::string& name, ExchangeKind kind, const Schema& schema,
                            std::vector<std::string> keys) {
  auto x = std::make_unique<Exchange>();
  x->name = "query." + name;
  x->kind = kind;
  x->schema = schema;
  x->keys = std::move(keys);
  x->stride = record_stride(std::max(1u, schema.packed_bytes()));
  if (kind == ExchangeKind::kShuffle) {
    if (x->keys.empty()) throw PlanError("shuffle exchange " + name + " needs key columns");
    KeyEncoder check(schema, x->keys);  // throws on an unknown column
  }
  x->targets = kind == ExchangeKind::kGather ? std::vector<sluice::Endpoint>{{0, 0}}
                                             : cluster_.all_ranks(options_.threads);
  x->num_sources = world_ * options_.threads;
  if (options_.impl == ExchangeImpl::kSluice) x->flow = make_sluice_flow(cluster_, *x, options_);
  exchanges_.push_back(std::move(x));
  return static_cast<ExchangeId>(exchanges_.size() - 1);
}

QueryWorker::QueryWorker(Runtime& rt, uint32_t slot) : rt_(rt), slot_(slot) {
  const size_t n = rt.exchanges_count();
  downstream_.assign(n, nullptr);
  ended_.assign(n, false);
  stats_.resize(n);
  inbox_.reserve(n);
  for (size_t x = 0; x < n; ++x) inbox_.emplace_back(rt.exchange(x).schema);
  if (rt.options().impl == ExchangeImpl::kSockets) {
    auto d = rt.mesh()->driver(*this, slot);
    for (size_t x = 0; x < n; ++x)
      ports_.push_back(rt.mesh()->open(*d, static_cast<ExchangeId>(x), rt.exchange(x)));
    driver_ = std::move(d);
  } else {
    // Spinning only pays when every busy thread has a core of its own.
    const uint32_t busy = rt.world() * rt.threads();
    const bool spare = busy < std::max(1u, std::thread::hardware_concurrency());
    auto d = std::make_unique<SluiceDriver>(sluice::IdleStrategy{spare ? 200u : 0u, 64});
    for (size_t x = 0; x < n; ++x) {
      sluice::Worker::InputId input = 0;
      const ExchangeId id = static_cast<ExchangeId>(x);
      ports_.push_back(
          rt.exchange(x).flow->open(rt.cluster(), *this, d->w, id, receives(id), &input));
      if (receives(id)) d->inputs[id] = input;
    }
    driver_ = std::move(d);
  }
  for (size_t x = 0; x < n; ++x) {
    senders_.push_back(std::make_unique<Sender>(*this, static_cast<ExchangeId>(x), rt.exchange(x),
                                                ports_[x].get()));
  }
}

QueryWorker::~QueryWorker() {
  // Targets (in the driver) go before the sources; both before the flows.
  senders_.clear();
  driver_.reset();
  ports_.clear();
}

Sink* QueryWorker::sender(ExchangeId x) { return senders_.at(x).get(); }

bool QueryWorker::receives(ExchangeId x) const {
  return rt_.exchange(x).kind != ExchangeKind::kGather || (rt_.rank() == 0 && slot_ == 0);
}

void QueryWorker::receive(ExchangeId x, Sink* downstream) {
  if (!receives(x)) {
    throw PlanError("worker " + std::to_string(slot_) + " of rank " + std::to_string(rt_.rank()) +
                    " receives nothing of gather exchange " + rt_.exchange(x).name);
  }
  downstream_.at(x) = downstream;
}

void QueryWorker::add_local(LocalSource* source) { locals_.push_back(source); }

void QueryWorker::fail(const std::string& why, std::optional<uint32_t> lost_rank) {
  if (!error_.empty()) return;
  error_ = why;
  lost_rank_ = lost_rank;
}

void QueryWorker::note_sent(ExchangeId x, uint64_t rows) { stats_[x].rows_sent += rows; }

void QueryWorker::deliver(ExchangeId x, const std::byte* recs, size_t n, uint32_t stride) {
  if (failed() || n == 0) return;
  Batch& b = inbox_[x];
  b.clear();
  for (size_t i = 0; i < n; ++i) b.unpack_row(recs + i * stride);
  stats_[x].rows_received += n;
  stats_[x].bytes_received += n * stride;
  downstream_[x]->push(b);
}

void QueryWorker::run() {
  for (size_t x = 0; x < downstream_.size(); ++x) {
    if (receives(static_cast<ExchangeId>(x)) && downstream_[x] == nullptr) {
      throw PlanError("nothing receives the rows of exchange " + rt_.exchange(x).name +
                      " on worker " + std::to_string(slot_));
    }
  }
  size_t next_local = 0;
  start_ = std::chrono::steady_clock::now();
  for (;;) {
    // The paper's loop: deliver what arrived, then one batch of local work;
    // park only when neither found anything.
    size_t work = driver_->poll();
    bool open = false;
    for (size_t x = 0; x < downstream_.size() && !failed(); ++x) {
      if (ended_[x] || !receives(static_cast<ExchangeId>(x))) continue;
      std::string why;
      std::optional<uint32_t> lost;
      switch (driver_->state(static_cast<ExchangeId>(x), &why, &lost)) {
        case InputState::kOpen:
          open = true;
          break;
        case InputState::kEnded:
          ended_[x] = true;
          ++work;
          stats_[x].ended_seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
          downstream_[x]->finish();
          break;
        case InputState::kFailed:
          fail("exchange " + rt_.exchange(x).name + ": " + why, lost);
          break;
      }
    }
    bool local_left = false;
    for (size_t k = 0; k < locals_.size() && !failed(); ++k) {
      LocalSource* s = locals_[(next_local + k) % locals_.size()];
      if (s->done()) continue;
      local_left = true;
      work += s->step() + 1;
      next_local = (next_local + k + 1) % locals_.size();
      break;
    }
    if (failed()) break;
    if (!open && !local_left && work == 0) return;
    driver_->idle(work);
  }
  // Tell the peers at once rather than when this process exits.
  for (auto& p : ports_) p->abort();
  driver_.reset();
  const std::string what =
      "worker " + std::to_string(slot_) + " of rank " + std::to_string(rt_.rank()) + ": " + error_;
  if (lost_rank_) throw sluice::PeerLostError(*lost_rank_, what);
  throw QueryError(what);
}

}  // namespace sluice::query
