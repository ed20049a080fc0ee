// apps/query/exchange_internal.h: what the two exchange implementations
// (sluice flows in exchange.cc, sockets in sockets.cc) share behind exchange.h.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exchange.h"

namespace sluice::query {

enum class InputState : uint8_t { kOpen, kEnded, kFailed };

// One worker's end of one exchange: sends packed records (each `stride`
// bytes) and closes. A false return means it failed; `why` says how, and
// `lost_rank` names the peer whose loss it was, if it was one.
struct QueryWorker::Port {
  virtual ~Port() = default;
  // Record i goes to targets[i] (an index into the exchange's targets);
  // broadcast ports send every record to every target.
  virtual bool send(const std::byte* recs, const uint32_t* targets, size_t n) = 0;
  virtual bool close() = 0;
  // Ends this worker's part without closing: the targets learn at once.
  virtual void abort() = 0;
  std::string why;
  std::optional<uint32_t> lost_rank;
};

// Hands arrived records to QueryWorker::deliver, and waits when there is no work.
struct QueryWorker::Driver {
  virtual ~Driver() = default;
  virtual size_t poll() = 0;
  virtual void idle(size_t work) = 0;
  // Whether this worker's input of x is open, has ended (every source
  // closed and everything delivered), or failed (`why`; `lost_rank`: the
  // peer whose loss it was, if it was one).
  virtual InputState state(ExchangeId x, std::string* why, std::optional<uint32_t>* lost_rank) = 0;
};

// The sluice flow of one exchange on this process (exchange.cc).
class FlowHolder {
 public:
  virtual ~FlowHolder() = default;
  // Opens worker qw's source and, if it is a target, adds its target to `w`.
  virtual std::unique_ptr<QueryWorker::Port> open(sluice::Cluster& cluster, QueryWorker& qw,
                                                  sluice::Worker& w, ExchangeId x, bool is_target,
                                                  sluice::Worker::InputId* input) = 0;
};

struct Runtime::Exchange {
  std::string name;
  ExchangeKind kind = ExchangeKind::kShuffle;
  Schema schema;
  std::vector<std::string> keys;
  uint32_t stride = 8;  // bytes per record
  uint32_t num_sources = 0;
  std::vector<sluice::Endpoint> targets;
  std::unique_ptr<FlowHolder> flow;  // kSluice
};

}  // namespace sluice::query
