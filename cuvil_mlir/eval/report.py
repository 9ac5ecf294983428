"""A comparison's result: one ``Entry`` per target x configuration and per PyTorch competitor,
gathered in a ``Report`` (its JSON form: docs/harness.md), and what the report says about the machine."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cuvil_mlir.core.diagnostics import CuvilError, one_line
from cuvil_mlir.eval.measure import Latency, OutputError, finite

SCHEMA = "cuvil-compare"
SCHEMA_VERSION = 1


@dataclass
class Numerics:
    """Errors of an entry's outputs against the reference, the worst over all input sets."""

    max_abs_err: float
    max_rel_err: float
    rtol: float  # the tolerance of the worst output
    passed: bool
    input_sets: int
    outputs: list[OutputError]

    @classmethod
    def of(cls, outputs: list[OutputError], input_sets: int) -> "Numerics":
        worst = max(outputs, key=lambda e: (not e.passed, e.max_rel_err))
        return cls(max(e.max_abs_err for e in outputs), worst.max_rel_err, worst.rtol,
                   all(e.passed for e in outputs), input_sets, outputs)


@dataclass
class Entry:
    """One row: a target with a configuration, or a PyTorch competitor on a device."""

    name: str  # unique in the report: "cpu", "cpu [plain-iree]", "torch eager (cpu)"
    kind: str  # "cuvil", "plain-iree" or "competitor"
    config: str  # "default", "without:X", "plain-iree", "precision:P"; a competitor's name for competitors
    target: str | None = None  # the target spec (None for competitors)
    device: str | None = None  # where it ran: "local-task", "vulkan: llvmpipe (...)", "torch cpu"
    status: str = "ok"  # ok | mismatch | failed | skipped
    reason: str | None = None  # why skipped or failed
    failed_stage: str | None = None  # compile | load | run
    repro: str | None = None  # the command that reproduces a failure
    compile_seconds: float | None = None
    compile_breakdown: dict[str, float] = field(default_factory=dict)
    first_call_ms: float | None = None
    latency: Latency | None = None
    numerics: Numerics | None = None
    patterns_fired: dict[str, dict[str, int]] = field(default_factory=dict)
    iree_flags: list[str] = field(default_factory=list)
    module_bytes: int | None = None  # the compiled module's size (the .vmfb of this target)
    baseline: str | None = None  # the entry the deltas compare with
    deltas: dict[str, float] | None = None

    def skip(self, reason: str) -> "Entry":
        self.status, self.reason = "skipped", reason
        return self

    def fail(self, stage: str, error: BaseException) -> "Entry":
        self.status, self.failed_stage = "failed", stage
        if isinstance(error, CuvilError):
            self.reason, self.repro = one_line(error.message), error.repro
        else:
            self.reason = f"internal error: {type(error).__name__}: {one_line(str(error))}"
        return self

    @property
    def ran(self) -> bool:
        return self.status in ("ok", "mismatch")


@dataclass
class Report:
    model: str
    reference: dict
    inputs: list[dict]
    settings: dict
    tolerances: dict[str, float]
    entries: list[Entry]
    machine: dict
    versions: dict
    notes: list[str]
    created: str

    @property
    def ok(self) -> bool:
        """Every Cuvil entry that was not skipped ran and matched (competitors do not count)."""
        return all(e.status in ("ok", "skipped") for e in self.entries if e.kind != "competitor")

    def entry(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no entry '{name}'; entries: {', '.join(e.name for e in self.entries)}")

    def to_json(self) -> dict:
        return finite({
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": self.created, "model": self.model,
            "ok": self.ok, "reference": self.reference, "inputs": self.inputs, "settings": self.settings,
            "tolerances": self.tolerances, "entries": [asdict(e) for e in self.entries], "machine": self.machine,
            "versions": self.versions, "notes": self.notes,
        })

    def save_json(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n")

    def table(self):
        """The report as a ``rich`` renderable (a table with the notes under it)."""
        from cuvil_mlir.eval import render

        return render.table(self.to_json())

    def print(self, console=None) -> None:
        from cuvil_mlir.eval import render

        render.print_report(self.to_json(), console)

    def plot(self, path: str | os.PathLike) -> None:
        """A PNG: latency per entry (median, p10-p90 bars) and error per entry (log scale)."""
        from cuvil_mlir.eval import render

        render.plot(self.to_json(), path)


def machine_info(drivers=None) -> dict:
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    devices = {name: [d.name for d in s.devices] for name, s in (drivers or {}).items() if s.devices}
    return {"hostname": platform.node(), "cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "platform": platform.platform(), "iree_devices": devices,
            "torch_cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages: other work on the machine skews latency."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
