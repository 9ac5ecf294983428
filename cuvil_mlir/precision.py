"""Precision policies: what the "precision" stage of the pipeline runs.

A policy is a string a user types (``--precision`` / ``compile(precision=...)``), optionally
with options, ``name{option=value,...}``:

    fp32                      no change (the default)
    fp16, bf16                demote compute to 16-bit floats, keeping sensitive ops in fp32
    int8-weight               weight-only int8, per output channel, symmetric
    int4-weight{group=128}    weight-only int4, group-wise
    int8                      static int8 weights and activations (needs a calibration)

``stage_passes`` turns a policy into the passes of the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil_mlir.diagnostics import CuvilError
from cuvil_mlir.passes import parse_pass_spec

POLICIES = ("fp32", "fp16", "bf16", "int8-weight", "int4-weight", "int8")


@dataclass(frozen=True)
class Policy:
    name: str
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def spec(self) -> str:
        if not self.options:
            return self.name
        return f"{self.name}{{{','.join(f'{k}={v}' for k, v in self.options)}}}"

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)


def parse_policy(spec: str | Policy | None) -> Policy:
    if isinstance(spec, Policy):
        return spec
    if spec is None or spec == "":
        return Policy("fp32")
    try:
        name, options = parse_pass_spec(spec)
    except CuvilError:
        raise CuvilError(f"malformed precision '{spec}' (expected a policy, e.g. fp16 or int4-weight{{group=64}}); "
                         f"policies: {', '.join(POLICIES)}") from None
    if name not in POLICIES:
        raise CuvilError(f"unknown precision '{name}'; policies: {', '.join(POLICIES)}")
    return Policy(name, tuple(sorted(options.items())))


def stage_passes(policy: str | Policy | None, calibration=None) -> list:
    """The passes the "precision" stage runs for ``policy``."""
    policy = parse_policy(policy)
    if policy.name == "fp32":
        if policy.options:
            raise CuvilError(f"precision fp32 takes no options, got {policy.spec}")
        return []
    raise CuvilError(f"precision '{policy.name}' is not built yet")
