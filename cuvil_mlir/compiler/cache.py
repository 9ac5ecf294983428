"""The on-disk compile cache, shared by ``compile(cache=...)``, ``@jit`` and ``torch.compile(backend="cuvil")``.

    cache = Cache()                                   # CUVIL_CACHE_DIR, else ~/.cache/cuvil-mlir
    compiled, status = cached_compile(model, args, options, cache)   # status: hit, miss, waited

An entry is a ``.cuvilpkg`` (CompiledModel.save, stored uncompressed so loading costs what
reading the file costs) named after its key (cuvil_mlir/compiler/fingerprint.py), with a JSON file
beside it that says what it was compiled from. Layout under the cache folder::

    v1/entries/<key>.cuvilpkg     the package (its metadata carries "cache_key")
    v1/entries/<key>.json         what was compiled: model summary, target, precision, versions
    v1/entries/<key>.failed.json  a compile that failed (its error), so it is not retried
    v1/locks/<key>.lock           held (flock) by the process compiling that key
    v1/calls/<call key>.json      a jit call's record: the key it compiled to (cuvil_mlir/compiler/warm_start.py)

Several processes: a process that misses takes the key's lock and checks again before it
compiles, so one compiles and the others wait and load its result. Files are written to a
temporary name and renamed into place, so a reader never sees half an entry. An entry that
fails to read (not a zip, bad metadata, a module failing its sha256) is deleted with a
warning and rebuilt. When the entries exceed the size limit (CUVIL_CACHE_MAX_SIZE, default
10G) the least recently used (file mtime, touched on every hit) are removed.
CUVIL_CACHE=0 turns caching off for jit and the torch.compile backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cuvil_mlir.core import diagnostics
from cuvil_mlir.core.diagnostics import CuvilError, PackageError

LAYOUT = "v1"
DEFAULT_MAX_BYTES = 10 * 1024**3
DEFAULT_LOCK_TIMEOUT = 3600.0  # seconds to wait for another process compiling the same key
# Compile failures worth remembering: deterministic for the same key (the toolchain is in it).
CACHED_FAILURES = (diagnostics.ImportError_, diagnostics.PassError, diagnostics.LoweringError, diagnostics.CompileError)

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock; writes stay atomic (rename)
    fcntl = None


class CacheWarning(RuntimeWarning):
    """Something about the cache went wrong and was repaired (a corrupt entry, a lock timeout)."""


def default_directory() -> Path:
    """CUVIL_CACHE_DIR, else $XDG_CACHE_HOME/cuvil-mlir, else ~/.cache/cuvil-mlir
    (%LOCALAPPDATA%\\cuvil-mlir on Windows, ~/Library/Caches/cuvil-mlir on macOS)."""
    if os.environ.get("CUVIL_CACHE_DIR"):
        return Path(os.environ["CUVIL_CACHE_DIR"]).expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "cuvil-mlir"
    if os.uname().sysname == "Darwin":
        return Path.home() / "Library" / "Caches" / "cuvil-mlir"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cuvil-mlir"


def parse_size(text: str | int) -> int:
    """``"10G"``, ``"512M"``, ``"1.5GB"``, ``"200k"`` or a byte count -> bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not m:
        raise CuvilError(f"malformed size '{text}' (expected a byte count or e.g. 512M, 10G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    bytes: int
    last_used: float  # the package's mtime: touched on every hit
    info: dict  # the JSON beside it ({} if missing)
    failed: bool = False


class Cache:
    def __init__(self, directory: str | os.PathLike | None = None, *, max_bytes: int | str | None = None,
                 lock_timeout: float | None = None):
        self.directory = Path(directory).expanduser() if directory is not None else default_directory()
        env_max = os.environ.get("CUVIL_CACHE_MAX_SIZE")
        self.max_bytes = parse_size(max_bytes if max_bytes is not None else env_max or DEFAULT_MAX_BYTES)
        self.lock_timeout = DEFAULT_LOCK_TIMEOUT if lock_timeout is None else float(lock_timeout)

    def __repr__(self) -> str:
        return f"Cache({str(self.directory)!r}, max_bytes={self.max_bytes})"

    @property
    def _entries_dir(self) -> Path:
        return self.directory / LAYOUT / "entries"

    @property
    def _records_dir(self) -> Path:
        return self.directory / LAYOUT / "calls"

    @property
    def _locks_dir(self) -> Path:
        return self.directory / LAYOUT / "locks"

    def package_path(self, key: str) -> Path:
        return self._entries_dir / f"{key}.cuvilpkg"

    # --- reading and writing one entry -------------------------------------------------

    def get(self, key: str):
        """The CompiledModel stored under ``key`` (not yet loaded on a device), or None. A
        corrupt entry is removed (with a CacheWarning) and reads as None."""
        from cuvil_mlir.runtime import package
        from cuvil_mlir.runtime.compiled import CompiledModel

        path = self.package_path(key)
        if not path.exists():
            return None
        try:
            metadata, modules = package.read(path)
            if metadata.get("cache_key") != key:
                raise PackageError(f"{path} holds the entry of key {metadata.get('cache_key')!r}, not {key}")
        except PackageError as e:
            warnings.warn(f"cuvil cache: removing a corrupt entry ({e.message}); it will be rebuilt", CacheWarning, stacklevel=3)
            self._remove(key)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        return CompiledModel(modules, metadata)

    def put(self, key: str, compiled, info: dict | None = None) -> Path:
        """Store ``compiled`` under ``key`` atomically, then keep the cache within its size."""
        from cuvil_mlir.runtime import package
        self._entries_dir.mkdir(parents=True, exist_ok=True)
        path = self.package_path(key)
        metadata = {k: v for k, v in compiled.metadata.items() if k != "modules"}
        metadata["cache_key"] = key
        with _temporary(path) as tmp:
            package.write(tmp, compiled.modules, metadata, compress=False)
            os.replace(tmp, path)
        compiled.metadata["cache_key"] = key
        record = {"key": key, "created": _now(), "bytes": path.stat().st_size, **(info or {})}
        self._write_json(self._entries_dir / f"{key}.json", record)
        (self._entries_dir / f"{key}.failed.json").unlink(missing_ok=True)
        self.prune(keep={key})
        return path

    def failure(self, key: str) -> CuvilError | None:
        """The error a compile of ``key`` failed with before, or None."""
        path = self._entries_dir / f"{key}.failed.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        cls = getattr(diagnostics, str(data.get("error", "")), None)
        if not (isinstance(cls, type) and issubclass(cls, CuvilError)):
            cls = CuvilError
        return cls(f"{data.get('message', '')} (cached failure: run `cuvil cache clear` to retry)", repro=data.get("repro"))

    def put_failure(self, key: str, error: CuvilError, info: dict | None = None) -> None:
        self._entries_dir.mkdir(parents=True, exist_ok=True)
        self._write_json(self._entries_dir / f"{key}.failed.json", {
            "key": key, "created": _now(), "error": type(error).__name__, "message": error.message,
            "repro": error.repro, **(info or {})})

    def get_record(self, name: str) -> dict | None:
        """A call record (cuvil_mlir/compiler/warm_start.py), or None."""
        try:
            data = json.loads((self._records_dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def put_record(self, name: str, data: dict) -> None:
        self._records_dir.mkdir(parents=True, exist_ok=True)
        self._write_json(self._records_dir / f"{name}.json", data)

    def get_or_build(self, key: str, build, info: dict | None = None):
        """``(compiled, status)``: the entry of ``key`` (status "hit"), the one another process
        finished while this one waited for its lock ("waited"), or ``build()``'s result, stored
        ("miss"). A failure ``build`` raised before for this key is raised again."""
        hit = self.get(key)
        if hit is not None:
            return hit, "hit"
        failed = self.failure(key)
        if failed is not None:
            raise failed
        with self._lock(key):
            hit = self.get(key)
            if hit is not None:
                return hit, "waited"
            failed = self.failure(key)
            if failed is not None:
                raise failed
            try:
                compiled = build()
            except CACHED_FAILURES as e:
                self.put_failure(key, e, info)
                raise
            self.put(key, compiled, info)
            return compiled, "miss"

    # --- the whole cache ---------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Every entry, least recently used first."""
        out = []
        for path in self._entries_dir.glob("*.json"):
            failed = path.name.endswith(".failed.json")
            key = path.name.removesuffix(".failed.json").removesuffix(".json")
            target = path if failed else self.package_path(key)
            try:
                stat = target.stat()
                info = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            out.append(Entry(key, target, stat.st_size, stat.st_mtime, info if isinstance(info, dict) else {}, failed))
        # packages whose JSON is missing (written by a process that died between the two renames)
        known = {e.key for e in out}
        for path in self._entries_dir.glob("*.cuvilpkg"):
            key = path.name.removesuffix(".cuvilpkg")
            if key not in known:
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    out.append(Entry(key, path, stat.st_size, stat.st_mtime, {}))
        return sorted(out, key=lambda e: e.last_used)

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries())

    def clear(self) -> int:
        """Remove every entry; returns how many."""
        entries = self.entries()
        for e in entries:
            self._remove(e.key)
        for path in self._records_dir.glob("*.json"):  # call records name entries that are gone now
            path.unlink(missing_ok=True)
        return len(entries)

    def prune(self, max_bytes: int | None = None, *, older_than: float | None = None, keep=()) -> list[Entry]:
        """Remove entries unused for ``older_than`` seconds, then the least recently used until
        the cache holds at most ``max_bytes`` (default: its limit). An entry another process
        is compiling or ``keep`` names stays. Returns the removed entries."""
        limit = self.max_bytes if max_bytes is None else parse_size(max_bytes)
        if not self._entries_dir.exists():
            return []
        removed = []
        with self._lock("prune"):
            self._remove_stale_temporaries()
            entries = self.entries()
            total = sum(e.bytes for e in entries)
            now = time.time()
            for e in entries:  # least recently used first
                too_old = older_than is not None and now - e.last_used > older_than
                if e.key in keep or not (too_old or total > limit):
                    continue
                if self._remove(e.key, only_if_unlocked=True):
                    total -= e.bytes
                    removed.append(e)
        return removed

    def info(self) -> dict:
        entries = self.entries()
        return {"directory": str(self.directory), "entries": len([e for e in entries if not e.failed]),
                "failed": len([e for e in entries if e.failed]), "bytes": sum(e.bytes for e in entries),
                "max_bytes": self.max_bytes}

    # --- helpers -----------------------------------------------------------------------

    def _remove(self, key: str, *, only_if_unlocked: bool = False) -> bool:
        with self._lock(key, blocking=not only_if_unlocked) as held:
            if not held:
                return False
            for path in (self.package_path(key), self._entries_dir / f"{key}.json", self._entries_dir / f"{key}.failed.json"):
                path.unlink(missing_ok=True)
        return True  # the lock file stays: another process may be waiting on it

    def _remove_stale_temporaries(self, age: float = 3600.0) -> None:
        now = time.time()
        for path in self._entries_dir.glob(".tmp-*"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > age:
                    path.unlink()

    def _write_json(self, path: Path, data: dict) -> None:
        with _temporary(path) as tmp:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
            os.replace(tmp, path)

    @contextlib.contextmanager
    def _lock(self, name: str, *, blocking: bool = True):
        """An exclusive lock on ``name`` across processes (flock); yields whether it is held.
        Waiting longer than ``lock_timeout`` goes on without it (with a CacheWarning)."""
        path = str(self._locks_dir / f"{name}.lock")
        held_here = _HELD.__dict__.setdefault("paths", set())
        if fcntl is None or path in held_here:  # no flock here, or this thread holds it already
            yield True
            return
        self._locks_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            held = _acquire(fd, self.lock_timeout if blocking else 0.0)
            if held:
                held_here.add(path)
            if blocking and not held:
                warnings.warn(f"cuvil cache: waited {self.lock_timeout:.0f} s for the lock of {name}; going on without it",
                              CacheWarning, stacklevel=4)
            try:
                yield held
            finally:
                if held:
                    held_here.discard(path)
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


# The lock files this thread holds: flock locks conflict between two descriptors of one
# process too, so taking a held lock again (a corrupt entry removed while compiling) would hang.
_HELD = threading.local()


def _acquire(fd: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def _temporary(path: Path):
    """A unique temporary path beside ``path`` (same file system: the rename is atomic),
    removed if the caller did not rename it."""
    fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------
# Choosing a cache, and compiling through one.


def caching_enabled() -> bool:
    return os.environ.get("CUVIL_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def resolve(cache) -> Cache | None:
    """``cache=`` as the API takes it: True (the default cache, unless CUVIL_CACHE=0),
    False/None (no cache), a folder, or a Cache."""
    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache() if caching_enabled() else None
    if isinstance(cache, Cache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Cache(cache)
    raise CuvilError(f"cache must be True, False, a folder or a cuvil_mlir.compiler.cache.Cache, got {type(cache).__name__}")


def compile_exported(program, options, cache: Cache | None, *, seconds: dict | None = None):
    """Compile an ExportedProgram through ``cache``: ``(compiled, status, key)``; status is
    "hit", "waited", "miss", or "off" (no cache). ``seconds`` gets "key" and "compile" (on a
    miss) or "load" (on a hit) times."""
    from cuvil_mlir.compiler.fingerprint import compile_key

    def build():
        from cuvil_mlir.compiler.pipeline import compile_program  # not needed on a hit

        return compile_program(program, (), options)

    seconds = {} if seconds is None else seconds
    if cache is None:
        start = time.perf_counter()
        compiled = build()
        seconds["compile"] = time.perf_counter() - start
        return compiled, "off", None
    start = time.perf_counter()
    key, parts = compile_key(program, options)
    seconds["key"] = time.perf_counter() - start
    info = {"model": _model_summary(program), "target": options.target, "precision": parts["options"]["precision"],
            "opt_level": options.opt_level, "versions": parts["toolchain"]["versions"],
            "patterns": [p["name"] for p in parts["patterns"]]}
    start = time.perf_counter()
    compiled, status = cache.get_or_build(key, build, info)
    seconds["compile" if status == "miss" else "load"] = time.perf_counter() - start
    return compiled, status, key


def cached_compile(model, args, options, cache, *, kwargs=None, dynamic_shapes=None):
    """``cuvil_mlir.compile(..., cache=...)``: export once, look up, compile on a miss. The key
    reads the exported program, so kwargs and dynamic dims (its signature and ranges) are in it."""
    from cuvil_mlir.compiler.importers import fx, onnx

    if onnx.is_onnx_model(model):
        raise CuvilError("the compile cache keys exported PyTorch programs; compile an ONNX model without cache=")
    program = fx.to_exported_program(model, args, kwargs, dynamic_shapes)
    compiled, _, _ = compile_exported(program, options, resolve(cache))
    return compiled


def _model_summary(program) -> dict:
    import torch

    inputs = []
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs and isinstance(val, torch.Tensor):
            inputs.append(f"{str(val.dtype).removeprefix('torch.')}{list(val.shape)}")
    weights = [t for t in {**program.state_dict, **program.constants}.values() if isinstance(t, torch.Tensor)]
    return {"inputs": inputs, "nodes": len(program.graph.nodes), "weight_bytes": sum(t.numel() * t.element_size() for t in weights)}
