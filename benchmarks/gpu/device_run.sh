#!/bin/bash
# On the H200 (device tool), from the repo root: install the IREE runtime wheel and the Vulkan loader,
# stage cuvil_mlir (its runtime side: no torch-mlir, no IREE compiler), then measure the run folders
# given (benchmarks/gpu/run_on_h200.py) and, if .gpu/cmp exists, run `cuvil compare --from .gpu/cmp`.
#   bash benchmarks/gpu/device_run.sh .gpu/run1 [...]
set -u
export PYTHONUNBUFFERED=1 TORCH_FP32=${TORCH_FP32:-transformer,gpt2}
SITE=/tmp/iree-site; CV=/tmp/cv
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .gpu/common/whl/*.whl || exit 1
for f in .gpu/common/deb/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1)
mkdir -p $CV && cp -r cuvil_mlir $CV/ && cp -r dialects $CV/cuvil_mlir/dialects && cp -r lowering $CV/cuvil_mlir/lowering && cp -r targets $CV/cuvil_mlir/targets
export PYTHONPATH=$CV:$SITE IREE_SITE=$SITE
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 benchmarks/gpu/run_on_h200.py "$@" --out $OUT --deadline ${DEADLINE:-400} 2>&1 | tee $OUT/run.log | grep -v "^ \|^{\|^}"
if [ -d .gpu/cmp ]; then
  python3 -c "import sys; from cuvil_mlir.cli import main; sys.argv=['cuvil']+sys.argv[1:]; sys.exit(main())" \
    compare --from .gpu/cmp --json $OUT/compare.json --plot $OUT/compare.png -q 2>&1 | tee $OUT/compare.txt
  python3 -c "import torch; ep=torch.export.load('.gpu/cmp/model.pt2'); print('pt2 from torch 2.13 loads in', torch.__version__, ep.module()(torch.randn(2,16,64)).shape)" 2>&1 | tail -2 | tee $OUT/pt2.txt
fi
