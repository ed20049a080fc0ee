#include "command_run.h"

namespace sluice::stream::command {

// nb7, q11, nb8 and nb11, on generated input or on files (--input).
int run_nexmark_query(const ss::Options& opt, sluice::Cluster& cluster,
                      const ss::WindowSpec& window) {
  auto with = [&window](auto build) {
    return [build, window](auto make) { return build(std::move(make), window); };
  };
  if (!opt.input.empty()) {
    if (opt.query == "nb7") {
      return run_from_files<ss::Bid>(
          opt, cluster, with([](auto m, auto w) { return ss::nb7_query_from(std::move(m), w); }),
          &ss::parse_csv);
    }
    if (opt.query == "q11") {
      return run_from_files<ss::Bid>(
          opt, cluster, with([](auto m, auto w) { return ss::q11_query_from(std::move(m), w); }),
          &ss::parse_csv);
    }
    if (opt.query == "nb8") {
      return run_from_files<ss::NexmarkEvent>(
          opt, cluster, with([](auto m, auto w) { return ss::nb8_query_from(std::move(m), w); }),
          nullptr);
    }
    return run_from_files<ss::NexmarkEvent>(
        opt, cluster, with([](auto m, auto w) { return ss::nb11_query_from(std::move(m), w); }),
        nullptr);
  }
  if (opt.query == "nb7")
    return run_query(opt, cluster, ss::nb7_query(opt.gen, window, opt.live), sizeof(ss::Bid));
  if (opt.query == "q11")
    return run_query(opt, cluster, ss::q11_query(opt.gen, window, opt.live), sizeof(ss::Bid));
  if (opt.query == "nb8") {
    return run_query(opt, cluster, ss::nb8_query(opt.gen, window, opt.live),
                     sizeof(ss::NexmarkEvent));
  }
  return run_query(opt, cluster, ss::nb11_query(opt.gen, window, opt.live),
                   sizeof(ss::NexmarkEvent));
}

}  // namespace sluice::stream::command
