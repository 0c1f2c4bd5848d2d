# rgt environment probe (docs/remote-ops.md §4 rows 1,2,5-11,14,16,17 and the §5 GPU health inputs).
# In rgt's code it is the environment survey (services/launch/env_audit.py); the words it prints, its version
# "rgt-env-probe/1", RGT_PROBE_BUDGET_S and the .rgt-probe-* test file keep their names: facts stored by
# earlier audits and users' settings carry them.
#
# Sent on stdin, never spliced:   bash -s -- SCRATCH DURABLE PYTHON WORKDIR [STAGING FINAL]...
# Prints ONE JSON object whose first key is "version", then exits 0. It gathers raw facts only;
# verdicts are computed on the client by audits/env_audit.py and audits/gpu_health.py, so this
# script never decides anything and never changes the box (the durable write test removes its file).
#
# Every external command that can block on a hung mount or a sick driver runs under `timeout`, within one
# overall deadline (RGT_PROBE_BUDGET_S, default 110 s, under the client's 120 s); a command stopped that way,
# or not started because the deadline passed, reports rc 124 where it ran. Shell builtins ([ -e ], cd) cannot
# be bounded: on a hung mount the client's own deadline ends the call and the state is "unknown".
#
# Why the body is one function called with </dev/null: bash reads this script from the same stdin
# the commands would inherit; any command that reads stdin would swallow the rest of the script.
# Bash parses a whole function before running it, so the redirection cannot cut the script short.
#
# Why JSON strings go through awk and not python3: python3 is absent from common GPU base images
# (nvidia/cuda:*-base) and the run's interpreter is one of the things under test (row 8). awk is
# POSIX and in every base image (Debian/Ubuntu mark mawk "required"; busybox has one). The escaper
# runs in the C locale, so awk sees bytes: it escapes the only bytes JSON forbids raw (", \ and
# 0x01-0x1f) and passes every byte >= 0x80 through untouched, so valid UTF-8 survives exactly and
# the client maps invalid sequences to U+FFFD when it decodes. NULs are deleted (a shell variable
# cannot hold them anyway). Escaping works by split/join on each special character (no gsub: its
# backslash rules differ between awks), so it stays linear in the input size.
set -u

RGT_PROBE_VERSION="rgt-env-probe/1"

# ---- JSON helpers ---------------------------------------------------------------------------------

# stdin -> one JSON string literal; records are joined with \n, so one trailing newline is dropped.
jesc() {
  tr -d '\000' | LC_ALL=C awk -v q='"' '
    BEGIN {
      ORS = ""; bs = sprintf("%c", 92)
      specials[1] = bs; esc[bs] = bs bs
      specials[2] = q; esc[q] = bs q
      n = 2
      for (i = 1; i < 32; i++) { c = sprintf("%c", i); specials[++n] = c; esc[c] = sprintf("%cu%04x", 92, i) }
      esc["\t"] = bs "t"; esc["\r"] = bs "r"; esc["\b"] = bs "b"; esc["\f"] = bs "f"
      printf "%s", q
    }
    {
      s = $0
      for (k = 1; k <= n; k++) {
        c = specials[k]
        if (index(s, c) == 0) continue
        m = split(s, part, c); s = part[1]
        for (j = 2; j <= m; j++) s = s esc[c] part[j]
      }
      if (NR > 1) printf "%cn", 92
      printf "%s", s
    }
    END { printf "%s", q }'
}

jstr() { printf '%s' "$1" | jesc; }

# an integer literal, or null when $1 is not a plain integer
jint() {
  if [[ $1 =~ ^-?(0|[1-9][0-9]*)$ ]]; then printf '%s' "$1"; else printf 'null'; fi
}

jbool() { if [ "$1" = 1 ]; then printf 'true'; else printf 'false'; fi; }

# {"rc": N, "out": "..."} for a captured command
jres() { printf '{"rc":%s,"out":%s}' "$(jint "$1")" "$(jstr "$2")"; }

# ---- bounded execution ----------------------------------------------------------------------------

BUDGET=${RGT_PROBE_BUDGET_S:-110}
[[ $BUDGET =~ ^[0-9]+$ ]] || BUDGET=110
DEADLINE=$((SECONDS + BUDGET))
HAVE_TIMEOUT=0

# tmo SECONDS CMD...: run an external command under `timeout`, never past the script's deadline.
# A command that no longer fits is not started and answers 124, like a timed-out one.
tmo() {
  local want=$1 left
  shift
  left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 2 ]; then
    return 124
  fi
  [ "$want" -gt "$left" ] && want=$left
  if [ "$HAVE_TIMEOUT" = 1 ]; then
    timeout -k 2 "$want" "$@"
  else
    "$@"
  fi
}

# OUT/RC of a command, stdout only (stderr dropped), capped at 64 KiB
cap_out() { OUT=$(tmo "$@" 2>/dev/null | head -c 65536; exit "${PIPESTATUS[0]}"); RC=$?; }
# OUT/RC of a command, stdout and stderr merged, capped at 64 KiB
cap_all() { OUT=$(tmo "$@" 2>&1 | head -c 65536; exit "${PIPESTATUS[0]}"); RC=$?; }

# nearest existing ancestor of a path (a staging dir may not exist yet; it will live where its parent is)
nearest() {
  local p=$1
  while [ -n "$p" ] && [ ! -e "$p" ] && [ "$p" != / ] && [ "$p" != . ]; do
    p=$(dirname -- "$p")
  done
  printf '%s' "${p:-.}"
}

# ---- facts ----------------------------------------------------------------------------------------

mount_of() {  # findmnt -P pairs for the filesystem holding $1 (escapes special characters itself)
  if [ "$HAVE_FINDMNT" = 1 ]; then
    cap_all 10 findmnt -n -P -o TARGET,FSTYPE,SOURCE -T "$1"
    jres "$RC" "$OUT"
  else
    printf 'null'
  fi
}

disk_facts() {  # row 1 and 2 for one path
  local path=$1 b i
  cap_all 15 df -B1 --output=target,size,used,avail,pcent "$path"; b=$(jres "$RC" "$OUT")
  cap_all 15 df --output=target,itotal,iused,iavail,ipcent "$path"; i=$(jres "$RC" "$OUT")
  printf '{"path":%s,"bytes":%s,"inodes":%s,"mount":%s}' "$(jstr "$path")" "$b" "$i" "$(mount_of "$path")"
}

read_first() { [ -r "$1" ] && head -c 4096 "$1" 2>/dev/null | tr -d '\000'; }

# Raw cgroup values from the process's own cgroup up to the hierarchy root, nearest first: the
# effective limit is the smallest of them (a slice above the session scope may hold the limit).
cgroup_chain() {  # BASE REL FILE...: prints JSON array of raw values (one entry per directory with the files)
  local base=$1 rel=$2 dir sep="" v f
  shift 2
  dir=$base$rel
  [ -d "$dir" ] || dir=$base
  printf '['
  while :; do
    v=""
    for f in "$@"; do
      [ -r "$dir/$f" ] || { v=""; break; }
      v="$v${v:+ }$(read_first "$dir/$f" | tr '\n' ' ' | sed 's/ *$//')"
    done
    if [ -n "$v" ]; then printf '%s%s' "$sep" "$(jstr "$v")"; sep=","; fi
    [ "$dir" = "$base" ] && break
    dir=${dir%/*}
    [ "${#dir}" -lt "${#base}" ] && dir=$base
  done
  printf ']'
}

v1_rel() {  # cgroup v1 path of controller $1 from /proc/self/cgroup
  awk -F: -v want="$1" '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == want) { print $3; exit } }' \
    /proc/self/cgroup 2>/dev/null
}

cgroup_facts() {  # row 5 and 6
  local fs rel base cpubase
  fs=$(stat -fc %T /sys/fs/cgroup 2>/dev/null)
  if [ "$fs" = cgroup2fs ]; then
    rel=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup 2>/dev/null)
    base=/sys/fs/cgroup
    [ "$rel" = / ] && rel=""
    printf '{"fs":%s,"version":2,"path":%s,"memory_limits":%s,"memory_current":%s,"memory_events":%s,"cpu_limits":%s}' \
      "$(jstr "$fs")" "$(jstr "$rel")" "$(cgroup_chain "$base" "$rel" memory.max)" \
      "$(jstr "$(read_first "$base$rel/memory.current" || read_first "$base/memory.current")")" \
      "$(jstr "$(read_first "$base$rel/memory.events" || read_first "$base/memory.events")")" \
      "$(cgroup_chain "$base" "$rel" cpu.max)"
  elif [ -d /sys/fs/cgroup/memory ] || [ -d /sys/fs/cgroup/cpu ]; then
    rel=$(v1_rel memory); [ "$rel" = / ] && rel=""
    base=/sys/fs/cgroup/memory
    cpubase=/sys/fs/cgroup/cpu
    [ -d "$cpubase" ] || cpubase=/sys/fs/cgroup/cpu,cpuacct
    local cpurel
    cpurel=$(v1_rel cpu); [ "$cpurel" = / ] && cpurel=""
    printf '{"fs":%s,"version":1,"path":%s,"memory_limits":%s,"memory_current":%s,"memory_events":%s,"cpu_limits":%s}' \
      "$(jstr "$fs")" "$(jstr "$rel")" "$(cgroup_chain "$base" "$rel" memory.limit_in_bytes)" \
      "$(jstr "$(read_first "$base$rel/memory.usage_in_bytes" || read_first "$base/memory.usage_in_bytes")")" \
      "$(jstr "$(read_first "$base$rel/memory.oom_control" || read_first "$base/memory.oom_control")")" \
      "$(cgroup_chain "$cpubase" "$cpurel" cpu.cfs_quota_us cpu.cfs_period_us)"
  else
    printf '{"fs":%s,"version":null,"path":null,"memory_limits":[],"memory_current":"","memory_events":"","cpu_limits":[]}' \
      "$(jstr "$fs")"
  fi
}

durable_write() {  # row 11: write a random token, fsync, read back, compare, delete
  local dir=$1 probe token back wrote=0 same=0 removed=0 err=""
  probe="$dir/.rgt-probe-$$-$RANDOM$RANDOM"
  token="rgt probe $$ $RANDOM$RANDOM $(date +%s)"
  if [ ! -d "$dir" ]; then
    err="not a directory"
  else
    if err=$(printf '%s' "$token" | tmo 10 dd of="$probe" conv=fsync status=none 2>&1); then
      wrote=1
      back=$(tmo 10 cat "$probe" 2>/dev/null)
      [ "$back" = "$token" ] && same=1
    fi
    rm -f -- "$probe" 2>/dev/null
  fi
  [ -e "$probe" ] || removed=1
  printf '{"path":%s,"written":%s,"read_back":%s,"removed":%s,"error":%s}' "$(jstr "$probe")" \
    "$(jbool "$wrote")" "$(jbool "$same")" "$(jbool "$removed")" "$(jstr "$err")"
}

same_fs_pairs() {  # row 10: device id and mount target of each staging dir and its final dir
  local sep="" s f sa fa
  printf '['
  while [ "$#" -ge 2 ]; do
    s=$1 f=$2
    shift 2
    sa=$(nearest "$s"); fa=$(nearest "$f")
    printf '%s{"staging":%s,"final":%s,"staging_at":%s,"final_at":%s,"staging_dev":%s,"final_dev":%s,' \
      "$sep" "$(jstr "$s")" "$(jstr "$f")" "$(jstr "$sa")" "$(jstr "$fa")" \
      "$(jint "$(tmo 5 stat -L -c %d -- "$sa" 2>/dev/null)")" "$(jint "$(tmo 5 stat -L -c %d -- "$fa" 2>/dev/null)")"
    printf '"staging_mount":%s,"final_mount":%s}' "$(mount_of "$sa")" "$(mount_of "$fa")"
    sep=","
  done
  printf ']'
}

torch_facts() {  # row 8, in the workdir, with the run's own interpreter
  local code
  code='import json, sys
d = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import torch
except BaseException as exc:
    d["error"] = type(exc).__name__ + ": " + str(exc)
else:
    d["torch"] = torch.__version__
    d["cuda"] = torch.version.cuda
    d["available"] = bool(torch.cuda.is_available())
    d["count"] = torch.cuda.device_count() if d["available"] else 0
    d["capability"] = [list(torch.cuda.get_device_capability(i)) for i in range(d["count"])]
print("RGT_TORCH=" + json.dumps(d))'
  OUT=$(cd -- "$WORKDIR" 2>/dev/null || :; tmo 60 "$PY" -c "$code" 2>&1 | tail -c 8192; exit "${PIPESTATUS[0]}")
  RC=$?
  jres "$RC" "$OUT"
}

conda_bases() {  # conda installations whose pkgs/ cache may be large: CONDA_EXE, the run's interpreter, usual homes
  local home=$1 py r
  [ -n "${CONDA_EXE:-}" ] && printf '%s\n' "${CONDA_EXE%/bin/conda}"
  py=$(cd -- "$WORKDIR" 2>/dev/null || :; r=$(command -v -- "$PY" 2>/dev/null) && readlink -f -- "$r" 2>/dev/null)
  case "$py" in
    */envs/*/bin/*) printf '%s\n' "${py%/envs/*}" ;;
    */bin/*) r=${py%/bin/*}; [ -d "$r/conda-meta" ] && printf '%s\n' "$r" ;;
  esac
  printf '%s\n' /opt/conda "$home/miniconda3" "$home/anaconda3" "$home/miniforge3"
}

cache_facts() {  # row 9: size and home of each hidden cache (one du budget of 60 s); never deletes anything
  local home=${HOME:-/root} sep="" c r seen=" " du_end left candidates base
  candidates=("$home/.cache/huggingface" "$home/.cache/pip" "$home/.cache/torch" "$home/.triton" "$home/.nv"
    "$home/.conda/pkgs" "$home/.cache/wandb")
  [ -n "${HF_HOME:-}" ] && candidates+=("$HF_HOME")
  while IFS= read -r base; do
    [ -n "$base" ] && [ -d "$base/pkgs" ] && candidates+=("$base/pkgs")
  done < <(conda_bases "$home")
  du_end=$((SECONDS + 60))
  printf '['
  for c in "${candidates[@]}"; do
    [ -e "$c" ] || continue
    r=$(tmo 5 readlink -f -- "$c" 2>/dev/null) || r=$c
    case "$seen" in *" $r "*) continue ;; esac
    seen="$seen$r "
    left=$((du_end - SECONDS))
    if [ "$left" -ge 2 ]; then cap_out "$left" du -sxB1 -- "$r"; else OUT="" RC=124; fi
    printf '%s{"path":%s,"resolved":%s,"du":%s,' "$sep" "$(jstr "$c")" "$(jstr "$r")" "$(jres "$RC" "$OUT")"
    cap_all 10 df -B1 --output=target,size,used,avail,pcent "$r"
    printf '"df":%s,"mount":%s}' "$(jres "$RC" "$OUT")" "$(mount_of "$r")"
    sep=","
  done
  printf ']'
}

SAMPLE_FIELDS="index,pci.bus_id,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm"
INVENTORY_FIELDS="index,uuid,name,pci.bus_id,memory.total,memory.used,driver_version"

gpu_samples() {  # §5: 5 samples 1 s apart; the throttle field has a new name, then the old one
  local field=clocks_event_reasons.active i sep=""
  printf '{"fields":%s,"throttle_field":' "$(jstr "$SAMPLE_FIELDS")"
  cap_all 10 nvidia-smi --query-gpu="$SAMPLE_FIELDS,$field" --format=csv,noheader,nounits
  if [ "$RC" != 0 ]; then
    field=clocks_throttle_reasons.active
    cap_all 10 nvidia-smi --query-gpu="$SAMPLE_FIELDS,$field" --format=csv,noheader,nounits
  fi
  printf '%s,"samples":[' "$(jstr "$field")"
  for i in 1 2 3 4 5; do
    if [ "$i" -gt 1 ]; then
      sleep 1
      cap_all 10 nvidia-smi --query-gpu="$SAMPLE_FIELDS,$field" --format=csv,noheader,nounits
    fi
    [ "$RC" = 124 ] && [ "$((DEADLINE - SECONDS))" -lt 2 ] && break
    printf '%s%s' "$sep" "$(jres "$RC" "$OUT")"
    sep=","
  done
  printf ']}'
}

kernel_log() {  # §5 Xid: dmesg, else journalctl -k; only NVRM Xid lines travel (the last 200)
  local src=dmesg text rc lines
  text=$(tmo 10 dmesg 2>/dev/null); rc=$?
  if { [ "$rc" != 0 ] || [ -z "$text" ]; } && command -v journalctl >/dev/null 2>&1; then
    src=journalctl
    text=$(tmo 15 journalctl -k -q --no-pager 2>/dev/null); rc=$?
  fi
  lines=0
  [ -n "$text" ] && lines=$(printf '%s\n' "$text" | wc -l)
  printf '{"source":%s,"rc":%s,"lines":%s,"xid":%s}' "$(jstr "$src")" "$(jint "$rc")" "$(jint "${lines// /}")" \
    "$(jstr "$(printf '%s\n' "$text" | grep -E 'NVRM: Xid' | tail -n 200)")"
}

device_holders() {  # §5.1: processes holding /dev/nvidia*, with age and name (report only)
  local pids="" p sep="" age comm tool=none n=0
  if command -v fuser >/dev/null 2>&1; then
    tool="fuser"; pids=$(tmo 10 fuser /dev/nvidia* 2>/dev/null)
  elif command -v lsof >/dev/null 2>&1; then
    tool="lsof"; pids=$(tmo 10 lsof -t /dev/nvidia* 2>/dev/null)
  fi
  printf '{"tool":%s,"pids":[' "$(jstr "$tool")"
  for p in $(printf '%s\n' "$pids" | tr -cs '0-9' '\n' | sort -un); do
    n=$((n + 1)); [ "$n" -gt 256 ] && break
    age=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ')
    comm=$(read_first "/proc/$p/comm")
    printf '%s{"pid":%s,"age_s":%s,"comm":%s}' "$sep" "$p" "$(jint "$age")" "$(jstr "$comm")"
    sep=","
  done
  printf ']}'
}

gpu_facts() {
  if [ -z "$(command -v nvidia-smi 2>/dev/null)" ]; then
    printf '"nvidia_smi":null,"gpus":null,"gpu_samples":null,"compute_apps":null,"device_holders":null,"kernel_log":null'
    return
  fi
  printf '"nvidia_smi":%s,' "$(jstr "$(command -v nvidia-smi)")"
  cap_all 15 nvidia-smi --query-gpu="$INVENTORY_FIELDS" --format=csv,noheader,nounits
  printf '"gpus":%s,' "$(jres "$RC" "$OUT")"
  if [ "$RC" = 0 ]; then
    printf '"gpu_samples":%s,' "$(gpu_samples)"
    cap_all 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader
    printf '"compute_apps":%s,' "$(jres "$RC" "$OUT")"
    printf '"device_holders":%s,' "$(device_holders)"
  else
    printf '"gpu_samples":null,"compute_apps":null,"device_holders":null,'
  fi
  printf '"kernel_log":%s' "$(kernel_log)"
}

proxy_facts() {  # row 17: which proxy variables are set (names only: a proxy URL may hold a password), no_proxy
  local sep="" v
  printf '{"set":['
  for v in http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY; do
    if [ -n "${!v:-}" ]; then printf '%s%s' "$sep" "$(jstr "$v")"; sep=","; fi
  done
  printf '],"no_proxy":%s,"NO_PROXY":%s}' "$(jstr "${no_proxy:-}")" "$(jstr "${NO_PROXY:-}")"
}

main() {
  export LC_ALL=C
  local M=${1-} D=${2-} nargs=$#
  PY=${3-} WORKDIR=${4-}
  if [ "$nargs" -lt 4 ] || [ $(((nargs - 4) % 2)) != 0 ]; then
    printf '{"version":%s,"error":%s}\n' "$(jstr "$RGT_PROBE_VERSION")" \
      "$(jstr "usage: bash -s -- SCRATCH DURABLE PYTHON WORKDIR [STAGING FINAL]...")"
    return 0
  fi
  shift 4
  timeout -k 1 5 true >/dev/null 2>&1 && HAVE_TIMEOUT=1
  HAVE_FINDMNT=0; command -v findmnt >/dev/null 2>&1 && HAVE_FINDMNT=1

  local J head
  head=$(printf '"version":%s,"now":%s,"boot_id":%s,"hostname":%s,"uid":%s,"kernel":%s,"have_timeout":%s' \
    "$(jstr "$RGT_PROBE_VERSION")" "$(jint "$(date -u +%s)")" \
    "$(jstr "$(read_first /proc/sys/kernel/random/boot_id | tr -d '\n')")" \
    "$(jstr "$(hostname 2>/dev/null || read_first /proc/sys/kernel/hostname)")" "$(jint "$(id -u 2>/dev/null)")" \
    "$(jstr "$(uname -r 2>/dev/null)")" "$(jbool "$HAVE_TIMEOUT")")
  J=$head
  J="$J,\"args\":{\"scratch\":$(jstr "$M"),\"durable\":$(jstr "$D"),\"python\":$(jstr "$PY"),\"workdir\":$(jstr "$WORKDIR")}"
  J="$J,\"workdir_exists\":$(jbool "$([ -d "$WORKDIR" ] && echo 1)")"
  J="$J,\"disks\":{\"scratch\":$(disk_facts "$M"),\"durable\":$(disk_facts "$D")}"
  J="$J,\"cgroup\":$(cgroup_facts)"
  J="$J,\"mem_total_kb\":$(jint "$(awk '$1 == "MemTotal:" { print $2; exit }' /proc/meminfo 2>/dev/null)")"
  # GNU nproc honours OMP_NUM_THREADS and OMP_THREAD_LIMIT: a shell's thread setting is not the box's CPUs
  J="$J,\"nproc\":$(jint "$( (unset OMP_NUM_THREADS OMP_THREAD_LIMIT; nproc 2>/dev/null) || getconf _NPROCESSORS_ONLN 2>/dev/null)")"
  J="$J,\"durable_write\":$(durable_write "$D")"
  J="$J,\"same_fs\":$( (cd -- "$WORKDIR" 2>/dev/null || :; same_fs_pairs "$@"))"
  J="$J,$(gpu_facts)"
  J="$J,\"torch\":$(torch_facts)"
  J="$J,\"caches\":$(cache_facts)"
  J="$J,\"proxy\":$(proxy_facts)"
  # a command stopped by its timeout or by the deadline shows rc 124 where it ran
  J="$J,\"budget_s\":$BUDGET,\"elapsed_s\":$SECONDS"
  printf '{%s}\n' "$J"
}

main "$@" </dev/null; exit 0
