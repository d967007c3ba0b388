#!/usr/bin/env bash
# The GPU nights of docs/gpu.md, rerun on any x86-64 Linux host with one NVIDIA GPU and no network. Given a base
# interpreter that holds torch with CUDA (BASE_PYTHON, default python3) and a wheelhouse made for it by
# `spark-nightly wheelhouse --profile gpu --gate --base-listing ...`, it installs the gate over the base from the
# wheelhouse's `spark-nightly` set, then runs through `spark-nightly nightly --profile gpu` (offline): a good night, a slower build,
# a NaN build, a build that ignores the grammar, an entry whose declared kernel the build does not select, and the
# good build again; the golden variants (broken engines served in the good build's place, benchmarks/
# gpu_golden_variants.py); then the boot spread of the good build. Each night's verdict, reason and stage times are
# printed and kept in WORK/summary.txt.
#   benchmarks/gpu_nights.sh WHEELHOUSE [WORK] [STEPS]
#   STEPS (default all, in this order): good,slower,again,nan,grammar,kernel,variants,spread; `reference` records
#   the golden reference the variants need without a whole night (`spark-nightly golden ENTRY --record`).
#   Built nights (`--profile gpu-built`, their own history under WORK/state-built), from the repository tarball
#   VLLM_REPO made by `python -m benchmarks.gpu_built_repo` (vLLM 0.26.0's tree, PRs 301-303, a day of main;
#   FlashInfer 0.6.14's tree, built into the night's flashinfer-python):
#   built (main alone), guilty (main with PRs 301,302,303: 302 shifts the logits), built-again (main alone: closes
#   the guilty night's alert), day (main moved to the day's 16
#   commits, the 11th a 2 ms sleep per engine step: the night fails on main alone and bisects it), day-moderate (main
#   moved to 10 commits, a C++ change and its revert, the 7th a 0.6 ms sleep per engine step: about 0.75x decode)
#   two-hosts (a machine with two GPUs): the gpu profile's cluster entry served across two network namespaces, one GPU
#   each, through Ray and NCCL over their fast link, its cells by `spark-nightly bench`, and its kill, link-down and
#   Ctrl-C cases
#   (benchmarks/gpu_two_hosts.py; TWO_HOST_CASES picks some, TWO_HOST_DEBS brings ip and ssh to an image without them)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wheelhouse=$(realpath "$1") work=$(realpath -m "${2:-/tmp/gpu-nights}")
steps=${3:-good,slower,again,nan,grammar,kernel,variants,spread}
base=${BASE_PYTHON:-python3}
entry=smollm2-135m-instruct-gpu
mkdir -p "$work"
summary=$work/summary.txt
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$summary"; }

if [ ! -x "$work/gate/bin/python" ]; then  # the gate in a venv over the base: its own wheels, nothing fetched
    started=$(date +%s)
    "$base" -m venv "$work/gate"
    site=$("$work/gate/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/spark-nightly-base.pth"
    gate_files=$("$work/gate/bin/python" -c '
import json, sys
index = json.load(open(sys.argv[1] + "/wheelhouse.json"))
(found,) = [s for s in index["sets"].values() if s["name"] == "spark-nightly"]
print(" ".join(sys.argv[1] + "/files/" + f["filename"] for f in found["files"]))' "$wheelhouse")
    "$work/gate/bin/python" -m pip install -q --no-index --no-deps $gate_files
    say "gate installed over $("$base" -c 'import sys; print(sys.executable)') in $(( $(date +%s) - started )) s"
fi
export SPARK_NIGHTLY_PATHS_CACHE=$work/cache SPARK_NIGHTLY_PATHS_STATE=$work/state SPARK_NIGHTLY_PATHS_RUNS=$work/runs
export SPARK_NIGHTLY_PUBLISH_LOCAL_DIR=$work/releases SPARK_NIGHTLY_PATHS_WHEELHOUSE=$wheelhouse
export SPARK_NIGHTLY_NETWORK_OFFLINE=true SPARK_NIGHTLY_CANDIDATE_BASE_PYTHON=$base SPARK_NIGHTLY_PATHS_CONFIG=$here
gate() { (cd "$here" && "$work/gate/bin/python" -m pipeline "$@"); }

variant() {  # a copy of the configuration with one change to the gpu profile or its entry
    local name=$1 change=$2
    rm -rf "$work/config-$name" && mkdir -p "$work/config-$name"
    cp -r "$here/models.yaml" "$here/thresholds" "$here/golden" "$work/config-$name/"
    (cd "$here" && "$work/gate/bin/python" - "$work/config-$name/models.yaml" "$change" <<'PY'
import sys, yaml
path, change = sys.argv[1], sys.argv[2]
data = yaml.safe_load(open(path))
gpu = data["profiles"]["gpu"]["candidate"]
entry = next(e for e in data["models"] if e["id"] == "smollm2-135m-instruct-gpu")
if change.startswith("remove:"):  # another build: a candidate that removes a name nobody installs
    gpu["remove"] = [change.split(":", 1)[1]]
elif change.startswith("attention:"):  # the entry declares a kernel the build does not select
    entry["kernels"]["attention"] = change.split(":", 1)[1]
yaml.safe_dump(data, open(path, "w"), sort_keys=False)
PY
    )
    echo "$work/config-$name"
}

host_line() {  # the host as a night starts: load, the GPU's clocks and heat, and any process still on it
    local gpu apps
    gpu=$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
        --format=csv,noheader 2>/dev/null | head -1)
    apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | tr '\n' ' ')
    say "host before $1: load $(cut -d' ' -f1-3 /proc/loadavg); gpu ${gpu:-unread}; on the GPU: ${apps:-nothing}"
}

night() {  # night NAME [CONFIG [ARGS...]]: one nightly (NIGHT_PROFILE, default gpu), its verdict and stage times
    local name=$1 config=${2:-$here} started rc
    shift $(( $# < 2 ? $# : 2 ))
    host_line "$name"
    started=$(date +%s)
    gate --set "paths.config=$config" nightly --profile "${NIGHT_PROFILE:-gpu}" "$@" > "$work/night-$name.log" 2>&1
    rc=$?
    say "night $name: exit $rc in $(( $(date +%s) - started )) s"
    grep -E "^nightly |^release: |$entry: (PASS|FAIL|XFAIL|ABORTED|SKIPPED) at|boots|error:|vllm: |culprit|bisect" \
        "$work/night-$name.log" | tail -24 | tee -a "$summary"
    local run
    run=$(ls -td "$work"/runs/*/ | head -1)
    "$work/gate/bin/python" - "$run" <<'PY' | tee -a "$summary"
import json, sys, pathlib
for path in sorted(pathlib.Path(sys.argv[1]).glob("entries/*.json")):
    outcome = json.loads(path.read_text())
    numbers = outcome.get("numbers", {})
    print(f"  {outcome['entry']}: {outcome['status']} at {outcome['stage']}: {outcome['reason'][:400]}")
    print(f"    stage_s {numbers.get('stage_s')}; boots in turns {numbers.get('turns', {}).get('boots', 0)}")
    for cell, found in sorted(numbers.get("cells", {}).items()):
        print(f"    {cell}: {found}")
    for prompt, found in sorted((numbers.get("drift_evidence") or {}).items()):
        shown = {k: v for k, v in found.items() if k.endswith(("_mean_abs_diff", "_max_abs_diff", "_tokens", "_non_finite")) or k.startswith("first_") or k == "judge"}
        print(f"    drift {prompt}: {shown or found}")
PY
}

built_night() {  # built_night NAME [PRS [ARGS...]]: a night of the gpu-built profile over the carried repositories
    local prs=${2:-}
    if [ ! -d "$work/vllm-repo" ]; then
        mkdir -p "$work/vllm-repo" && tar -xzf "${VLLM_REPO:?the tarball of python -m benchmarks.gpu_built_repo}" \
            -C "$work/vllm-repo"
    fi
    local args=(--set "sources.vllm.repo=file://$work/vllm-repo/o/upstream.git" --set sources.vllm.ref=main)
    [ -d "$work/vllm-repo/f/upstream.git" ] && args+=(  # FlashInfer's tree, where the tarball carries it
        --set "sources.flashinfer.repo=file://$work/vllm-repo/f/upstream.git" --set sources.flashinfer.ref=main)
    [ -n "$prs" ] && args+=(--set "sources.vllm.prs=$prs")
    args+=("${@:3}")
    SPARK_NIGHTLY_PATHS_STATE=$work/state-built NIGHT_PROFILE=gpu-built night "$1" "$here" "${args[@]}"
    local run
    run=$(ls -td "$work"/runs/*/ | head -1)
    for found in "$run/build.json" "$run/culprit/search.json" "$run/culprit/bisect.json"; do
        [ -f "$found" ] && "$work/gate/bin/python" - "$found" <<'PY' | tee -a "$summary"
import json, sys
data = json.load(open(sys.argv[1]))
if "builds" in data:
    for b in data["builds"]:
        print(f"  build {b['family']}: {b.get('kind')} ({b.get('build_seconds', 0):.0f} s, cached {b.get('cached')}): {b.get('why')}")
else:
    print(f"  {sys.argv[1].rsplit('/', 1)[-1]}: {json.dumps({k: v for k, v in data.items() if k not in ('trials', 'steps')})[:600]}")
    for row in data.get("trials", data.get("steps", [])):
        print(f"    {json.dumps(row)[:300]}")
PY
    done
}

for step in ${steps//,/ }; do
    case $step in
        built|built-again) built_night "$step" ;;
        guilty)  # CULPRIT_BUILDS=0: the guilty night without its culprit search (about 15 minutes of trials)
            built_night guilty 301,302,303 ${CULPRIT_BUILDS:+--set "culprit.max_builds=$CULPRIT_BUILDS"} ;;
        day|day-moderate)  # day-moderate: 10 commits, the 7th about 0.75x decode (benchmarks/gpu_built_repo.py)
            git -C "$work/vllm-repo/o/upstream.git" update-ref refs/heads/main "refs/heads/$step"
            built_night "$step" ;;
        good|again) night "$step" ;;
        slower)
            config=$(variant slower remove:planted-slowdown)
            (cd "$here" && "$work/gate/bin/python" -m benchmarks.gpu_plants slower "$config" "${PLANTED_DELAY_S:-0.002}") | tee -a "$summary"
            night slower "$config" ;;
        nan)
            config=$(variant nan remove:planted-nan)
            (cd "$here" && "$work/gate/bin/python" -m benchmarks.gpu_plants nan "$config") | tee -a "$summary"
            night nan "$config" ;;
        reference)  # the golden set's reference without a night: the good build's answers, judged and recorded
            started=$(date +%s)
            gate golden "$entry" --record --json "$work/reference.json" > "$work/reference.log" 2>&1
            say "reference: exit $? in $(( $(date +%s) - started )) s"
            grep -E "checks,|recorded|not recorded" "$work/reference.log" | tee -a "$summary" ;;
        grammar)
            config=$(variant grammar remove:planted-grammar-ignored)
            (cd "$here" && "$work/gate/bin/python" -m benchmarks.gpu_plants grammar "$config") | tee -a "$summary"
            night grammar "$config" ;;
        kernel) night kernel "$(variant kernel attention:FLASHINFER)" ;;
        variants)
            started=$(date +%s)
            IFS=, read -r -a chosen <<< "${VARIANTS:-}"  # VARIANTS="final norm x3,two layers swapped": some of them
            (cd "$here" && "$work/gate/bin/python" -u -m benchmarks.gpu_golden_variants "$work/variants" "${chosen[@]}") \
                2>&1 | grep --line-buffered -vE "^\[|INFO|WARNING" | tee -a "$summary"
            say "golden variants: $(( $(date +%s) - started )) s" ;;
        spread)
            started=$(date +%s)
            (cd "$here" && "$work/gate/bin/python" -m benchmarks.gpu_boot_spread "$entry" "${BOOTS:-8}" 5) 2>&1 \
                | grep -vE "^\[|INFO|WARNING" | tee -a "$summary"
            say "boot spread: $(( $(date +%s) - started )) s" ;;
        two-hosts)  # two GPUs: the cluster entry across two namespaces, one GPU each (benchmarks/gpu_two_hosts.py);
            # TWO_HOST_DEBS: the packages of `python -m benchmarks.two_host_tools fetch`, for an image without ip and ssh
            started=$(date +%s)
            if [ -n "${TWO_HOST_DEBS:-}" ]; then
                debs=$(realpath "$TWO_HOST_DEBS")
                if ! (cd "$here" && "$work/gate/bin/python" -m benchmarks.two_host_tools install "$debs" \
                    "$work/tools") >> "$summary" 2>&1; then
                    say "two hosts: the tools from $debs did not install (above)"; continue
                fi
                export PATH=$work/tools/bin:$PATH
            fi
            # its own lines only (a night's output goes to WORK/two-hosts-CASE.log): a reason that quotes a log line
            # with INFO in it is kept
            (cd "$here" && "$work/gate/bin/python" -u -m benchmarks.gpu_two_hosts "$work" "${TWO_HOST_CASES:-}") 2>&1 \
                | grep --line-buffered -vE "^\[|^(INFO|WARNING|DEBUG)[: ]" | tee -a "$summary"
            say "two hosts: $(( $(date +%s) - started )) s" ;;
        *) say "unknown step $step" ;;
    esac
done
