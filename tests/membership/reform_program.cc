// A keyed sum whose flows re-form among the living (Cluster::declare(view,
// spec), KeyGroups), for reform_test.cc. Every rank is a source and a target
// of one shuffle per round. A round's input is `--splits` splits of
// `--records` records each, generated from (round, split, i) alone, so that
// any rank can produce any split; its keys fall into `--groups` key groups.
// KeyGroups assign the splits and the groups to the members of the current
// view: a lost rank's splits are read, and its groups summed, by the others;
// a rank back as a new incarnation takes its own again. A round commits when
// the view's members gather their groups' sums (a view-scoped allgather,
// which completes on every member or fails on all): a loss at any moment of
// a round makes every survivor run the round again in the next view, with
// the flow declared anew. Nobody is told which rank dies or when: the
// launcher kills it (sluice run --kill).
//
// With --leave-rank R --leave-after K, rank R's first process stops after K
// rounds and leaves the job (Cluster::leave): an elastic job scaling down; a
// process that joins later (sluice run --max-ranks, --join) may take its
// number. Prints, per rank: "REFORMED rank R epoch E members M owns O took G gave G'"
// for every view it ran a round in after its first (a restarted process: its
// first too), with the groups it owns in it (O), took (G: owned now, not in
// its previous view) and gave (G'), "RETRY rank R round N epoch E: why"
// when a round fails, and at the end "DONE rank R incarnation I committed C
// rounds N checksum X expect Y", and rank 0 "MARK round N begins" once (for
// the launcher's --faults-after). Every committed round's sums are checked
// against the sums of its generated input: a difference prints MISMATCH.
// With --no-reform, the flows are declared once per round among every rank,
// not in a view, and a loss fails the job: the negative control. With
// --combiner, each round is a combiner flow (count and sum by key) declared
// in the view instead, and every key's sums are checked.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/hash.h"
#include "sluice/job.h"
#include "sluice/worker.h"

namespace {

struct Rec {
  uint64_t key;
  uint64_t value;
};

// A group's sum: order-independent, so that any owner and any arrival order
// give the same.
struct Sum {
  uint64_t count = 0;
  uint64_t total = 0;
  uint64_t digest = 0;  // sum of hash64(key ^ value): a record lost and another doubled differ
  bool operator==(const Sum&) const = default;
  void add(const Rec& r) {
    ++count;
    total += r.value;
    digest += sluice::hash64(r.key ^ (r.value << 1));
  }
};

Rec record(uint64_t round, uint32_t split, uint64_t i, uint64_t keys) {
  const uint64_t h = sluice::hash64(round << 40 ^ uint64_t{split} << 32 ^ i);
  return Rec{h % keys, (h >> 20) % 1000 + 1};
}

std::string join_list(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "-" : s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a keyed sum whose flows re-form among the living (a test program)"};
  uint64_t rounds = 60, records = 5000, keys = 1000;
  uint32_t splits = 8, groups = 16;
  int interval_ms = 10;
  bool no_reform = false;
  bool combine = false;
  uint64_t mark_round = 10;
  bool marked = false;
  int64_t leave_rank = -1;
  uint64_t leave_after = 0;
  uint32_t leave_when_members = 0;
  app.add_option("--rounds", rounds, "rounds to run")->check(CLI::PositiveNumber);
  app.add_option("--records", records, "records per split per round")->check(CLI::PositiveNumber);
  app.add_option("--splits", splits, "input splits per round")->check(CLI::PositiveNumber);
  app.add_option("--groups", groups, "key groups")->check(CLI::PositiveNumber);
  app.add_option("--keys", keys, "distinct keys")->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", interval_ms, "pause between rounds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mark-round", mark_round,
                 "rank 0 prints 'MARK round N begins' when it first starts round N");
  app.add_flag("--no-reform", no_reform,
               "declare each round's flow among every rank, outside any view (a loss then fails "
               "the job: the negative control)");
  app.add_flag("--combiner", combine,
               "sum through a combiner flow (group by key: count and sum), declared in the view, "
               "instead of a shuffle to the groups' owners; every key's sums are checked");
  app.add_option("--leave-rank", leave_rank,
                 "this rank's first process leaves the job (Cluster::leave) after --leave-after "
                 "rounds: scaling down an elastic job");
  app.add_option("--leave-after", leave_after, "rounds the leaving rank runs before it leaves");
  app.add_option("--leave-when-members", leave_when_members,
                 "and before it leaves, it waits (up to 60 s) for a view of at least this many "
                 "members: it is drained once a newcomer joined");
  CLI11_PARSE(app, argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t me = cluster.rank();
    const uint32_t incarnation = cluster.incarnation(me);
    // --leave-rank: this process stops after --leave-after rounds and leaves.
    const bool leaves = leave_rank == static_cast<int64_t>(me) && incarnation == 0;
    const auto deadline = [] { return sluice::Clock::now() + std::chrono::seconds(90); };
    std::vector<uint32_t> everyone;
    for (uint32_t r = 0; r < cluster.world_size(); ++r) everyone.push_back(r);
    const sluice::KeyGroups split_groups(splits, everyone);
    const sluice::KeyGroups key_groups(groups, everyone);

    // What the round's input sums to, per group: the reference every
    // committed round is checked against.
    auto expected = [&](uint64_t round) {
      std::vector<Sum> sums(groups);
      for (uint32_t s = 0; s < splits; ++s)
        for (uint64_t i = 0; i < records; ++i) {
          const Rec r = record(round, s, i, keys);
          sums[key_groups.group_of(sluice::hash64(r.key))].add(r);
        }
      return sums;
    };

    uint64_t checksum = 0, expect = 0;
    bool mismatch = false;
    std::vector<uint32_t> owned;  // the groups this rank summed in its last view
    uint64_t owned_epoch = ~uint64_t{0};
    // A failed round: RETRY in the next view (--no-reform: the job fails).
    auto retry_round = [&](const sluice::View& view, uint64_t round,
                           const std::string& why) -> sluice::Result<std::string> {
      if (no_reform) throw std::runtime_error("round " + std::to_string(round) + ": " + why);
      std::printf("RETRY rank %u round %llu epoch %llu: %s\n", me,
                  static_cast<unsigned long long>(round),
                  static_cast<unsigned long long>(view.epoch), why.c_str());
      std::fflush(stdout);
      return sluice::Status::kViewChanged;
    };
    // The round's flow, declared in `view` (--no-reform: among every rank,
    // outside any view); "" or why not.
    auto declare_round = [&](const auto& spec, const sluice::View& view,
                             sluice::DeclaredFlow* flow) -> std::string {
      if (no_reform) {
        *flow = cluster.declare(spec);
        return "";
      }
      sluice::Result<sluice::DeclaredFlow> declared = cluster.declare(view, spec);
      if (!declared) return std::string("declare: ") + to_string(declared.status());
      *flow = std::move(*declared);
      return "";
    };
    // This rank's splits of the round through push(record), then `src`
    // closed and `w` run to the end of its inputs; "" or why not.
    auto drive = [&](sluice::Worker& w, auto& src, const std::vector<uint32_t>& split_owner,
                     uint64_t round, const auto& push) -> std::string {
      sluice::Status st = sluice::Status::kOk;
      for (uint32_t s = 0; s < splits && st == sluice::Status::kOk; ++s) {
        if (split_owner[s] != me) continue;
        for (uint64_t i = 0; i < records && st == sluice::Status::kOk; ++i)
          st = push(record(round, s, i, keys));
      }
      if (st == sluice::Status::kOk) st = w.close(src, deadline());
      if (st != sluice::Status::kOk)
        return std::string("push: ") + sluice::to_string(st) + ": " + src.error();
      if ((st = w.run(deadline())) != sluice::Status::kEndOfFlow)
        return std::string("consume: ") + sluice::to_string(st) + ": " + w.error(w.reported());
      return "";
    };
    // The groups this rank owns in `view` (by `group_owner`), and a
    // REFORMED line for the first round it runs in a view after its first.
    auto note_view = [&](const sluice::View& view, const std::vector<uint32_t>& group_owner) {
      std::vector<uint32_t> mine;
      for (uint32_t g = 0; g < groups; ++g)
        if (group_owner[g] == me) mine.push_back(g);
      if (owned_epoch != view.epoch && (owned_epoch != ~uint64_t{0} || incarnation > 0)) {
        std::vector<uint32_t> took, gave;
        std::set_difference(mine.begin(), mine.end(), owned.begin(), owned.end(),
                            std::back_inserter(took));
        std::set_difference(owned.begin(), owned.end(), mine.begin(), mine.end(),
                            std::back_inserter(gave));
        std::printf("REFORMED rank %u epoch %llu members %s owns %s took %s gave %s\n", me,
                    static_cast<unsigned long long>(view.epoch), join_list(view.members).c_str(),
                    join_list(mine).c_str(), join_list(took).c_str(), join_list(gave).c_str());
        std::fflush(stdout);
      }
      owned = mine;
      owned_epoch = view.epoch;
      return mine;
    };
    // A round through a combiner flow declared in the view: this rank's
    // splits folded by key, every key's (count, sum) on the member its hash
    // names; the value it commits is its keys' sums.
    auto attempt_combined = [&](const sluice::View& view,
                                uint64_t round) -> sluice::Result<std::string> {
      auto spec = sluice::combiner<Rec>("sum-" + std::to_string(round))
                      .sources(cluster.all_ranks())
                      .targets(cluster.all_ranks())
                      .group_by(&Rec::key)
                      .sum(&Rec::value)
                      .count();
      auto retry = [&](const std::string& why) { return retry_round(view, round, why); };
      sluice::DeclaredFlow flow;
      if (std::string why = declare_round(spec, view, &flow); !why.empty()) return retry(why);
      const std::vector<uint32_t> split_owner = split_groups.assign(view);
      note_view(view, key_groups.assign(view));
      sluice::CombinerResult groups;
      std::string why;
      {
        sluice::Worker w(sluice::IdleStrategy{0, 16});
        w.add(cluster.target(spec, 0), [&](sluice::CombinerResult r) { groups = std::move(r); });
        auto& src = w.add_output(cluster.source(spec, 0));
        why = drive(w, src, split_owner, round,
                    [&](const Rec& r) { return w.push(src, r, deadline()); });
      }
      if (!why.empty()) return retry(why);
      std::string value;
      for (const sluice::Group& g : groups.groups()) {
        const uint64_t entry[3] = {g.key, g.count, static_cast<uint64_t>(g.sum(&Rec::value))};
        value.append(reinterpret_cast<const char*>(entry), sizeof entry);
      }
      return value;
    };
    // Every member's keys: each key once, with its input's count and sum.
    auto commit_combined = [&](uint64_t round, const std::vector<std::string>& values) {
      std::vector<std::pair<uint64_t, uint64_t>> want(keys), got(keys);  // (count, sum)
      std::vector<uint32_t> seen(keys, 0);
      for (uint32_t s = 0; s < splits; ++s)
        for (uint64_t i = 0; i < records; ++i) {
          const Rec r = record(round, s, i, keys);
          ++want[r.key].first;
          want[r.key].second += r.value;
        }
      for (const std::string& v : values) {
        for (size_t o = 0; o + 24 <= v.size(); o += 24) {
          uint64_t entry[3];
          std::memcpy(entry, v.data() + o, sizeof entry);
          if (entry[0] >= keys) {
            std::printf("MISMATCH rank %u round %llu: key %llu was never pushed\n", me,
                        static_cast<unsigned long long>(round),
                        static_cast<unsigned long long>(entry[0]));
            mismatch = true;
            continue;
          }
          got[entry[0]] = {entry[1], entry[2]};
          ++seen[entry[0]];
        }
      }
      for (uint64_t k = 0; k < keys; ++k) {
        if (want[k].first == 0 && seen[k] == 0) continue;
        if (seen[k] != 1 || got[k] != want[k]) {
          std::printf(
              "MISMATCH rank %u round %llu key %llu: reported %u times, count %llu of "
              "%llu\n",
              me, static_cast<unsigned long long>(round), static_cast<unsigned long long>(k),
              seen[k], static_cast<unsigned long long>(got[k].first),
              static_cast<unsigned long long>(want[k].first));
          mismatch = true;
        }
        checksum += sluice::hash64(k ^ got[k].second << 1) + got[k].first;
        expect += sluice::hash64(k ^ want[k].second << 1) + want[k].first;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    };
    // A round: this rank's splits pushed to the groups' owners, its groups
    // summed; the value it commits is its groups' sums.
    auto attempt = [&](const sluice::View& view, uint64_t round) -> sluice::Result<std::string> {
      if (me == 0 && round == mark_round && !marked) {
        // A line the launcher can inject a fault after (--faults-after).
        std::printf("MARK round %llu begins\n", static_cast<unsigned long long>(round));
        std::fflush(stdout);
        marked = true;
      }
      if (combine) return attempt_combined(view, round);
      auto spec = sluice::shuffle<Rec>("sum-" + std::to_string(round))
                      .sources(cluster.all_ranks())
                      .targets(cluster.all_ranks())
                      .explicit_targets();
      auto retry = [&](const std::string& why) { return retry_round(view, round, why); };
      sluice::DeclaredFlow flow;
      if (std::string why = declare_round(spec, view, &flow); !why.empty()) return retry(why);
      const std::vector<uint32_t> split_owner = split_groups.assign(view);
      const std::vector<uint32_t> group_owner = key_groups.assign(view);
      // The flow's targets are the members, in rank order: a rank's index.
      std::vector<uint32_t> index(cluster.world_size(), ~0u);
      for (uint32_t i = 0; i < view.members.size(); ++i) index[view.members[i]] = i;
      const std::vector<uint32_t> mine = note_view(view, group_owner);

      std::vector<Sum> sums(groups);
      uint64_t strays = 0;
      std::string why;
      {
        sluice::Worker w(sluice::IdleStrategy{0, 16});
        w.add(cluster.target(spec, 0), [&](std::span<const Rec> batch) {
          for (const Rec& r : batch) {
            const uint32_t g = key_groups.group_of(sluice::hash64(r.key));
            if (group_owner[g] != me) ++strays;
            sums[g].add(r);
          }
        });
        auto& src = w.add_output(cluster.source(spec, 0));
        why = drive(w, src, split_owner, round, [&](const Rec& r) {
          return w.push_to(src, index[group_owner[key_groups.group_of(sluice::hash64(r.key))]], r,
                           deadline());
        });
      }
      if (!why.empty()) return retry(why);
      if (strays != 0) {
        std::printf("MISMATCH rank %u round %llu: %llu records of groups it does not own\n", me,
                    static_cast<unsigned long long>(round),
                    static_cast<unsigned long long>(strays));
        mismatch = true;
      }
      std::string value;
      for (uint32_t g : mine) {
        value.append(reinterpret_cast<const char*>(&g), sizeof g);
        value.append(reinterpret_cast<const char*>(&sums[g]), sizeof(Sum));
      }
      return value;
    };
    // Every member's sums of its groups: each group once, with its input's sums.
    auto commit = [&](uint64_t round, const std::vector<std::string>& values) {
      std::vector<Sum> round_sums(groups);
      std::vector<uint32_t> seen(groups, 0);
      constexpr size_t kEntry = sizeof(uint32_t) + sizeof(Sum);
      for (const std::string& v : values) {
        for (size_t o = 0; o + kEntry <= v.size(); o += kEntry) {
          uint32_t g;
          std::memcpy(&g, v.data() + o, sizeof g);
          std::memcpy(&round_sums[g], v.data() + o + sizeof g, sizeof(Sum));
          ++seen[g];
        }
      }
      const std::vector<Sum> want = expected(round);
      for (uint32_t g = 0; g < groups; ++g) {
        if (seen[g] != 1 || !(round_sums[g] == want[g])) {
          std::printf(
              "MISMATCH rank %u round %llu group %u: reported %u times, count %llu of %llu\n", me,
              static_cast<unsigned long long>(round), g, seen[g],
              static_cast<unsigned long long>(round_sums[g].count),
              static_cast<unsigned long long>(want[g].count));
          mismatch = true;
        }
        checksum += round_sums[g].digest + round_sums[g].count;
        expect += want[g].digest + want[g].count;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    };
    uint64_t committed = 0, next = 0;
    if (no_reform) {
      // Every rank, outside any view: the first loss ends the job.
      const sluice::View all = cluster.view();
      for (; next < rounds; ++next, ++committed) {
        sluice::Result<std::string> mine = attempt(all, next);
        const std::vector<std::string> values = cluster.allgather("round", *mine, deadline());
        if (combine) {
          commit_combined(next, values);
        } else {
          commit(next, values);
        }
      }
    } else {
      // The leaving rank runs fewer steps, then leaves: the others see it
      // leave (a new view) and go on without it.
      const sluice::StepsReport report =
          sluice::run_steps(cluster, "sum", leaves ? std::min(leave_after, rounds) : rounds,
                            attempt, [&](uint64_t round, const sluice::Gathered& all) {
                              if (combine) {
                                commit_combined(round, all.values);
                              } else {
                                commit(round, all.values);
                              }
                            });
      committed = report.committed;
      next = report.next;
    }
    std::printf(
        "DONE rank %u incarnation %u committed %llu rounds %llu checksum %llu expect %llu\n", me,
        incarnation, static_cast<unsigned long long>(committed),
        static_cast<unsigned long long>(next), static_cast<unsigned long long>(checksum),
        static_cast<unsigned long long>(expect));
    std::fflush(stdout);
    if (leaves) {
      const sluice::Deadline until = sluice::Clock::now() + std::chrono::seconds(60);
      sluice::View view = cluster.view();
      while (view.members.size() < leave_when_members) {
        sluice::Result<sluice::View> next = cluster.await_view(view.epoch, until);
        if (!next) break;
        view = std::move(*next);
      }
    }
    (void)cluster.leave(sluice::Clock::now() + std::chrono::seconds(10));
    return mismatch ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}
