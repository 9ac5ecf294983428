"""``cuvil cache [info|clear|prune]``: the on-disk compile cache (cuvil_mlir/compiler/cache.py).

    cuvil cache info [--json]                 folder, entries (key, model, target, size, last use), limit
    cuvil cache clear                         remove every entry
    cuvil cache prune [--max-size 2G] [--older-than DAYS]   least recently used first
"""

from __future__ import annotations

import json
import time


def add_parsers(sub, common) -> None:
    p = sub.add_parser("cache", parents=[common], help="show, clear or prune the compile cache",
                       description="The on-disk cache of jit, torch.compile(backend='cuvil') and compile(cache=True): "
                       "its folder is CUVIL_CACHE_DIR, else $XDG_CACHE_HOME/cuvil-mlir (~/.cache/cuvil-mlir).")
    p.add_argument("action", nargs="?", choices=("info", "clear", "prune"), default="info")
    p.add_argument("--dir", metavar="DIR", help="the cache folder (default: CUVIL_CACHE_DIR or the user cache folder)")
    p.add_argument("--json", action="store_true", help="info: print JSON")
    p.add_argument("--max-size", metavar="SIZE", help="prune: the size to prune to (e.g. 2G; default the cache's limit, "
                   "CUVIL_CACHE_MAX_SIZE or 10G)")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="prune: also remove entries unused for DAYS days")
    p.set_defaults(command=cache_command)


def cache_command(args, parser) -> int:
    from cuvil_mlir.compiler.cache import Cache

    cache = Cache(args.dir)
    if args.action == "clear":
        n = cache.clear()
        print(f"removed {n} entr{'y' if n == 1 else 'ies'} from {cache.directory}")
        return 0
    if args.action == "prune":
        older = args.older_than * 86400 if args.older_than is not None else None
        removed = cache.prune(args.max_size, older_than=older)
        freed = sum(e.bytes for e in removed)
        print(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} ({_size(freed)}) from {cache.directory}; "
              f"{_size(cache.total_bytes())} left")
        return 0
    return _info(cache, args.json)


def _info(cache, as_json: bool) -> int:
    info = cache.info()
    entries = cache.entries()
    if as_json:
        info["items"] = [{"key": e.key, "bytes": e.bytes, "last_used": e.last_used, "failed": e.failed, **e.info} for e in entries]
        print(json.dumps(info, indent=1, default=str))
        return 0
    print(f"cache:   {info['directory']}")
    print(f"entries: {info['entries']} compiled, {info['failed']} failed; {_size(info['bytes'])} of {_size(info['max_bytes'])}")
    now = time.time()
    for e in reversed(entries):  # most recently used first
        model = e.info.get("model", {})
        inputs = ", ".join(model.get("inputs", [])) or "?"
        what = "FAILED: " + e.info.get("message", "")[:80] if e.failed else f"{e.info.get('target', '?')} {e.info.get('precision', '')}"
        print(f"  {e.key[:16]}  {_size(e.bytes):>9}  used {_ago(now - e.last_used):>8}  ({inputs})  {what}")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"
