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

}  // namespace sluice::detail
