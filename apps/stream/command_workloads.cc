#include "command_run.h"

namespace sluice::stream::command {

// ysb, ro and cm, on generated input or on files (--input).
int run_workload_query(const ss::Options& opt, sluice::JobContext& ctx,
                       const ss::WindowSpec& window) {
  if (opt.query == "ysb") {
    return run_either<ss::YsbEvent, ss::Windows::kFixed>(
        opt, ctx,
        [&window](AnyMake<ss::YsbEvent> m) { return ss::ysb_query_from(std::move(m), window); },
        ss::ysb_input(opt.gen, opt.live), &ss::ysb_csv_schema());
  }
  if (opt.query == "ro") {
    return run_either<ss::RoRecord, ss::Windows::kFixed>(
        opt, ctx,
        [&window](AnyMake<ss::RoRecord> m) { return ss::ro_query_from(std::move(m), window); },
        ss::ro_input(opt.gen, opt.live), &ss::ro_csv_schema());
  }
  return run_either<ss::CmEvent, ss::Windows::kFixed>(
      opt, ctx,
      [&window](AnyMake<ss::CmEvent> m) { return ss::cm_query_from(std::move(m), window); },
      ss::cm_input(opt.gen, opt.live), &ss::cm_csv_schema());
}

}  // namespace sluice::stream::command
