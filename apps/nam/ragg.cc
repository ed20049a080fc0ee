#include "ragg.h"

#include <algorithm>
#include <bit>
#include <chrono>

namespace sluice::nam::olap {

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// An open-addressing table of groups (count 0 marks a free slot). A fixed
// table holds at most `limit` groups and refuses a new one beyond that (the
// caller spills it); a growing one doubles when half full. The slots in use
// are listed, so clearing and spilling cost the groups, not the table.
class GroupTable {
 public:
  GroupTable(size_t limit, bool grows) : limit_(limit), grows_(grows) {
    resize(std::bit_ceil(std::max<size_t>(16, 2 * limit)));
  }
  // False (and nothing done) if `key` is new and a fixed table is full.
  bool add(uint64_t key, uint64_t count, uint64_t sum) {
    size_t at = hash64(key) & mask_;
    for (; slots_[at].count != 0; at = (at + 1) & mask_) {
      if (slots_[at].key == key) {
        slots_[at].count += count;
        slots_[at].sum += sum;
        return true;
      }
    }
    if (used_.size() >= limit_) {
      if (!grows_) return false;
      limit_ *= 2;
      resize(slots_.size() * 2);
      return add(key, count, sum);
    }
    slots_[at] = Partial{key, count, sum};
    used_.push_back(static_cast<uint32_t>(at));
    return true;
  }
  template <class F>
  void for_each(F f) const {
    for (uint32_t at : used_) f(slots_[at]);
  }
  void clear() {
    for (uint32_t at : used_) slots_[at] = Partial{};
    used_.clear();
  }
  size_t size() const { return used_.size(); }

 private:
  void resize(size_t n) {
    std::vector<Partial> old;
    old.swap(slots_);
    std::vector<uint32_t> was;
    was.swap(used_);
    slots_.assign(n, Partial{});
    mask_ = n - 1;
    used_.reserve(limit_);
    for (uint32_t at : was) add(old[at].key, old[at].count, old[at].sum);
  }

  std::vector<Partial> slots_;
  std::vector<uint32_t> used_;
  size_t mask_ = 0, limit_;
  bool grows_;
};

void fold(const GroupTable& table, ThreadStats& st) {
  table.for_each([&](const Partial& g) {
    st.a += 1;
    st.b += g.count;
    st.c += group_hash(g.key, g.count, g.sum);
  });
}

uint32_t ragg_partitions(const AggConfig& config, uint32_t workers) {
  if (config.partitions != 0) return config.partitions;
  return static_cast<uint32_t>(std::min<uint64_t>(
      4096, std::bit_ceil(std::max<uint64_t>(4ull * workers, config.input.rows / 65536))));
}

}  // namespace

StoreLayout ragg_layout(const AggConfig& config, uint32_t servers, uint32_t workers) {
  // Spilled partials never outnumber the rows.
  return make_store_layout(servers, workers, ragg_partitions(config, workers), 1, sizeof(Partial),
                           config.chunk_bytes, config.input.rows, config.space_factor);
}

ShuffleSpec<Partial> hagg_flow(const std::vector<Endpoint>& workers, const std::string& tag) {
  ShuffleSpec<Partial> spec("olap-" + tag + "-groups");
  spec.sources(workers).targets(workers).explicit_targets();
  return spec;
}

ThreadStats run_ragg(const Team& team, const AggConfig& config, const std::string& store_region) {
  ThreadStats st;
  const StoreLayout layout = ragg_layout(config, team.servers, team.size());
  Remote in(*team.cluster, kRegionRows, team.servers),
      store(*team.cluster, store_region, team.servers);
  std::vector<Tuple> rows;
  presize_share(config.input.rows, team, rows);
  GroupTable pre(config.table_entries, false);
  team.barrier(store_region + "-start");
  const auto t0 = Clock::now();
  try {
    fetch_share(in, config.input.rows, team, rows);
    st.fetch = since(t0);
    const auto t1 = Clock::now();
    PartitionWriter writer(layout, store, team.index, config.background);
    const auto spill = [&] {
      pre.for_each([&](const Partial& g) {
        writer.add(0, reduce_hash(hash64(g.key), layout.partitions), g);
      });
      pre.clear();
    };
    for (const Tuple& row : rows) {
      if (pre.add(row.key, 1, row.payload)) continue;
      spill();
      (void)pre.add(row.key, 1, row.payload);
    }
    spill();
    writer.finish();
    st.chunks = writer.chunks();
    st.partition = since(t1);
  } catch (const std::exception& e) {
    st.error = e.what();
  }
  team.barrier(store_region + "-spilled");
  const auto t2 = Clock::now();
  if (st.error.empty()) {
    try {
      GroupTable post(config.table_entries, true);
      std::vector<Partial> partials;
      std::vector<std::byte> scratch;
      for (uint32_t p = claim_partition(store); p < layout.partitions; p = claim_partition(store)) {
        partials.clear();
        read_partition(layout, store, 0, p, partials, scratch);
        for (const Partial& g : partials) (void)post.add(g.key, g.count, g.sum);
        fold(post, st);
        post.clear();
      }
    } catch (const std::exception& e) {
      st.error = e.what();
    }
  }
  st.finish = since(t2);
  st.seconds = since(t0);
  st.remote_ops = in.operations() + store.operations();
  st.path = store.path();
  return st;
}

ThreadStats run_hagg(const Team& team, const AggConfig& config, const ShuffleSpec<Partial>& flow,
                     const std::string& tag) {
  ThreadStats st;
  Cluster& cluster = *team.cluster;
  Remote in(cluster, kRegionRows, team.servers);
  std::vector<Tuple> rows;
  presize_share(config.input.rows, team, rows);
  GroupTable local(config.table_entries, true), global(config.table_entries, true);
  team.barrier("olap-" + tag + "-start");
  const auto t0 = Clock::now();
  try {
    fetch_share(in, config.input.rows, team, rows);
  } catch (const std::exception& e) {
    st.error = e.what();  // go on with nothing: the flow needs this thread's ends
    rows.clear();
  }
  st.fetch = since(t0);
  const auto t1 = Clock::now();
  for (const Tuple& row : rows) (void)local.add(row.key, 1, row.payload);
  // The status first (PeerLost: a rank is lost), then the flow's account.
  const auto flow_failure = [&](const char* what, Status s, const std::string& why) {
    if (st.error.empty()) st.error = std::string(what) + ": " + sluice::to_string(s) + ": " + why;
  };
  {
    // The global union: every local group to the thread that owns its key,
    // which post-aggregates as the groups arrive.
    Worker w;
    w.add(cluster.target(flow, team.slot), [&](std::span<const Partial> batch) {
      for (const Partial& g : batch) (void)global.add(g.key, g.count, g.sum);
    });
    Source<Partial> out = cluster.source(flow, team.slot);
    bool ok = true;
    local.for_each([&](const Partial& g) {
      if (!ok) return;
      const Status s = w.push_to(out, reduce_hash(hash64(g.key), team.size()), g);
      if (s != Status::kOk) {
        flow_failure("push", s, out.error());
        ok = false;
      }
    });
    st.flow_records = local.size();
    if (const Status s = w.close(out); s != Status::kOk) flow_failure("close", s, out.error());
    if (const Status s = w.run(); s != Status::kEndOfFlow) flow_failure("groups", s, w.error(0));
  }
  st.partition = since(t1);
  const auto t2 = Clock::now();
  if (st.error.empty()) fold(global, st);
  st.finish = since(t2);
  st.seconds = since(t0);
  st.remote_ops = in.operations();
  st.path = in.path();
  return st;
}

}  // namespace sluice::nam::olap
