// sluice-join-mpi: the MPI baseline of bench/join, the shape of the MPI radix
// join the DFI paper compares against (§6.2.1): every process first makes a
// histogram pass over its fragment to learn how many tuples go to each
// process, exchanges the counts (MPI_Alltoall), scatters its tuples into a
// send buffer laid out by destination, and moves them with MPI_Alltoallv, a
// collective, so no process starts local work before every process has sent
// everything. Then each process runs the same local radix join as a sluice
// worker (partition into cache-sized sub-partitions, build, probe).
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 sluice-join-mpi --r 4000000 --s 4000000
//   --verify
//
// Same data flags as sluice-join; with P processes, rank r's fragment is the
// same as sluice-join's rank r with --threads 1.
#include <mpi.h>
#include <sluice/job.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data.h"
#include "local_join.h"
#include "options.h"

namespace sj = sluice::join;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTooMany = "more than 2^31 tuples for one process; use more processes";

// One relation's exchange: histogram, counts, scatter, MPI_Alltoallv.
template <class T>
class Exchange {
 public:
  Exchange(int procs, uint64_t local, uint64_t expected_in) : procs_(procs), send_(local), recv_() {
    recv_.reserve(expected_in);
    recv_.resize(expected_in);  // touched now, like sluice's preallocated buffers
    send_counts_.resize(procs);
    recv_counts_.resize(procs);
    send_displs_.resize(procs);
    recv_displs_.resize(procs);
  }

  // Partition pass: histogram and scatter into send_ by destination.
  void partition(const std::vector<T>& rows) {
    std::vector<uint64_t> counts(procs_, 0);
    for (const T& t : rows) ++counts[sj::network_partition(sj::key_hash(t.key), procs_)];
    std::vector<uint64_t> at(procs_, 0);
    uint64_t sum = 0;
    for (int p = 0; p < procs_; ++p) {
      if (counts[p] > INT_MAX) throw std::runtime_error(kTooMany);
      send_counts_[p] = static_cast<int>(counts[p]);
      send_displs_[p] = static_cast<int>(sum);
      at[p] = sum;
      sum += counts[p];
    }
    for (const T& t : rows) send_[at[sj::network_partition(sj::key_hash(t.key), procs_)]++] = t;
  }

  // Network: counts, then the tuples.
  const std::vector<T>& exchange(MPI_Datatype type, uint64_t* received) {
    MPI_Alltoall(send_counts_.data(), 1, MPI_INT, recv_counts_.data(), 1, MPI_INT, MPI_COMM_WORLD);
    uint64_t sum = 0;
    for (int p = 0; p < procs_; ++p) {
      if (sum > INT_MAX) throw std::runtime_error(kTooMany);
      recv_displs_[p] = static_cast<int>(sum);
      sum += static_cast<uint64_t>(recv_counts_[p]);
    }
    if (sum > recv_.size()) recv_.resize(sum);  // skew beyond the estimate
    MPI_Alltoallv(send_.data(), send_counts_.data(), send_displs_.data(), type, recv_.data(),
                  recv_counts_.data(), recv_displs_.data(), type, MPI_COMM_WORLD);
    *received = sum;
    return recv_;
  }

 private:
  int procs_;
  std::vector<T> send_, recv_;
  std::vector<int> send_counts_, recv_counts_, send_displs_, recv_displs_;
};

template <class T>
int run(const sj::Options& opt, const sluice::JobFlags& flags, int rank, int procs) {
  const sj::DataSpec& data = opt.data;
  const auto [r_local, s_local] = sj::local_fragments<T>(data, rank, procs, 1);
  uint64_t r_total = data.r_tuples, s_total = data.s_tuples;
  if (data.from_files()) {
    uint64_t mine[2] = {r_local.size(), s_local.size()}, all[2];
    MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    r_total = all[0];
    s_total = all[1];
  }
  const bool swapped = s_total < r_total;
  const std::vector<T>& build_local = swapped ? s_local : r_local;
  const std::vector<T>& probe_local = swapped ? r_local : s_local;
  const uint64_t build_share = (swapped ? s_total : r_total) / procs;
  const uint64_t probe_share = (swapped ? r_total : s_total) / procs;
  const uint32_t fbits = sj::choose_fanout_bits(build_share, sizeof(T));

  MPI_Datatype type;
  MPI_Type_contiguous(sizeof(T), MPI_BYTE, &type);
  MPI_Type_commit(&type);
  // Setup, not timed (as in sluice-join): every buffer preallocated and touched.
  Exchange<T> build_x(procs, build_local.size(), build_share + build_share / 8 + 64);
  Exchange<T> probe_x(procs, probe_local.size(), probe_share + probe_share / 8 + 64);
  sj::PartitionBuffers<T> build_parts(fbits, build_share + build_share / 8 + 64);
  sj::PartitionBuffers<T> probe_parts(fbits, probe_share + probe_share / 8 + 64);
  sj::JoinTable<T> table(fbits);
  table.reserve(sj::largest_partition_estimate(build_share, fbits));

  MPI_Barrier(MPI_COMM_WORLD);
  const double cpu0 = sluice::process_cpu_seconds();
  const auto t0 = Clock::now();
  build_x.partition(build_local);
  probe_x.partition(probe_local);
  const auto t1 = Clock::now();
  uint64_t build_in = 0, probe_in = 0;
  const std::vector<T>& build_rows = build_x.exchange(type, &build_in);
  const std::vector<T>& probe_rows = probe_x.exchange(type, &probe_in);
  const auto t2 = Clock::now();
  // The same local kernel as a sluice worker: partition what arrived, then
  // build and probe sub-partition by sub-partition.
  for (uint64_t i = 0; i < build_in; ++i) build_parts.add(build_rows[i]);
  const auto t2b = Clock::now();
  for (uint64_t i = 0; i < probe_in; ++i) probe_parts.add(probe_rows[i]);
  const auto t3 = Clock::now();
  double build_seconds = 0;
  const sj::JoinResult result =
      sj::join_partitions<T, Clock>(build_parts, probe_parts, swapped, table, &build_seconds);
  const auto t4 = Clock::now();
  const double cpu = sluice::process_cpu_seconds() - cpu0;
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double seconds = secs(t0, t4);

  uint64_t mine[3] = {result.matches, result.checksum, (build_in + probe_in) * sizeof(T)}, sum[3];
  MPI_Reduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  // Phases as sluice-join charges them: partition = the sender-side passes
  // (histogram + scatter), network = the two collectives, build =
  // partitioning the received build side and building, probe = the same for
  // the probe side.
  double mine_d[6] = {secs(t0, t1),
                      secs(t1, t2),
                      secs(t2, t2b) + build_seconds,
                      secs(t2b, t3) + secs(t3, t4) - build_seconds,
                      cpu,
                      seconds},
         sum_d[6], max_d[6];
  MPI_Reduce(mine_d, sum_d, 6, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(mine_d, max_d, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Type_free(&type);
  if (rank != 0) return 0;

  const sj::JoinResult total{sum[0], sum[1]};
  std::string verdict = "skipped";
  sj::JoinResult reference;
  if (flags.verify) {
    const auto all_rows = sj::whole_relations<T>(data, procs, 1);
    reference = sj::hash_join<T>(all_rows.r, all_rows.s);
    verdict = reference == total ? "OK" : "MISMATCH";
  }
  const double tuples = static_cast<double>(r_total + s_total);
  const double slowest = max_d[5];
  if (flags.json) {
    std::printf(
        "{\"program\":\"sluice-join-mpi\",\"algorithm\":\"mpi-radix\",\"ranks\":%d,\"threads\":1,"
        "\"width\":%u,"
        "\"r\":%" PRIu64 ",\"s\":%" PRIu64 ",\"dist\":\"%s\",\"theta\":%.3f,\"seed\":%" PRIu64
        ",\"matches\":%" PRIu64 ",\"checksum\":\"%016" PRIx64
        "\",\"seconds\":%.6f,\"cpu_seconds\":%.3f,"
        "\"tuples_per_s\":%.0f,\"bytes_moved\":%" PRIu64
        ",\"phases_mean_per_worker\":{\"partition\":%.6f,"
        "\"network\":%.6f,\"build\":%.6f,\"probe\":%.6f},\"fanout_bits\":%u,\"verify\":\"%s\"}\n",
        procs, data.width, r_total, s_total, sj::to_string(data.dist), data.theta, data.seed,
        total.matches, total.checksum, slowest, sum_d[4], tuples / std::max(slowest, 1e-9), sum[2],
        sum_d[0] / procs, sum_d[1] / procs, sum_d[2] / procs, sum_d[3] / procs, fbits,
        verdict.c_str());
  } else {
    std::printf("sluice-join-mpi: MPI radix join (histogram + MPI_Alltoallv), %d processes\n",
                procs);
    std::printf("  data      %s\n", data.describe().c_str());
    std::printf("  result    %" PRIu64 " matches, checksum %016" PRIx64 "\n", total.matches,
                total.checksum);
    std::printf(
        "  time      %.3f s (slowest process), %.1f M tuples/s of |R|+|S|, %.2f CPU-seconds in "
        "all\n",
        slowest, tuples / std::max(slowest, 1e-9) / 1e6, sum_d[4]);
    std::printf(
        "  phases    partition %.3f s, network %.3f s, build %.3f s, probe %.3f s (mean per "
        "process)\n",
        sum_d[0] / procs, sum_d[1] / procs, sum_d[2] / procs, sum_d[3] / procs);
  }
  if (flags.verify) {
    std::printf(verdict == "OK" ? "verify: OK (%" PRIu64 " matches, checksum %016" PRIx64 ")\n"
                                : "verify: MISMATCH (got %" PRIu64 " matches, checksum %016" PRIx64
                                  ")\n",
                total.matches, total.checksum);
  }
  std::fflush(stdout);
  return verdict == "MISMATCH" ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, procs = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  sluice::Job job("sluice-join-mpi",
                  "The MPI baseline: histogram pass, MPI_Alltoallv of both relations, local "
                  "radix join",
                  sluice::kFlagJson | sluice::kFlagVerify);
  sj::Options opt;
  sj::add_mpi_options(job.cli(), opt);
  // Every process parses the same arguments: all stop here alike.
  if (std::optional<int> status = job.parse(argc, argv)) {
    MPI_Finalize();
    return *status;
  }
  bool finished = false;  // past every collective: the others need nothing more from this one
  const int status = job.run_local([&] {
    const int code = opt.data.width == 8 ? run<sj::Tuple8>(opt, job.flags(), rank, procs)
                                         : run<sj::Tuple16>(opt, job.flags(), rank, procs);
    finished = true;
    return code;
  });
  // A process that failed before the end would leave the others waiting in
  // a collective: take them down with it.
  if (!finished) MPI_Abort(MPI_COMM_WORLD, status);
  MPI_Finalize();
  return status;
}
