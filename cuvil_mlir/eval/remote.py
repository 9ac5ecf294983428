"""Compile here, run there: ``compare --build-only DIR`` (``build_only``: every package, the
input sets, the reference outputs and a manifest, on a machine without the devices) and
``compare --from DIR`` (``run_from``: load and time them where the devices are, with only
the IREE runtime and torch)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, MissingFileError, one_line
from cuvil_mlir.core.versions import versions
from cuvil_mlir.eval.configs import Config, Plan, config_tolerances
from cuvil_mlir.eval.entries import (
    Baseline, Expected, add_deltas, build_competitors, check_entry, competitor_devices, competitor_names, entry_name,
    entry_notes, place_on_device, record_compile, time_interleaved,
)
from cuvil_mlir.eval.inputs import load_model_spec, make_input_sets, normalize_model, reference_outputs, without_torch_competitors
from cuvil_mlir.eval.measure import TimingSettings, finite, wall_clock
from cuvil_mlir.eval.progress import Progress
from cuvil_mlir.eval.report import SCHEMA_VERSION, Entry, Report, loadavg, machine_info

BUILD_SCHEMA = "cuvil-compare-build"
MANIFEST = "manifest.json"


def build_only(model, inputs=None, *, out_dir: str | os.PathLike, model_spec: str | None = None,
               targets: str | Sequence[str] = ("cpu",), reference: str = "torch", configs: Sequence[str] | None = None,
               competitors: Sequence[str] = ("eager",), patterns=(), opt_level: int = 3,
               tolerances: dict[str, float] | None = None, repetitions: int = 50, warmup: int = 5,
               min_time: float = 0.5, max_time: float = 10.0, rounds: int = 3, input_sets: int = 3, seed: int = 0,
               progress: bool = False) -> dict:
    """The first half of ``compare`` on a machine without the devices: compile every target x
    configuration into ``out_dir`` (one .cuvilpkg each), with the input sets, the reference
    outputs and a manifest; ``run_from(out_dir)`` finishes the comparison where the devices are.
    Nothing here needs a device. ``model_spec`` (``FILE.py:FACTORY``) lets the other machine
    rebuild the model for the PyTorch competitors (a .pt2 ``model`` is copied along instead).
    Returns the manifest."""
    timing = TimingSettings(repetitions, warmup, min_time, max_time, rounds, input_sets)
    plan = Plan.parse(targets, configs, opt_level=opt_level, patterns=patterns)
    baseline = Baseline.parse(reference, competitors, tolerances)
    program, eager, model_name = normalize_model(model, inputs)
    baseline, onnx_notes = without_torch_competitors(eager, baseline)
    sets, input_info, input_notes = make_input_sets(program, inputs, timing.input_sets, seed)
    input_notes = [*input_notes, *onnx_notes]
    out = Path(out_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.cuvilpkg"):
        old.unlink()
    model_spec = _portable_spec(model_spec)
    pt2 = None
    if isinstance(model, (str, os.PathLike)) and str(model).endswith(".pt2"):
        pt2 = "model.pt2"
        (out / pt2).write_bytes(Path(model).read_bytes())
    with Progress(progress) as bar:
        bar.say(f"reference: {reference}")
        refs, reference_info = reference_outputs(reference, eager, program, sets, opt_level=opt_level)
        bar.phase("compiling", len(plan.builds()))
        entries = []
        for i, (spec, config) in enumerate(plan.builds()):
            bar.say(f"{entry_name(spec, config)}: compiling")
            entries.append(_build_package(i, spec, config, program, plan, out))
            bar.advance()
    files = {"inputs": [], "refs": []}
    for s, (xs, rs) in enumerate(zip(sets, refs)):
        files["inputs"].append(_save_arrays(out / "data", f"set{s}_in", xs))
        files["refs"].append(_save_arrays(out / "data", f"set{s}_ref", rs))
    manifest = finite({
        "schema": BUILD_SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model": model_name,
        "model_spec": model_spec, "pt2": pt2, "targets": list(plan.targets), "configs": [c.name for c in plan.configs],
        "competitors": list(baseline.competitors), "reference": reference_info, "check_dtype": baseline.check_dtype,
        "inputs": input_info, "input_notes": input_notes, "files": files,
        "settings": {**timing.to_json(), "opt_level": opt_level, "seed": seed},
        "tolerances": baseline.tolerance_table(), "entries": entries,
        "machine": {**machine_info(), "loadavg": loadavg()}, "versions": versions(),
    })
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n")
    return manifest


def _build_package(index: int, spec: str, config: Config, program, plan: Plan, out: Path) -> dict:
    from cuvil_mlir.targets import parse_target

    target = parse_target(spec, opt_level=plan.opt_level)
    entry = Entry(entry_name(spec, config), "plain-iree" if config.plain else "cuvil", config.name, target=spec)
    row = {"driver": target.driver, "package": None}
    start = time.perf_counter()
    try:
        compiled = plan.compile(spec, config, program)
    except Exception as e:
        entry.fail("compile", e)
        return {**asdict(entry), **row}
    record_compile(entry, compiled, time.perf_counter() - start)
    slug = "".join(ch if ch.isalnum() else "-" for ch in entry.name).strip("-")
    row["package"] = f"{index:02d}-{slug}.cuvilpkg"
    compiled.save(out / row["package"])
    return {**asdict(entry), **row}


def _portable_spec(spec: str | None) -> str | None:
    """A FILE.py:FACTORY spec with FILE relative to the working directory when it lies under it
    (run_from resolves it against its own working directory: run both from the repo root)."""
    if not spec:
        return spec
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).resolve()
        try:
            return f"{path.relative_to(Path.cwd().resolve())}:{name}"
        except ValueError:
            return f"{path}:{name}"
    return spec


def _save_arrays(folder: Path, stem: str, arrays) -> list[str]:
    names = []
    for j, a in enumerate(arrays):
        names.append(f"{stem}{j}.npy")
        np.save(folder / names[-1], np.asarray(a), allow_pickle=False)
    return names


def run_from(build_dir: str | os.PathLike, *, competitors: Sequence[str] | None = None, model_spec: str | None = None,
             repetitions: int | None = None, warmup: int | None = None, min_time: float | None = None,
             max_time: float | None = None, rounds: int | None = None, progress: bool = False) -> Report:
    """The second half of ``compare``: load the packages ``build_only`` wrote on this machine's
    devices (a target without a device here is skipped), check them against the reference
    outputs computed where they were built, rebuild the model for the PyTorch competitors
    (``model_spec`` or the manifest's; else the copied .pt2), and time everything interleaved.
    Needs only the IREE runtime and torch: no torch-mlir, no IREE compiler. Timing settings
    default to the ones given at build time."""
    folder = Path(build_dir)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise MissingFileError(f"compare --from: {folder} has no {MANIFEST} (write one with compare --build-only {folder})") from None
    if manifest.get("schema") != BUILD_SCHEMA:
        raise CuvilError(f"compare --from: {folder / MANIFEST} is not a '{BUILD_SCHEMA}' manifest")
    given = manifest["settings"]
    chosen = {"repetitions": repetitions, "warmup": warmup, "min_time": min_time, "max_time": max_time, "rounds": rounds}
    timing = TimingSettings(**{k: given[k] if v is None else v for k, v in chosen.items()}, input_sets=given["input_sets"])
    data = folder / "data"
    sets = [tuple(np.load(data / f) for f in names) for names in manifest["files"]["inputs"]]
    refs = [[np.load(data / f) for f in names] for names in manifest["files"]["refs"]]
    tolerances = manifest["tolerances"]
    expected = Expected(sets, refs, tolerances, manifest["check_dtype"])
    chosen_competitors = competitor_names(manifest["competitors"] if competitors is None else competitors)
    spec = model_spec or manifest.get("model_spec")
    from cuvil_mlir.runtime.session import probe_drivers

    with Progress(progress) as bar:
        drivers = probe_drivers()
        devices = competitor_devices(manifest["targets"], chosen_competitors)
        bar.phase("loading", len(manifest["entries"]) + sum(len(n) for n in devices.values()))
        built = []
        for row in manifest["entries"]:
            bar.say(f"{row['name']}: loading and checking")
            built.append(_load_package(row, folder, expected, drivers, timing))
            bar.advance()
        eager = _rebuild_eager(spec, folder, manifest) if any(devices.values()) else None
        built += build_competitors(devices, eager, expected, timing, bar)
        time_interleaved([(e, t) for e, t in built if t is not None], timing, bar)
    entries = [e for e, _ in built]
    add_deltas(entries, manifest["targets"])
    notes = entry_notes(entries, timing, manifest["input_notes"])
    b = manifest["machine"]
    notes.insert(0, f"compiled on {b.get('hostname')} ({b.get('cpu')}) at {manifest['created']} with "
                    + ", ".join(f"{k} {v}" for k, v in manifest["versions"].items() if k != "iree-base-runtime")
                    + f"; loaded and run here from {folder.name}/; reference outputs computed there")
    if chosen_competitors and not isinstance(eager, str) and eager is not None:
        notes.append(f"competitors: the model rebuilt here from {spec or manifest.get('pt2')}")
    return Report(manifest["model"], manifest["reference"], manifest["inputs"],
                  {**timing.to_json(), "opt_level": given.get("opt_level"), "seed": given.get("seed"),
                   "built_from": str(folder), "built_on": b.get("hostname"), "built": manifest["created"]},
                  tolerances, entries, {**machine_info(drivers), "loadavg_end": loadavg()}, versions(), notes,
                  datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _load_package(row: dict, folder: Path, expected: Expected, drivers, timing: TimingSettings):
    """An entry built elsewhere: its row of the manifest, its package loaded here, checked and ready to time."""
    from cuvil_mlir.runtime import package
    from cuvil_mlir.runtime.compiled import CompiledModel

    keep = {f.name for f in fields(Entry)}
    entry = Entry(**{k: v for k, v in row.items() if k in keep and k not in ("latency", "numerics", "deltas", "baseline")})
    if entry.status == "failed":  # it did not compile there: the row says why
        return entry, None
    entry.status = "ok"
    if not place_on_device(entry, row["driver"], drivers):
        return entry, None
    try:
        metadata, modules = package.read(folder / row["package"])
        compiled = CompiledModel(modules, metadata, prefer=[row["target"]])
        compiled.select()
    except Exception as e:
        return entry.fail("load", e), None
    config = Config(entry.config or "default", precision=metadata.get("precision", "fp32"))
    expected = replace(expected, tolerances=config_tolerances(config, expected.tolerances))
    return check_entry(entry, lambda *xs: compiled(*xs), expected, timing, wall_clock)


def _rebuild_eager(spec: str | None, folder: Path, manifest: dict):
    """The eager model for the competitors, or a string saying why there is none."""
    try:
        if spec:
            return load_model_spec(spec)[0]
        if manifest.get("pt2"):
            import torch

            return torch.export.load(folder / manifest["pt2"]).module()
    except Exception as e:
        return f"cannot rebuild the model here: {type(e).__name__}: {one_line(str(e))[:300]}"
    return "no model to rebuild: the build had no model spec (FILE.py:FACTORY) and no .pt2"
