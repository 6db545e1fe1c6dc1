// Everything of the sm_80-family templates (mma.sync, ldmatrix, cp.async; A100 and later).
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/epilogue.h"
#include "attnc/common/gemm.h"
#include "attnc/common/kv_tiles.h"
#include "attnc/common/layout.h"
#include "attnc/common/mma.h"
#include "attnc/common/philox.h"
#include "attnc/common/softmax.h"
#include "attnc/common/types.h"
#include "attnc/sm80/backward.h"
#include "attnc/sm80/bwd_config.h"
#include "attnc/sm80/config.h"
#include "attnc/sm80/decode.h"
#include "attnc/sm80/decode_config.h"
#include "attnc/sm80/forward.h"
