"""`cuvil profile` of modules that build.py compiled with their dispatch call sites recorded
(``--record-dispatches``), on the GPU machine: each dispatch's time per call (ncu on CUDA), mapped
to its nn.Module path and Cuvil op, as cuvil_mlir.eval.profiler.profile_compiled does for a
package; here the module, its parameter archive (external weights) and the call sites come from a
case folder (case.json, <variant>.dispatches.json), so no second copy of the weights travels.

Runs THERE, with the IREE runtime wheel and cuvil_mlir's runtime side on PYTHONPATH (run.sh of the
e2e device step sets both up) and the run folder already unpacked by run_on_h200.py:

    python3 benchmarks/gpu/e2e_profile.py RUN --cases gpt2-12l-b1:cuvil_h200_td,llama-2048-b8:cuvil_h200_td \\
        --out $OUT/profiles.json [--deadline 120]

Writes every profile (the `cuvil-profile` schema, docs/profiling.md, plus the case's kernel records)
into one JSON file, after each; `report` below and benchmarks/gpu/e2e_report.py make the tables and
the chart here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parameters_path(case_dir: Path, info: dict) -> Path:
    name = info["parameters"]
    return case_dir / name if (case_dir / name).exists() else case_dir.parent / "_params" / name


def profile_case(case_dir: Path, variant: str, runtime_flags=()) -> dict:
    from cuvil_mlir.eval.profiler import join, measure

    case = json.loads((case_dir / "case.json").read_text())
    info = case["variants"][variant]
    if "dispatches_file" not in info:
        raise ValueError(f"{case_dir.name}:{variant} has no recorded dispatches (build.py --record-dispatches {variant})")
    meta = json.loads((case_dir / info["dispatches_file"]).read_text())
    inputs = [np.load(case_dir / f) for f in case["inputs"][info.get("input_dtype", info["dtype"])]]
    params = parameters_path(case_dir, info) if info.get("parameters") else None
    timing = measure(case_dir / info["file"], info["driver"], inputs, sites=meta["dispatches"], runtime_flags=tuple(runtime_flags),
                     parameters=params)
    prof = join(timing, meta["dispatches"], target=meta["target"], peak=peak_of(meta["target"]),
                pattern_sites=meta["pattern_sites"], model=f"{case['case']} ({variant})")
    prof["case"], prof["variant"] = case["case"], variant
    prof["kernels"] = info.get("kernels", [])  # which op got which prebuilt kernel (or why none)
    if params is not None:  # the archive's path there says nothing here
        prof["commands"] = [c.replace(str(params), "$PARAMS") for c in prof["commands"]]
    return prof


def peak_of(target: str) -> dict | None:
    from cuvil_mlir.targets import parse_target

    return parse_target(target).peak()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a run folder (build.py pack), already unpacked")
    p.add_argument("--cases", required=True, help="case:variant,... in order of importance")
    p.add_argument("--out", type=Path, required=True, help="the JSON file (all profiles)")
    p.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new profile starts")
    p.add_argument("--runtime-flag", action="append", default=[], help="more iree-benchmark-module flags")
    opts = p.parse_args()
    start = time.monotonic()
    data = json.loads(opts.out.read_text()) if opts.out.exists() else {"profiles": [], "errors": []}
    for item in filter(None, opts.cases.split(",")):
        case, _, variant = item.partition(":")
        if time.monotonic() - start > opts.deadline:
            data["errors"].append(f"{item}: skipped: deadline")
            continue
        t0 = time.monotonic()
        try:
            prof = profile_case(opts.run / case, variant, opts.runtime_flag)
            prof["profile_s"] = round(time.monotonic() - t0, 1)
            data["profiles"].append(prof)
            from cuvil_mlir.eval.profiler import print_profile

            print_profile(prof, limit=15)
        except Exception as e:
            data["errors"].append(f"{item}: {type(e).__name__}: {str(e)[-1500:]}")
            traceback.print_exc()
        tmp = opts.out.with_name(opts.out.name + ".part")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.rename(opts.out)
        print(f"{item}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
