#!/bin/bash
# On the H200 (device tool), from the repo root: install the IREE runtime wheel and the Vulkan loader,
# stage cuvil_mlir (its runtime side: no torch-mlir, no IREE compiler); if CMP=DIR is set (a
# `cuvil compare --build-only DIR`), run `cuvil compare --from DIR` (its competitors: the manifest's);
# with IO="DIR/case:variant ..." time a CompiledModel call's I/O paths (benchmarks/gpu/io_paths.py);
# then measure the run folders given (benchmarks/gpu/run_on_h200.py).
# COMMON: the folder build.py fetch filled (default .gpu/common).
#   DEADLINE=420 CMP=.gpu/cmp bash benchmarks/gpu/device_run.sh .gpu/run1 [...]
set -u
export PYTHONUNBUFFERED=1 TORCH_FP32=${TORCH_FP32:-all}
SITE=/tmp/iree-site; CV=/tmp/cv; COMMON=${COMMON:-.gpu/common}
# the runtime wheel, and rich (+ its deps) for `cuvil compare`'s table (matplotlib is not there: the PNG is made here)
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $COMMON/whl/*.whl $(ls $COMMON/pywhl/*.whl 2>/dev/null) || exit 1
for f in $(ls $COMMON/deb/*.deb 2>/dev/null); do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1)
mkdir -p $CV && cp -r cuvil_mlir $CV/ && cp -r dialects $CV/cuvil_mlir/dialects && cp -r lowering $CV/cuvil_mlir/lowering && cp -r targets $CV/cuvil_mlir/targets
export PYTHONPATH=$CV:$SITE IREE_SITE=$SITE
# Hugging Face models (gpt2, llama) for the torch side: transformers trimmed to gpt2/llama/auto and the
# deps torch does not already bring (build.py fetch-tf), used only where the machine has no transformers
if ! python3 -c "import transformers" 2>/dev/null && [ -f $COMMON/tfsite.tar.xz ]; then
  tar -xJf $COMMON/tfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/tfsite
fi
python3 -c "import transformers; print('transformers', transformers.__version__, transformers.__file__)" 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pstate --format=csv | tee $OUT/nvidia-smi.txt
if [ -n "${CMP:-}" ] && [ -d "$CMP" ]; then
  python3 -c "import sys; from cuvil_mlir.cli import main; sys.argv=['cuvil']+sys.argv[1:]; sys.exit(main())" \
    compare --from $CMP --json $OUT/compare.json -q 2>&1 | tee $OUT/compare.txt | tail -40
fi
if [ -n "${IO:-}" ]; then  # IO="run/case:variant ...": where a CompiledModel call's time goes (io_paths.py)
  python3 benchmarks/gpu/io_paths.py $IO --out $OUT/io.json 2>&1 | tail -20
fi
if [ "$#" -gt 0 ]; then
  python3 benchmarks/gpu/run_on_h200.py "$@" --common $COMMON --out $OUT --deadline ${DEADLINE:-400} 2>&1 | tee $OUT/run.log | grep -v "^ \|^{\|^}\|^\[\|^Traceback"
fi
