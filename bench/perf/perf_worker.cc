#include "perf_worker.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "perf_mode.h"
#include "perf_stats.h"
#include "sluice/sluice.h"

namespace sluice::tool::perf {
namespace {

struct WorkerOptions {
  std::string mode = "bandwidth";
  std::string sizes;
  std::string out;  // "-": stdout
  WorkerArgs args;
};

void run_worker(const WorkerOptions& o) {
  const PerfMode* mode = find_mode(o.mode);
  if (mode == nullptr) throw std::invalid_argument("--mode '" + o.mode + "' is not a perf mode");
  const std::vector<uint32_t> sizes = parse_sizes(o.sizes);
  Cluster c = Cluster::join();
  const WorkerArgs& a = o.args;
  if (c.world_size() != a.sources + a.targets) {
    throw std::invalid_argument("the job has " + std::to_string(c.world_size()) +
                                " ranks but --sources " + std::to_string(a.sources) +
                                " --targets " + std::to_string(a.targets) + " need " +
                                std::to_string(a.sources + a.targets));
  }
  for (uint32_t size : sizes) {
    const nlohmann::json mine = mode->run_rank(c, a, size);
    const std::string tag =
        "perf-" + o.mode + "-" + std::to_string(size) + "-" + std::to_string(a.rep) + "-result";
    const std::vector<std::string> all = c.allgather(tag, mine.dump());
    if (c.rank() != 0) continue;
    std::vector<nlohmann::json> parts;
    for (const std::string& s : all) parts.push_back(nlohmann::json::parse(s));
    nlohmann::json line = mode->merge(parts, a, size);
    line["mode"] = o.mode;
    line["record_bytes"] = size;
    line["rep"] = a.rep;
    emit_json_line(o.out, line);
  }
  (void)c.leave();
}

}  // namespace

void add_perf_worker_command(CLI::App& app) {
  auto o = std::make_shared<WorkerOptions>();
  CLI::App* sub = app.add_subcommand("worker", "One rank of a sluice-perf flow job (internal)");
  sub->group("");  // hidden: only `sluice perf` starts it
  sub->add_option("--mode", o->mode);
  sub->add_option("--sources", o->args.sources)->required();
  sub->add_option("--targets", o->args.targets)->required();
  sub->add_option("--sizes", o->sizes)->required();
  sub->add_option("--rep", o->args.rep)->required();
  sub->add_option("--bytes", o->args.bytes);
  sub->add_option("--round-trips", o->args.round_trips);
  sub->add_option("--segment-bytes", o->args.segment_bytes);
  sub->add_option("--ring-segments", o->args.ring_segments);
  sub->add_option("--push-batch", o->args.push_batch);
  sub->add_option("--out", o->out)->required();
  sub->callback([o] {
    try {
      run_worker(*o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice-perf worker: FAILED: %s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::tool::perf
