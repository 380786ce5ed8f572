#!/usr/bin/env bash
# The compiled waves loop (schedsim/sim/_cwaves.c) under AddressSanitizer + UndefinedBehaviorSanitizer (gcc):
# builds the extension with both in a throwaway clone of this checkout's HEAD and runs its tests there, every
# compiled run also checked against the Python loop by the tests, and bad input to its helpers (test_compiled_helpers_agree,
# test_emitter_inputs_c) refused. Any sanitizer report stops the run (rc != 0).
#   bash .ci/cwaves_sanitize.sh            (~30 s on 2 cores; needs gcc with libasan/libubsan)
set -euo pipefail
PY=${PYTHON:-python}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$here" "$tmp/src"
cd "$tmp/src"
CFLAGS='-fsanitize=address,undefined -fno-omit-frame-pointer -g' LDFLAGS='-fsanitize=address,undefined' \
    "$PY" setup.py build_ext --inplace -q 2>/dev/null
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1,print_stacktrace=1 PYTHONPATH="$PWD" \
    "$PY" -m pytest -q -p no:cacheprovider tests/sim/test_cwaves.py tests/sim/test_cwaves_helpers.py tests/gpu/test_gpu_model.py \
    tests/sim/test_compiled_helpers_agree.py tests/pipeline/test_emitter_inputs_c.py
echo "sanitizers: no report"
