// The Open MPI peer of `sluice perf` (run by bench/peers/run with mpirun):
//
//   mpirun -np 2   sluice-peer-mpi --test pingpong --sizes 8,64 --round-trips N
//   mpirun -np S+T sluice-peer-mpi --test stream --sources S --sizes 8,64 --bytes B [--max-records
//   M] mpirun -np P   sluice-peer-mpi --test alltoall --sizes 8,64 --bytes B [--max-records M]
//
// N = min(B / size, M) records per sender (M defaults to 4 M: one message per
// record, so small records are bounded by count, not bytes).
//
// pingpong: ranks 0 and 1 bounce one record (MPI_Send / MPI_Recv), rank 0
// times each round trip after a warm-up. stream: ranks 0..S-1 each send N
// records, one message per record, record i of sender s to receiver
// (i + s) % T, in windows of 64 MPI_Isend (as osu_bw does); receivers post
// windows of 64 MPI_Irecv from any source, copy each record out and sum its
// key. alltoall: every rank calls MPI_Alltoall with one record per peer,
// N / (P - 1) times (records moved between distinct ranks are counted).
// Time: from a barrier to the last receive (slowest receiver); CPU: each
// rank's getrusage over its loop, summed by side. Rank 0 prints one JSON line
// per size (bench/peers/peer_common.h).
#include <mpi.h>

#include "peer_common.h"

namespace {

constexpr int kWindow = 64;

struct Cpu {
  double src = 0, tgt = 0;
};

// Sums this rank's CPU seconds into the sender or receiver side on rank 0.
Cpu reduce_cpu(double mine, bool sender) {
  double in[2] = {sender ? mine : 0, sender ? 0 : mine};
  double out[2] = {0, 0};
  MPI_Reduce(in, out, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  return {out[0], out[1]};
}

double max_over_ranks(double v) {
  double out = 0;
  MPI_Reduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return out;
}

void pingpong(int rank, uint32_t bytes, uint32_t requested) {
  const uint32_t n = peers::round_trips_for(requested, bytes);
  const uint32_t warmup = std::min<uint32_t>(n / 10 + 10, 1000);
  std::vector<unsigned char> rec = peers::make_record(bytes), back(bytes), scratch(bytes);
  std::vector<double> rtt;
  MPI_Barrier(MPI_COMM_WORLD);
  const double cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
  for (uint32_t i = 0; i < warmup + n; ++i) {
    if (rank == 0) {
      const double s = peers::now_seconds();
      peers::set_key(rec.data(), peers::key_of(i));
      MPI_Send(rec.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(back.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      if (peers::take_record(back.data(), scratch.data(), bytes) != peers::key_of(i))
        MPI_Abort(MPI_COMM_WORLD, 3);
      if (i >= warmup) rtt.push_back((peers::now_seconds() - s) * 1e6);
    } else if (rank == 1) {
      MPI_Recv(back.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      peers::take_record(back.data(), scratch.data(), bytes);
      MPI_Send(back.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  const double seconds = peers::now_seconds() - t0;
  const Cpu cpu = reduce_cpu(peers::cpu_seconds() - cpu0, rank == 0);
  if (rank == 0)
    peers::print_sample(bytes, n, seconds, cpu.src, cpu.tgt, peers::percentile(rtt, 50),
                        peers::percentile(rtt, 99), peers::percentile(rtt, 99.9));
}

void stream(int rank, int size, int sources, uint32_t bytes, uint64_t n) {
  const int targets = size - sources;
  const bool sender = rank < sources;
  std::vector<unsigned char> buf(static_cast<size_t>(kWindow) * bytes), scratch(bytes);
  const std::vector<unsigned char> rec = peers::make_record(bytes);
  for (int w = 0; w < kWindow; ++w)
    std::memcpy(buf.data() + static_cast<size_t>(w) * bytes, rec.data(), bytes);
  MPI_Request req[kWindow];
  uint64_t expected = 0;  // this receiver's records from every sender
  if (!sender) {
    const int t = rank - sources;
    for (int s = 0; s < sources; ++s)
      for (uint64_t i = 0; i < n; ++i) expected += (i + s) % targets == static_cast<uint64_t>(t);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
  uint64_t sum = 0;
  if (sender) {
    for (uint64_t i = 0; i < n;) {
      int k = 0;
      for (; k < kWindow && i < n; ++k, ++i) {
        unsigned char* r = buf.data() + static_cast<size_t>(k) * bytes;
        peers::set_key(r, peers::key_of(static_cast<uint64_t>(rank) * n + i));
        const int dest = sources + static_cast<int>((i + rank) % targets);
        MPI_Isend(r, static_cast<int>(bytes), MPI_BYTE, dest, 0, MPI_COMM_WORLD, &req[k]);
      }
      MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    }
  } else {
    for (uint64_t got = 0; got < expected;) {
      int k = 0;
      for (; k < kWindow && got + k < expected; ++k)
        MPI_Irecv(buf.data() + static_cast<size_t>(k) * bytes, static_cast<int>(bytes), MPI_BYTE,
                  MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &req[k]);
      MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
      for (int j = 0; j < k; ++j)
        sum +=
            peers::take_record(buf.data() + static_cast<size_t>(j) * bytes, scratch.data(), bytes);
      got += static_cast<uint64_t>(k);
    }
  }
  const double seconds = max_over_ranks(sender ? 0 : peers::now_seconds() - t0);
  const Cpu cpu = reduce_cpu(peers::cpu_seconds() - cpu0, sender);
  uint64_t total = 0;
  MPI_Reduce(&sum, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    peers::print_sample(bytes, static_cast<double>(n) * sources, seconds, cpu.src, cpu.tgt);
}

void alltoall(int rank, int size, uint32_t bytes, uint64_t n) {
  const uint64_t iters = std::max<uint64_t>(1, n / static_cast<uint64_t>(std::max(1, size - 1)));
  std::vector<unsigned char> out(static_cast<size_t>(size) * bytes),
      in(static_cast<size_t>(size) * bytes), scratch(bytes);
  const std::vector<unsigned char> rec = peers::make_record(bytes);
  for (int p = 0; p < size; ++p)
    std::memcpy(out.data() + static_cast<size_t>(p) * bytes, rec.data(), bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const double cpu0 = peers::cpu_seconds(), t0 = peers::now_seconds();
  uint64_t sum = 0;
  for (uint64_t it = 0; it < iters; ++it) {
    for (int p = 0; p < size; ++p)
      peers::set_key(out.data() + static_cast<size_t>(p) * bytes, peers::key_of(it));
    MPI_Alltoall(out.data(), static_cast<int>(bytes), MPI_BYTE, in.data(), static_cast<int>(bytes),
                 MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < size; ++p)
      if (p != rank)
        sum +=
            peers::take_record(in.data() + static_cast<size_t>(p) * bytes, scratch.data(), bytes);
  }
  const double seconds = max_over_ranks(peers::now_seconds() - t0);
  // Every rank is both sides: its CPU counts half to each.
  const double mine = peers::cpu_seconds() - cpu0;
  const Cpu cpu = reduce_cpu(mine, true);
  if (rank == 0)
    peers::print_sample(bytes, static_cast<double>(iters) * size * (size - 1), seconds, cpu.src / 2,
                        cpu.src / 2);
  (void)sum;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string test = peers::arg(argc, argv, "--test", "stream");
  const std::vector<uint32_t> sizes = peers::parse_list(peers::arg(argc, argv, "--sizes", "64"));
  const uint64_t bytes_per_sender =
      std::strtoull(peers::arg(argc, argv, "--bytes", "67108864").c_str(), nullptr, 10);
  const uint64_t max_records =
      std::strtoull(peers::arg(argc, argv, "--max-records", "4000000").c_str(), nullptr, 10);
  const uint32_t round_trips = static_cast<uint32_t>(
      std::strtoul(peers::arg(argc, argv, "--round-trips", "10000").c_str(), nullptr, 10));
  const int sources = std::atoi(peers::arg(argc, argv, "--sources", "1").c_str());
  if ((test == "pingpong" && size != 2) || (test == "stream" && (sources < 1 || sources >= size))) {
    if (rank == 0)
      std::fprintf(stderr, "sluice-peer-mpi: --test %s does not fit %d ranks\n", test.c_str(),
                   size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (uint32_t bytes : sizes) {
    if (bytes < 8) continue;
    const uint64_t n = std::max<uint64_t>(1, std::min(bytes_per_sender / bytes, max_records));
    if (test == "pingpong")
      pingpong(rank, bytes, round_trips);
    else if (test == "stream")
      stream(rank, size, sources, bytes, n);
    else
      alltoall(rank, size, bytes, n);
  }
  MPI_Finalize();
  return 0;
}
