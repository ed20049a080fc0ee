// Exactly once through a rank's death and return (sluice/replay.h), for
// replay_test.cc. Every rank is a source and a target of one ReplayFlow:
// it sends `--records` records to every rank, record `pos` to rank t being
// made from (rank, t, pos) alone, and checks that it consumes every rank's
// records once each and in position order (a record out of place prints
// MISMATCH and ends the process with status 3). Every `--commit-ms` it
// writes its state (positions and an order-independent digest per source)
// to `--state-dir`/rank-R, then commit()s; a restarted process (sluice run
// --restarts) reads it back, restore()s the flow and makes its records
// again from the positions it saved. Nobody is told which rank dies or
// when: every rank prints "MARK rank R consumed N" once it consumed N
// records and saved its state since, and the launcher kills a rank
// (--kill) after such a line (the tests: rank 1's own, so that a restarted
// rank 1 always has a state to restore).
//
// Prints per rank "RESTORED rank R incarnation I received a,b,c" after a
// restart, "OPENED rank R epoch E" per view, and at the end "DONE rank R
// incarnation I received X expect Y digest D expect D' views V waits W"
// (W: pushes that waited for acknowledgements).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/hash.h"
#include "sluice/replay.h"

namespace {

struct Rec {
  uint64_t source;
  uint64_t position;
  uint64_t value;
};

Rec make(uint32_t source, uint32_t target, uint64_t pos) {
  return Rec{source, pos, sluice::hash64(uint64_t{source} << 48 ^ uint64_t{target} << 40 ^ pos)};
}

// What this rank's state holds, saved before each commit().
struct State {
  std::vector<uint64_t> received, resume_at, digest;
};

bool load(const std::string& path, State& s, size_t n) {
  std::ifstream in(path);
  if (!in) return false;
  s.received.assign(n, 0);
  s.resume_at.assign(n, 0);
  s.digest.assign(n, 0);
  for (size_t r = 0; r < n; ++r) in >> s.received[r] >> s.resume_at[r] >> s.digest[r];
  return static_cast<bool>(in);
}

void save(const std::string& path, const State& s) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (size_t r = 0; r < s.received.size(); ++r)
      out << s.received[r] << ' ' << s.resume_at[r] << ' ' << s.digest[r] << '\n';
  }
  std::rename(tmp.c_str(), path.c_str());  // whole or not at all
}

std::string join_list(const std::vector<uint64_t>& v) {
  std::string s;
  for (uint64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "exactly once through a rank's death and return, with sluice::ReplayFlow (a test "
      "program)"};
  uint64_t records = 100000, capacity = uint64_t{1} << 20, mark = 50000;
  int commit_ms = 20;
  std::string state_dir;
  bool no_replay = false;
  app.add_option("--records", records, "records to every rank")->check(CLI::PositiveNumber);
  app.add_option("--capacity", capacity, "records kept per target (ReplayOptions::capacity)")
      ->check(CLI::PositiveNumber);
  app.add_option("--commit-ms", commit_ms, "save the state and commit() this often")
      ->check(CLI::PositiveNumber);
  app.add_option("--mark", mark,
                 "each rank prints 'MARK rank R consumed N' once it consumed N records and saved "
                 "its state");
  app.add_option("--state-dir", state_dir, "where each rank saves its state")->required();
  app.add_flag("--no-replay", no_replay,
               "ReplayOptions::replay = false: nothing is sent again after a view change (the "
               "negative control)");
  CLI11_PARSE(app, argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t me = cluster.rank();
    const uint32_t n = cluster.world_size();
    const uint32_t incarnation = cluster.incarnation(me);
    const std::string path = state_dir + "/rank-" + std::to_string(me);
    auto spec = sluice::shuffle<Rec>("replayed")
                    .sources(cluster.all_ranks())
                    .targets(cluster.all_ranks())
                    .explicit_targets();
    auto owned = std::make_unique<sluice::ReplayFlow<Rec>>(
        cluster, spec, sluice::ReplayOptions{.capacity = capacity, .replay = !no_replay});
    sluice::ReplayFlow<Rec>& flow = *owned;

    State state{std::vector<uint64_t>(n, 0), std::vector<uint64_t>(n, 0),
                std::vector<uint64_t>(n, 0)};
    if (incarnation > 0 && load(path, state, n)) {
      flow.restore(state.received, state.resume_at);
      std::printf("RESTORED rank %u incarnation %u received %s\n", me, incarnation,
                  join_list(state.received).c_str());
      std::fflush(stdout);
    }
    std::vector<uint64_t> next = state.resume_at;  // the next record to make, per target
    uint64_t views = 0, waits = 0, consumed = 0;
    bool marked = false;
    auto soon = [](int ms) { return sluice::Clock::now() + std::chrono::milliseconds(ms); };
    auto last_commit = sluice::Clock::now();
    bool mark_due = false;  // consumed `mark` records: say so once saved
    auto commit = [&] {
      for (uint32_t t = 0; t < n; ++t) state.resume_at[t] = flow.acknowledged(t);
      state.received.assign(n, 0);
      for (uint32_t s = 0; s < n; ++s) state.received[s] = flow.received(s);
      save(path, state);
      (void)flow.commit();
      last_commit = sluice::Clock::now();
      if (mark_due && !marked) {
        marked = true;
        std::printf("MARK rank %u consumed %llu\n", me, static_cast<unsigned long long>(mark));
        std::fflush(stdout);
      }
    };

    sluice::View view = cluster.view();
    for (bool done = false; !done;) {
      sluice::Status s = flow.open(view, soon(60000));
      if (s == sluice::Status::kOk) {
        ++views;
        std::printf("OPENED rank %u epoch %llu\n", me, static_cast<unsigned long long>(view.epoch));
        std::fflush(stdout);
        bool ended = false;
        while (s == sluice::Status::kOk && !done) {
          if (cluster.epoch() != flow.epoch()) {
            s = sluice::Status::kViewChanged;
            break;
          }
          // Push a little to every target, then consume what came.
          bool all_made = true;
          for (uint32_t t = 0; t < n && s == sluice::Status::kOk; ++t) {
            for (int k = 0; k < 512 && next[t] < records; ++k) {
              const bool full = flow.buffered(t) >= capacity;
              s = flow.push(t, make(me, t, next[t]), soon(2));
              if (s == sluice::Status::kTimeout) {
                waits += full;
                s = sluice::Status::kOk;
                break;
              }
              if (s != sluice::Status::kOk) break;
              ++next[t];
            }
            all_made = all_made && next[t] == records;
          }
          if (s != sluice::Status::kOk) break;
          if (all_made) {
            s = flow.close(soon(2));
            if (s == sluice::Status::kTimeout) s = sluice::Status::kOk;
            if (s != sluice::Status::kOk) break;
          } else if (s = flow.flush(soon(2)); s == sluice::Status::kTimeout) {
            s = sluice::Status::kOk;
          }
          if (s != sluice::Status::kOk) break;
          for (int k = 0; k < 64 && !ended; ++k) {
            auto batch = flow.consume(soon(1));
            if (!batch) {
              if (batch.status() == sluice::Status::kEndOfFlow)
                ended = true;
              else if (batch.status() != sluice::Status::kTimeout)
                s = batch.status();
              break;
            }
            const uint32_t src = flow.last_source_rank();
            uint64_t pos = flow.received(src) - batch->size();
            for (const Rec& r : *batch) {
              const Rec want = make(src, me, pos);
              if (r.source != want.source || r.position != want.position || r.value != want.value) {
                std::printf("MISMATCH rank %u: from rank %u expected position %llu, got %llu\n", me,
                            src, static_cast<unsigned long long>(pos),
                            static_cast<unsigned long long>(r.position));
                std::fflush(stdout);
                return 3;
              }
              state.digest[src] += sluice::hash64(r.value ^ r.position);
              ++pos;
            }
            consumed += batch->size();
            if (consumed >= mark) mark_due = true;
          }
          if (s != sluice::Status::kOk) break;
          if (sluice::Clock::now() - last_commit > std::chrono::milliseconds(commit_ms)) commit();
          if (ended && all_made) {
            commit();
            s = flow.finish(soon(60000));
            if (s == sluice::Status::kOk) done = true;
          }
        }
      }
      if (done) break;
      if (s != sluice::Status::kViewChanged && s != sluice::Status::kPeerLost) {
        std::fprintf(stderr, "replay_program: rank %u: %s: %s\n", me, sluice::to_string(s),
                     flow.error().c_str());
        return 1;
      }
      // The view this one changes into (a loss seen on the flow first: wait for it).
      auto next_view =
          cluster.await_view(flow.epoch() > view.epoch ? flow.epoch() : view.epoch, soon(60000));
      if (!next_view) {
        std::fprintf(stderr, "replay_program: rank %u: no view after epoch %llu\n", me,
                     static_cast<unsigned long long>(view.epoch));
        return 1;
      }
      view = *next_view;
    }

    uint64_t received = 0, digest = 0, expect_digest = 0;
    for (uint32_t s = 0; s < n; ++s) {
      received += flow.received(s);
      digest += state.digest[s];
      for (uint64_t pos = 0; pos < records; ++pos) {
        const Rec r = make(s, me, pos);
        expect_digest += sluice::hash64(r.value ^ r.position);
      }
    }
    std::printf(
        "DONE rank %u incarnation %u received %llu expect %llu digest %llu expect %llu views %llu "
        "waits %llu\n",
        me, incarnation, static_cast<unsigned long long>(received),
        static_cast<unsigned long long>(records * n), static_cast<unsigned long long>(digest),
        static_cast<unsigned long long>(expect_digest), static_cast<unsigned long long>(views),
        static_cast<unsigned long long>(waits));
    std::fflush(stdout);
    owned.reset();  // its flows withdrawn, then leave the job cleanly
    (void)cluster.leave(soon(10000));
    return received == records * n && digest == expect_digest ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay_program: %s\n", e.what());
    return 1;
  }
}
