"""Errors a user sees. Each says what failed, where, and (when known) how to reproduce it."""

from __future__ import annotations

import re


class CuvilError(Exception):
    """Base class of every error cuvil-mlir raises on purpose (CLI prints it as one line)."""

    def __init__(self, message: str, *, repro: str | None = None):
        super().__init__(message)
        self.message = message
        self.repro = repro

    def __str__(self) -> str:
        if self.repro:
            return f"{self.message}\n  reproduce with: {self.repro}"
        return self.message


class ImportError_(CuvilError):
    """The model could not be read or imported by torch-mlir."""


class PassError(CuvilError):
    """A Cuvil pass failed or left invalid IR."""


class LoweringError(CuvilError):
    """IR that cannot be handed to IREE (e.g. a Cuvil op nothing lowered)."""


class CompileError(CuvilError):
    """The IREE compiler rejected the module."""


class PackageError(CuvilError):
    """A .cuvilpkg file is missing, corrupt or not a cuvil package."""


class InputError(CuvilError):
    """Call-time inputs do not match the compiled signature."""


class RuntimeFailure(CuvilError):
    """The IREE runtime failed to load or run a module."""


class MissingFileError(CuvilError, FileNotFoundError):
    """A file the user named (model, package, input, pattern or calibration file) is not there."""


def require_file(path, what: str):
    """``path`` as a Path if it names a file; else MissingFileError "<what> not found: <path>"."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"{what} not found: {path}")
    if not path.is_file():
        raise MissingFileError(f"{what} is not a file: {path}")
    return path


def one_line(text_or_error) -> str:
    """A message on one line. For an exception, the error it was raised from follows in
    parentheses (iree.runtime's "Could not create device" carries the driver's reason only there)."""
    if isinstance(text_or_error, BaseException):
        e = text_or_error
        text = one_line(str(e)) or type(e).__name__
        return f"{text} ({one_line(e.__cause__)})" if e.__cause__ is not None else text
    return " ".join(line.strip() for line in str(text_or_error).splitlines() if line.strip())


def location_text(loc) -> str:
    """A short source location for messages: ``module.path (file:line:col)``, ``file:line:col``
    or the op's loc as printed."""
    text = str(loc)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    named = _NAMED.match(text)
    if named:  # "path"(child): the importer's module path around torch-mlir's location
        path, child = named.group(1), named.group(2)
        return path if child in (None, "", "unknown") else f"{path} ({child})"
    return text


_NAMED = re.compile(r'^"([^"]*)"(?:\((.*)\))?$')


def module_path(loc) -> str:
    """The nn.Module path the importer named ``loc`` after (``layers.0.attn``), or ""."""
    text = str(loc)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    named = _NAMED.match(text)
    return named.group(1) if named else ""
