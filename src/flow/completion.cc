#include "flow/completion.h"

#include <sched.h>

#include "common/log.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {

void post_control_receive(ofi::Endpoint& ep, uint64_t* control, void* desc, uint32_t index,
                          Op* op) {
  ssize_t rc = -FI_EAGAIN;
  for (int i = 0; i < 1000 && rc == -FI_EAGAIN; ++i) {
    rc = ep.trecv(&control[index], sizeof(uint64_t), desc, kTagAbort | index, &op->ctx);
    if (rc == -FI_EAGAIN) sched_yield();
  }
  op->busy = rc == 0;
  if (rc != 0)
    log::warn("cannot post an abort receive: ", ofi::lib::strerror(static_cast<int>(-rc)));
}

void send_aborts_unopened(ofi::Endpoint& ep, uint64_t* control, void* desc, uint32_t n,
                          uint32_t index, uint32_t cause_rank,
                          const std::vector<fi_addr_t>& peers) {
  Op op;
  for (fi_addr_t peer : peers) {
    if (peer != FI_ADDR_UNSPEC)
      (void)post_abort_message(ep, control, n, desc, index, cause_rank, peer, &op);
  }
  CompletionReader cq;
  flush_abort_messages(&op, [&] {
    return cq.drain(
        ep,
        [&](const Completion& c) {
          if (c.entry.op_context == &op.ctx && op.count > 0) --op.count;
          return true;
        },
        [&](const std::string&, void* failed) {
          if (failed == &op.ctx && op.count > 0) --op.count;
          return Status::kOk;
        });
  });
}

}  // namespace sluice::detail
