// Host check of philox.h against the Random123 known-answer vectors for philox4x32-10
// (Random123 kat_vectors), and of the dropout threshold's rounding at the edges.
#include "attnc/common/philox.h"

#include <cstdio>
#include <initializer_list>

namespace {

int failures = 0;

void expect(const char* name, attnc::u32x4 got, attnc::u32x4 want) {
  if (got.x == want.x && got.y == want.y && got.z == want.z && got.w == want.w) return;
  std::printf("FAIL %s: got %08x %08x %08x %08x, want %08x %08x %08x %08x\n", name, got.x, got.y,
              got.z, got.w, want.x, want.y, want.z, want.w);
  ++failures;
}

void expectEq(const char* name, attnc::u32 got, attnc::u32 want) {
  if (got == want) return;
  std::printf("FAIL %s: got %u, want %u\n", name, got, want);
  ++failures;
}

}  // namespace

int main() {
  using attnc::u32x4;
  expect("zeros", attnc::philox4x32_10(u32x4{0, 0, 0, 0}, 0, 0),
         u32x4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  expect("ones",
         attnc::philox4x32_10(u32x4{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff,
                              0xffffffff),
         u32x4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  expect("pi",
         attnc::philox4x32_10(u32x4{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822,
                              0x299f31d0),
         u32x4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  // The attnc mapping: element (q, k)'s group is one plain philox call on the documented counter
  // and key.
  expect("mapping", attnc::dropoutRandom(0x299f31d0a4093822ull, 0x0370734400000000ull, 0x13198a2e,
                                         /*q=*/16 * 5 + 8 + 3, /*k=*/16 * 7 + 8 + 2 * 2 + 1),
         attnc::philox4x32_10(u32x4{7 * 4 + 2, 5 * 8 + 3, 0x13198a2e, 0x00000000}, 0xa4093822,
                              0x299f31d0 ^ 0x03707344));
  // The 8 elements (q | 8 r, k | 8 t | j) of a group share its call and take its 8 distinct 16-bit
  // halves: word 2 r + t, half j.
  {
    const attnc::u64 seed = 0x123456789abcdef0ull, offset = 0xfedcba9876543210ull;
    const attnc::u32 q = 32 + 5, k = 48 + 6;
    const u32x4 w = attnc::dropoutRandom(seed, offset, 5, q, k);
    const attnc::u32 words[4] = {w.x, w.y, w.z, w.w};
    for (attnc::u32 r = 0; r < 2; ++r)
      for (attnc::u32 t = 0; t < 2; ++t)
        for (attnc::u32 j = 0; j < 2; ++j) {
          const attnc::u32 qe = q | 8 * r, ke = k | 8 * t | j;
          expect("group", attnc::dropoutRandom(seed, offset, 5, qe, ke), w);
          expectEq("group bits", attnc::dropoutBits(w, qe, ke),
                   (words[2 * r + t] >> (16 * j)) & 0xffffu);
        }
    // The same values from test/gpu/philox_host.py (numpy), b = 1, h = 2 of 3 heads.
    const attnc::u32 known[4][3] = {{0, 0, 14816}, {9, 3, 28872}, {17, 26, 724}, {31, 31, 5623}};
    for (const auto& e : known)
      expectEq("host reference", attnc::dropoutBits(attnc::dropoutRandom(seed, offset, 5, e[0], e[1]), e[0], e[1]),
               e[2]);
  }
  // The launch's precomputed round keys give the same words as the per-call key schedule.
  {
    const attnc::u64 seed = 0x123456789abcdef0ull, offset = 0xfedcba9876543210ull;
    attnc::u32 keys[attnc::kDropoutRoundKeys];
    attnc::dropoutKeySchedule(seed, offset, keys);
    for (attnc::u32 q : {0u, 9u, 37u})
      for (attnc::u32 k : {0u, 26u, 54u})
        expect("round keys", attnc::dropoutRandom(keys, offset, 5, q, k),
               attnc::dropoutRandom(seed, offset, 5, q, k));
  }
  expectEq("threshold 0", attnc::dropoutThreshold(0.0f), 0u);
  expectEq("threshold 0.5", attnc::dropoutThreshold(0.5f), 0x8000u);
  expectEq("threshold 0.1", attnc::dropoutThreshold(0.1f), 6553u);
  expectEq("threshold 1", attnc::dropoutThreshold(1.0f), 0xffffu);
  expectEq("threshold <0", attnc::dropoutThreshold(-0.25f), 0u);
  if (failures == 0) std::printf("philox: all known answers match\n");
  return failures == 0 ? 0 : 1;
}
