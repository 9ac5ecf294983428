"""Accuracy of a precision policy: what each demoted or quantized op costs, and which ops
must stay in higher precision to meet an error budget.

    rep = cuvil_mlir.eval.accuracy.report(model, (x,), precision="fp16")
    print(rep.describe())               # end-to-end metrics, then one line per op, worst first
    found = cuvil_mlir.eval.accuracy.search(model, (x,), precision="int8-weight", budget=1e-2)
    found.policy                        # e.g. "int8-weight{skip=model.lm_head}"

The reference is eager PyTorch in fp32. An *op* is a module path (the nn.Module the op came
from, as recorded in the IR's locations) with the kinds of ops the policy rewrote there
(``transformer.h.0.mlp.c_fc: linear``). Its error is measured by compiling the model with the
policy applied to that op alone (every other op kept with ``keep_paths`` / ``skip``), so a
report costs one compile per op plus one for the whole policy; the import runs once.
``search`` ranks the ops by that error and keeps the worst ones, greedily, until the whole
policy meets the budget (one more compile per op it keeps). docs/precision.md says how to
read the numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.runtime.arrays import to_numpy
from cuvil_mlir.lowering.common import FORWARD
from cuvil_mlir.compiler.precision import BUDGETS, Policy, parse_policy
from cuvil_mlir.runtime.signature import as_signature

# What each policy rewrites (pass -> the patterns that change an op's precision) and the
# option that keeps module paths out of it.
_REWRITES = {
    "demote-precision": ("demote_linear", "demote_conv2d", "demote_attention", "demote_norm", "demote_matmul",
                         "demote_elementwise", "demote_softmax", "demote_reduction", "demote_exp", "demote_log"),
    "quantize-weights": ("quantize_linear", "quantize_conv2d"),
    "quantize-static": ("static_linear", "static_conv2d"),
}
_KEEP_OPTION = {"fp16": "keep_paths", "bf16": "keep_paths", "int8-weight": "skip", "int4-weight": "skip", "int8": "skip"}
# Budgets of the weight-only policies (tests/python/test_quantization.py holds them to these).
DEFAULT_BUDGETS = {**BUDGETS, "int8-weight": 2e-2, "int4-weight": 0.2, "int8": 5e-2}


@dataclass
class Metrics:
    """Errors of one output against the fp32 reference. ``max_rel_err`` is max |err| / max |ref|
    (the budgets' measure); ``top1`` the share of rows whose argmax agrees (classifier-like
    outputs: rank >= 2, last dim > 1), else None."""

    max_abs_err: float
    max_rel_err: float
    cosine: float
    top1: float | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class OpError:
    path: str  # module path ("" for ops of the model's own forward)
    kinds: tuple[str, ...]  # what the policy did there: linear, attention, elementwise, ...
    count: int  # ops rewritten at that path
    metrics: list[Metrics]  # per output, with only this op rewritten

    @property
    def max_rel_err(self) -> float:
        return max(m.max_rel_err for m in self.metrics)

    @property
    def label(self) -> str:
        return f"{self.path or FORWARD}: {', '.join(self.kinds)}"

    def to_json(self) -> dict:
        return {"path": self.path, "kinds": list(self.kinds), "count": self.count, "max_rel_err": self.max_rel_err,
                "metrics": [m.to_json() for m in self.metrics]}


@dataclass
class AccuracyReport:
    policy: str
    metrics: list[Metrics]  # per output, the whole policy
    ops: list[OpError] = field(default_factory=list)  # worst first
    compiles: int = 0
    seconds: float = 0.0

    @property
    def max_rel_err(self) -> float:
        return max(m.max_rel_err for m in self.metrics)

    def to_json(self) -> dict:
        return {"policy": self.policy, "max_rel_err": self.max_rel_err, "metrics": [m.to_json() for m in self.metrics],
                "ops": [o.to_json() for o in self.ops], "compiles": self.compiles, "seconds": round(self.seconds, 2)}

    def describe(self) -> str:
        compiles = f"{self.compiles} compile{'s' * (self.compiles != 1)}"
        lines = [f"precision {self.policy} against fp32 PyTorch ({compiles}, {self.seconds:.1f} s)"]
        for i, m in enumerate(self.metrics):
            top1 = "" if m.top1 is None else f", top-1 agreement {m.top1:.3f}"
            lines.append(f"  output {i}: max abs err {m.max_abs_err:.3g}, max rel err {m.max_rel_err:.3g}, "
                         f"cosine {m.cosine:.6f}{top1}")
        if self.ops:
            lines.append("  per op (only that op rewritten), worst first:")
            width = max(len(o.label) for o in self.ops)
            lines += [f"    {o.label:<{width}}  max rel err {o.max_rel_err:.3g}  ({o.count} op{'s' * (o.count != 1)})"
                      for o in self.ops]
        return "\n".join(lines)


@dataclass
class SearchResult:
    policy: str  # the policy string that meets the budget (or keeps every op it could)
    budget: float
    max_rel_err: float  # of ``policy``
    kept: list[str]  # module paths kept in higher precision, in the order they were added
    met: bool
    report: AccuracyReport  # the per-op report the search ranked by
    compiles: int = 0

    def to_json(self) -> dict:
        return {"policy": self.policy, "budget": self.budget, "max_rel_err": self.max_rel_err, "kept": self.kept,
                "met": self.met, "compiles": self.compiles, "report": self.report.to_json()}


def metrics(got, ref) -> Metrics:
    """Errors of ``got`` against ``ref`` (arrays of one output)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise CuvilError(f"output shape {list(got.shape)} differs from the reference's {list(ref.shape)}")
    err = np.abs(got - ref)
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    g, r = got.ravel(), ref.ravel()
    norms = float(np.linalg.norm(g) * np.linalg.norm(r))
    cosine = float(g @ r / norms) if norms > 0 else float(np.array_equal(g, r))
    top1 = None
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        top1 = float(np.mean(got.argmax(-1) == ref.argmax(-1)))
    return Metrics(float(err.max(initial=0.0)), float(err.max(initial=0.0)) / scale, cosine, top1)


class _Session:
    """One import of the model; compiles it under policies and measures them against eager fp32."""

    def __init__(self, model, args, *, target: str, opt_level: int, calibration):
        import torch

        from cuvil_mlir.compiler.context import make_context
        from cuvil_mlir.compiler.importers import fx
        from cuvil_mlir.core.ir import module_to_bytecode
        from cuvil_mlir.runtime.signature import signature_of
        from cuvil_mlir.targets import parse_targets

        self.args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        program = fx.to_exported_program(model, self.args)
        self.ctx = make_context()
        module = fx.import_program(program, self.ctx)
        self.signature = signature_of(module)
        self.imported = module_to_bytecode(module)
        self.target = parse_targets(target, opt_level=opt_level)[0]
        self.opt_level, self.calibration = opt_level, calibration
        with torch.no_grad():
            out = program.module()(*self.args) if not isinstance(model, torch.nn.Module) else model(*self.args)
        self.reference = [np.asarray(o.detach().float().numpy()) for o in _flat(out)]
        self.compiles = 0

    def run(self, policy: str):
        """(per-output metrics, sites: pass -> pattern -> module path -> count) of ``policy``."""
        from cuvil_mlir.runtime.compiled import CompiledModel
        from cuvil_mlir.compiler.pipeline import Options, _compile_for_target, _metadata

        options = Options(target=self.target.spec, opt_level=self.opt_level, precision=policy, calibration=self.calibration)
        built = _compile_for_target(self.target, self.imported, self.ctx, options, None, True)
        self.compiles += 1
        compiled = CompiledModel([built.module], _metadata(self.signature, [built], options, 0.0))
        got = _flat(compiled(*as_signature([to_numpy(a) for a in self.args], compiled.signature)))
        return [metrics(g, r) for g, r in zip(got, self.reference)], built.sites


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in _flat(o)]
    return [out]


def _rewritten_ops(sites) -> dict[str, tuple[tuple[str, ...], int]]:
    """module path -> (kinds rewritten there, count), from the pipeline's pattern sites. An op
    that two passes rewrote (a combination: demoted, then quantized) counts once."""
    kinds: dict[str, set] = {}
    counts: dict[str, dict[str, int]] = {}  # path -> pass -> ops it rewrote there
    for pass_name, names in _REWRITES.items():
        for pattern, where in sites.get(pass_name, {}).items():
            if pattern not in names:
                continue
            for path, n in where.items():
                kinds.setdefault(path, set()).add(pattern.split("_", 1)[1])
                per_pass = counts.setdefault(path, {})
                per_pass[pass_name] = per_pass.get(pass_name, 0) + n
    return {p: (tuple(sorted(kinds[p])), max(counts[p].values())) for p in sorted(kinds)}


def with_kept(policy: Policy, paths) -> str:
    """``policy`` with ``paths`` added to its keep option (keep_paths / skip; a combination:
    to every part's)."""
    if policy.combined:
        return "+".join(with_kept(part, paths) for part in policy.combined)
    key = _KEEP_OPTION[policy.name]
    options = dict(policy.options)
    entries = [e for e in (options.get(key, "").split(",") + list(paths)) if e]
    if entries:
        options[key] = ",".join(dict.fromkeys(entries))
    return Policy(policy.name, tuple(sorted(options.items()))).spec


def _can_keep(policy: Policy) -> bool:
    return all(p.name in _KEEP_OPTION for p in policy.parts)


def _check_policy(policy: Policy) -> None:
    if policy.name == "fp32":
        raise CuvilError("precision fp32 changes nothing: give a policy to measure (fp16, bf16, int8-weight, ...)")


def report(model, args=(), *, precision: str = "fp16", per_op: bool | None = None, target: str = "cpu",
           opt_level: int = 3, calibration=None) -> AccuracyReport:
    """End-to-end metrics of ``precision`` against eager fp32 and, with ``per_op`` (default: on),
    the error each rewritten op adds alone, worst first.
    ``calibration``: for precision="int8" (cuvil_mlir.calibrate)."""
    policy = parse_policy(precision)
    per_op = _can_keep(policy) if per_op is None else per_op
    return _report(_Session(model, args, target=target, opt_level=opt_level, calibration=calibration), policy, per_op)


def _report(session: _Session, policy: Policy, per_op: bool) -> AccuracyReport:
    _check_policy(policy)
    start = time.perf_counter()
    whole, sites = session.run(policy.spec)
    ops = []
    if per_op:
        if not _can_keep(policy):
            raise CuvilError(f"a per-op report needs a policy that can keep ops ({', '.join(_KEEP_OPTION)}), got "
                             f"{policy.spec}; pass per_op=False for the end-to-end metrics")
        rewritten = _rewritten_ops(sites)
        for path, (kinds, count) in rewritten.items():
            others = [p or FORWARD for p in rewritten if p != path]
            alone, _ = session.run(with_kept(policy, others))
            ops.append(OpError(path, kinds, count, alone))
        ops.sort(key=lambda o: -o.max_rel_err)
    return AccuracyReport(policy.spec, whole, ops, session.compiles, time.perf_counter() - start)


def search(model, args=(), *, precision: str = "fp16", budget: float | None = None, target: str = "cpu",
           opt_level: int = 3, max_kept: int | None = None, calibration=None) -> SearchResult:
    """The ops ``precision`` must leave in higher precision for its error (max rel err against
    eager fp32) to stay within ``budget`` (default: the policy's documented budget). Greedy:
    keep the op with the largest error alone, recompile, repeat. ``calibration``: for
    precision="int8"."""
    policy = parse_policy(precision)
    _check_policy(policy)
    if not _can_keep(policy):
        raise CuvilError(f"search needs a policy that can keep ops ({', '.join(_KEEP_OPTION)}), got {policy.spec}")
    budget = policy.budget(DEFAULT_BUDGETS) if budget is None else float(budget)
    if not budget > 0:
        raise CuvilError(f"budget must be a positive relative error, got {budget}")
    session = _Session(model, args, target=target, opt_level=opt_level, calibration=calibration)
    rep = _report(session, policy, per_op=True)
    kept: list[str] = []
    spec, err = policy.spec, rep.max_rel_err
    candidates = [o.path or FORWARD for o in rep.ops]
    limit = len(candidates) if max_kept is None else min(max_kept, len(candidates))
    while err > budget and len(kept) < limit:
        kept.append(candidates[len(kept)])
        spec = with_kept(policy, kept)
        whole, _ = session.run(spec)
        err = max(m.max_rel_err for m in whole)
    return SearchResult(spec, budget, err, kept, err <= budget, rep, session.compiles)
