# Sourced by the device scripts of benchmarks/ (run from the repository root on the GPU machine): keeps NVLink
# multicast off (the device tool's rule), quiets Python, and installs the carried wheels of .whl/ (pydantic and
# the rest the GPU image lacks) into /tmp/site when pydantic is missing; puts the checkout on PYTHONPATH.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [ -d .whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
