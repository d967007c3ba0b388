#!/usr/bin/env bash
# Whole CPU nights with no network, from a cold cache, in both forms: the CPU profile's pip candidate, and the same
# candidate layered over a base venv that holds the CPU torch. Each makes its wheelhouse with the network first
# (`spark-nightly wheelhouse`), then runs `spark-nightly nightly` inside a network namespace that has only loopback
# (`unshare -n`, as root). Prints each step's time, the wheelhouse's size and the verdict.
#   benchmarks/offline_nights.sh [WORK]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/offline-nights}
gate=$here/.venv/bin/spark-nightly
rm -rf "$work" && mkdir -p "$work"
timed() { local started=$SECONDS; "$@"; echo "  ($(( SECONDS - started )) s)"; }

offline_night() {  # offline_night NAME [BASE_PYTHON]: a cold cache, no network, the wheelhouse alone
    local name=$1 base=${2:-}
    mkdir -p "$work/$name" && cd "$work/$name"
    unshare -n sh -c 'ip link set lo up; exec "$@"' sh env \
        SPARK_NIGHTLY_PATHS_CONFIG="$here" SPARK_NIGHTLY_PATHS_CACHE="$work/$name/cache" \
        SPARK_NIGHTLY_PATHS_STATE="$work/$name/state" SPARK_NIGHTLY_PATHS_WHEELHOUSE="$work/wheelhouse-$name" \
        SPARK_NIGHTLY_NETWORK_OFFLINE=true SPARK_NIGHTLY_CANDIDATE_BASE_PYTHON="$base" \
        "$gate" nightly --profile cpu > "$work/$name/night.log" 2>&1 || true
    grep -E "^nightly |^release: |candidate: done|weights: done|runtime .*: ready" "$work/$name/night.log"
}

echo "== the pip candidate"
timed "$gate" --set "paths.config=$here" wheelhouse --profile cpu --dest "$work/wheelhouse-pip" 2>/dev/null
timed offline_night pip

echo "== layered over a base venv holding the CPU torch"
torch=$(grep -o '"torch==[^"]*"' "$here/models.yaml" | head -1 | tr -d '"')
timed python3 -m venv "$work/base"
timed "$work/base/bin/pip" install -q "$torch"
timed env SPARK_NIGHTLY_CANDIDATE_BASE_PYTHON="$work/base/bin/python" "$gate" --set "paths.config=$here" \
    wheelhouse --profile cpu --dest "$work/wheelhouse-layered" 2>/dev/null
timed offline_night layered "$work/base/bin/python"
