#include "spares.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "txn.h"

namespace sluice::nam {

namespace {

// [ state: 8 bits | rank: 24 bits | incarnation: 32 bits ]
constexpr uint32_t kRankBits = 24;
constexpr uint64_t kFreeWord = 0;

uint64_t cas_claim(RemoteRegion& results, uint64_t offset, uint64_t expected, uint64_t desired) {
  const Result<uint64_t> prev =
      results.compare_and_swap(offset, expected, desired, Clock::now() + std::chrono::seconds(10));
  if (!prev) {
    throw NamError("nam: the spare clients' claim word at " + std::to_string(offset) +
                   " on memory server rank 0 cannot be changed: " + to_string(prev.status()) +
                   ": " + results.error());
  }
  return *prev;
}

}  // namespace

uint64_t encode_claim(const SpareClaim& claim) {
  return static_cast<uint64_t>(claim.state) << 56 |
         uint64_t{claim.rank & ((1u << kRankBits) - 1)} << 32 | claim.incarnation;
}

SpareClaim decode_claim(uint64_t word) {
  SpareClaim c;
  c.state = static_cast<SpareState>(word >> 56);
  c.rank = static_cast<uint32_t>(word >> 32) & ((1u << kRankBits) - 1);
  c.incarnation = static_cast<uint32_t>(word);
  return c;
}

std::vector<uint8_t> free_slots(const Cluster& cluster, const Layout& layout,
                                uint32_t clients_per_rank) {
  std::vector<uint8_t> free(layout.clients, 0);
  const uint32_t m = layout.memory_servers;
  for (uint32_t r = m; r < cluster.world_size(); ++r) {
    if (cluster.alive(r) && cluster.incarnation(r) == 0) continue;
    for (uint32_t t = 0; t < clients_per_rank; ++t) free[(r - m) * clients_per_rank + t] = 1;
  }
  for (uint32_t id = layout.first_spare(); id < layout.clients; ++id) free[id] = 1;
  return free;
}

void park_free_slots(const Layout& layout, std::byte* meta, const std::vector<uint8_t>& free) {
  for (uint32_t id = 0; id < layout.clients && id < free.size(); ++id) {
    if (free[id] == 0) continue;
    const uint64_t first = id + 1;  // client id's first timestamp
    std::memcpy(meta + layout.park_offset(id), &first, 8);
  }
}

void init_claims(std::byte* words, const std::vector<uint8_t>& free) {
  const uint64_t owned = encode_claim({SpareState::kOwned, 0, 0});
  for (size_t id = 0; id < free.size(); ++id)
    std::memcpy(words + 8 * id, free[id] != 0 ? &kFreeWord : &owned, 8);
}

std::vector<uint32_t> claim_spares(RemoteRegion& results, uint64_t offset, uint32_t slots,
                                   uint32_t want, uint32_t rank, uint32_t incarnation, bool* over) {
  std::vector<uint32_t> claimed;
  *over = false;
  const uint64_t mine = encode_claim({SpareState::kRunning, rank, incarnation});
  for (uint32_t s = 0; s < slots && claimed.size() < want; ++s) {
    const uint64_t prev = cas_claim(results, offset + 8ull * s, kFreeWord, mine);
    if (prev == kFreeWord) {
      claimed.push_back(s);
    } else if (decode_claim(prev).state == SpareState::kClosed) {
      // The reporter closes every free slot at the run's end, in order, and
      // waits for the running ones before it goes on: slots claimed before
      // this one are still this process's to run (for what is left of the
      // run, possibly nothing) and to finish.
      *over = true;
      break;
    }
  }
  return claimed;
}

void finish_spare(RemoteRegion& results, uint64_t offset, uint32_t index, uint32_t rank,
                  uint32_t incarnation) {
  const uint64_t mine = encode_claim({SpareState::kRunning, rank, incarnation});
  const uint64_t prev = cas_claim(results, offset + 8ull * index, mine,
                                  encode_claim({SpareState::kDone, rank, incarnation}));
  if (prev != mine) {
    throw NamError("nam: spare client slot " + std::to_string(index) +
                   " is not this process's to finish (its claim word is " + std::to_string(prev) +
                   ")");
  }
}

SpareClaim close_spare(RemoteRegion& results, uint64_t offset, uint32_t index) {
  const uint64_t closed = encode_claim({SpareState::kClosed, 0, 0});
  const uint64_t prev = cas_claim(results, offset + 8ull * index, kFreeWord, closed);
  return decode_claim(prev == kFreeWord ? closed : prev);
}

SpareClaim settle_spare(Cluster& cluster, RemoteRegion& results, uint64_t offset, uint32_t index) {
  for (;;) {
    const SpareClaim c = close_spare(results, offset, index);
    if (c.state != SpareState::kRunning) return c;
    if (!cluster.alive(c.rank) || cluster.incarnation(c.rank) != c.incarnation) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace sluice::nam
