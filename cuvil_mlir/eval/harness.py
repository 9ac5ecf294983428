"""The comparison harness: one model on several targets, pattern configurations and PyTorch,
side by side: compile time, latency, and errors against a reference.

    from cuvil_mlir.eval.harness import compare
    report = compare(model, (x,), targets=["cpu", "vulkan", "cuda"],
                     configs=["default", "plain-iree", "without:raise-torch-to-cuvil"],
                     competitors=["eager", "torch.compile"])
    report.print(); report.save_json("report.json"); report.plot("report.png")

Each entry (a row of the report) is a target with a configuration, or a PyTorch competitor
on a device. It is ``ok`` (ran, every output within its dtype's tolerance), ``mismatch`` (ran,
an output is not), ``failed`` (compile, load or call failed: the error and its repro) or
``skipped`` (no device here: the runtime's device discovery says why). How latency and errors
are measured: cuvil_mlir/eval/measure.py. The JSON fields: docs/harness.md.

Everything is built first (compile, load, first call, errors on every input set), then the
entries are timed in interleaved rounds, so a burst of load on the machine hits all alike.

This module is the harness's public face (``cuvil_mlir.harness`` is the same module); the code
lives in the modules of this folder, by role:

    comparison.py  compare(), and compare_plan() taking the settings grouped
    configs.py     Config, parse_config, Plan (what to build: targets x configurations, -O, patterns)
    entries.py     Baseline (what to compare against), Expected; building, checking and timing entries
    inputs.py      the model, its input sets, the reference's outputs, FILE.py:FACTORY specs
    remote.py      build_only / run_from: compile here, run where the devices are
    bench.py       bench_package: one package's latency
    report.py      Entry, Numerics, Report, machine_info
"""

from cuvil_mlir.eval.bench import BENCH_SCHEMA, bench_package
from cuvil_mlir.eval.comparison import compare, compare_plan
from cuvil_mlir.eval.configs import Config, Plan, parse_config
from cuvil_mlir.eval.entries import COMPETITORS, CUDA_GRAPH_MODES, GPU_KINDS, Baseline, Expected
from cuvil_mlir.eval.inputs import REFERENCES, load_model_spec, make_input_sets, program_input_specs, reference_outputs
from cuvil_mlir.eval.measure import DEFAULT_RTOL, Latency, OutputError, TimingSettings
from cuvil_mlir.eval.remote import BUILD_SCHEMA, MANIFEST, build_only, run_from
from cuvil_mlir.eval.report import SCHEMA, SCHEMA_VERSION, Entry, Numerics, Report, machine_info

__all__ = [
    "BENCH_SCHEMA", "BUILD_SCHEMA", "COMPETITORS", "CUDA_GRAPH_MODES", "DEFAULT_RTOL", "GPU_KINDS", "MANIFEST", "REFERENCES",
    "SCHEMA", "SCHEMA_VERSION", "Baseline", "Config", "Entry", "Expected", "Latency", "Numerics", "OutputError", "Plan",
    "Report", "TimingSettings", "bench_package", "build_only", "compare", "compare_plan", "load_model_spec",
    "machine_info", "make_input_sets", "parse_config", "program_input_specs", "reference_outputs", "run_from",
]
