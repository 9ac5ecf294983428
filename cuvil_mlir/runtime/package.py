"""The ``.cuvilpkg`` format: a zip of compiled modules and ``metadata.json``.

Layout::

    metadata.json           {"format": "cuvilpkg", "format_version": 2, "signature": ..., "boundary": ..., "modules": [...], ...}
    modules/<target>.vmfb   one IREE module per target
    state/<i>.npy           the module state (buffers the program mutates), when it has some

Loading reads JSON and bytes only (never pickle, never code), checks every module's
sha256, and rejects a corrupt or foreign file with a message that says which.
See docs/package-format.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from cuvil_mlir.core.diagnostics import PackageError, require_file

FORMAT = "cuvilpkg"
FORMAT_VERSION = 2  # 2 added "boundary" and "state" (docs/package-format.md)
READ_VERSIONS = (1, 2)  # a version-1 package (no boundary) loads with positional tensors in and out


@dataclass(frozen=True)
class PackagedModule:
    target: str
    driver: str
    iree_flags: tuple[str, ...]
    vmfb: bytes
    passes: tuple[str, ...] = ()  # the Cuvil passes that produced it (with options)
    patterns_fired: dict = field(default_factory=dict)
    requires: dict = field(default_factory=dict)  # what the machine must have beyond the driver (a CPU's ISA)


def module_file_name(target_spec: str) -> str:
    return "modules/" + re.sub(r"[^A-Za-z0-9_.-]", "_", target_spec) + ".vmfb"


def write(path: str | os.PathLike, modules: list[PackagedModule], metadata: dict, files: dict[str, bytes] | None = None,
          *, compress: bool = True) -> None:
    """Write atomically: a failure never leaves a half-written package at ``path``.
    ``files``: more entries (name -> bytes; the module state, ``state/<i>.npy``).
    ``compress=False`` stores the modules uncompressed (deflate runs at ~30 MB/s on a module's
    weights and saves <10%: the compile cache stores its entries so)."""
    path = Path(path)
    entries = []
    for m in modules:
        entries.append({
            "target": m.target, "driver": m.driver, "iree_flags": list(m.iree_flags),
            "passes": list(m.passes), "patterns_fired": m.patterns_fired, "requires": m.requires,
            "file": module_file_name(m.target), "sha256": hashlib.sha256(m.vmfb).hexdigest(), "bytes": len(m.vmfb),
        })
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **metadata, "modules": entries}
    tmp = path.with_name(path.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
            z.writestr("metadata.json", json.dumps(meta, indent=2, sort_keys=True))
            for m, e in zip(modules, entries):
                z.writestr(e["file"], m.vmfb)
            for name, data in (files or {}).items():
                z.writestr(name, data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read(path: str | os.PathLike) -> tuple[dict, list[PackagedModule]]:
    path = require_file(path, "package")
    if not zipfile.is_zipfile(path):
        raise PackageError(f"{path} is not a .cuvilpkg (not a zip archive)")
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "metadata.json" not in names:
                raise PackageError(f"{path} is not a .cuvilpkg: it has no metadata.json")
            meta = _parse_metadata(z.read("metadata.json"), path)
            modules = [_read_module(z, names, entry, path) for entry in meta["modules"]]
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise PackageError(f"{path} is corrupt: {e}") from e
    return meta, modules


def _parse_metadata(raw: bytes, path: Path) -> dict:
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PackageError(f"{path} is corrupt: metadata.json is not valid JSON ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PackageError(f"{path} is not a .cuvilpkg: metadata.json has no \"format\": \"{FORMAT}\"")
    version = meta.get("format_version")
    if version not in READ_VERSIONS:
        raise PackageError(f"{path} has package format version {version}; this cuvil-mlir reads versions "
                           f"{', '.join(map(str, READ_VERSIONS))}")
    for key in ("signature", "modules"):
        if key not in meta:
            raise PackageError(f"{path} is corrupt: metadata.json lacks '{key}'")
    if not isinstance(meta["modules"], list) or not meta["modules"]:
        raise PackageError(f"{path} holds no modules")
    signature = meta["signature"]
    well_formed = isinstance(signature, dict) and all(
        isinstance(signature.get(side), list)
        and all(isinstance(s, dict) and isinstance(s.get("shape"), list) and isinstance(s.get("dtype"), str) for s in signature[side])
        for side in ("inputs", "outputs")
    )
    if not well_formed:
        raise PackageError(f"{path} is corrupt: metadata.json has a malformed signature")
    return meta


def _read_module(z: zipfile.ZipFile, names: set, entry: dict, path: Path) -> PackagedModule:
    try:
        file, digest = entry["file"], entry["sha256"]
        target, driver, flags = entry["target"], entry["driver"], tuple(entry["iree_flags"])
    except (KeyError, TypeError) as e:
        raise PackageError(f"{path} is corrupt: a module entry lacks {e}") from e
    if file not in names:
        raise PackageError(f"{path} is corrupt: module file {file} for target '{target}' is missing")
    data = z.read(file)
    if hashlib.sha256(data).hexdigest() != digest:
        raise PackageError(f"{path} is corrupt: module {file} for target '{target}' fails its sha256 check")
    passes = tuple(entry.get("passes", ()))
    requires = entry.get("requires", {})
    if not isinstance(requires, dict):
        raise PackageError(f"{path} is corrupt: 'requires' of module '{target}' is not an object")
    return PackagedModule(target, driver, flags, data, passes, dict(entry.get("patterns_fired", {})), dict(requires))


def read_file(path: str | os.PathLike, name: str, sha256: str) -> bytes:
    """One more entry of a package (``write``'s ``files``), checked against its sha256."""
    try:
        with zipfile.ZipFile(path) as z:
            if name not in z.namelist():
                raise PackageError(f"{path} is corrupt: {name} is missing")
            data = z.read(name)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise PackageError(f"{path} is corrupt: {e}") from e
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PackageError(f"{path} is corrupt: {name} fails its sha256 check")
    return data
