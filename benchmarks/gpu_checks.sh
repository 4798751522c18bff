#!/usr/bin/env bash
# The checks that need an accelerator, as one script for a lent GPU machine (its image has
# jax with CUDA, numpy, ml_dtypes, safetensors, pytest; not panel: the UI is not run there).
#
#     bash benchmarks/gpu_checks.sh [OUT_DIR] [PARTS...]     # parts: place scan quant ops tests
#
# Each part's output goes to OUT_DIR/<part>.log and to the terminal. The figures it printed
# are in docs/performance.md ("On a GPU").
set -u
out=${1:-/tmp/gpu_checks}
shift || true
parts=${*:-place scan quant tests}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
py=${PY:-python3}
nvidia-smi -L 2>&1 | tee "$out/device.log"
$py -c "import jax, numpy; print('jax', jax.__version__, jax.devices(), 'numpy', numpy.__version__)" \
    2>&1 | tee -a "$out/device.log"
for part in $parts; do
  case $part in
    place) timeout 150 $py benchmarks/bench_place.py --rounds 5 --dir /tmp/bplace --variants "${VARIANTS:-}" ${PLACE_ARGS:-} ;;
    scan) timeout 150 $py benchmarks/bench_health.py --only scan many ;;
    quant) timeout 150 $py benchmarks/bench_quant.py --only dequantize ;;
    ops) timeout 150 $py benchmarks/bench_ops.py --only ops ;;
    tests) timeout 120 $py -m pytest -q -p no:cacheprovider -p no:benchmark --maxfail 40 --timeout 60 -n 4 \
             tests/core/test_device_upload.py tests/core/test_working_set.py tests/core/test_health_one_pass.py \
             tests/core/test_health_scan.py tests/core/test_health_timeline.py \
             tests/core/test_quant.py tests/core/test_dequant_packed.py tests/core/test_packed_ops.py \
             tests/core/test_weighted_sum.py \
             tests/core/test_stacking.py tests/core/test_indexing.py tests/core/test_runner.py \
             tests/core/test_output_slots.py tests/core/test_merge.py tests/core/test_convert.py \
             tests/core/test_half_precision.py tests/core/test_value_diff.py \
             tests/core/test_executable_cache.py tests/core/test_chunked_stream.py tests/core/test_host_read.py ;;
    *) echo "unknown part $part" ;;
  esac 2>&1 | tee "$out/$part.log"
done
