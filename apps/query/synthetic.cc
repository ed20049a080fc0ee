#include "synthetic.h"

#include <algorithm>
#include <vector>

namespace sluice::query {

namespace {

Schema int_schema() { return Schema({int64_field("n")}); }

inline int64_t three_halves(int64_t n) { return n * 3 / 2; }

// The "Int Generator" of the paper's plan: rows [begin, end) in batches.
class IntGenerator final : public LocalSource {
 public:
  IntGenerator(uint64_t begin, uint64_t end, Sink* next)
      : pos_(begin), end_(end), next_(next), batch_(int_schema()) {}
  size_t step() override {
    if (done_) return 0;
    if (pos_ >= end_) {
      done_ = true;
      next_->finish();
      return 0;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(1024, end_ - pos_));
    batch_.clear();
    std::vector<int64_t>& v = batch_.column(0).ints;
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(pos_ + i));
    batch_.set_rows(n);
    pos_ += n;
    next_->push(batch_);
    return n;
  }
  bool done() const override { return done_; }

 private:
  uint64_t pos_, end_;
  Sink* next_;
  Batch batch_;
  bool done_ = false;
};

// n := n*3/2, in place of a copy of the batch.
class ThreeHalves final : public Operator {
 public:
  ThreeHalves() : out_(int_schema()) { out_schema_ = int_schema(); }
  void push(const Batch& b) override {
    out_.clear();
    std::vector<int64_t>& v = out_.column(0).ints;
    for (int64_t n : b.column(0).ints) v.push_back(three_halves(n));
    out_.set_rows(b.rows());
    emit(out_);
  }
  void finish() override { end(); }

 private:
  Batch out_;
};

class Checksum final : public Sink {
 public:
  void push(const Batch& b) override {
    for (int64_t n : b.column(0).ints) sum += sluice::hash64(static_cast<uint64_t>(n));
    count += b.rows();
  }
  void finish() override {}
  uint64_t count = 0, sum = 0;
};

}  // namespace

namespace {

// The same operators with no exchange: each worker's rows go straight from
// the generator through n*3/2 into its checksum. The result is the same
// (the checksum does not depend on where a row is counted); the time is the
// plan's compute alone, on the same processes and threads.
SyntheticResult run_compute_only(sluice::Cluster& cluster, const SyntheticConfig& config) {
  const uint32_t threads = std::max(1u, config.runtime.threads);
  std::vector<SyntheticResult> per(threads);
  const sluice::PoolReport run = sluice::run_workers(
      cluster, {threads, config.name + ".start", {}}, [&](uint32_t t, sluice::StartLine& start) {
        const uint64_t base = static_cast<uint64_t>(cluster.rank()) * config.rows;
        ThreeHalves step;
        Checksum sum;
        IntGenerator gen(base + config.rows * t / threads, base + config.rows * (t + 1) / threads,
                         &step);
        step.to(&sum);
        start.wait();
        if (t == 0 && config.on_start) config.on_start();
        while (gen.step() != 0) {
        }
        per[t].count = sum.count;
        per[t].checksum = sum.sum;
      });
  SyntheticResult total;
  for (const SyntheticResult& r : per) {
    total.count += r.count;
    total.checksum += r.checksum;
  }
  total.seconds = run.seconds;
  total.failure = run.failure;
  return total;
}

}  // namespace

SyntheticResult run_synthetic(sluice::Cluster& cluster, const SyntheticConfig& config) {
  if (config.runtime.impl == ExchangeImpl::kNone) return run_compute_only(cluster, config);
  const uint32_t threads = config.runtime.threads;
  Runtime rt(cluster, config.runtime);
  const ExchangeId s1 = rt.declare(config.name + ".1", ExchangeKind::kShuffle, int_schema(), {"n"});
  const ExchangeId s2 = rt.declare(config.name + ".2", ExchangeKind::kShuffle, int_schema(), {"n"});

  std::vector<SyntheticResult> per(threads);
  const sluice::PoolReport run = sluice::run_workers(
      cluster, {threads, config.name + ".start", {}}, [&](uint32_t t, sluice::StartLine& start) {
        QueryWorker w(rt, t);
        const uint64_t base = static_cast<uint64_t>(rt.rank()) * config.rows;
        IntGenerator gen(base + config.rows * t / threads, base + config.rows * (t + 1) / threads,
                         w.sender(s1));
        ThreeHalves step;
        Checksum sum;
        step.to(w.sender(s2));
        w.receive(s1, &step);
        w.receive(s2, &sum);
        w.add_local(&gen);
        start.wait();
        if (t == 0 && config.on_start) config.on_start();
        w.run();
        SyntheticResult& r = per[t];
        r.count = sum.count;
        r.checksum = sum.sum;
        r.rows_shuffled_1 = w.stats(s1).rows_received;
        r.rows_shuffled_2 = w.stats(s2).rows_received;
        r.bytes_moved = w.stats(s1).bytes_received + w.stats(s2).bytes_received;
      });
  SyntheticResult total;
  for (const SyntheticResult& r : per) {
    total.count += r.count;
    total.checksum += r.checksum;
    total.rows_shuffled_1 += r.rows_shuffled_1;
    total.rows_shuffled_2 += r.rows_shuffled_2;
    total.bytes_moved += r.bytes_moved;
  }
  total.seconds = run.seconds;
  total.failure = run.failure;
  return total;
}

SyntheticResult synthetic_reference(uint64_t rows, uint32_t processes) {
  SyntheticResult r;
  const uint64_t all = rows * processes;
  for (uint64_t v = 0; v < all; ++v) {
    r.checksum += sluice::hash64(static_cast<uint64_t>(three_halves(static_cast<int64_t>(v))));
  }
  r.count = all;
  r.rows_shuffled_1 = r.rows_shuffled_2 = all;
  return r;
}

}  // namespace sluice::query
