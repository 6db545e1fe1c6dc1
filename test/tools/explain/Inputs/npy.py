# Writes a .npy file without numpy, for the explain tests:
#   npy.py OUT DESCR SHAPE VALUES   e.g. npy.py doc.npy '<i4' 6 0,0,0,1,1,2
# VALUES may use V*N for N copies of V, as Python's [V] * N (0*300,1*200). DESCR 'bad-magic' writes a non-.npy file.
import struct
import sys

out, descr, shape, values = sys.argv[1:5]
items = []
for item in values.split(","):
    value, _, count = item.partition("*")
    items += [value] * (int(count) if count else 1)
if descr == "bad-magic":
    open(out, "wb").write(b"not a numpy file")
    sys.exit(0)
fmt = {"<i4": "<i", "<i8": "<q", "<f4": "<f", "<f8": "<d"}[descr]
data = b"".join(struct.pack(fmt, float(v) if "f" in descr else int(v)) for v in items)
dims = [int(d) for d in shape.split("x")]
shape_text = "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"
header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
open(out, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
