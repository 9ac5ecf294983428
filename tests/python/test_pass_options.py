"""Typed pass options (cuvil_mlir/core/options.py): parsed once from ``name{k=v}``, checked when
given in code, written back by ``spec``; the pass API that carries them (PatternSet, FunctionPass,
Registry). Pure Python: no model is compiled."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import pytest

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.core.options import check_options, describe_options, option_fields, parse_options, pass_spec
from cuvil_mlir.core.passes import FunctionPass, Registry
from cuvil_mlir.core.patterns import PatternSet
from cuvil_mlir.lowering import builtin_registry
from cuvil_mlir.lowering.precision.demote_precision import DemotePrecisionOptions
from cuvil_mlir.lowering.precision.quantize_weights import QuantizeWeightsOptions


class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


@dataclass(frozen=True)
class Knobs:
    tile: int = 4
    ratio: float = 0.5
    label: str = "x"
    fuse: bool = True
    mode: Mode = Mode.FAST
    width: Literal[8, 16] = 8
    paths: tuple[str, ...] = ()
    sizes: tuple[int, ...] = (1, 2)

    def __post_init__(self):
        if isinstance(self.tile, int) and self.tile < 1:
            raise ValueError(f"option tile={self.tile} must be at least 1")


def parse(given: dict[str, str]) -> Knobs:
    return parse_options("knobs", Knobs, given)


def test_each_type_parses_from_its_text():
    k = parse({"tile": "16", "ratio": "1e-3", "label": "a.b", "fuse": "false", "mode": "exact", "width": "16",
               "paths": "lm_head:h.0.*", "sizes": "3:5:7"})
    assert k == Knobs(16, 1e-3, "a.b", False, Mode.EXACT, 16, ("lm_head", "h.0.*"), (3, 5, 7))
    assert parse({}) == Knobs()  # every option at its default
    assert parse({"paths": "none"}).paths == ()
    assert parse({"paths": "one"}).paths == ("one",)


@pytest.mark.parametrize("given, message", [
    ({"tiles": "4"}, "pass 'knobs' has no option 'tiles'; options: tile, ratio, label, fuse, mode, width, paths, sizes"),
    ({"tile": "four"}, "pass 'knobs': option tile=four is not an int"),
    ({"tile": "4.5"}, "option tile=4.5 is not an int"),
    ({"ratio": "half"}, "option ratio=half is not a float"),
    ({"fuse": "yes"}, "option fuse=yes is not a bool (true or false)"),
    ({"mode": "slow"}, "option mode=slow is not one of fast, exact"),
    ({"width": "12"}, "option width=12 is not one of 8, 16"),
    ({"sizes": "3:x"}, "option sizes=3:x item 'x' is not an int"),
    ({"paths": "a::b"}, "option paths=a::b has an empty item"),
    ({"tile": "0"}, "pass 'knobs': option tile=0 must be at least 1"),  # the class's own check
])
def test_bad_text_names_the_pass_option_and_what_was_expected(given, message):
    with pytest.raises(CuvilError) as e:
        parse(given)
    assert message in str(e.value)


def test_spec_writes_only_non_defaults_and_parses_back():
    k = Knobs(tile=8, fuse=False, mode=Mode.EXACT, paths=("a", "b.*"), sizes=())
    text = pass_spec("knobs", k)
    assert text == "knobs{tile=8,fuse=false,mode=exact,paths=a:b.*,sizes=none}"
    registry = Registry([FunctionPass("knobs", lambda module, options: Counter(), options=Knobs())])
    assert registry.get(text).options == k
    assert pass_spec("knobs", Knobs()) == "knobs"
    assert registry.get("knobs").options == Knobs()


def test_options_given_in_code_are_checked():
    check_options("knobs", Knobs, Knobs(tile=2, sizes=(4,)))  # fine
    cases = [
        (Knobs(tile="4"), "option tile='4' is not an int"),
        (Knobs(fuse=1), "option fuse=1 is not a bool"),
        (Knobs(tile=True), "option tile=True is not an int"),  # a bool is not an int option
        (Knobs(width=12), "option width=12 is not one of 8, 16"),
        (Knobs(mode="fast"), "option mode='fast' is not one of fast, exact"),  # the enum member, not its text
        (Knobs(paths="lm_head"), "option paths='lm_head' is not a tuple"),
        (Knobs(sizes=(1, "2")), "option sizes: item '2' is not an int"),
    ]
    for options, message in cases:
        with pytest.raises(CuvilError, match="pass 'knobs': ") as e:
            check_options("knobs", Knobs, options)
        assert message in str(e.value), options
    with pytest.raises(CuvilError, match="takes Knobs options, got QuantizeWeightsOptions"):
        check_options("knobs", Knobs, QuantizeWeightsOptions())


def test_an_options_class_must_be_frozen_with_defaults_of_supported_types():
    @dataclass
    class Mutable:
        a: int = 1

    @dataclass(frozen=True)
    class NoDefault:
        a: int

    @dataclass(frozen=True)
    class Listy:
        a: list = ()

    for cls, message in ((Mutable, "frozen dataclass"), (NoDefault, "needs a default"), (Listy, "unsupported option type")):
        with pytest.raises(TypeError, match=message):
            option_fields(cls)


# --- the pass API that carries options --------------------------------------------------------


def _pattern_pass() -> PatternSet:
    p = PatternSet("knob-pass", options=Knobs())

    @p.add("torch.aten.relu")
    def reads_options(op, rewriter, options):
        """relu(x) -> x   (when fuse)"""
        return None

    @p.add("torch.aten.relu", when=lambda options: options.mode is Mode.EXACT)
    def exact_only(op, rewriter):
        """relu(x) -> x   (mode=exact only)"""
        return None

    return p


def test_a_pattern_set_keeps_the_patterns_of_its_configuration():
    p = _pattern_pass()
    assert [pat.name for pat in p.patterns] == ["reads_options"]
    assert p.patterns[0].takes_options and not p.registered[1].takes_options
    exact = p.with_options(Knobs(mode=Mode.EXACT))
    assert [pat.name for pat in exact.patterns] == ["reads_options", "exact_only"]
    assert exact.spec == "knob-pass{mode=exact}" and p.spec == "knob-pass"
    assert [pat.name for pat in exact.with_options(Knobs()).patterns] == ["reads_options"]  # back again
    assert p.options == Knobs()  # configuring made a new pass
    assert [pat.name for pat in exact.without("reads_options").patterns] == ["exact_only"]


def test_a_pattern_reading_options_needs_a_pass_with_options():
    p = PatternSet("plain")
    with pytest.raises(TypeError, match="reads options, but pass 'plain' has none"):
        p.add("torch.aten.relu")(lambda op, rewriter, options: None)
    p.add("torch.aten.relu", name="ok")(lambda op, rewriter: None)  # two arguments: fine
    with pytest.raises(CuvilError, match="pass 'plain' takes no options"):
        p.with_options(Knobs())
    with pytest.raises(CuvilError, match="pass 'plain' takes no options"):
        p.configure({"tile": "2"})


def test_registry_lists_in_registration_order_and_configures_builtins():
    registry = builtin_registry()
    names = registry.names()
    assert names[:2] == ["raise-torch-to-cuvil", "raise-pt2e-quant"] and names[-2:] == ["lower-cuvil-to-torch", "verify-no-cuvil"]
    assert names != sorted(names)
    p = registry.get("quantize-weights{bits=4,group=64,skip=lm_head:h.0.*}")
    assert p.options == QuantizeWeightsOptions(bits=4, group=64, skip=("lm_head", "h.0.*"))
    assert registry.get(p.spec).options == p.options  # round trip
    assert registry.get("quantize-weights{bits=4 group=64}").options == QuantizeWeightsOptions(bits=4, group=64)  # spaces too
    with pytest.raises(CuvilError, match=r"pass 'quantize-weights': option group=3 must be a positive even integer"):
        registry.get("quantize-weights{group=3}")
    with pytest.raises(CuvilError, match=r"option bits=2 is not one of 8, 4"):
        registry.get("quantize-weights{bits=2}")
    demote = registry.get("demote-precision{dtype=bf16,keep=none,keep_paths=lm_head}")
    assert demote.options == DemotePrecisionOptions(dtype="bf16", keep=(), keep_paths=("lm_head",))
    assert "demote_softmax" in {pat.name for pat in demote.patterns}
    assert "demote_softmax" not in {pat.name for pat in registry.get("demote-precision").patterns}
    lower = registry.get("lower-cuvil-to-torch{attention=decomposed}")
    assert [pat.fn.__name__ for pat in lower.patterns if pat.name == "attention"] == ["attention_decomposed"]
    with pytest.raises(CuvilError, match="pass 'verify-no-cuvil' takes no options"):
        registry.get("verify-no-cuvil{x=1}")
    with pytest.raises(CuvilError, match="option 'bits' is given twice"):
        registry.get("quantize-weights{bits=4,bits=8}")


def test_describe_options_gives_types_and_defaults():
    lines = describe_options(builtin_registry().entry("quantize-weights"))
    assert lines == [
        "option bits: 8 | 4 (default 8; e.g. -p 'quantize-weights{bits=4}')",
        "option group: int (default 128)",
        "option skip: list of str, ':'-separated (default none)",
    ]
    assert describe_options(builtin_registry().entry("verify-no-cuvil")) == []
