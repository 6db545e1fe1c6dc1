// Shared memory of the sm_90a kernels: the aligned base every kernel's layout starts from, the
// ring of schedule slots by which a producer tells its consumers which kv tile a stage holds, and
// the 32- and 64-bit shared loads and stores (one PTX instruction each) the kernels read them with.
#pragma once

#include "attnc/common/copy.h"
#include "attnc/common/expr.h"
#include "attnc/common/types.h"
#include "attnc/sm90/wgmma.h"

namespace attnc {
namespace sm90 {

ATTNC_DEVICE u32 loadShared32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

ATTNC_DEVICE float loadSharedF32(u32 addr) { return __builtin_bit_cast(float, loadShared32(addr)); }

ATTNC_DEVICE void storeSharedF32x2(u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
ATTNC_DEVICE void loadSharedF32x2(u32 addr, float& a, float& b) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(a), "=f"(b) : "r"(addr) : "memory");
}

// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) access.
ATTNC_DEVICE void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The first 1024-byte aligned address of the dynamic shared memory: 128-byte-swizzled TMA boxes
// and wgmma operands start on swizzle atoms (wgmma.h).
ATTNC_DEVICE u32 swizzleAlignedBase(unsigned char* raw) {
  return (sm80::smemAddress(raw) + u32(kSwizzleAtomBytes - 1)) & ~u32(kSwizzleAtomBytes - 1);
}

// A ring of schedule slots, one a stage from `base`: the kv tile the stage holds (-1: the stream
// has ended) and its class. The forward's and the dQ kernel's producers publish, their consumers
// read while they hold the stage.
struct KvTileSlots {
  u32 base;
  ATTNC_DEVICE u32 slot(int stage) const { return base + u32(8 * stage); }
  ATTNC_DEVICE void publish(int stage, int tile, expr::Tri cls) const {
    sm80::storeShared32(slot(stage), u32(tile));
    sm80::storeShared32(slot(stage) + 4, u32(cls));
  }
  ATTNC_DEVICE int scheduledTile(int stage) const { return int(loadShared32(slot(stage))); }
  ATTNC_DEVICE expr::Tri scheduledClass(int stage) const {
    return expr::Tri(loadShared32(slot(stage) + 4));
  }
};

}  // namespace sm90
}  // namespace attnc
