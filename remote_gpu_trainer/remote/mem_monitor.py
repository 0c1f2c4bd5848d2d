"""Host facts for the run rules (docs/remote-ops.md §11): the job's cgroup memory, its OOM kills, the disks of
the result root, the GPU compute processes, and a memory TSV written while the job runs.

Two uses of one program, so the cgroup, process-tree and nvidia-smi reading exists once:

- `monitor`: started in the background by the job wrapper before the first cell, as
  `<python> <ctl>/mem_monitor.py monitor <ctl> <interval>`; appends one row to `<ctl>/mem.tsv` every
  `interval` seconds until `<ctl>/mem.stop` appears or the wrapper's pid (`<ctl>/pid`) is gone.
- `sample`: shipped on stdin to the box's interpreter (`<python> -`) on each watcher tick, with a PARAMS line
  in front (remote/__init__.py program_stdin); prints KEY=VALUE lines (below) and the TSV rows since an offset.

mem.tsv: a header line, then one row per sample, tab-separated; an empty field is unknown:

    t  rss_bytes  sys_used_bytes  sys_avail_bytes  cg_current_bytes  cg_max_bytes  cg_oom_kill  gpu<i>_used_mib...

`t` is epoch seconds; `rss_bytes` the RSS of the wrapper's process tree (the trainer, its workers); the system
columns come from /proc/meminfo (used = MemTotal - MemAvailable); the cgroup columns from the wrapper's memory
cgroup (v2 memory.current / memory.max / memory.events oom_kill; v1 memory.usage_in_bytes /
memory.limit_in_bytes, a limit >= 2^60 meaning none, / memory.oom_control oom_kill); one column per GPU of
nvidia-smi memory.used (when nvidia-smi exists), named by the index at the monitor's start.

`sample` output (every line optional but NOW; the client parses strictly and ignores anything else):
NOW, PIDS (the wrapper's process tree), CG_CURRENT, CG_MAX (empty: no limit), CG_OOM, DISK=<i> <total bytes>
<available bytes> <used bytes> <inodes total> <inodes free> <dev> for each PARAMS mount, CLAIM=<i> <0|1> <size>,
GPU=<csv row of the query-gpu fields>, GPUMAP=<index>, <uuid>, APP=<pid>, <gpu uuid>, <used MiB>,
TSV_HEAD, TSV (rows), TSV_OFFSET, OOM_BASE (cg_oom_kill of the TSV's first row).

Standard library only, Python 3.8 syntax. Every read is guarded: a fact that cannot be read is left out.
"""

import os
import shutil
import subprocess
import sys
import time

NONE_LIMIT = 1 << 60  # cgroup v1 writes a huge number for "no limit"
TSV_NAME = "mem.tsv"
CGROUP_NAME = "cgroup"
STOP_NAME = "mem.stop"
TSV_TAIL = 32 << 10  # a sample reads at most this many bytes of new TSV rows (about 30 min at 5 s)
SMI_TIMEOUT = 10
COLUMNS = ("t", "rss_bytes", "sys_used_bytes", "sys_avail_bytes", "cg_current_bytes", "cg_max_bytes",
           "cg_oom_kill")


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_int(path):
    text = read_text(path)
    text = text.strip() if text is not None else ""
    return int(text) if text.isdigit() else None


def cgroup_mounts():
    """(fstype, controllers, mount root, mount point) of every cgroup mount."""
    mounts = []
    for line in (read_text("/proc/self/mountinfo") or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((tail[0], tail[2].split(","), fields[3], fields[4].replace("\\040", " ")))
    return mounts


def cgroup_dir(pid):
    """(version, folder) of the memory cgroup `pid` belongs to, or None."""
    found = []
    for line in (read_text(f"/proc/{pid}/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1].split(","), parts[2]))
    for fstype, options, root, point in cgroup_mounts():
        for controllers, path in found:
            v2 = fstype == "cgroup2" and controllers == [""]
            if not v2 and not (fstype == "cgroup" and "memory" in controllers and "memory" in options):
                continue
            rel = path[len(root):] if root != "/" and path.startswith(root) else path
            for candidate in (point + rel, point):
                probe = "memory.current" if v2 else "memory.usage_in_bytes"
                if os.path.exists(os.path.join(candidate, probe)):
                    return ("v2" if v2 else "v1", candidate)
    return None


def recorded_cgroup(ctl):
    """The cgroup the monitor last saw the wrapper in (`<ctl>/cgroup`: version, tab, folder): a sample after
    the job ended still reads its OOM kills there."""
    version, _, folder = (read_text(os.path.join(ctl, CGROUP_NAME)) or "").strip().partition("\t")
    names = {"v1": "memory.usage_in_bytes", "v2": "memory.current"}
    if version in names and folder.startswith("/") and os.path.exists(os.path.join(folder, names[version])):
        return version, folder
    return None


def cgroup_memory(pid, ctl=None):
    """(current, max or None, oom_kill count) of the pid's memory cgroup (or the recorded one once the pid is
    gone); (None, None, None) unknown."""
    where = cgroup_dir(pid) if pid else None
    where = where or (recorded_cgroup(ctl) if ctl else None)
    if where is None:
        return None, None, None
    version, folder = where
    if version == "v2":
        current = read_int(os.path.join(folder, "memory.current"))
        raw = (read_text(os.path.join(folder, "memory.max")) or "").strip()
        limit = int(raw) if raw.isdigit() else None
        events = read_text(os.path.join(folder, "memory.events")) or ""
    else:
        current = read_int(os.path.join(folder, "memory.usage_in_bytes"))
        limit = read_int(os.path.join(folder, "memory.limit_in_bytes"))
        events = read_text(os.path.join(folder, "memory.oom_control")) or ""
    limit = None if limit is None or limit >= NONE_LIMIT else limit
    oom = None
    for line in events.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            oom = int(value.strip())
    return current, limit, oom


def process_tree(pid):
    """The pid and every descendant (from /proc/*/stat parent pids)."""
    if not pid:
        return []
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read_text(f"/proc/{name}/stat") or ""
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(fields[1], []).append(name)
    tree, todo = [], [str(pid)]
    while todo and len(tree) < 4096:
        current = todo.pop()
        if os.path.isdir(f"/proc/{current}"):
            tree.append(current)
            todo.extend(children.get(current, []))
    return tree


def tree_rss(pids):
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        fields = (read_text(f"/proc/{pid}/statm") or "").split()
        if len(fields) > 1 and fields[1].isdigit():
            total += int(fields[1]) * page
    return total


def meminfo():
    values = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        number = rest.strip().split(" ")[0]
        if number.isdigit():
            values[key] = int(number) * 1024
    total, avail = values.get("MemTotal"), values.get("MemAvailable")
    return (total - avail if total is not None and avail is not None else None), avail


def smi(*args):
    """nvidia-smi's csv lines, or [] when there is none or it fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool] + list(args) + ["--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=SMI_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]


def gpu_used():
    """{index: memory.used MiB} of every GPU nvidia-smi lists."""
    used = {}
    for line in smi("--query-gpu=index,memory.used"):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            used[int(parts[0])] = parts[1]
    return used


def wrapper_pid(ctl):
    """The wrapper's pid while it lives; None once it is gone or a zombie (some containers' PID 1 never reaps,
    and a zombie's /proc entry no longer names its cgroup)."""
    text = (read_text(os.path.join(ctl, "pid")) or "").strip()
    stat = read_text(f"/proc/{text}/stat") or "" if text.isdigit() else ""
    state = stat[stat.rfind(")") + 2:stat.rfind(")") + 3]
    return text if state and state not in "ZX" else None


def record_cgroup(ctl, pid, last):
    """Write `<ctl>/cgroup` when the wrapper's cgroup changed (a job may move itself into one)."""
    where = cgroup_dir(pid) if pid else None
    if where is not None and where != last:
        tmp = os.path.join(ctl, CGROUP_NAME + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\t".join(where) + "\n")
        os.replace(tmp, os.path.join(ctl, CGROUP_NAME))
    return where or last


def tsv_row(pid, gpus, ctl):
    tree = process_tree(pid)
    current, limit, oom = cgroup_memory(pid, ctl)
    used, avail = meminfo()
    values = [f"{time.time():.1f}", tree_rss(tree) if tree else None, used, avail, current, limit, oom]
    found = gpu_used() if gpus else {}
    values += [found.get(index) for index in gpus]
    return "\t".join("" if v is None else str(v) for v in values) + "\n"


def monitor(ctl, interval):
    """Append a row every `interval` s until the stop file appears or the wrapper is gone."""
    path = os.path.join(ctl, TSV_NAME)
    gpus = sorted(gpu_used())
    if not os.path.exists(path):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\t".join(list(COLUMNS) + [f"gpu{i}_used_mib" for i in gpus]) + "\n")
    last = None
    while True:
        pid = wrapper_pid(ctl)
        last = record_cgroup(ctl, pid, last)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(tsv_row(pid, gpus, ctl))
        if os.path.exists(os.path.join(ctl, STOP_NAME)) or pid is None:
            return 0
        time.sleep(interval)


def print_disks(mounts, emit=print):
    seen = set()
    for index, path in enumerate(mounts):
        while path and not os.path.exists(path):
            path = os.path.dirname(path)
        try:
            st, vfs = os.stat(path), os.statvfs(path)
        except OSError:
            continue
        if st.st_dev in seen:
            continue
        seen.add(st.st_dev)
        used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
        numbers = (index, vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize, used, vfs.f_files, vfs.f_ffree,
                   st.st_dev)
        emit("DISK=" + " ".join(str(int(n)) for n in numbers))


def print_claims(claims, emit=print):
    for index, candidates in enumerate(claims):
        found = None
        for path in candidates:
            try:
                found = os.stat(path)
                break
            except OSError:
                continue
        emit(f"CLAIM={index} {int(found is not None)} {found.st_size if found is not None else 0}")


def print_gpus(fields, emit=print):
    for query in fields:
        rows = smi("--query-gpu=" + query)
        if rows:
            for row in rows:
                emit("GPU=" + row)
            break
    for row in smi("--query-gpu=index,uuid"):
        emit("GPUMAP=" + row)
    for row in smi("--query-compute-apps=pid,gpu_uuid,used_memory"):
        emit("APP=" + row)


def print_tsv(ctl, offset, emit=print):
    path = os.path.join(ctl, TSV_NAME)
    try:
        with open(path, "rb") as handle:
            lines = handle.read(TSV_TAIL).decode("utf-8", "replace").splitlines()
            head = lines[0] if lines else ""
            first = lines[1] if len(lines) > 1 else ""
            size = handle.seek(0, 2)
            offset = offset if offset <= size else 0  # a new launch began a new file
            start = max(offset, size - TSV_TAIL, len(head) + 1)
            handle.seek(start)
            data = handle.read(size - start) if size > start else b""
    except OSError:
        return
    cut = data.rfind(b"\n") + 1  # a row the monitor is still writing waits for the next sample
    rows = data[:cut].decode("utf-8", "replace").splitlines()
    if start > offset and rows and start > len(head) + 1:
        rows = rows[1:]  # began mid-row
    emit("TSV_HEAD=" + head)
    emit("OOM_BASE=" + (first.split("\t")[6] if len(first.split("\t")) > 6 else ""))
    for row in rows:
        emit("TSV=" + row)
    emit(f"TSV_OFFSET={min(start, size) + cut}")


def sample(params, emit=print):
    """The KEY=VALUE lines above, each passed to `emit` (print on the box; rgt's own list when the box is this
    machine, services/watch/host_signals.py)."""
    ctl = params["ctl"]
    pid = wrapper_pid(ctl)
    emit(f"NOW={time.time():.3f}")
    emit("PIDS=" + " ".join(process_tree(pid)))
    current, limit, oom = cgroup_memory(pid, ctl)
    for key, value in (("CG_CURRENT", current), ("CG_MAX", limit), ("CG_OOM", oom)):
        emit(f"{key}={'' if value is None else value}")
    print_disks(params.get("mounts", []), emit)
    print_claims(params.get("claims", []), emit)
    print_gpus(params.get("gpu_fields", []), emit)
    print_tsv(ctl, int(params.get("offset", 0)), emit)
    return 0


def main(argv):
    params = globals().get("PARAMS")
    if isinstance(params, dict):
        return sample(params)
    if len(argv) == 4 and argv[1] == "monitor":
        return monitor(argv[2], float(argv[3]))
    sys.stderr.write("usage: mem_monitor.py monitor CTL INTERVAL (or PARAMS on stdin)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
