"""The dropout decision of templates/attnc/common/philox.h, reimplemented on the host with numpy
(vectorised uint32/uint64 arithmetic), so a test can rebuild the exact dropped set of a launch."""
import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
LO32 = np.uint64(0xFFFFFFFF)


def philox4x32(c0, c1, c2, c3, k0, k1, rounds):
    """Philox4x32 of `rounds` rounds on uint64 arrays holding 32-bit words; k0, k1 are Python
    ints."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3))
    for _ in range(rounds):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & LO32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & LO32)
        k0 = (k0 + W0) & 0xFFFFFFFF
        k1 = (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def threshold(p):
    """round(double(float(p)) * 2^8) clamped to 0..255 (half up); p is a float32 in the kernel."""
    t = float(np.float32(p)) * 256.0 + 0.5
    if not t >= 1.0:
        return 0
    return 255 if t >= 255.0 else int(t)


def scale(p):
    """The factor of a kept probability: 256 / (256 - threshold(p)), as the kernel's float."""
    return float(np.float32(256.0) / np.float32(256 - threshold(p)))


def random_bits(seed, offset, batch, heads_q, q_len, kv_len, rounds):
    """The 8 random bits of every element (b, h, q, k): uint64 array [batch, heads_q, q_len, kv_len],
    from Philox4x32 of `rounds` rounds (the kernel's info["dropout_rounds"]).
    Element (q, k) takes byte 2 ((k >> 4) & 1) + (k & 1) of word 2 ((q >> 3) & 1) + ((k >> 3) & 1)
    of the Philox call with counter {kGroup, qGroup, b * heads_q + h, lo32(offset)}."""
    k0 = seed & 0xFFFFFFFF
    k1 = ((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF
    bh = np.arange(batch * heads_q, dtype=np.uint64).reshape(-1, 1, 1)
    q = np.arange(q_len, dtype=np.uint64).reshape(1, -1, 1)
    k = np.arange(kv_len, dtype=np.uint64).reshape(1, 1, -1)
    shape = (batch * heads_q, q_len, kv_len)
    one = np.uint64(1)
    q_group = (q >> np.uint64(4)) * np.uint64(8) + (q & np.uint64(7))
    k_group = (k >> np.uint64(5)) * np.uint64(4) + ((k >> one) & np.uint64(3))
    c0 = np.broadcast_to(k_group, shape)
    c1 = np.broadcast_to(q_group, shape)
    c2 = np.broadcast_to(bh, shape)
    c3 = np.full(shape, offset & 0xFFFFFFFF, dtype=np.uint64)
    words = np.stack(philox4x32(c0, c1, c2, c3, k0, k1, rounds), axis=-1)  # [bh, q, k, 4]
    index = np.broadcast_to(np.uint64(2) * ((q >> np.uint64(3)) & one)
                            + ((k >> np.uint64(3)) & one), shape).astype(np.int64)
    word = np.take_along_axis(words, index[..., None], axis=-1)[..., 0]
    byte = np.uint64(2) * ((k >> np.uint64(4)) & one) + (k & one)
    bits = (word >> (np.uint64(8) * np.broadcast_to(byte, shape))) & np.uint64(0xFF)
    return bits.reshape(batch, heads_q, q_len, kv_len)


def keep_mask(seed, offset, p, batch, heads_q, q_len, kv_len, rounds):
    """True where the element is kept (not dropped): bool [batch, heads_q, q_len, kv_len]."""
    return (random_bits(seed, offset, batch, heads_q, q_len, kv_len, rounds)
            >= np.uint64(threshold(p)))
