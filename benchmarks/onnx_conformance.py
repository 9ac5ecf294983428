"""ONNX conformance: the ONNX backend node tests (``onnx.backend.test``) through Cuvil and
through plain torch-mlir + IREE, side by side. A benchmark, not a CI gate.

    python benchmarks/onnx_conformance.py --sample 60                 # a sample while iterating
    python benchmarks/onnx_conformance.py --timeout 60 --out benchmarks/results   # the whole suite
    python benchmarks/onnx_conformance.py --filter 'test_gemm|test_layer_norm' --backends cuvil -v

The node tests are generated in memory by the onnx package (``load_model_tests(kind="node")``:
one single-node model per case, plus the ``_expanded`` forms of ops defined as ONNX functions),
each with inputs and reference outputs. Each case runs in a forked child, one at a time, with a
per-test timeout (a hang or a crash in the compiler costs one case, not the run). A backend
(the ONNX backend API: ``prepare`` -> rep, ``rep.run(inputs)``) compiles the model for the CPU
and runs it; outputs are compared as onnx's own runner does (``assert_allclose`` with the
case's rtol / atol, same dtype and shape).

Every failure gets a class, from where it failed: ``onnx-import`` (torch-mlir's ONNX importer),
``unsupported-op`` (convert-torch-onnx-to-torch left the op), ``torch-lowering`` (the torch
backend pipeline), ``cuvil-pass`` (a Cuvil pass), ``iree-compile``, ``runtime``,
``input-type`` (sequence / optional / string inputs the compiled module cannot take),
``mismatch``, ``timeout``, ``crash``.

Results: benchmarks/results/onnx-conformance-<date>.{json,md}: the pass rate per category (op
family, node vs expanded) and per failure class, for both backends, with the machine and command.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shlex
import sys
import time
import traceback
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BACKENDS = ("cuvil", "plain-iree")

# Op families for the per-category table (the ONNX operator list's usual grouping).
FAMILIES = {
    "elementwise": "Abs Acos Acosh Add And Asin Asinh Atan Atanh BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor "
                   "Ceil Clip Cos Cosh Div Equal Erf Exp Floor Greater GreaterOrEqual IsInf IsNaN Less LessOrEqual Log "
                   "Max Mean Min Mod Mul Neg Not Or Pow Reciprocal Round Sign Sin Sinh Sqrt Sub Sum Tan Tanh Where Xor "
                   "CastLike Cast Identity",
    "activation": "Celu Elu Gelu HardSigmoid HardSwish Hardmax LeakyRelu LogSoftmax Mish PRelu Relu Selu Sigmoid Softmax "
                  "SoftmaxCrossEntropyLoss Softplus Softsign Swish ThresholdedRelu NegativeLogLikelihoodLoss",
    "matmul/conv": "Conv ConvInteger ConvTranspose DeformConv Einsum Gemm MatMul MatMulInteger QLinearConv QLinearMatMul",
    "normalization": "BatchNormalization GroupNormalization InstanceNormalization LayerNormalization LpNormalization "
                     "MeanVarianceNormalization RMSNormalization LRN",
    "pooling": "AveragePool GlobalAveragePool GlobalLpPool GlobalMaxPool LpPool MaxPool MaxRoiPool MaxUnpool RoiAlign",
    "reduction": "ArgMax ArgMin ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd "
                 "ReduceSum ReduceSumSquare CumSum TopK",
    "shape/tensor": "Concat ConstantOfShape Compress DepthToSpace Expand EyeLike Flatten Gather GatherElements GatherND "
                    "NonZero OneHot Pad Range Reshape Resize ScatterElements ScatterND Scatter Shape Size Slice "
                    "SpaceToDepth Split Squeeze Tile Transpose Trilu Unique Unsqueeze Upsample CenterCropPad Col2Im "
                    "ReverseSequence Constant AffineGrid GridSample ImageDecoder",
    "quantization": "DequantizeLinear QuantizeLinear DynamicQuantizeLinear",
    "attention/rnn": "Attention GRU LSTM RNN RotaryEmbedding",
    "control/sequence": "If Loop Scan SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert "
                        "SequenceLength SequenceMap SplitToSequence ConcatFromSequence Optional OptionalGetElement "
                        "OptionalHasElement",
    "random/misc": "Bernoulli Dropout Multinomial RandomNormal RandomNormalLike RandomUniform RandomUniformLike "
                   "BlackmanWindow DFT HammingWindow HannWindow MelWeightMatrix STFT NonMaxSuppression StringConcat "
                   "StringNormalizer StringSplit RegexFullMatch TfIdfVectorizer Det Adagrad Adam Momentum Gradient "
                   "Shrink Binarizer",
}
_FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops.split()}


def family(op_type: str) -> str:
    return _FAMILY_OF.get(op_type, "other")


# ---------------------------------------------------------------------------------------
# The backends (the ONNX backend API, on cuvil's compile and the plain-IREE baseline)


class CuvilRep:
    """A prepared model: ``run(inputs)`` -> outputs (numpy). A model with shape-operand
    inputs (reduction axes, Slice bounds, Pad pads, ... given at run time) is compiled at its
    first run, with those inputs bound to their values (docs/onnx.md), and again when a run
    passes other values."""

    def __init__(self, compiled=None, model=None, compile=None):
        self.compiled, self.model, self.compile = compiled, model, compile
        self.bound_values = None

    def run(self, inputs, **kwargs):
        import numpy as np

        if self.model is not None:
            from cuvil_mlir.compiler.importers.onnx import shape_operand_values
            from cuvil_mlir.compiler.pipeline import Options

            values = shape_operand_values(self.model, inputs)
            values.update({f"{i} len": np.array([len(x)]) for i, x in enumerate(inputs) if isinstance(x, list)})
            if self.compiled is None or not _same_values(values, self.bound_values):
                self.compiled, self.bound_values = self.compile(self.model, tuple(inputs), Options(target="cpu")), values
        out = self.compiled(*inputs)
        outs = out if isinstance(out, tuple) or (isinstance(out, list) and len(self.model_outputs()) > 1) else (out,)
        return [o if isinstance(o, list) else np.asarray(o) for o in outs]

    def model_outputs(self):
        return self.compiled.boundary.out_tree.get("children", []) if self.compiled.boundary.out_tree.get("type") == "tuple" else [0]


def _same_values(a: dict, b: dict | None) -> bool:
    import numpy as np

    return b is not None and a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in a)


class CuvilBackend:
    """onnx.backend.base.Backend's interface: compile for the CPU with all Cuvil passes."""

    plain = False

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> CuvilRep:
        from cuvil_mlir.compiler.pipeline import Options, compile_plain_iree, compile_program

        from cuvil_mlir.compiler.importers.onnx import sequence_inputs, shape_operand_inputs

        if not cls.plain and (shape_operand_inputs(model) or sequence_inputs(model)):  # compiled at the first run
            return CuvilRep(model=model, compile=compile_program)
        compile = compile_plain_iree if cls.plain else compile_program
        return CuvilRep(compile(model, (), Options(target="cpu")))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device).run(inputs)


class PlainIreeBackend(CuvilBackend):
    """torch-mlir's ONNX import and lowering straight into IREE: no Cuvil pass."""

    plain = True


# ---------------------------------------------------------------------------------------
# One case, in a forked child


def _classify(e: BaseException) -> str:
    from cuvil_mlir.compiler.importers.onnx import UnsupportedOnnxOp
    from cuvil_mlir.core.diagnostics import CompileError, ImportError_, InputError, PassError, RuntimeFailure

    text = str(e)
    if isinstance(e, UnsupportedOnnxOp):
        return "unsupported-op"
    if isinstance(e, ImportError_):
        if "could not lower" in text:
            return "torch-lowering"
        if "shape inference" in text or "not a valid ONNX model" in text:
            return "onnx-check"
        return "onnx-import"
    if isinstance(e, PassError):
        return "cuvil-pass"
    if isinstance(e, CompileError):
        return "iree-compile"
    if isinstance(e, InputError):
        return "input-type"
    if isinstance(e, RuntimeFailure):
        return "runtime"
    return "internal:" + type(e).__name__


def _as_arrays(values) -> list:
    """numpy scalars (the reference data has them for 0-d tensors) as 0-d arrays."""
    import numpy as np

    from onnx import numpy_helper

    # TensorProtos carry dtypes numpy lacks (float8, int4, ...): ml_dtypes arrays
    return [np.asarray(v) if isinstance(v, np.generic) else
            numpy_helper.to_array(v) if type(v).__name__ == "TensorProto" else
            _as_arrays(v) if isinstance(v, list) else v for v in values]


def _inputs_supported(inputs) -> str | None:
    import numpy as np

    for i, x in enumerate(inputs):
        if isinstance(x, list) and all(isinstance(e, np.ndarray) and e.dtype.kind not in "OUS" for e in x):
            continue  # a sequence: compiled for its length
        if not isinstance(x, np.ndarray):
            what = "a TensorProto (a dtype numpy has no type for)" if type(x).__name__ == "TensorProto" else \
                f"a {type(x).__name__} (sequence/optional)"
            return f"input {i} is {what}, not an array"
        if x.dtype.kind in "OUS":
            return f"input {i} has dtype {x.dtype} (strings)"
    return None


def _compare(outputs, expected, rtol, atol) -> str | None:
    import numpy as np

    if len(outputs) != len(expected):
        return f"expected {len(expected)} outputs, got {len(outputs)}"
    for i, (got, ref) in enumerate(zip(outputs, expected)):
        if isinstance(ref, list):  # a sequence
            if not isinstance(got, list) or len(got) != len(ref):
                return f"output {i}: expected a sequence of {len(ref)}, got {type(got).__name__}"
            bad = _compare([np.asarray(g) for g in got], ref, rtol, atol)
            if bad:
                return f"output {i}: {bad}"
            continue
        if not isinstance(ref, np.ndarray):
            return f"output {i} is a {type(ref).__name__} (sequence/optional)"
        if got.dtype != ref.dtype and not (ref.dtype == np.bool_ and got.dtype == np.bool_):
            return f"output {i}: dtype {got.dtype}, expected {ref.dtype}"
        if got.shape != ref.shape:
            return f"output {i}: shape {got.shape}, expected {ref.shape}"
        try:
            if ref.dtype.kind in "OUS":
                np.testing.assert_array_equal(got, ref)
            else:
                np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            lines = [ln for ln in str(e).splitlines() if "Max" in ln or "Mismatched" in ln]
            return f"output {i}: " + "; ".join(ln.strip() for ln in lines)[:300]
    return None


def _prepare_and_run(case, backend) -> dict:
    inputs, expected = (_as_arrays(v) for v in case.data_sets[0])
    try:
        rep = backend.prepare(case.model)
    except Exception as e:  # noqa: BLE001  (classified)
        return _result("fail", _classify(e), _one_line(e))
    try:
        outputs = rep.run(list(inputs))
    except Exception as e:  # noqa: BLE001
        cls = _classify(e)
        fired = rep.compiled.metadata.get("patterns_fired", {}) if rep.compiled is not None else {}
        return _result("fail", "runtime" if cls.startswith("internal") else cls, _one_line(e), fired)
    fired = rep.compiled.metadata.get("patterns_fired", {})
    bad = _compare(outputs, expected, case.rtol, case.atol)
    return _result("pass", fired=fired) if bad is None else _result("fail", "mismatch", bad, fired)


def _result(status, cls="", message="", fired=None) -> dict:
    return {"status": status, "class": cls, "message": message, "fired": fired or {}}


def _lowered_texts(case, backends) -> dict:
    """The IR each backend would hand to IREE (None where that step already fails)."""
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.importers import onnx as onnx_importer
    from cuvil_mlir.compiler.pipeline import Options, compile_program
    from cuvil_mlir.core.ir import module_to_text

    texts = {}
    for b in backends:
        try:
            if b == "cuvil":
                texts[b] = compile_program(case.model, (), Options(target="cpu"), emit="lowered", elide_weights=False).text
            else:
                texts[b] = module_to_text(onnx_importer.import_model(case.model, make_context(), kept_ops=(), rewrites_allowed=False))
        except Exception:  # noqa: BLE001  (prepare() reports it)
            texts[b] = None
    return texts


def _run_case(case, backends, conn) -> None:
    """In the child: every backend on one case; send {backend: result} back. Where both
    backends hand IREE the very same IR (no Cuvil pattern fired, no kept op), IREE compiles
    and runs it once and both get that result (``shared``): same IR, same flags, same module;
    where that fails, Cuvil runs on its own too (it rewrites the ONNX model after an IREE failure)."""
    try:
        why = _inputs_supported(_as_arrays(case.data_sets[0][0]))
        if why:
            conn.send({b: _result("fail", "input-type", why) for b in backends})
            return
        texts = _lowered_texts(case, backends) if len(backends) > 1 else {}
        out = {}
        if len(backends) > 1 and texts.get(backends[0]) is not None and len(set(texts.values())) == 1:
            shared = _prepare_and_run(case, PlainIreeBackend)
            out = {b: {**shared, "shared": True} for b in backends}
            if shared["status"] != "pass" and "cuvil" in backends:  # Cuvil's rewrites after a failure
                out["cuvil"] = _prepare_and_run(case, CuvilBackend)
        else:
            for b in backends:
                out[b] = _prepare_and_run(case, CuvilBackend if b == "cuvil" else PlainIreeBackend)
        conn.send(out)
    except BaseException as e:  # noqa: BLE001
        conn.send({b: _result("fail", "internal:" + type(e).__name__, _one_line(e) + " " + traceback.format_exc()[-300:])
                   for b in backends})
    finally:
        conn.close()


def _one_line(e, limit: int = 400) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def run_case(case, backends, timeout: float) -> dict:
    """{backend: result} for one case, run in a forked child with a timeout."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    proc = ctx.Process(target=_run_case, args=(case, backends, child), daemon=True)
    proc.start()
    child.close()
    result = None
    if parent.poll(timeout):
        try:
            result = parent.recv()
        except EOFError:
            result = None
    proc.join(5 if result is not None else 0.1)
    if proc.is_alive():
        proc.kill()
        proc.join()
        if result is None:
            result = {b: _result("fail", "timeout", f"over {timeout:g} s") for b in backends}
    if result is None:
        result = {b: _result("fail", "crash", f"the child died (exit code {proc.exitcode})") for b in backends}
    seconds = round(time.perf_counter() - start, 3)
    for r in result.values():
        r["seconds"] = seconds
    return result


# ---------------------------------------------------------------------------------------
# The run


def collect(filter_re: str | None, sample: int | None, seed: int):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.loader import load_model_tests

        cases = [c for c in load_model_tests(kind="node") if c.model is not None and c.data_sets]
    if filter_re:
        cases = [c for c in cases if re.search(filter_re, c.name)]
    cases.sort(key=lambda c: c.name)
    if sample and sample < len(cases):
        cases = random.Random(seed).sample(cases, sample)
    else:  # in a seeded random order: a run stopped early is still a uniform sample
        random.Random(seed).shuffle(cases)
    return cases


def op_type_of(case) -> str:
    """The op a node test is about: its single node's type, or (expanded) the test name's op."""
    nodes = case.model.graph.node
    if "_expanded" not in case.name:
        return nodes[0].op_type if nodes else "?"
    # an expanded function: the op the test is named after
    base = case.name.removeprefix("test_").split("_expanded")[0].lower().replace("_", "")
    from onnx import defs

    names = {s.name.lower(): s.name for s in defs.get_all_schemas()}
    for cut in range(len(base), 0, -1):
        if base[:cut] in names:
            return names[base[:cut]]
    return nodes[0].op_type


def summarize(results: list[dict], backends) -> dict:
    summary = {}
    for b in backends:
        rows = [r for r in results if b in r]
        total = len(rows)
        passed = sum(r[b]["status"] == "pass" for r in rows)
        by_family, by_kind = defaultdict(Counter), defaultdict(Counter)
        for r in rows:
            ok = r[b]["status"] == "pass"
            by_family[r["family"]]["total"] += 1
            by_family[r["family"]]["pass"] += ok
            kind = "expanded" if "_expanded" in r["name"] else "node"
            by_kind[kind]["total"] += 1
            by_kind[kind]["pass"] += ok
        classes = Counter(r[b]["class"] for r in rows if r[b]["status"] != "pass")
        summary[b] = {"total": total, "passed": passed, "rate": round(passed / total, 4) if total else None,
                      "by_family": {k: dict(v) for k, v in sorted(by_family.items())},
                      "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
                      "failure_classes": dict(classes.most_common())}
    return summary


def _markdown(report: dict) -> str:
    backends = report["backends"]
    s = report["summary"]
    lines = [f"# ONNX backend node tests: Cuvil vs plain torch-mlir + IREE ({report['date'][:10]})", "",
             f"- machine: {report['machine']}",
             f"- command: `{report['command']}`",
             *([f"- the runs merged: " + "; ".join(f"`{c}`" for c in report["commands"])] if report.get("commands") else []),
             f"- versions: {', '.join(f'{k} {v}' for k, v in report['versions'].items())}",
             f"- cases: {report['cases']} ({report['selection']}); per-test timeout {report['timeout_s']} s, "
             f"one case at a time in a forked child; wall time {report['wall_s']:.0f} s", "",
             "## Pass rate", "", "| backend | passed | total | rate |", "|---|---:|---:|---:|"]
    for b in backends:
        lines.append(f"| {b} | {s[b]['passed']} | {s[b]['total']} | {100 * (s[b]['rate'] or 0):.1f}% |")
    lines += ["", "## Per category (op family)", "",
              "| family | total | " + " | ".join(backends) + " |", "|---|---:|" + "---:|" * len(backends)]
    families = sorted({f for b in backends for f in s[b]["by_family"]})
    for f in families:
        total = s[backends[0]]["by_family"].get(f, {}).get("total", 0)
        cells = []
        for b in backends:
            c = s[b]["by_family"].get(f, {})
            cells.append(f"{c.get('pass', 0)} ({100 * c.get('pass', 0) / max(c.get('total', 1), 1):.0f}%)")
        lines.append(f"| {f} | {total} | " + " | ".join(cells) + " |")
    for kind in ("node", "expanded"):
        total = s[backends[0]]["by_kind"].get(kind, {}).get("total", 0)
        cells = [f"{s[b]['by_kind'].get(kind, {}).get('pass', 0)}" for b in backends]
        lines.append(f"| *{kind} tests* | {total} | " + " | ".join(cells) + " |")
    lines += ["", "## Failure classes", "", "| class | " + " | ".join(backends) + " |", "|---|" + "---:|" * len(backends)]
    classes = sorted({c for b in backends for c in s[b]["failure_classes"]})
    for c in classes:
        lines.append(f"| {c} | " + " | ".join(str(s[b]["failure_classes"].get(c, 0)) for b in backends) + " |")
    diff = [r for r in report["results"] if len(backends) > 1 and len({r[b]["status"] for b in backends if b in r}) > 1]
    if diff:
        lines += ["", "## Cases where the backends differ", ""]
        for r in diff:
            lines.append(f"- `{r['name']}`: " + "; ".join(f"{b} {r[b]['status']}" + (f" ({r[b]['class']}: {r[b]['message'][:160]})"
                                                                                  if r[b]["status"] != "pass" else "")
                                                        for b in backends))
    unsupported = Counter()
    for r in report["results"]:
        for b in backends:
            if r.get(b, {}).get("class") == "unsupported-op":
                unsupported[r["op"]] += 1
                break
    if unsupported:
        lines += ["", "## Ops torch-mlir's ONNX lowering left (unsupported-op)", "",
                  ", ".join(f"{op} ({n})" for op, n in sorted(unsupported.items()))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: cuvil, plain-iree")
    parser.add_argument("--filter", help="only cases whose name matches this regex")
    parser.add_argument("--names-file", help="only the cases named in this file (one per line), e.g. to rerun failures")
    parser.add_argument("--sample", type=int, help="a random sample of N cases (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case, all backends (default 60)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for the results")
    parser.add_argument("--name", default=None, help="results file stem (default onnx-conformance-<date>[-sample])")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per case")
    parser.add_argument("--merge", nargs=2, metavar=("BASE", "RERUN"),
                        help="run nothing: write the report of BASE (a whole-suite JSON) with each case RERUN (a JSON "
                             "of this script) ran replaced by its result there, for the backends RERUN ran")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args, *args.merge)
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            parser.error(f"unknown backend {b}; backends: {', '.join(BACKENDS)}")

    import warnings

    warnings.filterwarnings("ignore")
    # everything the children run is imported here, once, before the forks (so a case
    # costs no import, and every case runs the same code even if the tree changes meanwhile)
    import iree.compiler  # noqa: F401
    import iree.runtime  # noqa: F401
    import torch  # noqa: F401
    from torch_mlir.extras import onnx_importer  # noqa: F401

    import cuvil_mlir.compiler.context  # noqa: F401
    import cuvil_mlir.compiler.pipeline  # noqa: F401
    import cuvil_mlir.core.ir  # noqa: F401
    import cuvil_mlir.runtime.session  # noqa: F401
    from cuvil_mlir.compiler.importers import onnx as _onnx_importer  # noqa: F401
    from cuvil_mlir.lowering import builtin_registry

    registry = builtin_registry()
    for name in registry.names():
        registry.get(name)
    from cuvil_mlir.core.versions import versions

    cases = collect(args.filter, args.sample, args.seed)
    if args.names_file:
        wanted = {line.strip() for line in Path(args.names_file).read_text().splitlines() if line.strip()}
        cases = [c for c in cases if c.name in wanted]
    start = time.perf_counter()
    results = []
    for i, case in enumerate(cases):
        row = {"name": case.name, "op": op_type_of(case)}
        row["family"] = family(row["op"])
        row.update(run_case(case, backends, args.timeout))
        results.append(row)
        if (i + 1) % 100 == 0:  # a partial report survives an interrupted run
            _write(args, backends, cases, results, time.perf_counter() - start, partial=True)
        if args.verbose:
            print(f"[{i + 1}/{len(cases)}] {case.name}: " + ", ".join(
                f"{b} {row[b]['status']}" + (f" ({row[b]['class']}: {row[b]['message'][:120]})" if row[b]["status"] != "pass" else "")
                for b in backends), flush=True)
        elif (i + 1) % 50 == 0:
            print(f"[{i + 1}/{len(cases)}] {time.perf_counter() - start:.0f} s", flush=True)
    wall = time.perf_counter() - start
    report, stem = _write(args, backends, cases, results, wall)
    for b in backends:
        s = report["summary"][b]
        print(f"{b}: {s['passed']}/{s['total']} passed ({100 * (s['rate'] or 0):.1f}%); failures: {s['failure_classes']}")
    print(f"wrote {stem}.json and .md ({wall:.0f} s)")
    return 0


def merge(args, base_path: str, rerun_path: str) -> int:
    """``--merge``: the whole suite from BASE, the cases RERUN ran taking RERUN's results."""
    base, rerun = json.loads(Path(base_path).read_text()), json.loads(Path(rerun_path).read_text())
    backends = [b for b in BACKENDS if any(b in r for r in base["results"])]
    newer = {r["name"]: r for r in rerun["results"]}
    results = []
    for row in base["results"]:
        row = dict(row)
        for b in rerun["backends"]:
            if row["name"] in newer:
                row[b] = newer[row["name"]][b]
        results.append(row)
    commands = [*(base.get("commands") or [base.get("command")]), rerun["command"]]
    report = {
        "date": rerun["date"], "machine": rerun["machine"], "commands": commands,
        "command": "python benchmarks/onnx_conformance.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "versions": rerun["versions"], "backends": backends, "cases": len(results),
        "selection": f"all node tests: {base_path} with the {len(newer)} cases of {rerun_path} ({', '.join(rerun['backends'])}) "
                     "replaced by their results there",
        "timeout_s": rerun["timeout_s"], "wall_s": rerun["wall_s"], "summary": summarize(results, backends), "results": results,
    }
    out = Path(args.out)
    stem = out / (args.name or f"onnx-conformance-{report['date'][:10]}")
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    stem.with_suffix(".md").write_text(_markdown(report))
    for b in backends:
        s = report["summary"][b]
        print(f"{b}: {s['passed']}/{s['total']} passed ({100 * (s['rate'] or 0):.1f}%); failures: {s['failure_classes']}")
    print(f"wrote {stem}.json and .md")
    return 0


def _write(args, backends, cases, results, wall, partial: bool = False):
    from cuvil_mlir.core.versions import versions

    selection = "all node tests" if not (args.filter or args.sample or args.names_file) else \
        ", ".join(x for x in (f"filter {args.filter!r}" if args.filter else "",
                              f"sample {args.sample} (seed {args.seed})" if args.sample else "",
                              f"the {len(cases)} cases named in {args.names_file}" if args.names_file else "") if x)
    if partial:
        selection += f"; PARTIAL: {len(results)} of {len(cases)} run so far"
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}); shared with other jobs",
        "command": "python benchmarks/onnx_conformance.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "versions": versions(("cuvil-mlir", "torch-mlir", "iree-base-compiler", "onnx")),
        "backends": backends, "cases": len(results), "selection": selection, "timeout_s": args.timeout,
        "wall_s": round(wall, 1), "summary": summarize(results, backends), "results": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"onnx-conformance-{report['date'][:10]}" + ("-sample" if args.sample or args.filter or args.names_file else "")
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{stem}.md").write_text(_markdown(report))
    return report, out / stem


if __name__ == "__main__":
    sys.exit(main())
