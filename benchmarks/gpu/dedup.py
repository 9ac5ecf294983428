"""A module compressor for the trip to the GPU machine: 4 KiB chunks deduplicated, then xz.

Modules of models with tiled weights (gpu_models.tiled_sign_weights) are mostly a few distinct
chunks repeated: xz's fast modes miss repeats that far apart and its slow modes or bz2 take
minutes per module on a busy 2-core machine; this takes seconds and shrinks them ~100x.

    python benchmarks/gpu/dedup.py FILE...      # FILE -> FILE.dd.xz (FILE removed)
Format (before xz): magic, chunk size, byte length, chunk count n (u64 each), n u32 indices into
the distinct chunks, then the distinct chunks in order of first use.
"""

from __future__ import annotations

import lzma
import struct
import sys
from pathlib import Path

import numpy as np

MAGIC = 0x31444443  # "CDD1"
CHUNK = 4096


def pack(data: bytes) -> bytes:
    n = -(-len(data) // CHUNK)
    padded = data + b"\0" * (n * CHUNK - len(data))
    seen: dict[bytes, int] = {}
    index = np.empty(n, dtype=np.uint32)
    chunks = []
    for i in range(n):
        c = padded[i * CHUNK:(i + 1) * CHUNK]
        j = seen.get(c)
        if j is None:
            j = seen[c] = len(chunks)
            chunks.append(c)
        index[i] = j
    body = struct.pack("<4Q", MAGIC, CHUNK, len(data), n) + index.tobytes() + b"".join(chunks)
    return lzma.compress(body, preset=1)


def unpack(blob: bytes) -> bytes:
    body = lzma.decompress(blob)
    magic, chunk, length, n = struct.unpack_from("<4Q", body)
    if magic != MAGIC:
        raise ValueError("not a dedup.py file")
    index = np.frombuffer(body, dtype=np.uint32, count=n, offset=32)
    chunks = np.frombuffer(body, dtype=np.uint8, offset=32 + 4 * n).reshape(-1, chunk)
    return chunks[index].tobytes()[:length]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        data = path.read_bytes()
        blob = pack(data)
        assert unpack(blob) == data
        Path(name + ".dd.xz").write_bytes(blob)
        path.unlink()
        print(f"{name}: {len(data) / 2**20:.1f} -> {len(blob) / 2**20:.2f} MiB", file=sys.stderr)
