#include "command_run.h"

namespace sluice::stream::command {

// nb7, q11, nb8 and nb11, on generated input or on files (--input).
int run_nexmark_query(const ss::Options& opt, sluice::JobContext& ctx,
                      const ss::WindowSpec& window) {
  using Make = AnyMake<ss::Bid>;
  using EventMake = AnyMake<ss::NexmarkEvent>;
  if (opt.query == "nb7") {
    return run_either<ss::Bid, ss::Windows::kFixed>(
        opt, ctx, [&window](Make m) { return ss::nb7_query_from(std::move(m), window); },
        ss::nb7_input(opt.gen, opt.live), &ss::bid_csv_schema());
  }
  if (opt.query == "q11") {
    return run_either<ss::Bid, ss::Windows::kSession>(
        opt, ctx, [&window](Make m) { return ss::q11_query_from(std::move(m), window); },
        ss::q11_input(opt.gen, opt.live), &ss::bid_csv_schema());
  }
  if (opt.query == "nb8") {
    return run_either<ss::NexmarkEvent, ss::Windows::kFixed>(
        opt, ctx, [&window](EventMake m) { return ss::nb8_query_from(std::move(m), window); },
        ss::nb8_input(opt.gen, opt.live), nullptr);
  }
  return run_either<ss::NexmarkEvent, ss::Windows::kSession>(
      opt, ctx, [&window](EventMake m) { return ss::nb11_query_from(std::move(m), window); },
      ss::nb11_input(opt.gen, opt.live), nullptr);
}

}  // namespace sluice::stream::command
