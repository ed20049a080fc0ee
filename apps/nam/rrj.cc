#include "rrj.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>

namespace sluice::nam::olap {

namespace {

using Piece = std::array<uint64_t, 64>;  // [relation, first word, 62 filter words]
constexpr uint32_t kPieceWords = 62;
constexpr uint64_t kBlockTuples = 8192;  // build tuples per cache-sized block (128 KiB)

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A cache-sized hash join of one block: open addressing on the build
// tuples' positions (so duplicate keys need nothing special), reused from
// block to block (no allocation once it has grown to the largest block).
class BlockJoin {
 public:
  void join(const Tuple* build, size_t nb, const Tuple* probe, size_t np, ThreadStats& out) {
    if (nb == 0 || np == 0) return;
    const size_t slots = std::bit_ceil(std::max<size_t>(16, 2 * nb));
    const size_t mask = slots - 1;
    table_.assign(slots, 0);
    for (size_t i = 0; i < nb; ++i) {
      size_t at = hash64(build[i].key) & mask;
      while (table_[at] != 0) at = (at + 1) & mask;
      table_[at] = static_cast<uint32_t>(i + 1);
    }
    for (size_t j = 0; j < np; ++j) {
      const Tuple& s = probe[j];
      for (size_t at = hash64(s.key) & mask; table_[at] != 0; at = (at + 1) & mask) {
        const Tuple& r = build[table_[at] - 1];
        if (r.key != s.key) continue;
        out.a += 1;
        out.b += pair_hash(s.key, r.payload, s.payload);
      }
    }
  }

 private:
  std::vector<uint32_t> table_;
};

// Splits `in` into 2^bits blocks by hash bits 20.. (the bits above the
// network partitioning's top bits and the table's low bits): a counting
// sort into `out`, block b at [starts[b], starts[b+1]).
void local_partition(const std::vector<Tuple>& in, uint32_t bits, std::vector<Tuple>& out,
                     std::vector<size_t>& starts) {
  const uint32_t n = 1u << bits;
  starts.assign(n + 1, 0);
  const auto block = [bits](uint64_t key) {
    return static_cast<uint32_t>((hash64(key) >> 20) & ((uint64_t{1} << bits) - 1));
  };
  for (const Tuple& t : in) ++starts[block(t.key) + 1];
  for (uint32_t b = 0; b < n; ++b) starts[b + 1] += starts[b];
  std::vector<size_t> at(starts.begin(), starts.end() - 1);
  out.resize(in.size());
  for (const Tuple& t : in) out[at[block(t.key)]++] = t;
}

// The local radix join of what a GHJ thread received.
void radix_join(const std::vector<Tuple>& r, const std::vector<Tuple>& s, ThreadStats& out) {
  const uint64_t blocks =
      std::bit_ceil(std::max<uint64_t>(1, (r.size() + kBlockTuples - 1) / kBlockTuples));
  const uint32_t bits = static_cast<uint32_t>(std::countr_zero(blocks));
  std::vector<Tuple> rp, sp;
  std::vector<size_t> rs, ss;
  local_partition(r, bits, rp, rs);
  local_partition(s, bits, sp, ss);
  BlockJoin join;
  for (uint64_t b = 0; b < blocks; ++b) {
    join.join(rp.data() + rs[b], rs[b + 1] - rs[b], sp.data() + ss[b], ss[b + 1] - ss[b], out);
  }
}

uint32_t rrj_partitions(const JoinConfig& config, uint32_t workers) {
  if (config.partitions != 0) return config.partitions;
  const uint64_t by_cache = (config.input.r_rows + kBlockTuples - 1) / kBlockTuples;
  return static_cast<uint32_t>(
      std::min<uint64_t>(8192, std::bit_ceil(std::max<uint64_t>(4ull * workers, by_cache))));
}

class Bloom {
 public:
  explicit Bloom(uint64_t keys, uint32_t bits_per_key)
      : words_(std::bit_ceil(std::max<uint64_t>(64, keys * bits_per_key)) / 64, 0),
        mask_(words_.size() * 64 - 1) {}
  void add(uint64_t key) {
    const uint64_t h = hash64(key ^ 0x94d049bb133111ebULL), step = (h >> 32) | 1;
    for (uint64_t i = 0, at = h; i < 3; ++i, at += step)
      words_[(at & mask_) >> 6] |= 1ull << (at & 63);
  }
  bool may_contain(uint64_t key) const {
    const uint64_t h = hash64(key ^ 0x94d049bb133111ebULL), step = (h >> 32) | 1;
    for (uint64_t i = 0, at = h; i < 3; ++i, at += step) {
      if ((words_[(at & mask_) >> 6] & (1ull << (at & 63))) == 0) return false;
    }
    return true;
  }
  std::vector<uint64_t>& words() { return words_; }

 private:
  std::vector<uint64_t> words_;
  uint64_t mask_;
};

}  // namespace

StoreLayout rrj_layout(const JoinConfig& config, uint32_t servers, uint32_t workers) {
  return make_store_layout(servers, workers, rrj_partitions(config, workers), 2, sizeof(Tuple),
                           config.chunk_bytes, config.input.r_rows + config.input.s_rows,
                           config.space_factor);
}

GhjFlows ghj_flows(const std::vector<Endpoint>& workers, const std::string& tag) {
  GhjFlows f{shuffle<Tuple>("olap-" + tag + "-R"), shuffle<Tuple>("olap-" + tag + "-S"),
             replicate<Piece>("olap-" + tag + "-bloom")};
  f.r.sources(workers).targets(workers).explicit_targets();
  f.s.sources(workers).targets(workers).explicit_targets();
  f.bloom.sources(workers).targets(workers);
  return f;
}

ThreadStats run_rrj(const Team& team, const JoinConfig& config, const std::string& store_region) {
  ThreadStats st;
  const StoreLayout layout = rrj_layout(config, team.servers, team.size());
  Remote in_r(*team.cluster, kRegionR, team.servers), in_s(*team.cluster, kRegionS, team.servers);
  Remote store(*team.cluster, store_region, team.servers);
  std::vector<Tuple> r, s;
  presize_share(config.input.r_rows, team, r);
  presize_share(config.input.s_rows, team, s);
  team.barrier(store_region + "-start");
  const auto t0 = Clock::now();
  try {
    fetch_share(in_r, config.input.r_rows, team, r);
    fetch_share(in_s, config.input.s_rows, team, s);
    st.fetch = since(t0);
    // Radix partitioning into the remote store through the buffers.
    const auto t1 = Clock::now();
    PartitionWriter writer(layout, store, team.index, config.background);
    const uint32_t p = layout.partitions;
    for (const Tuple& t : r) writer.add(0, reduce_hash(hash64(t.key), p), t);
    for (const Tuple& t : s) writer.add(1, reduce_hash(hash64(t.key), p), t);
    writer.finish();
    st.chunks = writer.chunks();
    st.partition = since(t1);
  } catch (const std::exception& e) {
    st.error = e.what();
  }
  // Every chunk and list head is in place once every thread got here.
  team.barrier(store_region + "-partitioned");
  const auto t2 = Clock::now();
  if (st.error.empty()) {
    try {
      BlockJoin join;
      std::vector<std::byte> scratch;
      for (uint32_t p = claim_partition(store); p < layout.partitions; p = claim_partition(store)) {
        r.clear();
        s.clear();
        read_partition(layout, store, 0, p, r, scratch);
        read_partition(layout, store, 1, p, s, scratch);
        join.join(r.data(), r.size(), s.data(), s.size(), st);
      }
    } catch (const std::exception& e) {
      st.error = e.what();
    }
  }
  st.finish = since(t2);
  st.seconds = since(t0);
  st.remote_ops = in_r.operations() + in_s.operations() + store.operations();
  st.path = store.path();
  return st;
}

ThreadStats run_ghj(const Team& team, const JoinConfig& config, const GhjFlows& flows, bool bloom,
                    const std::string& tag) {
  ThreadStats st;
  Cluster& cluster = *team.cluster;
  Remote in_r(cluster, kRegionR, team.servers), in_s(cluster, kRegionS, team.servers);
  const uint32_t workers = team.size();
  std::vector<Tuple> r, s, got_r, got_s;
  // What arrives is about a 1/workers share of each side (less after the
  // Bloom filters): make room for it, so that receiving rarely allocates.
  // Touched now (resize, then clear: the capacity stays), not in the run.
  got_r.resize(config.input.r_rows / workers * 5 / 4 + 1024);
  got_s.resize(config.input.s_rows / workers * 5 / 4 + 1024);
  got_r.clear();
  got_s.clear();
  presize_share(config.input.r_rows, team, r);
  presize_share(config.input.s_rows, team, s);
  team.barrier("olap-" + tag + "-start");
  const auto t0 = Clock::now();
  try {
    fetch_share(in_r, config.input.r_rows, team, r);
    fetch_share(in_s, config.input.s_rows, team, s);
  } catch (const std::exception& e) {
    // Go on with nothing: the flows need this thread's ends all the same,
    // or its peers would wait for it.
    st.error = e.what();
    r.clear();
    s.clear();
  }
  st.fetch = since(t0);
  const auto t1 = Clock::now();
  const auto flow_failure = [&](const char* what, const std::string& why) {
    if (st.error.empty()) st.error = std::string(what) + ": " + why;
  };
  if (bloom) {
    // Semi-join reduction: every thread learns the Bloom filters of all of
    // R's and all of S's keys.
    Bloom mine_r(config.input.r_rows, config.bloom_bits_per_key),
        mine_s(config.input.s_rows, config.bloom_bits_per_key);
    for (const Tuple& t : r) mine_r.add(t.key);
    for (const Tuple& t : s) mine_s.add(t.key);
    Bloom all_r(config.input.r_rows, config.bloom_bits_per_key),
        all_s(config.input.s_rows, config.bloom_bits_per_key);
    Worker w;
    const auto id =
        w.add(cluster.target(flows.bloom, team.slot), [&](std::span<const Piece> batch) {
          for (const Piece& piece : batch) {
            std::vector<uint64_t>& into = piece[0] == 0 ? all_r.words() : all_s.words();
            for (uint64_t i = 0; i < kPieceWords && piece[1] + i < into.size(); ++i)
              into[piece[1] + i] |= piece[2 + i];
          }
        });
    Source<Piece> out = cluster.source(flows.bloom, team.slot);
    for (uint64_t rel = 0; rel < 2; ++rel) {
      const std::vector<uint64_t>& words = rel == 0 ? mine_r.words() : mine_s.words();
      for (uint64_t first = 0; first < words.size(); first += kPieceWords) {
        Piece piece{};
        piece[0] = rel;
        piece[1] = first;
        bool any = false;
        for (uint64_t i = 0; i < kPieceWords && first + i < words.size(); ++i) {
          piece[2 + i] = words[first + i];
          any = any || words[first + i] != 0;
        }
        if (!any) continue;            // an empty piece changes no one's filter
        if (!st.error.empty()) break;  // a failed flow: only close it
        if (w.push(out, piece) != Status::kOk) flow_failure("bloom push", out.error());
        ++st.flow_records;
      }
    }
    if (w.close(out) != Status::kOk) flow_failure("bloom close", out.error());
    if (w.run() != Status::kEndOfFlow) flow_failure("bloom filters", w.error(id));
    std::erase_if(r, [&](const Tuple& t) { return !all_s.may_contain(t.key); });
    std::erase_if(s, [&](const Tuple& t) { return !all_r.may_contain(t.key); });
  }
  {
    // The shuffle: both relations' flows open at once, one Worker.
    Worker w;
    w.add(cluster.target(flows.r, team.slot), [&](std::span<const Tuple> batch) {
      got_r.insert(got_r.end(), batch.begin(), batch.end());
    });
    w.add(cluster.target(flows.s, team.slot), [&](std::span<const Tuple> batch) {
      got_s.insert(got_s.end(), batch.begin(), batch.end());
    });
    Source<Tuple> out_r = cluster.source(flows.r, team.slot),
                  out_s = cluster.source(flows.s, team.slot);
    for (const Tuple& t : r) {
      if (w.push_to(out_r, reduce_hash(hash64(t.key), workers), t) != Status::kOk) {
        flow_failure("R push", out_r.error());
        break;
      }
    }
    if (w.close(out_r) != Status::kOk) flow_failure("R close", out_r.error());
    for (const Tuple& t : s) {
      if (w.push_to(out_s, reduce_hash(hash64(t.key), workers), t) != Status::kOk) {
        flow_failure("S push", out_s.error());
        break;
      }
    }
    if (w.close(out_s) != Status::kOk) flow_failure("S close", out_s.error());
    st.flow_records += r.size() + s.size();
    for (Status run = w.run(); run != Status::kEndOfFlow; run = w.run()) {
      flow_failure("shuffle", w.error(w.reported()));
      if (w.done()) break;
    }
  }
  st.partition = since(t1);
  const auto t2 = Clock::now();
  if (st.error.empty()) radix_join(got_r, got_s, st);
  st.finish = since(t2);
  st.seconds = since(t0);
  st.remote_ops = in_r.operations() + in_s.operations();
  st.path = in_r.path();
  return st;
}

}  // namespace sluice::nam::olap
