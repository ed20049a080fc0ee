// The program tests/lifecycle/ runs through `sluice run`: one flow name
// declared, used and destroyed `--cycles` times by every rank. Even cycles
// declare it as an all-to-all shuffle; odd cycles declare it again with
// another spec (one target rank, smaller segments and rings), so every
// re-declaration also changes the spec. In every cycle each rank pushes
// `--records` records from its one source (slot 0) and consumes through a
// Worker; after the cycle the flow is destroyed explicitly. At the end the
// ranks exchange their per-cycle count and checksum and each checks that
// every cycle delivered every record exactly once. After `--warmup` cycles
// and at the end the process's open fds, mappings and /dev/shm entries are
// counted: they must not have grown.
#include <dirent.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/job_args.h"

namespace {

struct Rec {
  uint64_t key;
  uint64_t value;  // source rank << 32 | record index
};

struct Args {
  uint32_t cycles = 100;
  uint64_t records = 3000;
  uint32_t warmup = 5;
  // End each cycle's flow by its destructor (which never waits: the Cluster
  // lets go of it in the background, and the next declaration of the name
  // waits for that) rather than by destroy().
  bool by_destructor = false;
};

Args parse(int argc, char** argv) {
  Args a;
  sluice::testing::JobArgs(argc, argv)
      .value("--cycles", &a.cycles)
      .value("--records", &a.records)
      .value("--warmup", &a.warmup)
      .flag("--by-destructor", &a.by_destructor)
      .parse();
  return a;
}

using sluice::testing::fail;

uint64_t fingerprint(uint32_t cycle, const Rec& r) {
  return sluice::hash64(r.value ^ (uint64_t{cycle} << 52) ^ r.key);
}
Rec record(uint32_t rank, uint32_t cycle, uint64_t i) {
  return Rec{sluice::hash64((uint64_t{cycle} << 40) ^ (uint64_t{rank} << 32) ^ i),
             uint64_t{rank} << 32 | i};
}

// What the process holds that a leaked flow would leave behind.
struct Resources {
  size_t fds = 0, maps = 0, shm = 0;
  std::string text() const {
    return "fds=" + std::to_string(fds) + " maps=" + std::to_string(maps) +
           " shm=" + std::to_string(shm);
  }
};

size_t dir_entries(const char* path, const char* containing = nullptr) {
  size_t n = 0;
  if (DIR* d = ::opendir(path)) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (containing == nullptr || name.find(containing) != std::string::npos) ++n;
    }
    ::closedir(d);
  }
  return n;
}

Resources measure() {
  Resources r;
  r.fds = dir_entries("/proc/self/fd") - 1;  // minus the one opendir holds
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++r.maps;
  r.shm = dir_entries("/dev/shm", "sluice");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    auto c = sluice::Cluster::join();
    const uint32_t me = c.rank(), world = c.world_size();
    std::vector<uint64_t> count(a.cycles, 0), sum(a.cycles, 0);
    Resources warm;
    // How long each destructor took (printed, never asserted: timings are
    // the machine's; that none waits is what the suite checks).
    std::vector<double> source_us, worker_us, flow_us;
    auto timed_end = [](auto& handle, std::vector<double>* took) {
      const auto start = sluice::Clock::now();
      { auto gone = std::move(handle); }
      took->push_back(
          std::chrono::duration<double, std::micro>(sluice::Clock::now() - start).count());
    };
    auto median_max = [](std::vector<double> v) {
      if (v.empty()) return std::string("-");
      std::sort(v.begin(), v.end());
      char text[64];
      std::snprintf(text, sizeof text, "%.0f/%.0f us", v[v.size() / 2], v.back());
      return std::string(text);
    };
    for (uint32_t cycle = 0; cycle < a.cycles; ++cycle) {
      const bool narrow = cycle % 2 == 1;
      const uint32_t target_rank = (cycle / 2) % world;
      auto spec = sluice::shuffle<Rec>("cycle").sources(c.all_ranks()).key(&Rec::key);
      if (narrow) {
        spec.targets(c.ranks({target_rank})).segment_bytes(1024).ring_segments(4);
      } else {
        spec.targets(c.all_ranks());
      }
      sluice::DeclaredFlow flow = c.declare(spec);
      const bool target_here = !narrow || target_rank == me;
      {
        sluice::Worker w;
        if (target_here) {
          w.add(c.target(spec, 0), [&](std::span<const Rec> batch) {
            for (const Rec& r : batch) sum[cycle] += fingerprint(cycle, r);
            count[cycle] += batch.size();
          });
        }
        auto out = c.source(spec, 0);
        if (cycle == 0) {
          // While a source is open the flow cannot go, and its name stays taken.
          const sluice::Status refused =
              flow.destroy(sluice::Clock::now() + std::chrono::seconds(5));
          if (refused == sluice::Status::kOk) return fail("destroyed a flow with an open source");
          if (refused != sluice::Status::kInvalid || !flow)
            return fail(std::string("destroy: ") + sluice::to_string(refused) + ": " +
                        flow.error());
          std::printf("REFUSED rank %u: %s\n", me, flow.error().c_str());
          try {
            auto again = c.declare(spec);
            return fail("declared a declared name again");
          } catch (const sluice::Error& e) {
            if (e.code() != sluice::ErrorCode::kInvalidArgument)
              return fail(std::string("declare: ") + e.what());
          }
        }
        for (uint64_t i = 0; i < a.records; ++i) {
          if (w.push(out, record(me, cycle, i)) != sluice::Status::kOk) {
            return fail("cycle " + std::to_string(cycle) + ": push: " + out.error());
          }
        }
        if (w.close(out) != sluice::Status::kOk)
          return fail("cycle " + std::to_string(cycle) + ": close: " + out.error());
        if (target_here && w.run() != sluice::Status::kEndOfFlow) {
          return fail("cycle " + std::to_string(cycle) + ": run: " + w.error(w.reported()));
        }
        timed_end(out, &source_us);
        timed_end(w, &worker_us);
      }  // the worker (with its target) and the source end before their flow
      if (!a.by_destructor) {
        if (sluice::Status s = flow.destroy(sluice::Clock::now() + std::chrono::seconds(30));
            s != sluice::Status::kOk) {
          return fail("cycle " + std::to_string(cycle) + ": destroy: " + flow.error());
        }
      }
      if (a.by_destructor) timed_end(flow, &flow_us);
      if (cycle + 1 == a.warmup) warm = measure();
    }
    if (a.by_destructor) {
      // Declaring the name once more waits until every rank let go of the
      // last cycle's flow; destroy() then frees this one before measuring.
      auto last =
          c.declare(sluice::shuffle<Rec>("cycle").sources(c.all_ranks()).targets(c.all_ranks()));
      if (last.destroy(sluice::Clock::now() + std::chrono::seconds(30)) != sluice::Status::kOk)
        return fail("destroy: " + last.error());
    }
    if (a.by_destructor) {
      std::printf(
          "DESTRUCTORS rank %u, median/longest of %u cycles: source %s, worker %s, flow %s\n", me,
          a.cycles, median_max(source_us).c_str(), median_max(worker_us).c_str(),
          median_max(flow_us).c_str());
    }
    const Resources end = measure();
    std::printf("RESOURCES rank %u after %u warm-up cycles: %s; after %u cycles: %s\n", me,
                a.warmup, warm.text().c_str(), a.cycles, end.text().c_str());
#if defined(SLUICE_SANITIZED)
    // A sanitizer's allocator maps memory as it goes (ASan holds freed
    // blocks in quarantine), so its mapping count says nothing about sluice:
    // there only descriptors and /dev/shm entries are checked.
    const bool maps_grew = false;
#else
    const bool maps_grew = end.maps > warm.maps;
#endif
    if (end.fds > warm.fds || maps_grew || end.shm > warm.shm) {
      return fail("rank " + std::to_string(me) + " grew from " + warm.text() + " to " + end.text());
    }

    // Every cycle, across the job: each record once (count and checksum).
    std::ostringstream mine;
    for (uint32_t i = 0; i < a.cycles; ++i) mine << count[i] << ' ' << sum[i] << ' ';
    const std::vector<std::string> all = c.allgather("lifecycle-results", mine.str());
    std::vector<uint64_t> total_count(a.cycles, 0), total_sum(a.cycles, 0);
    for (const std::string& s : all) {
      std::istringstream in(s);
      for (uint32_t i = 0; i < a.cycles; ++i) {
        uint64_t n = 0, x = 0;
        if (!(in >> n >> x)) return fail("malformed results '" + s + "'");
        total_count[i] += n;
        total_sum[i] += x;
      }
    }
    for (uint32_t i = 0; i < a.cycles; ++i) {
      uint64_t expected = 0;
      for (uint32_t r = 0; r < world; ++r) {
        for (uint64_t j = 0; j < a.records; ++j) expected += fingerprint(i, record(r, i, j));
      }
      if (total_count[i] != uint64_t{world} * a.records || total_sum[i] != expected) {
        return fail("cycle " + std::to_string(i) + ": " + std::to_string(total_count[i]) +
                    " records, expected " + std::to_string(uint64_t{world} * a.records) +
                    (total_sum[i] != expected ? " (checksum differs)" : ""));
      }
    }
    std::printf("VERIFIED %u cycles rank %u: %" PRIu64 " records each\n", a.cycles, me,
                uint64_t{world} * a.records);
    return sluice::testing::leave_after(c, 0);
  } catch (const sluice::Error& e) {
    return fail(std::string(sluice::to_string(e.code())) + ": " + e.what());
  }
}
