/// @file
/// sluice/sluice.h: everything a sluice program needs. Read cluster.h (joining
/// and declaring), flow_spec.h (describing a flow), flow.h (sources, targets,
/// records), worker.h (one loop for
/// a thread that sends and receives) and errors.h (failure); memory.h has
/// one-sided memory regions, options.h every setting and its SLUICE_*
/// variable.
#pragma once

#include "sluice/cluster.h"
#include "sluice/combiner.h"
#include "sluice/errors.h"
#include "sluice/flow.h"
#include "sluice/flow_spec.h"
#include "sluice/hash.h"
#include "sluice/memory.h"
#include "sluice/options.h"
#include "sluice/replay.h"
#include "sluice/version.h"
#include "sluice/worker.h"
