"""cuvil-mlir's version and the versions of what it runs with (package metadata, cache keys,
benchmark records)."""

from __future__ import annotations

__version__ = "0.1.0"

# What a compiled module depends on, and what a measurement is reported with.
DISTRIBUTIONS = ("cuvil-mlir", "torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "numpy")


def versions(distributions=DISTRIBUTIONS) -> dict[str, str]:
    """Distribution name -> installed version ("not installed" when absent)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in distributions:
        if dist == "cuvil-mlir":
            out[dist] = __version__
            continue
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out
