#!/usr/bin/env bash
# GPU throughput, benchhost side by side with PyTorch on the same GPU, in one run. Runs on the GPU
# machine (device tool) from the repository root after tools/device/pack.sh here (carry
# [".device"]); writes every raw output and a summary to $OUT (commit them under results/gpu/).
#   bash tools/device/bench_gpu.sh
#   WORKLOADS="<workload> ..." bash tools/device/bench_gpu.sh   # some workloads only, in that order (file names in bench/)
#   DEVICE=cpu ITERS=1 RN_BATCH=2 RN_SIZE=64 LM_BATCH=1 PYTHON=/usr/bin/python3 bash tools/device/bench_gpu.sh
#                                                    # plumbing check here, no GPU (slow: full-size models)
#   ONLY='^(bert|gpt3_125m_pytorch)' bash tools/device/bench_gpu.sh   # only the runs whose name matches
#   OP_TIMES=1 ITERS=2 ONLY=... bash tools/device/bench_gpu.sh        # our runs rank their ops by device
#                                                    # time (BENCHHOST_OP_TIMES, in each run's .log);
#                                                    # OP_TIMES=shapes ranks each op's shapes apart
# Each workload's pairs live in its own file, tools/device/bench/<workload>.sh, sourced here in name
# order with the helpers below (ours, peer, peer_modes, conf) and $dev, $iters, $bh, $out set: adding
# a workload adds its file and edits nothing here. The peers' model shapes are read from the same
# config files as ours (conf).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
. tools/device/env.sh || exit 2
dev=${DEVICE:-cuda}
iters=${ITERS:-20}
bh="$build/bin/benchhost"
run_timeout=${RUN_TIMEOUT:-300}  # seconds per run: a hang must not eat the lease
[ "${OP_TIMES:-0}" != 0 ] && export BENCHHOST_OP_TIMES=$OP_TIMES  # 1, or shapes (Note [Op times])
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1; nvidia-smi -L 2>&1;
  LD_LIBRARY_PATH="$base_ld_library_path" python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1; } > "$out/device.txt"

ours() {  # name, then benchhost arguments
  local name=$1; shift
  [[ -n "${ONLY:-}" && ! $name =~ $ONLY ]] && return
  timeout -k 5 "$run_timeout" "$bh" --mode train --synthetic --device "$dev" -w 3 -i "$iters" -o "$out/$name.json" "$@" > "$out/$name.log" 2>&1
  LD_LIBRARY_PATH="$base_ld_library_path" python3 - "$out/$name.json" "$name" >> "$out/summary.txt" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    print(f"{sys.argv[2]:28s} {r['status']:8s} {r.get('samples_per_second') or 0:12.1f} samples/s  MFU {r.get('mfu')} "
          f"of {r.get('peak_tflops')} TFLOP/s ({r.get('peak_source', '')}), datasheet MFU {r.get('mfu_datasheet')} "
          f"({r.get('datasheet_source', '')})  {r.get('message', '')}")
except Exception as e:
    print(f"{sys.argv[2]:28s} no report ({e})")
PY
}
peer() {  # name, then peer script arguments
  local name=$1; shift
  [[ -n "${ONLY:-}" && ! $name =~ $ONLY ]] && return
  LD_LIBRARY_PATH="$base_ld_library_path" timeout -k 5 "$run_timeout" "${PYTHON:-python3}" "$@" > "$out/$name.json" 2> "$out/$name.log"
  LD_LIBRARY_PATH="$base_ld_library_path" python3 - "$out/$name.json" "$name" >> "$out/summary.txt" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    v = r.get("images_per_second") or r.get("samples_per_second")
    print(f"{sys.argv[2]:28s} {'PASSED':8s} {v:12.1f} samples/s  {r.get('peer', r.get('torch', ''))} amp={r.get('amp')}")
except Exception as e:
    print(f"{sys.argv[2]:28s} failed ({e}); see {sys.argv[2]}.log")
PY
}

conf() {  # conf FILE KEY -> the value of "KEY = value" in a config file (the last one)
  sed -n "s/^$2[[:space:]]*=[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$1" | tail -n 1
}
peer_modes() {  # name, peer script, then its arguments: the peer in fp32, tf32 (--tf32) and AMP bf16 (--amp bf16) on $dev
  local name=$1 script=$2 mode
  shift 2
  for mode in fp32 tf32 amp_bf16; do
    local flags=()
    [ "$mode" = tf32 ] && flags=(--tf32)
    [ "$mode" = amp_bf16 ] && flags=(--amp bf16)
    peer "${name}_pytorch_$mode" "$script" bench --device "$dev" "${flags[@]}" "$@" --steps "$iters" --warmup 3 \
      --threads "$(nproc)"
  done
}
# WORKLOADS, where given, also sets the order (the most wanted first, when time is short).
for w in ${WORKLOADS:-$(cd tools/device/bench && ls *.sh | sed 's/\.sh$//')}; do
  [ -f "tools/device/bench/$w.sh" ] || { echo "$w: no tools/device/bench/$w.sh" >> "$out/summary.txt"; continue; }
  . "tools/device/bench/$w.sh"
done
cat "$out/device.txt" "$out/summary.txt"
