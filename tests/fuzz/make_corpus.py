"""Writes the seed corpora of the fuzz targets (run once with NumPy; the files are checked in).

npy: every dtype spillway reads and several it refuses, both byte orders, C and Fortran order,
header versions 1.0 / 2.0 / 3.0, scalars, empty and 3-D arrays, a truncated file. raw: layouts
that fit, with trailing bytes, with an offset, one byte short, an overflowing row count.
map_shapes: signatures NumPy accepts and some it does not, with shapes that broadcast or do not.
"""
import io
import os
import struct

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261123)


def put(kind, name, data):
    os.makedirs(os.path.join(here, "corpus", kind), exist_ok=True)
    with open(os.path.join(here, "corpus", kind, name), "wb") as f:
        f.write(data)


def npy_bytes(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a, allow_pickle=False)
    else:
        np.lib.format.write_array(b, a, version=version, allow_pickle=False)
    return b.getvalue()


dtypes = ["u1", "?", "i1", "<u2", "<i4", "<i8", "<f4", "<f8", "<c8", "<c16",
          ">u2", ">i4", ">f8", ">c8", "<i2", "<f2", "<u8"]
for dt in dtypes:
    a = (rng.integers(0, 100, size=(3, 5)) % (2 if dt == "?" else 100)).astype(np.dtype(dt))
    tag = dt.replace("<", "le_").replace(">", "be_").replace("?", "bool")
    put("npy", f"c_{tag}.npy", npy_bytes(a))
    put("npy", f"f_{tag}.npy", npy_bytes(np.asfortranarray(a)))
for v in [(1, 0), (2, 0), (3, 0)]:
    put("npy", f"v{v[0]}_f4_3d.npy", npy_bytes(rng.standard_normal((2, 3, 4)).astype("<f4"), version=v))
put("npy", "scalar_f8.npy", npy_bytes(np.float64(3.5)))
put("npy", "empty_0x7_i4.npy", npy_bytes(np.zeros((0, 7), dtype="<i4")))
put("npy", "vec_c16.npy", npy_bytes((rng.standard_normal(9) + 1j * rng.standard_normal(9)).astype("<c16")))
put("npy", "f_3d_u2.npy", npy_bytes(np.asfortranarray(rng.integers(0, 9, (2, 3, 4)).astype("<u2"))))
put("npy", "structured.npy", npy_bytes(np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])))
full = npy_bytes(rng.standard_normal((4, 4)).astype("<f8"))
put("npy", "truncated_f8.npy", full[:-9])


# raw: 24 bytes of layout (rows, row_bytes, offset as little-endian int64), a flags byte, the file.
def raw(name, rows, row_bytes, offset, flags, body):
    put("raw", name, struct.pack("<qqqB", rows, row_bytes, offset, flags) + body)


bits = np.packbits(rng.integers(0, 2, (5, 13)).astype(np.uint8), axis=1)
raw("packed_big_exact", 5, 2, 0, 0x80 | 0x02 | (3 << 2), bits.tobytes())
raw("packed_little_trailing", 5, 2, 0, 0x80 | 0x01, bits.tobytes() + b"xyz")
raw("packed_offset", 5, 2, 4, 0x80, b"HEAD" + bits.tobytes())
raw("short_by_one", 5, 2, 0, 0x80, bits.tobytes()[:-1])
raw("huge_rows", 2**62, 8, 0, 0x80, b"\x00" * 16)
raw("small_form", 3, 3, 1, 0x02, bytes(range(40)))

sigs = ["(n),(n)->()", "(m,n),(n,p)->(m,p)", "(m,o),(m,o)->(m,o)", "(3),(3)->(3)", "()->()",
        "(n)->(n),()", "(i, j) , (j) -> (i)", "(n?),(n)->()", "(n),(n)", "((n))->()",
        "(9999999999999999999)->()"]
shapes = bytes([2, 3, 4, 1, 4, 3, 5, 3, 4, 2, 4, 5])
for i, s in enumerate(sigs):
    put("map_shapes", f"sig_{i}", s.encode() + b"\x00" + shapes)
big = struct.pack(">q", 2**40)
put("map_shapes", "huge_extents",
    b"(n),(n)->()\x00" + bytes([2, 0x80]) + big + bytes([0x80]) + big + bytes([1, 0x80]) + struct.pack(">q", -5))
print("corpus written:", {k: len(os.listdir(os.path.join(here, "corpus", k))) for k in ["npy", "raw", "map_shapes"]})
