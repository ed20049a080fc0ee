// What each registry request sends and reads back: DECLARE, UNDECLARE, PUT,
// GET, ERASE, BARRIER and GATHER, on the call machinery of
// registry_client.cc.
#include "common/log.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_client_impl.h"
#include "sluice/errors.h"

namespace sluice::control {

using registry_client_impl::timeout_ms;

void RegistryClient::declare_flow(const std::string& name, const std::string& canonical,
                                  const std::vector<uint32_t>& participants, Deadline deadline,
                                  uint64_t epoch) {
  const std::string what = log::cat("declaring flow '", name, "'");
  const auto r =
      impl_->call(MsgType::kDeclare,
                  encode(DeclareMsg{name, canonical, participants, timeout_ms(deadline), epoch}),
                  deadline, what);
  impl_->expect(r, MsgType::kOk, what);
}

void RegistryClient::undeclare_flow(const std::string& name, Deadline deadline) {
  const std::string what = log::cat("destroying flow '", name, "'");
  const auto r = impl_->call(MsgType::kUndeclare, encode(UndeclareMsg{name, timeout_ms(deadline)}),
                             deadline, what);
  impl_->expect(r, MsgType::kOk, what);
}

void RegistryClient::undeclare_flow_async(const std::string& name, Deadline deadline,
                                          std::function<void(std::string)> done) {
  const std::string what = log::cat("destroying flow '", name, "'");
  Impl* impl = impl_.get();
  impl_->enqueue(MsgType::kUndeclare, encode(UndeclareMsg{name, timeout_ms(deadline)}), what,
                 [impl, what, done = std::move(done)](Impl::Reply r) {
                   done(impl->reply_problem(r, MsgType::kOk, what));
                 });
}

void RegistryClient::put_async(const std::string& key, const std::string& value) {
  const std::string what = log::cat("putting key '", key, "'");
  Impl* impl = impl_.get();
  impl_->enqueue(MsgType::kPut, encode(PutMsg{key, value}), what, [impl, what](Impl::Reply r) {
    if (std::string problem = impl->reply_problem(r, MsgType::kOk, what); !problem.empty()) {
      log::warn(problem);
    }
  });
}

uint64_t RegistryClient::erase(const std::string& key, bool prefix) {
  const std::string what = log::cat("erasing key ", prefix ? "prefix '" : "'", key, "'");
  const auto r = impl_->call(MsgType::kErase, encode(EraseMsg{key, prefix}), kForever, what);
  impl_->expect(r, MsgType::kOk, what);
  ErasedMsg done;
  if (!decode(r.payload, &done)) {
    throw Error(ErrorCode::kProtocol,
                log::cat(what, ": the registry at ", impl_->address, " sent a malformed OK reply"));
  }
  return done.count;
}

void RegistryClient::put(const std::string& key, const std::string& value) {
  const std::string what = log::cat("putting key '", key, "'");
  const auto r = impl_->call(MsgType::kPut, encode(PutMsg{key, value}), kForever, what);
  impl_->expect(r, MsgType::kOk, what);
}

std::string RegistryClient::get(const std::string& key, Deadline deadline, int64_t owner_rank,
                                uint32_t owner_incarnation) {
  const std::string what = log::cat("getting key '", key, "'");
  const auto r = impl_->call(
      MsgType::kGet, encode(GetMsg{key, owner_rank, timeout_ms(deadline), owner_incarnation}),
      deadline, what);
  impl_->expect(r, MsgType::kValue, what);
  ValueMsg v;
  if (!decode(r.payload, &v)) {
    throw Error(ErrorCode::kProtocol, log::cat(what, ": the registry at ", impl_->address,
                                               " sent a malformed VALUE reply"));
  }
  return std::move(v.value);
}

uint64_t RegistryClient::barrier(const std::string& name, Deadline deadline) {
  return barrier(name, {}, 0, deadline);
}

uint64_t RegistryClient::barrier(const std::string& name, const std::vector<uint64_t>& members,
                                 uint64_t self, Deadline deadline) {
  const std::string what = log::cat("barrier '", name, "'");
  const auto r =
      impl_->call(MsgType::kBarrier, encode(BarrierMsg{name, timeout_ms(deadline), members, self}),
                  deadline, what);
  impl_->expect(r, MsgType::kOk, what);
  BarrierDoneMsg done;
  if (!decode(r.payload, &done)) {
    throw Error(ErrorCode::kProtocol,
                log::cat(what, ": the registry at ", impl_->address, " sent a malformed OK reply"));
  }
  return done.generation;
}

GatheredMsg RegistryClient::gather(const std::string& name, uint64_t epoch,
                                   const std::string& value, Deadline deadline) {
  const std::string what = log::cat("gather '", name, "'");
  const auto r =
      impl_->call(MsgType::kGather, encode(GatherMsg{name, epoch, timeout_ms(deadline), value}),
                  deadline, what);
  impl_->expect(r, MsgType::kGathered, what);
  GatheredMsg done;
  if (!decode(r.payload, &done)) {
    throw Error(ErrorCode::kProtocol, log::cat(what, ": the registry at ", impl_->address,
                                               " sent a malformed GATHERED reply"));
  }
  return done;
}

}  // namespace sluice::control
