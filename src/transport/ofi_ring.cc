#include "transport/ofi_ring.h"

namespace sluice::detail {

std::unique_ptr<OfiRing> make_ofi_ring(ofi::Endpoint& ep) {
  return ep.rma() ? make_ofi_rma_ring(ep) : make_ofi_msg_ring(ep);
}

}  // namespace sluice::detail
