"""The external parameters of a compiled program (docs/package-format.md, "Parameters").

One set per program, shared by every target's module: the modules read parameter ``key`` of
scope ``model`` (``#stream.parameter.named<"model"::key>``), and a ``Session`` gives them a
parameter provider over this set. Two forms:

- in memory, right after compiling: ``key -> numpy array`` (views of the model's own weights
  and the arrays the precision passes computed; nothing is copied);
- an IREE parameter archive (``.irpa``) inside a package file, at a page-aligned offset and
  stored uncompressed: mapped read-only, so loading reads only the pages a device upload touches.
"""

from __future__ import annotations

import hashlib
import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvil_mlir.core.diagnostics import PackageError

SCOPE = "model"  # the scope the compiler writes (cuvil_mlir/core/params.py SCOPE)
ARCHIVE_NAME = "parameters/model.irpa"
ALIGNMENT = 4096  # where the archive starts in a package: a page, so it maps without a copy


@dataclass
class Parameters:
    """In memory (``arrays``) or an archive of ``length`` bytes at ``offset`` in ``path``."""

    arrays: dict[str, np.ndarray] | None = None
    path: Path | None = None
    offset: int = 0
    length: int = 0
    sha256: str = ""
    scope: str = SCOPE
    _map: mmap.mmap | None = field(default=None, repr=False)

    @classmethod
    def in_memory(cls, arrays: dict[str, np.ndarray]) -> "Parameters":
        return cls(arrays=dict(arrays))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values()) if self.arrays is not None else self.length

    def view(self) -> memoryview:
        """The archive's bytes, mapped read-only (mapped once, kept while this object lives)."""
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if self._map.size() < self.offset + self.length:
                raise PackageError(f"{self.path} is truncated: its parameter archive needs {self.offset + self.length} bytes, "
                                   f"the file has {self._map.size()}")
        return memoryview(self._map)[self.offset:self.offset + self.length]

    def verify(self) -> None:
        """Check the archive against its sha256 (reads every byte once, through the mapping)."""
        digest = hashlib.sha256()
        data = self.view()
        step = 64 << 20
        for start in range(0, len(data), step):
            digest.update(data[start:start + step])
        if digest.hexdigest() != self.sha256:
            raise PackageError(f"{self.path} is corrupt: {ARCHIVE_NAME} fails its sha256 check (tampered with or damaged)")

    def write_archive(self, out, scratch: Path) -> str:
        """Write the archive's bytes to the binary file ``out``; returns their sha256. In-memory
        parameters are written by IREE's archive writer to ``scratch`` first (then copied and removed)."""
        digest = hashlib.sha256()
        if self.arrays is None:
            data = self.view()
            for start in range(0, len(data), 64 << 20):
                out.write(data[start:start + (64 << 20)])
                digest.update(data[start:start + (64 << 20)])
            return digest.hexdigest()
        from cuvil_mlir.runtime import session

        try:
            session.write_parameter_archive(self.arrays, scratch)
            with open(scratch, "rb") as f:
                while chunk := f.read(64 << 20):
                    out.write(chunk)
                    digest.update(chunk)
        finally:
            scratch.unlink(missing_ok=True)
        return digest.hexdigest()


def aligned_extra(header_offset: int, name: str, zip64: bool) -> bytes:
    """A zip extra field (id 0xD935, as Android's zipalign uses) that makes the data of a stored
    entry named ``name`` whose local header starts at ``header_offset`` begin at a multiple of
    ALIGNMENT (the local header is 30 bytes, the name, the extra, 20 more with zip64)."""
    start = header_offset + 30 + len(name.encode()) + (20 if zip64 else 0) + 4
    pad = -start % ALIGNMENT
    return b"\x35\xd9" + pad.to_bytes(2, "little") + b"\0" * pad


def data_offset(fp, header_offset: int) -> int:
    """Where the data of the zip entry whose local header is at ``header_offset`` starts."""
    fp.seek(header_offset)
    header = fp.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise PackageError("the parameter archive's zip entry has no local header")
    return header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")

