"""Precision policies: what the "precision" stage of the pipeline runs.

A policy is a string a user types (``--precision`` / ``compile(precision=...)``), optionally
with options, ``name{option=value,...}``:

    fp32                      no change (the default)
    fp16, bf16                demote compute to 16-bit floats, keeping sensitive ops in fp32;
                              options keep=<kinds> (default softmax,norm,reduction,exp,log; none),
                              keep_paths=<module paths> (lm_head, h.0.*), io=model|fp16 (bf16:
                              io=model|bf16; default model: inputs and outputs keep their dtype)
    int8-weight               weight-only int8, per output channel, symmetric; skip=<module paths>
    int4-weight{group=128}    weight-only int4, group-wise; skip=<module paths>
    int8                      static int8 weights and activations (needs a calibration); skip=<module paths>

An option's value may be a comma-separated list: ``fp16{keep=softmax,norm,keep_paths=lm_head}``
(an item without ``=`` continues the previous option's list). ``+`` combines a 16-bit policy
with a quantized one: ``fp16+int8-weight`` (fp16 activations, int8 weights, from an fp32 model). docs/precision.md describes
every policy, its error budget and the accuracy report (cuvil_mlir/eval/accuracy.py).
``stage_passes`` turns a policy into the passes of the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil_mlir.core.diagnostics import CuvilError

POLICIES = ("fp32", "fp16", "bf16", "int8-weight", "int4-weight", "int8")
HALF_POLICIES = {"fp16": "f16", "bf16": "bf16"}  # policy -> the MLIR type it computes in
QUANTIZED = ("int8-weight", "int4-weight", "int8")


@dataclass(frozen=True)
class Policy:
    """One policy (``name``, ``options``), or a combination of a 16-bit policy and a quantized one
    (``fp16+int8-weight``: ``parts``; its name is the parts' names joined by ``+``)."""

    name: str
    options: tuple[tuple[str, str], ...] = field(default=())
    combined: tuple["Policy", ...] = field(default=())

    @property
    def parts(self) -> tuple["Policy", ...]:
        return self.combined or (self,)

    @property
    def spec(self) -> str:
        if self.combined:
            return "+".join(p.spec for p in self.combined)
        if not self.options:
            return self.name
        return f"{self.name}{{{','.join(f'{k}={v}' for k, v in self.options)}}}"

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    def uses(self, name: str) -> bool:
        """Whether ``name`` (a policy of POLICIES) is this policy or one of its parts."""
        return any(p.name == name for p in self.parts)

    def budget(self, budgets: dict[str, float]) -> float:
        """The error budget from per-policy ``budgets``: a combination's errors add up."""
        return sum(budgets.get(p.name, 0.0) for p in self.parts)


def parse_policy(spec: str | Policy | None) -> Policy:
    """A policy string -> Policy; ``a+b`` combines a 16-bit policy with a quantized one
    (``fp16+int8-weight``: 16-bit activations, int8 weights; demotion runs first)."""
    if isinstance(spec, Policy):
        return spec
    if spec is None or spec == "":
        return Policy("fp32")
    pieces = _split_plus(spec)
    if len(pieces) > 1:
        parts = [_parse_one(p) for p in pieces]
        half = [p for p in parts if p.name in HALF_POLICIES]
        quantized = [p for p in parts if p.name in QUANTIZED]
        if len(parts) != 2 or len(half) != 1 or len(quantized) != 1:
            raise CuvilError(f"precision '{spec}': a combination is one of {', '.join(HALF_POLICIES)} and one of "
                             f"{', '.join(QUANTIZED)} (e.g. fp16+int8-weight)")
        parts = (half[0], quantized[0])
        return Policy("+".join(p.name for p in parts), (), parts)
    return _parse_one(spec)


def _split_plus(spec: str) -> list[str]:
    """``a{x}+b`` -> ["a{x}", "b"]: ``+`` outside braces separates policies."""
    pieces, depth, current = [], 0, ""
    for ch in spec:
        depth += (ch == "{") - (ch == "}")
        if ch == "+" and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += ch
    return [p.strip() for p in pieces + [current]]


def _parse_one(spec: str) -> Policy:
    try:
        name, options = _parse_spec(spec)
    except CuvilError:
        raise CuvilError(f"malformed precision '{spec}' (expected a policy, e.g. fp16 or int4-weight{{group=64}} "
                         f"or fp16{{keep=softmax,norm}}); policies: {', '.join(POLICIES)}") from None
    if name not in POLICIES:
        raise CuvilError(f"unknown precision '{name}'; policies: {', '.join(POLICIES)}")
    return Policy(name, tuple(sorted(options.items())))


def _parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``name{k=v,w,k2=v2}`` -> (name, {k: "v,w", k2: "v2"}): list values continue after commas."""
    # imported here: reading a policy must not need the compiler (``compare --from`` runs where
    # only the IREE runtime is)
    from cuvil_mlir.core.passes import parse_pass_spec

    spec = spec.strip()
    name, brace, rest = spec.partition("{")
    if not brace:
        return parse_pass_spec(spec)
    if not rest.endswith("}") or "{" in rest[:-1] or "}" in rest[:-1]:
        raise CuvilError(f"malformed precision '{spec}'")
    options: dict[str, str] = {}
    key = None
    for item in rest[:-1].split(","):
        item = item.strip()
        k, eq, v = item.partition("=")
        if eq and k and v:
            key, options[k] = k, v
        elif not eq and item and key is not None:
            options[key] += f",{item}"
        else:
            raise CuvilError(f"malformed option '{item}' in precision '{spec}'")
    name, _ = parse_pass_spec(name)
    return name, options


def stage_passes(policy: str | Policy | None, calibration=None) -> list:
    """The passes the "precision" stage runs for ``policy`` (a combination: its parts' in order,
    demotion first, so quantization sees 16-bit weights and dequantizes to 16 bits)."""
    policy = parse_policy(policy)
    if policy.combined:
        return [p for part in policy.combined for p in stage_passes(part, calibration)]
    if policy.name == "fp32":
        if policy.options:
            raise CuvilError(f"precision fp32 takes no options, got {policy.spec}")
        return []
    if policy.name in ("int8-weight", "int4-weight"):
        return [_weight_only_pass(policy)]
    if policy.name == "int8":
        return [_static_int8_pass(policy, calibration)]
    return _demote_passes(policy)


# The error budget of each policy: relative error of the output against fp32 eager (max |err| /
# max |ref|) on the e2e models of examples/models.py (docs/precision.md; tests/python/test_precision.py).
BUDGETS = {"fp16": 1e-2, "bf16": 5e-2}


def _items(value: str | None) -> tuple[str, ...] | None:
    """A policy's list value, ``"a,b"`` -> ("a", "b"); ``"none"`` -> (); None when not given."""
    if value is None:
        return None
    items = tuple(v for v in value.split(",") if v)
    return () if items == ("none",) else items


def _configured(p, options_class, **values):
    """Pass ``p`` with ``options_class(**values)`` (values left None take their defaults); a value
    the options reject is an error naming the pass."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        options = options_class(**given)
    except ValueError as e:
        raise CuvilError(f"pass '{p.name}': {e}") from None
    return p.with_options(options)


def _demote_passes(policy: Policy) -> list:
    """fp16 / bf16{keep=...,keep_paths=...} -> demote-precision{dtype=f16|bf16,keep=...,keep_paths=...},
    after narrow-io{dtype=...} with io=fp16 / io=bf16 (so demotion folds the casts it adds)."""
    from cuvil_mlir.lowering.precision import demote_precision, narrow_io

    extra = [k for k, _ in policy.options if k not in ("keep", "keep_paths", "io")]
    if extra:
        raise CuvilError(f"precision {policy.name} takes only keep, keep_paths, io; got {policy.spec}")
    io = policy.option("io", "model")
    if io not in ("model", policy.name):
        raise CuvilError(f"precision {policy.spec}: io={io} is not one of model (inputs and outputs keep their dtype), "
                         f"{policy.name} (take and return {policy.name})")
    dtype = HALF_POLICIES[policy.name]
    demote = _configured(demote_precision.PASS, demote_precision.DemotePrecisionOptions, dtype=dtype,
                         keep=_items(policy.option("keep")), keep_paths=_items(policy.option("keep_paths")))
    return [demote] if io == "model" else [_configured(narrow_io.PASS, narrow_io.NarrowIOOptions, dtype=dtype), demote]


# Quantized policies only: IREE's const-expr hoisting would otherwise evaluate the weight
# dequantization at compile time (for tensors below its 1 MiB size-increase threshold) and
# store the float weights in the vmfb again; at 0 it never hoists what grows the module.
QUANTIZED_IREE_FLAGS = ("--iree-opt-const-expr-max-size-increase-threshold=0",)


def iree_flags(policy: str | Policy | None) -> list[str]:
    """IREE flags the policy needs on top of the target's."""
    policy = parse_policy(policy)
    return list(QUANTIZED_IREE_FLAGS) if any(policy.uses(q) for q in QUANTIZED) else []


def _weight_only_pass(policy: Policy):
    """int8-weight{skip=P} -> quantize-weights{bits=8,skip=P}; int4-weight{group=N} -> {bits=4,group=N}."""
    from cuvil_mlir.lowering.precision import quantize_weights

    allowed = ("group", "skip") if policy.name == "int4-weight" else ("skip",)
    extra = [k for k, _ in policy.options if k not in allowed]
    if extra:
        takes = "takes only group, skip" if policy.name == "int4-weight" else "takes no options (except skip)"
        raise CuvilError(f"precision {policy.name} {takes}, got {policy.spec}")
    group = policy.option("group")
    if group is not None and not group.lstrip("-").isdigit():
        raise CuvilError(f"precision {policy.spec}: group={group} is not an int")
    return _configured(quantize_weights.PASS, quantize_weights.QuantizeWeightsOptions, bits=4 if policy.name == "int4-weight" else 8,
                       group=None if group is None else int(group), skip=_items(policy.option("skip")))


def _static_int8_pass(policy: Policy, calibration):
    """int8{skip=P} -> quantize-static{skip=P} with the calibration's activation ranges."""
    from cuvil_mlir.compiler.calibration import Calibration
    from cuvil_mlir.lowering.precision import quantize_static

    extra = [k for k, _ in policy.options if k != "skip"]
    if extra:
        raise CuvilError(f"precision int8 takes no options (except skip), got {policy.spec}")
    if calibration is None:
        raise CuvilError("precision int8 needs activation ranges: pass calibration=cuvil_mlir.calibrate(model, sample_inputs)")
    if not isinstance(calibration, Calibration):
        raise CuvilError(f"calibration must be a cuvil_mlir.compiler.calibration.Calibration (from cuvil_mlir.calibrate), got {type(calibration).__name__}")
    options = quantize_static.QuantizeStaticOptions(skip=_items(policy.option("skip")) or ())
    return quantize_static.with_calibration(calibration.ranges, options)
