"""``CompiledModel``: a compiled program you call with torch tensors or numpy arrays.

A package may hold one module per target (``"cuda:sm_86,vulkan,cpu"``). Calls run on the
first module, in preference order, whose driver has a device on this machine. When that
module fails to load on its device, or a call fails there, the next one takes over with a
``TargetFallbackWarning``; when none is left, ``RuntimeFailure`` lists every target and why.
"""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, PackageError, RuntimeFailure
from cuvil_mlir.runtime import boundary as _boundary
from cuvil_mlir.runtime import device_resident, hostcpu, package
from cuvil_mlir.runtime.parameters import Parameters
from cuvil_mlir.runtime.session import Session, probe_drivers
from cuvil_mlir.runtime.signature import Signature, TensorSpec

log = logging.getLogger("cuvil_mlir")


class TargetFallbackWarning(RuntimeWarning):
    """A target failed on this machine and the next one in preference order took over."""


class CompiledModel:
    """Call it like the original model: torch tensors in -> torch tensors out, numpy in -> numpy out.

    Inputs are checked against the compiled signature (count, shape, dtype) first; an
    ``InputError`` is the caller's mistake and never makes it try another target.
    The model's pytrees, in-place mutations of inputs, module state (mutated buffers, kept
    here across calls) and Python scalars go through ``boundary`` (cuvil_mlir/runtime/boundary.py).
    A big model's weights are ``parameters``, outside the modules: one set all targets share.
    """

    def __init__(self, modules: list[package.PackagedModule], metadata: dict, *, prefer=None, boundary=None, state=None,
                 parameters: Parameters | None = None):
        self.modules = list(modules)
        self.parameters = parameters  # the external parameters every module reads (runtime/parameters.py), or None
        self.metadata = metadata
        self.signature = Signature.from_json(metadata["signature"])
        if boundary is None:
            try:
                boundary = _boundary.Boundary.from_json(metadata["boundary"]) if "boundary" in metadata else _boundary.Boundary.identity(self.signature)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise PackageError(f"the package's metadata.json has a malformed boundary ({type(e).__name__}: {e})") from e
        self.boundary = boundary
        self._state = [np.array(a, copy=True) for a in (state or [])]
        if len(self._state) != len(boundary.state):
            raise CuvilError(f"the program has {len(boundary.state)} state buffer(s) and {len(self._state)} value(s) were given")
        self._order = _preference_order(self.modules, prefer)
        self._session: Session | None = None
        self._active: package.PackagedModule | None = None
        self._failures: dict[str, str] = {}  # target -> why it cannot run here

    @property
    def targets(self) -> list[str]:
        """Every target the program was compiled for, in package order."""
        return [m.target for m in self.modules]

    @property
    def target(self) -> str:
        return self.modules[0].target

    @property
    def active_target(self) -> str | None:
        """The target that runs calls; None until one is chosen (``select`` or the first call)."""
        return self._active.target if self._active is not None else None

    @property
    def patterns_fired(self) -> dict[str, dict[str, int]]:
        return self.metadata.get("patterns_fired", {})

    def select(self, prefer=None) -> str:
        """Choose, and load on its device, the module that runs calls: the first, in
        ``prefer`` order (target specs or kinds, e.g. ``["vulkan", "cpu"]``; default: the
        order given at construction, else the package's), whose driver has a device here.
        Returns its target; raises ``RuntimeFailure`` when no target can run here."""
        if prefer is not None:
            self._order = _preference_order(self.modules, prefer)
        self._session, self._active, self._failures = None, None, {}
        self._start(self._runnable(), previous=None)
        return self.active_target

    def __call__(self, *args, **kwargs):
        if not kwargs and self.boundary.is_plain() and device_resident.wanted(args):
            # torch tensors on a GPU: no host round trip (runtime/device_resident.py)
            outputs = device_resident.call(self, args)
            if outputs is not None:
                return self.boundary.structure(outputs)
        call = self.boundary.bind(args, kwargs, self.signature, self._state)
        if self._session is None and not self._failures:
            self.select()
        results = self._invoke(self.metadata.get("function", "main"), call.arrays)
        return self.boundary.unbind(call, results, self.signature, self._state)

    @property
    def user_signature(self) -> Signature:
        """The tensors a caller passes (in input-leaf order) and gets back: the function's
        signature less the state arguments and the results that are state or write-backs."""
        ins = tuple(_as_caller(self.signature.inputs[leaf.index], leaf) for leaf in self.boundary.inputs if leaf.kind == "tensor")
        outs = tuple(_as_caller(self.signature.outputs[leaf.index], leaf) for leaf in self.boundary.outputs if leaf.kind == "tensor")
        return Signature(ins, outs)

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The module state (buffers the program mutates) as it is now, by buffer name."""
        return {slot.name: value for slot, value in zip(self.boundary.state, self._state)}

    def _invoke(self, function: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        while self._session is not None:
            try:
                return _boundary.as_declared(self._session.invoke(function, arrays), self.signature)
            except RuntimeFailure as e:
                failed = self._active
                self._failures[failed.target] = f"a call failed: {e.message}"
                self._session, self._active = None, None
                self._start(self._runnable(), previous=(failed, "a call failed", e))
        raise self._all_failed()

    def _runnable(self) -> list[package.PackagedModule]:
        """Modules in preference order that have not failed and whose driver has a device."""
        drivers = probe_drivers()
        out = []
        for m in self._order:
            if m.target in self._failures:
                continue
            status = drivers.get(m.driver)
            cpu_problem = hostcpu.unmet(m.requires)
            if cpu_problem is not None:
                self._failures[m.target] = cpu_problem
            elif status is None:
                self._failures[m.target] = f"this IREE runtime has no '{m.driver}' driver"
            elif not status.devices:
                self._failures[m.target] = f"no '{m.driver}' device ({status.reason})"
            else:
                out.append(m)
        return out

    def _start(self, candidates: list[package.PackagedModule], previous) -> None:
        """Load the first candidate that loads; warn for each target that hands over to another."""
        for m in candidates:
            if previous is not None:
                failed, what, error = previous
                warnings.warn(f"target '{failed.target}' (driver '{failed.driver}'): {what}: {error.message}; "
                              f"falling back to target '{m.target}'", TargetFallbackWarning, stacklevel=4)
            try:
                self._session = Session(m.vmfb, m.driver, parameters=self.parameters)
            except RuntimeFailure as e:
                self._failures[m.target] = f"loading failed: {e.message}"
                previous = (m, "loading failed", e)
                continue
            self._active = m
            skipped = "; ".join(f"{t}: {why}" for t, why in self._failures.items())
            log.info("running on target '%s' (driver '%s')%s", m.target, m.driver, f"; not used: {skipped}" if skipped else "")
            return
        raise self._all_failed()

    def _all_failed(self) -> RuntimeFailure:
        lines = [f"no target of this program can run on this machine (targets: {', '.join(t.target for t in self._order)}):"]
        lines += [f"  {m.target}: {self._failures.get(m.target, 'not tried')}" for m in self._order]
        return RuntimeFailure("\n".join(lines))

    def save(self, path: str | os.PathLike, *, compress: bool = True, parameters: str = "embed") -> None:
        """Write the package; the module state is saved as it is now (state/<i>.npy). ``compress=False``
        stores the modules uncompressed (the compile cache's entries). ``parameters="none"``
        leaves the external parameters out (modules and their description only): ``load`` then
        needs ``parameters=`` (an archive from ``save_parameters``, or generated where it runs)."""
        if parameters not in ("embed", "none"):
            raise CuvilError(f"save(parameters={parameters!r}): expected 'embed' or 'none'")
        metadata = {k: v for k, v in self.metadata.items() if k not in ("modules", "boundary", "state")}
        metadata["boundary"] = self.boundary.to_json()
        files = {f"state/{i}.npy": _boundary.state_to_bytes(a) for i, a in enumerate(self._state)}
        if files:
            metadata["state"] = [{"name": slot.name, "file": name, "sha256": _boundary.state_digest(data)}
                                 for slot, (name, data) in zip(self.boundary.state, files.items())]
        package.write(path, self.modules, metadata, files, compress=compress,
                      parameters=self.parameters if parameters == "embed" else None)

    def save_parameters(self, path: str | os.PathLike) -> None:
        """Write the external parameters alone as an IREE parameter archive (``.irpa``), each
        entry tagged with its dtype and shape; ``load(pkg, parameters=path)`` reads it."""
        from pathlib import Path

        if self.parameters is None:
            raise CuvilError("this program has no external parameters (compile with params='external')")
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            self.parameters.write_archive(out, path.with_name(path.name + ".scratch"))
        os.replace(tmp, path)

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.signature.inputs)
        outs = ", ".join(s.describe() for s in self.signature.outputs)
        return f"CompiledModel(targets={self.targets}, active={self.active_target}, ({ins}) -> ({outs}))"


def _as_caller(spec: TensorSpec, leaf) -> TensorSpec:
    """A tensor leaf's spec as the caller sees it (a carried leaf's own dtype)."""
    return TensorSpec(spec.shape, leaf.dtype) if leaf.dtype else spec


def supplied_parameters(path, metadata: dict, value) -> Parameters:
    """``load(..., parameters=value)`` of the package at ``path``: ``value`` checked against the
    entries its metadata records (runtime/parameters.py ``supplied``)."""
    from cuvil_mlir.runtime.parameters import supplied

    entry = metadata.get("parameters")
    if entry is None:
        raise PackageError(f"{path} has no external parameters: its weights are inside its modules (drop parameters=)")
    if "entries" not in entry:
        raise PackageError(f"{path} does not record its parameters' shapes and dtypes (written by an older "
                           "cuvil-mlir): recompile it to supply parameters at load time")
    return supplied(value, entry["entries"])


def _preference_order(modules: list[package.PackagedModule], prefer) -> list[package.PackagedModule]:
    """The modules ``prefer`` names (a target spec matches itself, a kind every target of
    that kind), in its order, then the rest in package order."""
    if prefer is None:
        return list(modules)
    names = prefer.split(",") if isinstance(prefer, str) else list(prefer)
    chosen: list[int] = []
    for name in (n.strip() for n in names):
        matches = [i for i, m in enumerate(modules) if name in (m.target, m.target.partition(":")[0])]
        if not matches:
            raise CuvilError(f"prefer: '{name}' names no target of this program; its targets: {', '.join(m.target for m in modules)}")
        chosen += [i for i in matches if i not in chosen]
    chosen += [i for i in range(len(modules)) if i not in chosen]
    return [modules[i] for i in chosen]


def load(path: str | os.PathLike, prefer=None, *, verify: bool = True, parameters=None) -> CompiledModel:
    """Read a package and load it on this machine's first usable target (see ``select``).
    The parameter archive is mapped, not read; ``verify`` checks it against its sha256 first
    (reading it once); ``verify=False`` checks only its place and size (a truncated package is
    still rejected), for loading a multi-GB package in about the time of mapping it.
    ``parameters``: the weights of a package saved without them (``save(parameters="none")``):
    an ``.irpa`` path (mapped) or a mapping key -> array, checked against the keys, shapes and
    dtypes the modules need (runtime/parameters.py ``supplied``); it replaces an archive inside.
    (``cuvil_mlir.load`` also loads a causal LM's package: runtime/generation.py ``load``.)"""
    metadata, modules = package.read(path)
    return from_package(path, metadata, modules, prefer, verify=verify, parameters=parameters)


def from_package(path, metadata: dict, modules: list[package.PackagedModule], prefer=None, *,
                 verify: bool = True, parameters=None) -> CompiledModel:
    """The CompiledModel of a package already read, loaded on its first usable target."""
    state = [_boundary.state_from_bytes(package.read_file(path, s["file"], s["sha256"]), s["name"]) for s in metadata.get("state", ())]
    if parameters is not None:
        parameters = supplied_parameters(path, metadata, parameters)
    else:
        parameters = package.read_parameters(path, metadata)
    if parameters is not None and parameters.arrays is None and parameters.sha256:
        parameters.view()  # maps it: a truncated file fails here
        if verify:
            parameters.verify()
    compiled = CompiledModel(modules, metadata, prefer=prefer, state=state, parameters=parameters)
    compiled.select()
    return compiled
