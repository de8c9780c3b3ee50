#!/usr/bin/env python3
"""Compares two ONNX TensorProto files of f32 data (rtol 1e-3, atol 1e-4) with no dependency: a minimal protobuf
reader for the fields stowage writes (dims 1, data_type 2, float_data 4, raw_data 9). For the device check, where
the onnx package is not installed."""
import struct
import sys


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def floats(path):
    b = open(path, "rb").read()
    i, raw, fl = 0, None, []
    while i < len(b):
        key, i = varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            chunk = b[i : i + n]
            i += n
            if field == 9:
                raw = chunk
            elif field == 4:
                fl.extend(struct.unpack(f"<{len(chunk) // 4}f", chunk))
        elif wire == 5:
            if field == 4:
                fl.append(struct.unpack("<f", b[i : i + 4])[0])
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"{path}: wire type {wire}")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw)) if raw is not None else fl


if __name__ == "__main__":
    got, want = floats(sys.argv[1]), floats(sys.argv[2])
    worst = max((abs(g - w) for g, w in zip(got, want)), default=0.0)
    ok = len(got) == len(want) and all(abs(g - w) <= 1e-4 + 1e-3 * abs(w) for g, w in zip(got, want))
    print(f"{'match' if ok else 'MISMATCH'} ({len(got)} values, max |difference| {worst:.2e})")
    sys.exit(0 if ok else 1)
