"""The ``.cuvilpkg`` format: a zip of compiled modules and ``metadata.json``.

Layout::

    metadata.json           {"format": "cuvilpkg", "format_version": 2, "signature": ..., "boundary": ..., "modules": [...], ...}
    modules/<target>.vmfb   one IREE module per target
    state/<i>.npy           the module state (buffers the program mutates), when it has some
    parameters/model.irpa   the external parameters every module reads (an IREE parameter
                            archive, stored uncompressed at a page-aligned offset), when there are any

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
from cuvil_mlir.runtime.parameters import ARCHIVE_NAME, SCOPE, Parameters, aligned_extra, data_offset

FORMAT = "cuvilpkg"
FORMAT_VERSION = 3  # 2 added "boundary" and "state", 3 "parameters" (docs/package-format.md)
READ_VERSIONS = (1, 2, 3)  # a version-1 package (no boundary) loads with positional tensors in and out


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
          *, compress: bool = True, parameters: Parameters | None = None) -> None:
    """Write atomically: a failure never leaves a half-written package at ``path``.
    ``files``: more entries (name -> bytes; the module state, ``state/<i>.npy``).
    ``compress=False`` stores the modules uncompressed (deflate runs at ~30 MB/s on a module's
    weights and saves <10%: the compile cache stores its entries so). ``parameters``: the
    external parameters, written as one archive (stored, page-aligned) that every module reads;
    None with ``metadata["parameters"]`` set: a package of modules only, whose parameters
    are given to ``load`` (``"file": null`` in metadata.json)."""
    path = Path(path)
    entries = []
    for m in modules:
        entries.append({
            "target": m.target, "driver": m.driver, "iree_flags": list(m.iree_flags),
            "passes": list(m.passes), "patterns_fired": m.patterns_fired, "requires": m.requires,
            "file": module_file_name(m.target), "sha256": hashlib.sha256(m.vmfb).hexdigest(), "bytes": len(m.vmfb),
        })
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **metadata, "modules": entries}
    described = meta.pop("parameters", None) or {}  # what the compiler recorded (count, weight_bytes)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
            for m, e in zip(modules, entries):
                z.writestr(e["file"], m.vmfb)
            for name, data in (files or {}).items():
                z.writestr(name, data)
            if parameters is not None:
                meta["parameters"] = {**described, **_write_parameters(z, parameters, path.with_name(path.name + ".irpa.tmp"))}
            elif described:  # modules only: the parameters are supplied at load time
                meta["parameters"] = {**described, "file": None}
            z.writestr("metadata.json", json.dumps(meta, indent=2, sort_keys=True))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_parameters(z: zipfile.ZipFile, parameters: Parameters, scratch: Path) -> dict:
    """The archive as a stored entry whose data starts at a page boundary; its metadata entry."""
    info = zipfile.ZipInfo(ARCHIVE_NAME, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.extra = aligned_extra(z.fp.tell(), ARCHIVE_NAME, zip64=True)
    with z.open(info, "w", force_zip64=True) as out:
        digest = parameters.write_archive(out, scratch)
    return {"file": ARCHIVE_NAME, "format": "irpa", "scope": SCOPE, "bytes": info.file_size, "sha256": digest}


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


def read_parameters(path: str | os.PathLike, meta: dict) -> Parameters | None:
    """The package's parameter archive (not read: located, to be mapped), or None when its
    modules have no external parameters. A missing or resized entry is a ``PackageError``."""
    entry = meta.get("parameters")
    if entry is None:
        return None
    path = Path(path)
    if entry.get("file", "") is None:
        raise PackageError(f"{path} was saved without its parameters ({entry.get('count', '?')} weights, "
                           f"{entry.get('weight_bytes', 0) / 2**20:.0f} MiB): pass them to load, "
                           f"e.g. cuvil_mlir.load(path, parameters='model.irpa'), or --parameters model.irpa on the command line")
    try:
        name, size, digest = entry["file"], int(entry["bytes"]), str(entry["sha256"])
    except (KeyError, TypeError, ValueError) as e:
        raise PackageError(f"{path} is corrupt: its 'parameters' entry lacks {e}") from e
    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo(name) if name in z.namelist() else None
            if info is None:
                raise PackageError(f"{path} is corrupt: the parameter archive {name} is missing")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != size:
                raise PackageError(f"{path} is corrupt: the parameter archive {name} has {info.file_size} bytes "
                                   f"(compression {info.compress_type}), metadata.json says {size}, stored")
            offset = data_offset(z.fp, info.header_offset)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise PackageError(f"{path} is corrupt: {e}") from e
    return Parameters(path=path, offset=offset, length=size, sha256=digest)


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
