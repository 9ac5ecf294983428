"""``cuvil passes``, ``cuvil targets``: what this installation can do (passes and their patterns,
target kinds and this machine's devices)."""

from __future__ import annotations

import json

from cuvil_mlir.cli.common import load_patterns, pattern_registry


def add_parsers(sub, common) -> None:
    """Add this group's commands to ``sub`` (the subparsers of ``cuvil``); ``common``: the parent parser of every command."""
    p = sub.add_parser("passes", parents=[common], help="list the registered passes and their patterns",
                       description="List every registered pass with its description and patterns (before -> after).")
    p.add_argument("--patterns", action="append", default=[], metavar="FILE.py", help="also list the passes a pattern file defines")
    p.set_defaults(command=_passes)

    p = sub.add_parser("targets", parents=[common], help="list every target and the devices this machine has",
                       description="List every target kind: the names a --target takes, its options, the runtime "
                       "driver, what running it needs, and whether this machine has a device for it.")
    p.add_argument("--json", action="store_true", help="print the same as JSON")
    p.set_defaults(command=_targets)


def _passes(args, parser) -> int:
    from cuvil_mlir.core.options import describe_options
    from cuvil_mlir.core.patterns import PatternSet

    registry = pattern_registry(load_patterns(args.patterns)[1])
    for name in registry.names():
        entry, p = registry.entry(name), registry.get(name)  # p: configured with default options
        print(f"{name}: {entry.description or p.description or '(no description)'}")
        for line in describe_options(entry):
            print(f"  {line}")
        if not isinstance(p, PatternSet):
            continue
        width = max((len(pat.name) for pat in p.patterns), default=0)
        for pat in p.patterns:
            print(f"  {pat.name:<{width}}  on {pat.root}: {pat.rewrite_doc or '(no docstring)'}")
    return 0


def _targets(args, parser) -> int:
    from cuvil_mlir.runtime import hostcpu
    from cuvil_mlir.runtime.session import probe_drivers
    from cuvil_mlir.targets import describe_targets

    drivers = probe_drivers()
    kinds = describe_targets()
    for k in kinds:
        status = drivers.get(k["driver"])
        if status is None:
            k["device"] = {"available": False, "why": f"this IREE runtime has no '{k['driver']}' driver"}
        else:
            k["device"] = {"available": bool(status.devices), "devices": [d.name or d.path for d in status.devices],
                           "why": status.reason}
    host = {"arch": hostcpu.host_arch(), "cpu": _host_cpu_name()}
    if args.json:
        print(json.dumps({"host": host, "targets": kinds}, indent=2))
        return 0
    print(f"host: {host['arch']}, LLVM CPU '{host['cpu'] or 'unknown'}' (what target 'cpu' compiles for)")
    for k in kinds:
        dev = k["device"]
        here = (f"yes: {', '.join(dev['devices'])}" if dev["available"] else f"no ({_short_reason(dev['why'])})")
        others = [f"{k['kind']}:{n}" for n in k["archs"] if n != k["default"]]
        print(f"\n{k['kind']}  (driver {k['driver']}; device here: {here})")
        print(f"  needs:   {k['needs']}")
        print(f"  names:   {k['kind']} (= {k['kind']}:{k['default']})" + "".join(f", {n}" for n in others))
        if k["aliases"]:
            print("  aliases: " + ", ".join(f"{k['kind']}:{a} ({arch})" for a, arch in k["aliases"].items()))
        for option, allowed in k["options"].items():
            print(f"  option:  {option}={' | '.join(map(str, allowed))} (default {allowed[0]}; e.g. {k['kind']}{{{option}={allowed[-1]}}})")
    return 0


def _short_reason(why: str | None) -> str:
    """IREE's driver errors carry source paths and status codes; keep the sentence."""
    text = (why or "unknown").split("UNAVAILABLE; ")[-1]
    return text.split("; please")[0].split(": please")[0].strip()


def _host_cpu_name() -> str | None:
    """The LLVM CPU name IREE resolves 'host' to (None without the IREE compiler)."""
    try:
        from cuvil_mlir.targets import iree, parse_target

        return iree.llvm_cpu_requirements(tuple(parse_target("cpu").iree_flags())).get("cpu")
    except Exception:
        return None
