// apps/kv/job_gateway.h: the RESP front end of a `sluice-kv run --resp-port`
// job (flow_job.h): each client rank's gateway (resp_gateway.h) started on
// its port, and every rank told whether all of them started.
//
// Thread safety: call from the rank's one thread.
#pragma once

#include <sluice/cluster.h>

#include <cstdint>
#include <memory>

#include "flow_job.h"
#include "resp_gateway.h"

namespace kv {

// On a client rank (`is_client`), starts its gateway on port
// options.gateway.port + its client index (or a port the kernel picks),
// with its own history file where there is more than one of the job's
// `client_ranks`, and says where it serves. Then, on every rank, learns
// whether every gateway started (a collective over the job), so that a
// port in use ends the whole job at once, not only its gateway's rank.
// Returns false if one did not start (said on stderr: by rank 0 and the
// ranks that failed); *gateway holds this rank's gateway, if any. A
// restarted process (`restarted`: the others met long ago) starts its own
// gateway, if it is a client rank, and learns nothing of the others.
bool start_gateways(sluice::Cluster& cluster, const FlowJobOptions& options, uint32_t client_ranks,
                    bool is_client, bool restarted, std::unique_ptr<RespGateway>* gateway);

}  // namespace kv
