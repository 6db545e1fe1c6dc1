"""The dropout decision of templates/attnc/common/philox.h, reimplemented on the host with numpy
(vectorised uint32/uint64 arithmetic), so a test can rebuild the exact dropped set of a launch."""
import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
LO32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit words; k0, k1 are Python ints."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3))
    for _ in range(10):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & LO32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & LO32)
        k0 = (k0 + W0) & 0xFFFFFFFF
        k1 = (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def threshold(p):
    """u32(min(double(float(p)) * 2^32, 2^32 - 1)), truncating; p is a float32 in the kernel."""
    t = float(np.float32(p)) * 4294967296.0
    if not t > 0.0:
        return 0
    return 4294967295 if t >= 4294967295.0 else int(t)


def random_words(seed, offset, batch, heads_q, q_len, kv_len):
    """The random word of every element (b, h, q, k): uint64 array [batch, heads_q, q_len, kv_len]."""
    k0 = seed & 0xFFFFFFFF
    k1 = ((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF
    groups = (kv_len + 3) // 4
    bh = np.arange(batch * heads_q, dtype=np.uint64).reshape(-1, 1, 1)
    q = np.arange(q_len, dtype=np.uint64).reshape(1, -1, 1)
    g = np.arange(groups, dtype=np.uint64).reshape(1, 1, -1)
    shape = (batch * heads_q, q_len, groups)
    c0 = np.broadcast_to(g, shape)
    c1 = np.broadcast_to(q, shape)
    c2 = np.broadcast_to(bh, shape)
    c3 = np.full(shape, offset & 0xFFFFFFFF, dtype=np.uint64)
    words = np.stack(philox4x32_10(c0, c1, c2, c3, k0, k1), axis=-1)  # [bh, q, groups, 4]
    words = words.reshape(batch * heads_q, q_len, groups * 4)[:, :, :kv_len]
    return words.reshape(batch, heads_q, q_len, kv_len)


def keep_mask(seed, offset, p, batch, heads_q, q_len, kv_len):
    """True where the element is kept (not dropped): bool [batch, heads_q, q_len, kv_len]."""
    return random_words(seed, offset, batch, heads_q, q_len, kv_len) >= np.uint64(threshold(p))
