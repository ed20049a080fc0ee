// A request and its answer, one at a time: rank 0 pushes a 20 KiB record
// into a Latency flow to rank 1 and waits on another flow for it to come
// back; rank 1 sends every record it gets back unchanged. Each thread waits
// on one flow while its last push to the other may still be on its way:
// past the provider's eager size (16 KiB on tcp;ofi_rxm) such a message
// goes in steps that need the sender's endpoint to be progressed, which
// the library must do while the thread waits elsewhere.
//
// Rank 0 checks every word of every answer and prints
// "PINGPONG rounds=N record_bytes=B checksum=X" (X over the rounds it
// sent); rank 1 prints "PINGPONG echoed=N checksum=X" (over what it got).
//
//   sluice-test-ping-pong [--rounds N]
#include <sluice/sluice.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "support/job_args.h"

namespace {

struct Big {
  uint64_t round;
  uint64_t key;
  std::array<uint64_t, 2558> words;  // 20480 bytes in all
};

uint64_t word(uint64_t round, size_t i) { return sluice::hash64(round * 2654435761u + i); }

void fill(Big* b, uint64_t round) {
  b->round = round;
  b->key = round;
  for (size_t i = 0; i < b->words.size(); ++i) b->words[i] = word(round, i);
}

bool intact(const Big& b, uint64_t round) {
  if (b.round != round || b.key != round) return false;
  for (size_t i = 0; i < b.words.size(); ++i) {
    if (b.words[i] != word(round, i)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t rounds = 200;
  sluice::testing::JobArgs(argc, argv, "[--rounds N]").value("--rounds", &rounds).parse();
  try {
    sluice::Cluster c = sluice::Cluster::join();
    if (c.world_size() != 2) return sluice::testing::fail("ping pong: run it on 2 ranks");
    auto ping = sluice::shuffle<Big>("ping-pong-ping")
                    .sources({{0, 0}})
                    .targets({{1, 0}})
                    .key(&Big::key)
                    .optimize(sluice::Optimize::kLatency);
    auto pong = sluice::shuffle<Big>("ping-pong-pong")
                    .sources({{1, 0}})
                    .targets({{0, 0}})
                    .key(&Big::key)
                    .optimize(sluice::Optimize::kLatency);
    auto ping_flow = c.declare(ping);
    auto pong_flow = c.declare(pong);
    if (!ping_flow || !pong_flow) return sluice::testing::fail("ping pong: declare failed");
    uint64_t checksum = 0, count = 0;
    if (c.rank() == 0) {
      sluice::Source<Big> out = c.source(ping, 0);
      sluice::Target<Big> in = c.target(pong, 0);
      auto rec = std::make_unique<Big>();
      for (uint64_t r = 0; r < rounds; ++r) {
        fill(rec.get(), r);
        if (out.push(*rec) != sluice::Status::kOk || out.flush() != sluice::Status::kOk)
          return sluice::testing::fail("ping pong: push: " + out.error());
        auto batch = in.consume();
        if (!batch) return sluice::testing::fail("ping pong: consume: " + in.error());
        if (batch->size() != 1 || !intact((*batch)[0], r)) {
          return sluice::testing::fail("ping pong: round " + std::to_string(r) +
                                       " came back changed or with another record");
        }
        checksum += sluice::hash64(r);
        ++count;
      }
      if (out.close() != sluice::Status::kOk)
        return sluice::testing::fail("ping pong: close: " + out.error());
      if (in.consume() || in.status() != sluice::Status::kEndOfFlow)
        return sluice::testing::fail("ping pong: the answers did not end: " + in.error());
      std::printf("PINGPONG rounds=%llu record_bytes=%zu checksum=%016llx\n",
                  static_cast<unsigned long long>(count), sizeof(Big),
                  static_cast<unsigned long long>(checksum));
    } else {
      sluice::Target<Big> in = c.target(ping, 0);
      sluice::Source<Big> out = c.source(pong, 0);
      while (auto batch = in.consume()) {
        for (const Big& b : *batch) {
          checksum += sluice::hash64(b.round);
          ++count;
          if (out.push(b) != sluice::Status::kOk || out.flush() != sluice::Status::kOk)
            return sluice::testing::fail("ping pong: echo: " + out.error());
        }
      }
      if (in.status() != sluice::Status::kEndOfFlow)
        return sluice::testing::fail("ping pong: requests: " + in.error());
      if (out.close() != sluice::Status::kOk)
        return sluice::testing::fail("ping pong: close: " + out.error());
      std::printf("PINGPONG echoed=%llu checksum=%016llx\n", static_cast<unsigned long long>(count),
                  static_cast<unsigned long long>(checksum));
    }
    return c.leave() == sluice::Status::kOk ? 0 : 1;
  } catch (const std::exception& e) {
    return sluice::testing::fail(std::string("ping pong: ") + e.what());
  }
}
