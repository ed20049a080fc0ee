// The README's example: every rank sends orders to every rank by key, and
// each rank sums what it receives. Run: sluice run -n 4 -- ./orders
#include <sluice/sluice.h>

#include <cstdio>
#include <string>

struct Order {
  uint64_t key;
  uint64_t amount;
};  // any trivially copyable type

int main() {
  auto cluster = sluice::Cluster::join();  // reads the env `sluice run` sets
  auto spec = sluice::shuffle<Order>("orders")
                  .sources(cluster.all_ranks())  // (rank, slot 0) for every rank
                  .targets(cluster.all_ranks())
                  .key(&Order::key);  // route by a hash of the key
  auto flow = cluster.declare(spec);  // every participant must agree; lives until `flow` ends

  sluice::Worker worker;  // this thread's progress loop
  uint64_t received = 0;
  worker.add(cluster.target(spec, /*slot=*/0), [&](std::span<const Order> batch) {
    for (const Order& o : batch) received += o.amount;
  });
  auto& out = worker.add_output(cluster.source(spec, /*slot=*/0));  // the worker owns it
  for (uint64_t i = 0; i < 1'000'000; ++i)  // consumes while the ring is full
    if (worker.push(out, Order{i, 1}) != sluice::Status::kOk) return 1;  // out.error() says why
  if (worker.close(out) != sluice::Status::kOk) return 1;
  if (worker.run() != sluice::Status::kEndOfFlow) {  // until every source has closed
    std::fprintf(stderr, "rank %u: %s\n", cluster.rank(),
                 worker.failure()->error.c_str());  // the input that failed, and why
    return 1;
  }

  // The cross-check: every rank sent 1,000,000 orders of amount 1, so the
  // amounts received across the job must add up to exactly that many.
  auto all = cluster.allgather("received", std::to_string(received));
  uint64_t total = 0;
  for (const auto& s : all) total += std::stoull(s);
  std::printf("rank %u received %llu\n", cluster.rank(), static_cast<unsigned long long>(received));
  const bool ok = total == 1'000'000ULL * cluster.world_size();
  if (cluster.rank() == 0) std::printf("job: %s\n", ok ? "totals match" : "MISMATCH");
  // Leaves the job cleanly (no destructor waits for the network).
  return cluster.leave() == sluice::Status::kOk && ok ? 0 : 1;
}
