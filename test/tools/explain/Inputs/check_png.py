# Checks that a file is a valid PNG as attnc explain --png writes it: the signature, every chunk's
# CRC-32, IHDR first and IEND last, and IDAT inflating to height rows of (filter byte + RGB).
# Prints "png WIDTH x HEIGHT" for FileCheck.
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
at, chunks, idat = 8, [], b""
while at < len(data):
    (length,) = struct.unpack(">I", data[at : at + 4])
    kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
    (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
    assert zlib.crc32(kind + body) == crc, "bad CRC in " + kind.decode()
    chunks.append(kind)
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        assert (depth, colour) == (8, 2), "not 8-bit RGB"
    idat += body if kind == b"IDAT" else b""
    at += 12 + length
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
assert len(zlib.decompress(idat)) == height * (1 + 3 * width), "IDAT size"
print("png %d x %d" % (width, height))
