// Hopper's asynchronous machinery in one include: the mbarrier protocol (barrier.h), TMA copies
// and reductions (tma.h), shared-memory layout helpers and accesses (smem.h), and named barriers,
// turns and register reallocation among warpgroups (warpgroup.h).
#pragma once

#include "attnc/sm90/barrier.h"
#include "attnc/sm90/smem.h"
#include "attnc/sm90/tma.h"
#include "attnc/sm90/warpgroup.h"
