// The sm_90a backward kernels, as a generated backward unit includes them: the dK/dV kernel
// (bwd_dkdv.h) and the dQ kernel (bwd_dq.h), their shapes in bwd_config.h.
#pragma once

#include "attnc/sm90/bwd_dkdv.h"
#include "attnc/sm90/bwd_dq.h"
