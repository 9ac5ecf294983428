"""What a comparison builds: pattern configurations (``default``, ``plain-iree``, ``without:X``,
``precision:P``), the ``Plan`` of targets x configurations, compiling one of them, and the
tolerance a configuration is held to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.eval.measure import DEFAULT_RTOL


@dataclass(frozen=True)
class Config:
    name: str
    plain: bool = False  # torch-mlir's import straight into IREE, no Cuvil
    disabled_passes: tuple[str, ...] = ()
    disabled_patterns: tuple[str, ...] = ()
    precision: str = "fp32"  # a policy of cuvil_mlir/compiler/precision.py; int8 is calibrated on the input sets


# The error a precision policy may add, as the harness measures it (max |err| / max |ref|):
# fp16/bf16 are docs/precision.md's budgets; the quantized policies' budgets there are
# relative L2 errors, and a max-norm error of the same build is up to ~2x larger.
def _precision_rtol() -> dict[str, float]:
    """Per policy budgets. cuvil_mlir.compiler.precision imports the pass machinery (torch-mlir): imported here,
    not at module level, so ``compare --from`` runs where only the IREE runtime and torch are."""
    from cuvil_mlir.compiler.precision import BUDGETS

    return {"fp32": 0.0, **BUDGETS, "int8-weight": 5e-2, "int4-weight": 2.5e-1, "int8": 1e-1}


def parse_config(text: str, patterns=()) -> Config:
    """``default``, ``plain-iree``, ``without:PASS``, ``without:PATTERN``, ``without:PASS/PATTERN``
    (PASS: a built-in pass or one of ``patterns``) or ``precision:POLICY`` (``precision:fp16``,
    ``precision:int4-weight{group=64}``). Unknown names fail with the valid ones."""
    from cuvil_mlir.compiler.pipeline import Options, check_disabled, pass_patterns
    from cuvil_mlir.compiler.precision import parse_policy

    text = text.strip()
    if text in ("default", "plain-iree"):
        return Config(text, plain=text == "plain-iree")
    kind, _, name = text.partition(":")
    if kind == "precision" and name:
        return Config(text, precision=parse_policy(name).spec)
    if kind != "without" or not name:
        raise CuvilError(f"unknown configuration '{text}'; configurations: default, plain-iree, without:PASS, "
                         "without:PATTERN, without:PASS/PATTERN, precision:POLICY")
    if name in pass_patterns(patterns):
        return Config(text, disabled_passes=(name,))
    check_disabled(Options(patterns=tuple(patterns), disabled_patterns=(name,)))  # raises with the valid names
    return Config(text, disabled_patterns=(name,))


def target_specs(targets) -> list[str]:
    from cuvil_mlir.targets import parse_targets

    text = targets if isinstance(targets, str) else ",".join(targets)
    return [t.spec for t in parse_targets(text)]  # validates, and names each target as parse_target does


@dataclass(frozen=True)
class Plan:
    """What a comparison builds: every target with every configuration, at one optimization
    level, with the user's PatternSets in every Cuvil configuration."""

    targets: tuple[str, ...] = ("cpu",)  # validated target specs
    configs: tuple[Config, ...] = (Config("default"),)
    opt_level: int = 3
    patterns: tuple = ()

    @classmethod
    def parse(cls, targets: str | Sequence[str] = ("cpu",), configs: Sequence[str] | None = None, *, opt_level: int = 3,
              patterns=()) -> "Plan":
        """From ``compare``'s arguments: target specs (a list or comma-separated) and configuration names
        (``parse_config``; default: ["default"]). Fails at once on an unknown target, pass or pattern."""
        patterns = tuple(patterns)
        return cls(tuple(target_specs(targets)), tuple(parse_config(c, patterns) for c in (configs or ["default"])),
                   opt_level, patterns)

    def builds(self) -> list[tuple[str, Config]]:
        """(target spec, configuration) of every Cuvil entry, target by target."""
        return [(t, c) for t in self.targets for c in self.configs]

    def compile(self, spec: str, config: Config, program, sets=()):
        return compile_config(spec, config, program, opt_level=self.opt_level, patterns=self.patterns, sets=sets)


def compile_config(spec: str, config: Config, program, *, opt_level: int = 3, patterns=(), sets=()):
    """Compile ``program`` for target ``spec`` under ``config`` (a static int8 policy calibrates on ``sets``)."""
    from cuvil_mlir.compiler.pipeline import Options, compile_plain_iree, compile_program
    from cuvil_mlir.compiler.precision import parse_policy

    calibration = None
    if parse_policy(config.precision).uses("int8"):  # calibrated on the comparison's own input sets
        import torch

        from cuvil_mlir.compiler.calibrate import calibrate

        if not sets:
            raise CuvilError(f"configuration '{config.name}' calibrates on the comparison's input sets, and there are none here")
        samples = [tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in s) for s in sets]
        calibration = calibrate(program, samples, target=spec, patterns=patterns,
                                disabled_passes=config.disabled_passes, disabled_patterns=config.disabled_patterns)
    options = Options(target=spec, opt_level=opt_level, patterns=tuple(patterns), disabled_passes=config.disabled_passes,
                      disabled_patterns=config.disabled_patterns, precision=config.precision, calibration=calibration)
    return compile_plain_iree(program, (), options) if config.plain else compile_program(program, (), options)


def config_tolerances(config: Config, tolerances: dict | None) -> dict | None:
    """A precision configuration is checked against its policy's budget."""
    if config.precision == "fp32":  # no budget; and no import of the pass machinery (torch-mlir) for `compare --from`
        return tolerances
    from cuvil_mlir.compiler.precision import parse_policy

    budget = parse_policy(config.precision).budget(_precision_rtol())
    if not budget:
        return tolerances
    merged = {**DEFAULT_RTOL, **(tolerances or {})}
    return {dtype: max(rtol, budget) for dtype, rtol in merged.items()}
