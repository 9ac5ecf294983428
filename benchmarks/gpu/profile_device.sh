#!/bin/bash
# On the H200 (device tool), from the repo root: the runtime wheel, iree-profile (the trimmed wheel
# lacks it: copied from the CPU machine's runtime wheel, a static tool), cuvil_mlir's runtime side
# from $CODE, then benchmarks/gpu/profile_run.py on the packages in $PKGS.
#   CODE=.gpu/profile/code PKGS=.gpu/profile bash .gpu/profile/code/benchmarks/gpu/profile_device.sh
set -u
export PYTHONUNBUFFERED=1
SITE=/tmp/iree-site; CV=/tmp/cv
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .gpu/common/whl/*.whl || exit 1
cp $CODE/tools/iree-profile $SITE/iree/_runtime_libs/ && chmod +x $SITE/iree/_runtime_libs/iree-profile
mkdir -p $CV && cp -r $CODE/cuvil_mlir $CV/ && cp -r $CODE/dialects $CV/cuvil_mlir/dialects && cp -r $CODE/lowering $CV/cuvil_mlir/lowering && cp -r $CODE/targets $CV/cuvil_mlir/targets
export PYTHONPATH=$CV:$SITE
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pstate --format=csv | tee $OUT/nvidia-smi.txt
python3 -c "import torch, numpy, sys; print('torch', torch.__version__, torch.version.cuda, 'numpy', numpy.__version__, sys.version.split()[0])" | tee $OUT/versions.txt
which ncu nsys 2>&1 | tee $OUT/tools.txt
if [ -n "${IO_ONLY:-}" ]; then  # the I/O paths only (IO_ONLY=1)
  python3 $CODE/benchmarks/gpu/profile_run.py $PKGS --out $OUT ${CASES:+--cases $CASES} --io-only 2>&1 | tee $OUT/run.log | tail -20
else
  python3 $CODE/benchmarks/gpu/profile_run.py $PKGS --out $OUT ${CASES:+--cases $CASES} 2>&1 | tee $OUT/run.log | tail -150
  python3 $CODE/benchmarks/gpu/profile_run.py $PKGS --out $OUT ${CASES:+--cases $CASES} --export-mode 2>&1 | tee $OUT/export.log | tail -30
fi
# the device tool brings back a few files only: everything in one archive
cd $OUT && tar -czf /tmp/results.tgz * && rm -rf $OUT/* && mv /tmp/results.tgz $OUT/
