#include "flow_radix.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <thread>

#include "distributed_join.h"
#include "tuples.h"

namespace sluice::nam::olap {

namespace {

using FlowTuple = sluice::join::Tuple16;
static_assert(sizeof(FlowTuple) == sizeof(Tuple));

// Rows of this worker's share of a relation of `rows` rows over all memory
// servers (the same share fetch_share() reads).
uint64_t share_rows(uint64_t rows, uint32_t servers, uint32_t index, uint32_t workers) {
  uint64_t n = 0;
  for (uint32_t m = 0; m < servers; ++m)
    n += worker_share(server_slice(rows, m, servers), index, workers).size();
  return n;
}

// fetch_share() into apps/join's tuple type (the same 16 bytes: key,
// payload), in reads of at most 1 MiB.
void fetch_into(Remote& input, uint64_t rows, uint32_t servers, uint32_t index, uint32_t workers,
                std::vector<FlowTuple>& out) {
  size_t at = 0;
  for (uint32_t m = 0; m < servers; ++m) {
    const Range slice = server_slice(rows, m, servers);
    const Range mine = worker_share(slice, index, workers);
    constexpr uint64_t kBlock = (1 << 20) / sizeof(FlowTuple);
    for (uint64_t r = mine.lo; r < mine.hi; r += kBlock) {
      const uint64_t n = std::min(kBlock, mine.hi - r);
      input.read(m, (r - slice.lo) * sizeof(FlowTuple), out.data() + at + (r - mine.lo),
                 n * sizeof(FlowTuple));
    }
    at += mine.size();
  }
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

ThreadStats run_flow_radix(Cluster& cluster, const JoinConfig& config, uint32_t servers,
                           const std::vector<Endpoint>& workers, uint32_t threads) {
  ThreadStats st;
  const uint32_t rank = cluster.rank();
  const uint32_t total = static_cast<uint32_t>(workers.size());
  std::vector<uint32_t> compute_ranks;
  for (const Endpoint& e : workers) {
    if (compute_ranks.empty() || compute_ranks.back() != e.rank) compute_ranks.push_back(e.rank);
  }
  const uint32_t first = static_cast<uint32_t>(
      std::find(compute_ranks.begin(), compute_ranks.end(), rank) - compute_ranks.begin());
  // Setup, not timed: handles and buffers sized and touched.
  std::vector<std::vector<FlowTuple>> r(threads), s(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    const uint32_t index = first * threads + t;
    r[t].assign(share_rows(config.input.r_rows, servers, index, total), FlowTuple{});
    s[t].assign(share_rows(config.input.s_rows, servers, index, total), FlowTuple{});
  }
  // One pair of input handles per thread (each used by that thread only).
  std::vector<std::unique_ptr<Remote>> in_r, in_s;
  for (uint32_t t = 0; t < threads; ++t) {
    in_r.push_back(std::make_unique<Remote>(cluster, kRegionR, servers));
    in_s.push_back(std::make_unique<Remote>(cluster, kRegionS, servers));
  }
  std::vector<std::string> errors(threads);
  cluster.barrier("olap-flow-radix-start", cluster.ranks(compute_ranks), 0,
                  Clock::now() + std::chrono::seconds(300));
  const auto t0 = Clock::now();
  {
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const uint32_t index = first * threads + t;
        try {
          fetch_into(*in_r[t], config.input.r_rows, servers, index, total, r[t]);
          fetch_into(*in_s[t], config.input.s_rows, servers, index, total, s[t]);
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  st.fetch = since(t0);
  for (uint32_t t = 0; t < threads; ++t)
    st.remote_ops += in_r[t]->operations() + in_s[t]->operations();
  std::vector<std::span<const FlowTuple>> r_parts, s_parts;
  for (uint32_t t = 0; t < threads; ++t) {
    if (!errors[t].empty()) {
      // Go on with nothing: the flows need this thread's ends all the same,
      // or its peers would wait for it.
      if (st.error.empty()) st.error = errors[t];
      r[t].clear();
      s[t].clear();
    }
    r_parts.emplace_back(r[t]);
    s_parts.emplace_back(s[t]);
  }
  sluice::join::JoinConfig jc;
  jc.algorithm = sluice::join::Algorithm::kRadix;
  jc.threads = threads;
  jc.ranks = compute_ranks;
  const sluice::join::RankReport rep = sluice::join::run_join<FlowTuple>(
      cluster, jc, r_parts, s_parts, config.input.r_rows, config.input.s_rows);
  st.seconds = since(t0);
  st.a = rep.result.matches;
  st.b = rep.result.checksum;
  st.partition = (rep.phases.partition + rep.phases.network) / threads;
  st.finish = (rep.phases.build + rep.phases.probe) / threads;
  st.flow_records = rep.bytes_in / sizeof(FlowTuple);
  if (st.error.empty() && !rep.error.empty()) st.error = "flow radix join: " + rep.error;
  return st;
}

}  // namespace sluice::nam::olap
