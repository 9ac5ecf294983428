"""Typed pass options: a frozen dataclass whose fields are a pass's command-line options.

    @dataclass(frozen=True)
    class QuantizeWeightsOptions:
        bits: Literal[8, 4] = 8           # quantize-weights{bits=4}
        group: int = 128                  # quantize-weights{group=64}
        skip: tuple[str, ...] = ()        # quantize-weights{skip=lm_head:h.0.*}

The field name is the option name, as typed. Field types: ``int``, ``float``, ``str``, ``bool``
(``true`` | ``false``), ``Literal[...]`` or an ``Enum`` (a choice), and ``tuple[T, ...]`` of one
of those (a list: items separated by ``:``, ``none`` for the empty list). Every field has a
default. A ``__post_init__`` may check what a type cannot say (``group`` even) by raising
``ValueError`` with the reason. Values are checked when parsed from text and when a pass is
given an options object in code (``with_options``), so a pass only ever sees valid options.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from dataclasses import dataclass

from cuvil_mlir.core.diagnostics import CuvilError

LIST_SEPARATOR = ":"  # "," separates options in a pass spec, so list items use ":"
EMPTY_LIST = "none"


@dataclass(frozen=True)
class Option:
    """One field of an options class, its type resolved."""

    name: str
    kind: object  # int, float, str, bool, a Literal[...], an Enum class, or tuple[T, ...]
    default: object

    @property
    def item(self):
        """The item type of a list option; None for a scalar one."""
        return _item_type(self.kind)

    def choices(self) -> tuple | None:
        """The allowed values of a choice (or of a list of choices' items), else None."""
        return _choices(self.item if self.item is not None else self.kind)

    def type_text(self) -> str:
        """``8 | 4``, ``int``, ``list of str``, ``list of softmax | norm | ...``."""
        if self.item is not None:
            return f"list of {_type_text(self.item)}, '{LIST_SEPARATOR}'-separated"
        return _type_text(self.kind)


def option_fields(cls: type) -> tuple[Option, ...]:
    """The options of an options class (a frozen dataclass whose every field has a default)."""
    return _fields(cls)


@functools.cache
def _fields(cls: type) -> tuple[Option, ...]:
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"pass options must be a frozen dataclass, got {cls!r}")
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: a pass option needs a default")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = hints[f.name]
        if _type_text(_item_type(kind) or kind) is None:
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported option type {kind!r} "
                            "(int, float, str, bool, Literal, Enum, or a tuple[T, ...] of one)")
        out.append(Option(f.name, kind, default))
    return tuple(out)


def _item_type(kind):
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def _choices(kind) -> tuple | None:
    if typing.get_origin(kind) is typing.Literal:
        return typing.get_args(kind)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return tuple(kind)
    return None


def _type_text(kind) -> str | None:
    choices = _choices(kind)
    if choices is not None:
        return " | ".join(_text(c) for c in choices)
    if kind is bool:
        return "bool (true | false)"
    return kind.__name__ if kind in (int, float, str) else None


# --- text -> value -------------------------------------------------------------------------


def parse_value(kind, text: str):
    """The value of ``text`` as ``kind`` (int, float, str, bool, a Literal or an Enum); ValueError
    saying what was expected (``is not an int``)."""
    choices = _choices(kind)
    if choices is not None:
        for c in choices:
            if _text(c) == text:
                return c
        raise ValueError(f"is not one of {', '.join(_text(c) for c in choices)}")
    if kind is bool:
        if text not in ("true", "false"):
            raise ValueError("is not a bool (true or false)")
        return text == "true"
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError("is not an int") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError("is not a float") from None
    return text  # str


def _parse_value(option: Option, text: str):
    if option.item is None:
        return parse_value(option.kind, text)
    if text == EMPTY_LIST:
        return ()
    items = text.split(LIST_SEPARATOR)
    if "" in items:
        raise ValueError(f"has an empty item (items are '{LIST_SEPARATOR}'-separated)")
    out = []
    for item in items:
        try:
            out.append(parse_value(option.item, item))
        except ValueError as e:
            raise ValueError(f"item '{item}' {e}") from None
    return tuple(out)


def parse_options(pass_name: str, cls: type, given: dict[str, str]):
    """``{"bits": "4"}`` -> ``cls(bits=4)``, every other option at its default. Errors name the
    pass, the option, the value and what was expected."""
    known = {o.name: o for o in option_fields(cls)}
    values = {}
    for key, text in given.items():
        option = known.get(key)
        if option is None:
            raise CuvilError(f"pass '{pass_name}' has no option '{key}'; options: {', '.join(known)}")
        try:
            values[key] = _parse_value(option, text)
        except ValueError as e:
            raise CuvilError(f"pass '{pass_name}': option {key}={text} {e}") from None
    try:
        return cls(**values)
    except ValueError as e:  # the class's own check (__post_init__)
        raise CuvilError(f"pass '{pass_name}': {e}") from None


# --- value -> text, and checking values given in code ---------------------------------------------


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return LIST_SEPARATOR.join(_text(v) for v in value) if value else EMPTY_LIST
    return str(value)


def options_text(options) -> str:
    """The options that differ from their defaults, as a pass spec writes them: ``bits=4,group=64``."""
    if options is None:
        return ""
    return ",".join(f"{o.name}={_text(getattr(options, o.name))}" for o in option_fields(type(options))
                    if getattr(options, o.name) != o.default)


def pass_spec(name: str, options) -> str:
    """``quantize-weights{bits=4}``: the text that ``Registry.get`` turns back into this pass."""
    text = options_text(options)
    return f"{name}{{{text}}}" if text else name


def _fits(kind, value) -> bool:
    choices = _choices(kind)
    if choices is not None:
        return any(value == c and type(value) is type(c) for c in choices)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def check_options(pass_name: str, expected: type, options) -> None:
    """Fail unless ``options`` is an ``expected`` whose every field has a value of its type."""
    if type(options) is not expected:
        raise CuvilError(f"pass '{pass_name}' takes {expected.__name__} options, got {type(options).__name__}")
    for o in option_fields(expected):
        value = getattr(options, o.name)
        if o.item is None:
            if not _fits(o.kind, value):
                raise CuvilError(f"pass '{pass_name}': option {o.name}={value!r} {_expected(o.kind)}")
            continue
        if not isinstance(value, tuple):
            raise CuvilError(f"pass '{pass_name}': option {o.name}={value!r} is not a tuple ({o.type_text()})")
        for v in value:
            if not _fits(o.item, v):
                raise CuvilError(f"pass '{pass_name}': option {o.name}: item {v!r} {_expected(o.item)}")


def _expected(kind) -> str:
    choices = _choices(kind)
    if choices is not None:
        return f"is not one of {', '.join(_text(c) for c in choices)}"
    text = _type_text(kind)
    return f"is not {'an' if text[0] in 'aeiou' else 'a'} {text}"


def describe_options(p) -> list[str]:
    """One line per option of pass ``p``, for ``cuvil passes``: its type or choices and default."""
    if p.options is None:
        return []
    lines = []
    for o in option_fields(type(p.options)):
        choices = o.choices() if o.item is None else None
        example = f"; e.g. -p '{p.name}{{{o.name}={_text(choices[-1])}}}'" if choices else ""
        lines.append(f"option {o.name}: {o.type_text()} (default {_text(o.default)}{example})")
    return lines


class Configurable:
    """The options part of a pass (PatternSet, FunctionPass): ``name`` and ``options``, an
    instance of the pass's options class (its defaults where registered) or None."""

    name: str
    options: object

    def with_options(self, options):
        """This pass with ``options`` (an instance of its options class; checked)."""
        if self.options is None:
            raise CuvilError(f"pass '{self.name}' takes no options, got {type(options).__name__}")
        check_options(self.name, type(self.options), options)
        return self._configured(options)

    def configure(self, given: dict[str, str]):
        """This pass with the options of a ``name{option=value ...}`` spec (the others at their defaults)."""
        if self.options is None:
            if given:
                raise CuvilError(f"pass '{self.name}' takes no options, got {given}")
            return self
        return self._configured(parse_options(self.name, type(self.options), given))

    @property
    def spec(self) -> str:
        return pass_spec(self.name, self.options)

    def _configured(self, options):
        return dataclasses.replace(self, options=options)
