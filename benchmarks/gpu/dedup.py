"""A module compressor for the trip to the GPU machine: 4 KiB chunks deduplicated, chunks of sign
weights stored as bits, then xz.

Modules of models with tiled weights (gpu_models.tiled_sign_weights) are mostly a few distinct
chunks repeated: xz's fast modes miss repeats that far apart and its slow modes or bz2 take
minutes per module on a busy 2-core machine; this takes seconds and shrinks them ~100x. Modules
with sign weights (gpu_models.sign_weights: each fp16 matrix holds two values) are mostly chunks
of 2048 16-bit words taking two values: stored as those two values and one bit per word (~16x,
where xz's fast mode gets ~10x and its slow modes ~14x in minutes).

    python benchmarks/gpu/dedup.py FILE...      # FILE -> FILE.dd.xz (FILE removed)
Format (before xz): magic, chunk size, byte length, chunk count n (u64 each), n u32 indices
(high bit set: into the two-valued chunks, else into the distinct chunks), the count of
two-valued chunks (u64), their two u16 values each, their bits each (chunk/16 bytes, bit set:
the second value), then the distinct chunks in order of first use. The older format without
two-valued chunks (magic CDD1) still unpacks.
"""

from __future__ import annotations

import lzma
import struct
import sys
from pathlib import Path

import numpy as np

MAGIC_V1 = 0x31444443  # "CDD1"
MAGIC = 0x32444443  # "CDD2"
CHUNK = 4096
TWO = np.uint32(1 << 31)


def pack(data: bytes) -> bytes:
    n = -(-len(data) // CHUNK)
    padded = data + b"\0" * (n * CHUNK - len(data))
    words = np.frombuffer(padded, dtype=np.uint16).reshape(n, CHUNK // 2)
    lo, hi = words.min(axis=1), words.max(axis=1)
    high = words == hi[:, None]
    two = (high | (words == lo[:, None])).all(axis=1) & (lo != hi)
    seen: dict[bytes, int] = {}
    index = np.empty(n, dtype=np.uint32)
    index[two] = np.arange(int(two.sum()), dtype=np.uint32) | TWO
    chunks = []
    for i in np.flatnonzero(~two):
        c = padded[i * CHUNK:(i + 1) * CHUNK]
        j = seen.get(c)
        if j is None:
            j = seen[c] = len(chunks)
            chunks.append(c)
        index[i] = j
    values = np.stack([lo[two], hi[two]], axis=1).astype(np.uint16)
    bits = np.packbits(high[two], axis=1)
    body = (struct.pack("<4Q", MAGIC, CHUNK, len(data), n) + index.tobytes() + struct.pack("<Q", len(values))
            + values.tobytes() + bits.tobytes() + b"".join(chunks))
    return lzma.compress(body, preset=1)


def unpack(blob: bytes) -> bytes:
    body = lzma.decompress(blob)
    magic, chunk, length, n = struct.unpack_from("<4Q", body)
    if magic not in (MAGIC, MAGIC_V1):
        raise ValueError("not a dedup.py file")
    index = np.frombuffer(body, dtype=np.uint32, count=n, offset=32)
    offset = 32 + 4 * n
    if magic == MAGIC_V1:
        chunks = np.frombuffer(body, dtype=np.uint8, offset=offset).reshape(-1, chunk)
        return chunks[index].tobytes()[:length]
    (count,) = struct.unpack_from("<Q", body, offset)
    offset += 8
    values = np.frombuffer(body, dtype=np.uint16, count=2 * count, offset=offset).reshape(count, 2)
    offset += 4 * count
    bits = np.frombuffer(body, dtype=np.uint8, count=count * chunk // 16, offset=offset).reshape(count, chunk // 16)
    offset += count * chunk // 16
    chunks = np.frombuffer(body, dtype=np.uint8, offset=offset).reshape(-1, chunk)
    out = np.empty((n, chunk), dtype=np.uint8)
    is_two = (index & TWO) != 0
    out[~is_two] = chunks[index[~is_two]]
    k = index[is_two] & ~TWO
    high = np.unpackbits(bits[k], axis=1).astype(bool)
    out[is_two] = np.where(high, values[k, 1:2], values[k, 0:1]).view(np.uint8)
    return out.tobytes()[:length]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        data = path.read_bytes()
        blob = pack(data)
        assert unpack(blob) == data
        Path(name + ".dd.xz").write_bytes(blob)
        path.unlink()
        print(f"{name}: {len(data) / 2**20:.1f} -> {len(blob) / 2**20:.2f} MiB", file=sys.stderr)
