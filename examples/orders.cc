// The README's example: every rank sends orders to every rank by key, and
// each rank sums what it receives. Run: sluice run -n 4 -- ./orders
#include <sluice/sluice.h>

#include <cstdio>
#include <string>

struct Order { uint64_t key; uint64_t amount; };   // any trivially copyable type

int main() {
  auto cluster = sluice::Cluster::join();           // reads the env `sluice run` sets
  auto spec = sluice::shuffle<Order>("orders")
                  .sources(cluster.all_ranks())     // (rank, slot 0) for every rank
                  .targets(cluster.all_ranks())
                  .key(&Order::key);                // route by a hash of the key
  cluster.declare(spec);                            // every participant must agree

  auto out = cluster.source(spec, /*slot=*/0);
  auto in = cluster.target(spec, /*slot=*/0);
  uint64_t received = 0;
  auto drain = [&] { while (auto b = in.try_consume()) for (const Order& o : *b) received += o.amount; };
  for (uint64_t i = 0; i < 1'000'000; ++i)
    while (out.try_push(Order{i, 1}) == sluice::Status::kBackPressured) drain();
  while (out.close(sluice::Clock::now()) == sluice::Status::kTimeout) drain();
  while (auto b = in.consume()) for (const Order& o : *b) received += o.amount;
  if (in.status() != sluice::Status::kEndOfFlow) {
    std::fprintf(stderr, "rank %u: %s\n", cluster.rank(), in.error().c_str());
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
  return ok ? 0 : 1;
}
