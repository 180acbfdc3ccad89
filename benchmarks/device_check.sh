#!/usr/bin/env bash
# The headline benchmarks on whatever accelerator JAX finds (GPU/TPU), as one short script.
#
# The CPU figures in RESULTS.md come from a shared 2-core machine; the absolute throughput
# targets (ProximityTaxel probe-steps/s, KinematicTaxel taxel-steps/s) and the chain-over-bare
# ratio mean most on an accelerator. This runs, each under its own time limit:
#   bench_proximity.py --headline   (1024 x 121 x 500 and 4096 x 121 x 2000)
#   bench_imperfections.py          (full chain vs bare KinematicTaxel, 1024 environments)
#   bench_kinematic.py              (64 / 1024 / 4096 environments, forward and gradient)
#   bench_elastomer.py              (FFT vs direct dilation, 11 / 32 / 64 grids)
# and writes each log to OUT_DIR (default $OUT, else ./device-check) plus summary.json, the
# last JSON line of each benchmark keyed by its name.
#
# Usage:  bash benchmarks/device_check.sh [OUT_DIR]
# Needs jax (with the accelerator's plugin), numpy and optax; trimesh (for
# bench_proximity's sphere) is installed from ./.whl/*.whl when it is missing and wheels are
# there (a machine without network access: `pip download --no-deps trimesh -d .whl` first).
# Runs from the repository root without installing difftaxel (PYTHONPATH).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-device-check}}"
mkdir -p "$out"
py="${PYTHON:-python3}"
if ! "$py" -c "import trimesh" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/dt-site .whl/*.whl
    export PYTHONPATH="/tmp/dt-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$py" -c "import jax; print('jax', jax.__version__, jax.default_backend(), jax.devices())" \
    | tee "$out/devices.txt"
run() {  # name, time limit (s), arguments
    local name=$1 limit=$2
    shift 2
    echo "== $name ($*)"
    timeout "$limit" "$py" "$@" >"$out/$name.txt" 2>&1
    echo "   exit $?; last line: $(tail -n 1 "$out/$name.txt" | cut -c1-300)"
}
run proximity 200 benchmarks/bench_proximity.py --headline --repeats 5
run imperfections 150 benchmarks/bench_imperfections.py --repeats 7
run kinematic 200 benchmarks/bench_kinematic.py --rounds 5
run elastomer 120 benchmarks/bench_elastomer.py --repeats 5
"$py" - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
summary = {}
for name in ("proximity", "imperfections", "kinematic", "elastomer"):
    f = out / f"{name}.txt"
    lines = f.read_text().strip().splitlines() if f.exists() else []
    try:
        summary[name] = json.loads(lines[-1])
    except (IndexError, ValueError):
        summary[name] = None
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print("summary:", out / "summary.json")
EOF
