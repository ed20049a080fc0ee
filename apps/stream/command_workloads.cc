#include "command_run.h"

namespace sluice::stream::command {

// ysb, ro and cm, on generated input or on files (--input).
int run_workload_query(const ss::Options& opt, sluice::Cluster& cluster,
                       const ss::WindowSpec& window) {
  auto with = [&window](auto build) {
    return [build, window](auto make) { return build(std::move(make), window); };
  };
  if (!opt.input.empty()) {
    if (opt.query == "ysb") {
      return run_from_files<ss::YsbEvent>(
          opt, cluster, with([](auto m, auto w) { return ss::ysb_query_from(std::move(m), w); }),
          &ss::parse_csv);
    }
    if (opt.query == "ro") {
      return run_from_files<ss::RoRecord>(
          opt, cluster, with([](auto m, auto w) { return ss::ro_query_from(std::move(m), w); }),
          &ss::parse_csv);
    }
    return run_from_files<ss::CmEvent>(
        opt, cluster, with([](auto m, auto w) { return ss::cm_query_from(std::move(m), w); }),
        &ss::parse_csv);
  }
  if (opt.query == "ysb")
    return run_query(opt, cluster, ss::ysb_query(opt.gen, window, opt.live), sizeof(ss::YsbEvent));
  if (opt.query == "ro")
    return run_query(opt, cluster, ss::ro_query(opt.gen, window, opt.live), sizeof(ss::RoRecord));
  return run_query(opt, cluster, ss::cm_query(opt.gen, window, opt.live), sizeof(ss::CmEvent));
}

}  // namespace sluice::stream::command
