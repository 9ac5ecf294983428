"""The pytest plugin of cuvil-mlir, registered as the ``pytest11`` entry point ``cuvil``:
installing cuvil-mlir is enough (``-p no:cuvil`` turns it off).

    pytest --cuvil-targets=cpu,vulkan,cuda

    def test_block(cuvil_target):          # runs once per requested target; skipped, with the
        compiled = cuvil_mlir.compile(model, (x,), target=cuvil_target)   # reason, without a device
        assert_matches_reference(compiled, (x,), reference=model)

    @pytest.mark.cuvil_targets("cpu", "vulkan")   # only these of the requested targets
    def test_small(cuvil_target): ...

``--cuvil-targets`` defaults to the ini option ``cuvil_targets``, else ``cpu``. Loading the
plugin imports nothing heavy: torch, the targets and IREE's runtime are imported when a test
asks for ``cuvil_target``.
"""

from __future__ import annotations

import functools

import pytest

from cuvil_mlir.eval.testing import assert_close_across_targets, assert_matches_reference

__all__ = ["assert_close_across_targets", "assert_matches_reference", "cuvil_target"]

DEFAULT_TARGETS = "cpu"


def pytest_addoption(parser):
    group = parser.getgroup("cuvil", "cuvil-mlir")
    group.addoption("--cuvil-targets", dest="cuvil_targets", default=None, metavar="TARGETS",
                    help="comma-separated cuvil target specs the cuvil_target fixture runs each test on, e.g. "
                         "cpu,vulkan,cuda:h200; targets without a device here are skipped (default: the "
                         f"cuvil_targets ini option, else {DEFAULT_TARGETS})")
    parser.addini("cuvil_targets", f"default for --cuvil-targets (default: {DEFAULT_TARGETS})", default=DEFAULT_TARGETS)


def pytest_configure(config):
    config.addinivalue_line("markers", "cuvil_targets(*names): run the test only on those of the requested cuvil "
                            "targets that these kinds or specs name")
    if config.getoption("cuvil_targets"):  # asked for on the command line: check it now (imports the targets)
        _checked(config.getoption("cuvil_targets"))


def pytest_report_header(config):
    return f"cuvil-mlir: --cuvil-targets={requested_targets(config)}"


def requested_targets(config) -> str:
    return config.getoption("cuvil_targets") or config.getini("cuvil_targets") or DEFAULT_TARGETS


@functools.cache
def _checked(text: str) -> tuple[str, ...]:
    """The target specs of ``text``; a usage error naming the valid targets if one is wrong."""
    from cuvil_mlir.core.diagnostics import CuvilError
    from cuvil_mlir.targets import parse_targets

    try:
        return tuple(t.spec for t in parse_targets(text))
    except CuvilError as e:
        raise pytest.UsageError(f"--cuvil-targets={text}: {e.message}") from None


def pytest_generate_tests(metafunc):
    if "cuvil_target" not in metafunc.fixturenames:
        return
    text = requested_targets(metafunc.config)
    specs = _checked(text)
    marker = metafunc.definition.get_closest_marker("cuvil_targets")
    if marker is not None:
        wanted = set(marker.args)
        specs = tuple(s for s in specs if s in wanted or s.partition(":")[0] in wanted)
    if not specs:
        reason = f"none of the requested cuvil targets ({text}) is one of {', '.join(marker.args)}"
        metafunc.parametrize("cuvil_target", [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
                             indirect=True, ids=["no-target"])
        return
    metafunc.parametrize("cuvil_target", specs, indirect=True, ids=list(specs))


@functools.cache
def _absent_reason(spec: str) -> str | None:
    """Why ``spec`` cannot run here (no driver or no device), or None. Probed once a session."""
    from cuvil_mlir.eval.entries import absent
    from cuvil_mlir.targets import parse_target

    return absent(parse_target(spec).driver, _drivers())


@functools.cache
def _drivers():
    from cuvil_mlir.runtime.session import probe_drivers

    return probe_drivers()


@pytest.fixture
def cuvil_target(request) -> str:
    """A target spec of ``--cuvil-targets`` (the test runs once per target), for
    ``cuvil_mlir.compile(..., target=cuvil_target)``; skipped, with the reason, when this
    machine has no device for it."""
    spec = getattr(request, "param", None)
    if spec is None:
        pytest.fail("the cuvil_target fixture is parametrized by the cuvil plugin; do not request it indirectly")
    reason = _absent_reason(spec)
    if reason:
        pytest.skip(f"cuvil target {spec}: {reason}")
    return spec
