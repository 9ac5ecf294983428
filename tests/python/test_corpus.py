"""The CI sample of the differential corpus (tests/corpus; the whole corpus is
benchmarks/corpus.py): two programs of every family, each run eagerly, through cuvil and
through plain torch-mlir + IREE. Every program plain IREE computes correctly, cuvil must
too: a program plain passes and cuvil fails is a bug."""

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))

import differential  # noqa: E402
import programs  # noqa: E402

pytestmark = pytest.mark.slow

SAMPLE = programs.sample(programs.all_programs(), 2 * len(programs.FAMILIES))


def test_the_corpus_is_generated_from_tables_with_stable_unique_names():
    everything = programs.all_programs()
    assert len(everything) > 400 and len({p.name for p in everything}) == len(everything)
    assert {p.family for p in SAMPLE} == {p.family for p in everything}  # the sample covers every family


@pytest.mark.parametrize("program", SAMPLE, ids=[p.name for p in SAMPLE])
def test_cuvil_passes_whatever_plain_iree_passes(program):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = differential.reference(program)
        cuvil = differential.run_cuvil(program, ref)
        if cuvil.ok:
            return
        plain = differential.run_plain(program, ref)
    assert not plain.ok, f"plain torch-mlir + IREE passes {program.name}, cuvil fails: {cuvil.stage}: {cuvil.detail}"
    pytest.xfail(f"neither path passes: cuvil {cuvil.stage}: {cuvil.detail[:200]}")
