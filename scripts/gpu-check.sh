#!/usr/bin/env bash
# One command for a GPU host, no network needed: the GPU tests and a short GPU benchmark.
#
#   scripts/gpu-check.sh [WHEEL_DIR]
#
# WHEEL_DIR: a folder of wheels for what this host's Python lacks (pycuda, xgboost,
# sqlalchemy, ...). They are installed with pip --no-index --no-deps into a temporary folder,
# which goes on PYTHONPATH after this checkout (pure Python: nothing is built). Without
# WHEEL_DIR the current environment is used as it is. $PYTHON picks the interpreter
# (default python3). See docs/gpu.md.
#
# Runs, in under 8 minutes: the tests only a GPU can run (marked cuda_device; on several
# pytest-xdist workers where xdist is installed: nvcc builds dominate; CI runs the rest),
# benchmarks/gpu.py in float16 (on Hopper, sm_90a: the wgmma kernels), a short model check
# (benchmarks/gpu_models.py --quick: ResNet-18 in float16 at batch 1, torch against
# autotune with and without CUDA graphs), bfloat16 matmuls, then float32, 8 trials per
# workload, each step under a cap (benchmarks stop between workloads) while budget lasts.
# Exit status: 0 every step passed, 1 a step failed or timed out, 2 bad arguments or no
# GPU / nvcc, 3 a module the checks import is missing.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
BUDGET_S=470          # the whole run: under 8 minutes with setup
BENCH_TRIALS=8

usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $2" >&2; exit "$1"; }

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -*) usage >&2; die 2 "unknown option $1" ;;
esac
[ $# -le 1 ] || { usage >&2; die 2 "expected at most one argument (WHEEL_DIR), got $#"; }

WHEEL_DIR=${1:-}
wheels=()
if [ -n "$WHEEL_DIR" ]; then
  [ -d "$WHEEL_DIR" ] || die 2 "WHEEL_DIR '$WHEEL_DIR' is not a directory"
  shopt -s nullglob
  wheels=("$WHEEL_DIR"/*.whl)
  shopt -u nullglob
  [ ${#wheels[@]} -gt 0 ] || die 2 "WHEEL_DIR '$WHEEL_DIR' holds no .whl files"
fi

# --- the GPU and nvcc, before anything is installed ---------------------------------------
command -v nvidia-smi >/dev/null 2>&1 || die 2 "no GPU: nvidia-smi is not on PATH"
if ! gpus=$(nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader 2>&1) \
    || [ -z "$gpus" ]; then
  die 2 "no GPU: nvidia-smi lists none (${gpus:-no output})"
fi
cap=$(echo "$gpus" | head -n1 | awk -F', *' '{print $3}')
[[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]] || die 2 "cannot read GPU 0's compute capability from: $gpus"
ARCH="sm_${cap/./}"
# Hopper's own target (wgmma, TMA, setmaxnreg) for the half-precision benchmarks
HALF_ARCH=$ARCH; [ "$ARCH" = "sm_90" ] && HALF_ARCH=sm_90a
NVCC=$(command -v nvcc || true)
for root in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [ -n "$NVCC" ] && break
  [ -n "$root" ] && [ -x "$root/bin/nvcc" ] && NVCC="$root/bin/nvcc"
done
[ -n "$NVCC" ] || die 2 "no nvcc (PATH, \$CUDA_HOME, /usr/local/cuda): install the CUDA toolkit"
echo "gpu-check: GPU $(echo "$gpus" | head -n1), target cuda -arch=$ARCH; nvcc $NVCC"

# --- the environment -------------------------------------------------------------------
SITE=""
if [ ${#wheels[@]} -gt 0 ]; then
  SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")
  trap 'rm -rf "$SITE"' EXIT
  # the distribution names; pip picks each one's wheel for this Python from the folder
  names=$(for w in "${wheels[@]}"; do basename "$w" | cut -d- -f1; done | sort -u)
  echo "gpu-check: installing from $WHEEL_DIR into $SITE:" $names
  pip_install() {
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
        --find-links "$WHEEL_DIR" --target "$SITE" "$@"
  }
  # shellcheck disable=SC2086  # one argument per name
  if ! pip_install $names; then
    # one at a time: a wheel for another Python or platform must not stop the others
    # (what the checks need and did not get is named by the import check below)
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die 1 "$PYTHON has no pip"
    for name in $names; do
      pip_install "$name" || echo "gpu-check: no wheel of $name installs here; skipped" >&2
    done
  fi
fi
export PYTHONPATH="$REPO${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO" || die 1 "cannot enter $REPO"

missing=$("$PYTHON" - <<'EOF'
import importlib
mods = ["numpy", "llvmlite", "torch", "pycuda.driver", "xgboost", "sqlalchemy", "alembic",
        "pydantic_settings", "httpx", "rich", "librt", "greenlet", "pytest", "hypothesis",
        "autotune"]
missing = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # ImportError, or a broken install
        missing.append(f"{m} ({type(e).__name__}: {e})")
print("; ".join(missing))
EOF
) || die 3 "$PYTHON cannot run"
[ -z "$missing" ] || die 3 "missing modules: $missing; add their wheels to WHEEL_DIR"

# --- the checks --------------------------------------------------------------------------
declare -a results=()
failed=0
# step NAME CAP_SECONDS COMMAND...: run under what is left of the budget; an argument
# @BUDGET@ becomes the seconds the command should plan to end within (the cap less a margin
# for its exit), so a benchmark stops between workloads rather than being cut inside one
step() {
  local name=$1 cap=$2 left rc start=$SECONDS arg
  shift 2
  left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt 10 ]; then
    results+=("$name: not run (the 8-minute budget is spent)"); failed=1; return
  fi
  [ "$cap" -lt "$left" ] || cap=$left
  local -a cmd=()
  for arg in "$@"; do
    [ "$arg" = "@BUDGET@" ] && arg=$(( cap > 30 ? cap - 15 : cap / 2 ))
    cmd+=("$arg")
  done
  echo; echo "=== $name (at most ${cap} s)"
  timeout --signal=INT --kill-after=10 "$cap" "${cmd[@]}"
  rc=$?
  case $rc in
    0) results+=("$name: passed in $((SECONDS - start)) s") ;;
    124|137) results+=("$name: TIMED OUT after ${cap} s"); failed=1 ;;
    *) results+=("$name: FAILED (exit $rc)"); failed=1 ;;
  esac
}

# The tests only a GPU can run (marked cuda_device, in any folder): CI runs every other one.
# nvcc builds dominate them: several pytest-xdist workers where xdist is installed.
workers=()
if "$PYTHON" -c "import xdist" >/dev/null 2>&1; then
  n=$(( $(nproc) / 2 )); [ "$n" -le 8 ] || n=8
  [ "$n" -lt 2 ] || workers=(-n "$n")
fi
# only the files that hold such tests: collecting the others would import what this host
# may lack (the service's fuzzing needs jsonschema), for tests that could not run anyway
gpu_tests=$(grep -rl --include='test_*.py' cuda_device tests | sort)
# shellcheck disable=SC2086  # one argument per file
step "GPU tests (-m cuda_device)" 160 "$PYTHON" -m pytest -q -rs -p no:cacheprovider \
    ${workers[@]+"${workers[@]}"} -m cuda_device $gpu_tests
step "benchmarks/gpu.py --dtype float16" 150 "$PYTHON" benchmarks/gpu.py --arch "$HALF_ARCH" \
    --dtype float16 --trials "$BENCH_TRIALS" --budget @BUDGET@
step "benchmarks/gpu_models.py --quick --layout auto" 110 "$PYTHON" benchmarks/gpu_models.py --quick --layout auto
step "benchmarks/gpu.py --dtype bfloat16 --only matmul" 60 "$PYTHON" benchmarks/gpu.py \
    --arch "$HALF_ARCH" --dtype bfloat16 --only matmul --trials "$BENCH_TRIALS" --budget @BUDGET@
step "benchmarks/gpu.py" 60 "$PYTHON" benchmarks/gpu.py --arch "$ARCH" --trials "$BENCH_TRIALS" \
    --budget @BUDGET@

echo; echo "=== gpu-check summary ($SECONDS s)"
printf '  %s\n' "${results[@]}"
exit "$failed"
