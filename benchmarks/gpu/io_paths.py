"""Where a CompiledModel call's time goes on a GPU: the same module called through each way
inputs can reach the device and outputs can come back (runs THERE, on the H200, with the IREE
runtime wheel and cuvil_mlir's runtime side on PYTHONPATH; device_run.sh runs it with IO=...).

    python3 benchmarks/gpu/io_paths.py .gpu/run1/prec-block256-b8:cuvil_h200 [...] --out $OUT/io.json

Per module, wall-clock per call (median of 200 after 20 warm-up calls):
  import_<alloc>   cuvil_mlir.runtime.session.Session(copy=False, allocator=<alloc>).invoke: numpy inputs
                   imported as host memory, outputs read back with to_host()
  copy_<alloc>     Session(copy=True, ...): device buffers filled by copy, outputs through pinned
                   staging buffers kept across calls
                   (<alloc>: IREE's default device allocator or its caching one)
  device_inputs    inputs uploaded once (asdevicearray), outputs read back with to_host()
  device_all       inputs uploaded once, outputs left on the device (the call's own time)
  chosen           what Session picks by itself on the driver (CompiledModel's path)
(iree-benchmark-module's number for the same module is in the run's results file.)
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import time
from pathlib import Path

import numpy as np

WARMUP, CALLS = 20, 200


def timed(fn) -> dict:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(samples), "p10_ms": float(np.percentile(samples, 10)),
            "p90_ms": float(np.percentile(samples, 90))}


def measure(case_dir: Path, variant: str) -> dict:
    import iree.runtime as rt

    from cuvil_mlir.runtime.session import Session

    case = json.loads((case_dir / "case.json").read_text())
    info = case["variants"][variant]
    inputs = [np.load(case_dir / f) for f in case["inputs"][info.get("input_dtype", info["dtype"])]]
    path = case_dir / info["file"]
    vmfb = path.read_bytes() if path.exists() else lzma.decompress((case_dir / (info["file"] + ".xz")).read_bytes())
    driver = info["driver"]
    out = {"case": case_dir.name, "variant": variant, "input_bytes": int(sum(a.nbytes for a in inputs))}

    sessions, first = {}, {}
    for copy in (False, True):
        for allocator in ("default", "caching"):
            name = f"{'copy' if copy else 'import'}_{allocator}"
            session = sessions[name] = Session(vmfb, driver, copy=copy, allocator=allocator)
            outs = first[name] = session.invoke("main", inputs)
            out["output_bytes"] = int(sum(o.nbytes for o in outs))
            out[name] = timed(lambda: session.invoke("main", inputs))
    # every path computes the same outputs
    out["same_outputs"] = all(all(np.array_equal(a, b) for a, b in zip(o, first["import_default"])) for o in first.values())
    chosen = Session(vmfb, driver)  # what CompiledModel does on this driver
    out["chosen"] = {"copy": chosen.copies, "allocator": chosen.allocator}

    session = sessions["import_caching"]
    call = session._invoker("main")
    on_device = [rt.asdevicearray(session._device, a) for a in inputs]

    def fetch():
        result = call(*on_device)
        for r in result if isinstance(result, (tuple, list)) else [result]:
            r.to_host()

    out["device_inputs"] = timed(fetch)
    out["device_all"] = timed(lambda: call(*on_device))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("modules", nargs="+", metavar="CASE_DIR:VARIANT")
    p.add_argument("--out", required=True)
    opts = p.parse_args()
    rows = []
    for spec in opts.modules:
        case_dir, _, variant = spec.rpartition(":")
        try:
            rows.append(measure(Path(case_dir), variant))
        except Exception as e:  # a failing module is a result
            rows.append({"case": Path(case_dir).name, "variant": variant, "status": f"failed: {type(e).__name__}: {e}"})
        print(json.dumps(rows[-1]), flush=True)
        Path(opts.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
