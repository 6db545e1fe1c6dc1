// Everything of the sm_80-family templates (mma.sync, ldmatrix, cp.async; A100 and later).
#pragma once

#include "attnc/common/kv_tiles.h"
#include "attnc/common/philox.h"
#include "attnc/common/types.h"
#include "attnc/sm80/backward.h"
#include "attnc/sm80/bwd_config.h"
#include "attnc/sm80/config.h"
#include "attnc/sm80/copy.h"
#include "attnc/sm80/epilogue.h"
#include "attnc/sm80/forward.h"
#include "attnc/sm80/gemm.h"
#include "attnc/sm80/layout.h"
#include "attnc/sm80/mma.h"
#include "attnc/sm80/softmax.h"
