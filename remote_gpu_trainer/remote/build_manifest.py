"""Build PULL_MANIFEST.json in a run's result root, on the far side (docs/gate.md §3).

This file is shipped as-is on stdin to the box's own interpreter (`<python> -`), so it is stdlib-only and
keeps to Python 3.8 syntax (no `from __future__`, no `match`, no `X | Y`; annotations are strings so 3.8
never evaluates them). The client prepends one line that defines PARAMS:

    import base64, json; PARAMS = json.loads(base64.b64decode("...").decode())

with keys `root`, `run_id`, `roster`, `required` and, optionally, `ctl`: the run's control folder, where the job
wrapper records each cell's exit code (`<cell>.exit_code`) and the run's (`exit_code`). A cell that exited
non-zero is `failed` and one the wrapper never started (the run ended without its exit code) is
`never_started`: what such a cell left is listed as it is, its required files are not demanded, a missing folder
is no problem, and the manifest's `cells` names both (docs/gate.md §2). Nothing from the run is spliced into a
shell string.

Exit codes: 0 written (prints `MANIFEST_SHA256=<hex>` and `WROTE <path>`); 1 validation problems (JSON list
of `{code, path, detail}` on stderr, all of them, not only the first); 2 usage (malformed PARAMS);
4 a manifest already exists (prints its `MANIFEST_SHA256=<hex>`; it is never overwritten).

With `"adopt": true` in PARAMS the builder writes nothing: it checks the manifest already in the root (one that
the public remote-gpu-trainer skill's `scripts/build_pull_manifest.py` wrote) against the tree, for adoption
(docs/gate.md §2.1). The tree is walked by the same rules as for building, nothing hashed (the pull hashes
every byte it takes): every file must be listed with its size and be no newer than the manifest, every listed
file must be there, and nothing the manifest cannot list (a link) may be. Exit 0 prints `MANIFEST_SHA256=<hex>`
(of the bytes checked) and `ADOPTABLE <path>`; 1 the problems, as above.
"""

import hashlib
import json
import os
import re
import stat
import sys
from datetime import datetime, timezone

SCHEMA = "remote-gpu-trainer/PULL/v1"
MANIFEST_NAME = "PULL_MANIFEST.json"
TEMP_PREFIX = ".rgt-tmp-PULL_MANIFEST."
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # rgt's own ids: the run and its cells
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Names that mean "still being written" are refused: rgt's own temporaries (`.rgt-tmp*`; `.tmp`, which its
# control files and sentinel write through; `<name>.part`, which a pull streams `<name>` into, so a listed
# `x.part` would collide with `x`) and the two other suffixes of a file caught mid-write (`.partial`, `.swp`).
# An editor's `~` backup, an NFS `.nfs*` or a `.#` lock is a file like any other: refusing one would leave a run
# that can never be pulled.
TEMP_SUFFIXES = (".tmp", ".part", ".partial", ".swp")
TEMP_PREFIXES = (".rgt-tmp",)
MAX_NAME_BYTES = 255 - len(".part")  # a name's local `<name>.part` must fit the file system's 255 bytes
CHUNK = 4 << 20
MANIFEST_MAX_BYTES = 256 << 20  # as the client reads it (services/evidence/manifest.py)

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_EXISTS = 4


def problem(code: str, path: str, detail: str) -> "dict[str, str]":
    return {"code": code, "path": path, "detail": detail}


def canonical_json(obj: object) -> bytes:
    """The one serialization both sides agree on; the manifest's identity is the hash of these bytes."""
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def is_temp_name(name: str) -> bool:
    """Names of a file still being written (TEMP_SUFFIXES): hashing one would seal a half-written file."""
    return name.endswith(TEMP_SUFFIXES) or name.startswith(TEMP_PREFIXES)


def name_problem(name: str) -> "str | None":
    """Why one component of a manifest path cannot be listed, or None. The names tools really write are fine:
    `epoch=3-step=64.ckpt`, `.hydra`, `mlruns/.trash`, spaces, non-ASCII (docs/gate.md §2). Refused: an empty
    part, `.` and `..`, a `/` inside a part, NUL and control characters (a name must print as itself), bytes
    that are not UTF-8 (the manifest is UTF-8 JSON), and rgt's own temporary names."""
    if name in ("", ".", ".."):
        return "empty, '.' or '..' path component"
    if "/" in name:
        return "'/' inside a path component"
    if CONTROL.search(name):
        return "control character in the name"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    if len(encoded) > MAX_NAME_BYTES:
        return f"name is {len(encoded)} bytes: the local copy is streamed into <name>.part, at most 255 bytes"
    if is_temp_name(name):
        return f"temporary file name {name!r}"
    return None


def shown(name: str) -> str:
    """A name as a problem shows it: control characters and undecodable bytes escaped, never raw."""
    return "".join(c if not CONTROL.match(c) and not 0xD800 <= ord(c) <= 0xDFFF else ascii(c)[1:-1] for c in name)


def check_params(params: object) -> "list[str]":
    """Usage errors: PARAMS itself is malformed (the client's fault, not the run's)."""
    if not isinstance(params, dict):
        return ["PARAMS must be a JSON object"]
    errors = []
    for key in ("root", "run_id"):
        if not isinstance(params.get(key), str):
            errors.append(f"PARAMS.{key} must be a string")
    for key in ("roster", "required"):
        value = params.get(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            errors.append(f"PARAMS.{key} must be a list of strings")
    if "ctl" in params and not isinstance(params["ctl"], str):
        errors.append("PARAMS.ctl must be a string")
    if "adopt" in params and not isinstance(params["adopt"], bool):
        errors.append("PARAMS.adopt must be a boolean")
    unknown = sorted(set(params) - {"root", "run_id", "roster", "required", "ctl", "adopt"})
    if unknown:
        errors.append("PARAMS has unknown keys: " + ", ".join(unknown))
    return errors


def check_inputs(root: str, run_id: str, roster: "list[str]",
                 required: "list[str]") -> "list[dict[str, str]]":
    """Steps 1-2: the root is a real directory, the run id and every cell id are safe names."""
    problems = []
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        problems.append(problem("root", root, "result root does not exist"))
    except OSError as exc:
        problems.append(problem("root", root, f"cannot stat result root: {exc.strerror}"))
    else:
        if stat.S_ISLNK(info.st_mode):
            problems.append(problem("root", root, "result root is a symlink; "
                                    "point remote_root at the real folder"))
        elif not stat.S_ISDIR(info.st_mode):
            problems.append(problem("root", root, "result root is not a directory"))
    if not run_id.strip() or not SAFE_NAME.match(run_id):
        problems.append(problem("run_id", run_id, "run id is not a safe name"))
    if not roster:
        problems.append(problem("roster", "", "roster is empty"))
    seen = set()
    for cell in roster:
        if not SAFE_NAME.match(cell):
            problems.append(problem("roster", cell, "cell id is not a safe name"))
        if cell in seen:
            problems.append(problem("roster", cell, "cell id listed twice"))
        seen.add(cell)
    for name in required:
        reasons = [name_problem(part) for part in name.split("/")]
        if any(reasons):
            problems.append(problem("required", shown(name), "required file is not a relative path: "
                                    + str(next(r for r in reasons if r))))
    return problems


def existing_manifest_sha(root: str) -> "str | None":
    """Step 3: the hash of a manifest already in the root, or None when there is none."""
    path = os.path.join(root, MANIFEST_NAME)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return "unreadable"


def cell_outcomes(ctl: "str | None", roster: "list[str]") -> "dict[str, dict[str, object]]":
    """Cells that did not finish: `{cell: {"state": "failed", "exit_code": n}}` for a recorded non-zero exit,
    `{"state": "never_started", "exit_code": None}` when the run ended (its `exit_code` exists) without the
    cell's. Without a control folder, or while the run has not ended, nothing is known and nothing is relaxed."""
    if not ctl:
        return {}
    ended = read_exit_code(os.path.join(ctl, "exit_code")) is not None
    outcomes = {}  # type: dict[str, dict[str, object]]
    for cell in roster:
        path = os.path.join(ctl, cell + ".exit_code")
        code = read_exit_code(path)
        if code is not None and code != 0:
            outcomes[cell] = {"state": "failed", "exit_code": code}
        elif ended and not os.path.lexists(path):  # an exit-code file that does not read as one relaxes nothing
            outcomes[cell] = {"state": "never_started", "exit_code": None}
    return outcomes


def read_exit_code(path: str) -> "int | None":
    """A small regular file holding one whole number, as the wrapper writes it; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if re.fullmatch(r"-?[0-9]{1,9}", text) else None


def walk(root: str, roster: "list[str]", links: "list[dict[str, object]] | None" = None,
         unfinished: "dict[str, dict[str, object]] | None" = None,
         manifest_there: bool = False) -> "tuple[list[str], list[dict[str, str]]]":
    """Steps 4-5: every regular file under the roster's cells, never following a link; each link inside a cell
    is appended to `links` (read_link) instead. `manifest_there`: the root's manifest is no loose file (adopt).

    Returns relative POSIX paths and the problems found; a problem entry is never also a file entry.
    """
    files: list[str] = []  # local annotations are never evaluated, so 3.8 accepts them
    found_links: list[dict[str, object]] = [] if links is None else links
    problems: list[dict[str, str]] = []
    found_cells = set()
    try:
        with os.scandir(root) as entries:
            top = sorted(entries, key=lambda entry: entry.name)
    except OSError as exc:
        return [], [problem("unreadable", root, "cannot list the result root: " + str(exc.strerror))]
    for entry in top:
        name = shown(entry.name)
        if manifest_there and entry.name == MANIFEST_NAME and entry.is_file(follow_symlinks=False):
            continue
        if entry.is_symlink():
            problems.append(problem("symlink", name, "symlink in the result root; copy the real data in"))
        elif is_temp_name(name):
            problems.append(problem("temp_file", name, "temporary file: still being written, or left by "
                                    "an interrupted build; remove it once nothing writes it"))
        elif not entry.is_dir(follow_symlinks=False):
            problems.append(problem("loose_file", name, "file directly in the result root; "
                                    "results belong in a cell folder"))
        elif name not in roster:
            problems.append(problem("unexpected_dir", name, "folder is not a cell of the roster"))
        else:
            found_cells.add(name)
            walk_cell(root, name, files, problems, found_links)
    for cell in roster:
        if cell not in found_cells and cell not in (unfinished or {}) and not os.path.lexists(os.path.join(root, cell)):
            problems.append(problem("missing_dir", cell, "roster cell has no folder in the result root"))
    return sorted(files), problems


def walk_cell(root: str, cell: str, files: "list[str]", problems: "list[dict[str, str]]",
              links: "list[dict[str, object]]") -> None:
    """Iterative walk of one cell (no recursion limit on deep trees), lstat only."""
    stack = [cell]
    while stack:
        relative = stack.pop()
        try:
            with os.scandir(os.path.join(root, relative)) as entries:
                children = sorted(entries, key=lambda entry: entry.name)
        except OSError as exc:
            problems.append(problem("unreadable", relative, "cannot list folder: " + str(exc.strerror)))
            continue
        for entry in children:
            path = relative + "/" + entry.name
            unfit = name_problem(entry.name)
            if entry.is_symlink() and unfit is None:
                link, issue = read_link(root, path)
                if issue is not None:
                    problems.append(issue)
                elif link is not None:
                    links.append(link)
            elif entry.is_symlink():
                problems.append(problem("path_unsafe", shown(path), unfit or ""))
            elif is_temp_name(entry.name):
                problems.append(problem("temp_file", shown(path), "temporary file: still being written?"))
            elif unfit is not None:
                problems.append(problem("path_unsafe", shown(path), unfit))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif entry.is_file(follow_symlinks=False):
                files.append(path)
            else:
                problems.append(problem("not_regular", shown(path), "not a regular file (fifo, socket or device)"))


def read_link(root: str, path: str) -> "tuple[dict[str, object] | None, dict[str, str] | None]":
    """Step 4b: a link inside a cell (W&B's `latest-run`, its `debug.log`) is recorded as itself, its path and
    target, never followed and never copied. `inside` is where it leads, relative to the root, when the box
    resolves it (every link on the way followed) to a path inside the root; None when it leads out (its target
    is not part of the results, and the teardown plan names it)."""
    full = os.path.join(root, *path.split("/"))
    try:
        target = os.readlink(full)
    except OSError as exc:
        return None, problem("unreadable", shown(path), f"cannot read the link: {exc.strerror}")
    if not target or CONTROL.search(target):
        return None, problem("link_unsafe", shown(path), "link target is empty or holds a control character")
    try:
        target.encode("utf-8")
    except UnicodeEncodeError:
        return None, problem("link_unsafe", shown(path), "link target is not valid UTF-8")
    real_root = os.path.realpath(root)
    resolved = os.path.realpath(full)
    inside = None
    if resolved.startswith(real_root + os.sep):
        inside = os.path.relpath(resolved, real_root).replace(os.sep, "/")
    return {"path": path, "target": target, "inside": inside}, None


def check_required(root: str, roster: "list[str]", required: "list[str]") -> "list[dict[str, str]]":
    """Step 6: every cell holds every required file, regular and non-empty."""
    problems = []
    for cell in roster:
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(root, cell)).st_mode):
                continue
        except OSError:
            continue
        for name in required:
            path = cell + "/" + name
            try:
                info = os.lstat(os.path.join(root, cell, *name.split("/")))
            except OSError:
                problems.append(problem("required_missing", path, "required file is missing"))
                continue
            if not stat.S_ISREG(info.st_mode):
                problems.append(problem("required_missing", path, "required file is not a regular file"))
            elif info.st_size == 0:
                problems.append(problem("required_empty", path, "required file is empty"))
    return problems


def hash_file(root: str, path: str) -> "tuple[dict[str, object] | None, dict[str, str] | None]":
    """Step 7: hash from one descriptor; a size or mtime change while reading is an error."""
    full = os.path.join(root, *path.split("/"))
    try:
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return None, problem("unreadable", path, f"cannot open: {exc.strerror}")
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None, problem("not_regular", path, "not a regular file")
        digest = hashlib.sha256()
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
        after = os.fstat(fd)
    except OSError as exc:
        return None, problem("unreadable", path, f"read failed: {exc.strerror}")
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        return None, problem("changed_while_hashing", path, "file changed while hashing; wait for the writer")
    return {"path": path, "bytes": after.st_size, "sha256": digest.hexdigest()}, None


def utc_now_iso() -> str:
    """ISO-8601 UTC with `+00:00`, whole seconds. (`datetime.UTC` is 3.11+, hence `timezone.utc`.)"""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()  # noqa: UP017


def manifest_object(run_id: str, roster: "list[str]", entries: "list[dict[str, object]]",
                    links: "list[dict[str, object]] | None" = None,
                    cells: "dict[str, dict[str, object]] | None" = None) -> "dict[str, object]":
    """The manifest; `links` and `cells` only when there are some, so a tree without links and a run whose
    cells all finished give the same bytes as ever."""
    total = 0
    for entry in entries:
        size = entry["bytes"]
        assert isinstance(size, int)
        total += size
    body = {
        "schema": SCHEMA,
        "run_id": run_id,
        "created_at_utc": utc_now_iso(),
        "top_level_dirs": sorted(roster),
        "files": entries,
        "totals": {"files": len(entries), "bytes": total},
    }  # type: dict[str, object]
    if links:
        body["links"] = sorted(links, key=lambda link: str(link["path"]))
    if cells:
        body["cells"] = {cell: cells[cell] for cell in sorted(cells)}
    return body


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_no_clobber(root: str, data: bytes) -> bool:
    """Step 9: O_EXCL temp, fsync, hard link onto the final name (fails if it exists), fsync the folder.

    Returns whether the write was atomic and no-clobber; where hard links are unsupported (some FUSE/NFS
    mounts) it re-checks absence and renames, which leaves a tiny race, and says so.
    """
    final = os.path.join(root, MANIFEST_NAME)
    temp = os.path.join(root, TEMP_PREFIX + str(os.getpid()))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, final)
            atomic = True
        except FileExistsError:
            raise
        except OSError:
            if os.path.lexists(final):
                raise FileExistsError(final) from None
            os.replace(temp, final)
            atomic = False
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
    fsync_dir(root)
    return atomic


def build(root: str, run_id: str, roster: "list[str]", required: "list[str]", ctl: "str | None" = None) -> int:
    """Steps 1-10 in order; every problem of a step is gathered before failing."""
    root = root.rstrip("/") or "/"
    problems = check_inputs(root, run_id, roster, required)
    if problems:
        return fail(problems)
    existing = existing_manifest_sha(root)
    if existing is not None:
        print(f"MANIFEST_SHA256={existing}")
        print("EXISTS " + os.path.join(root, MANIFEST_NAME))
        return EXIT_EXISTS
    links = []  # type: list[dict[str, object]]
    outcomes = cell_outcomes(ctl, roster)
    files, problems = walk(root, roster, links, outcomes)
    problems.extend(check_required(root, [cell for cell in roster if cell not in outcomes], required))
    if problems:
        return fail(problems)  # hashing is the expensive step: only for an otherwise valid tree
    entries = []
    for path in files:
        entry, issue = hash_file(root, path)
        if issue is not None:
            problems.append(issue)
        elif entry is not None:
            entries.append(entry)
    if not entries and not problems:
        problems.append(problem("no_files", "", "the result root holds no files"))
    if problems:
        return fail(problems)
    data = canonical_json(manifest_object(run_id, roster, entries, links, outcomes))
    try:
        atomic = write_no_clobber(root, data)
    except FileExistsError:
        print(f"MANIFEST_SHA256={existing_manifest_sha(root)}")
        return EXIT_EXISTS
    except OSError as exc:
        return fail([problem("write", MANIFEST_NAME, f"cannot write the manifest: {exc.strerror}")])
    print("MANIFEST_SHA256=" + hashlib.sha256(data).hexdigest())
    print("WROTE " + os.path.join(root, MANIFEST_NAME))
    if not atomic:
        print("atomic_no_clobber=false")
    return EXIT_OK


def read_existing(root: str) -> "tuple[bytes | None, int, dict[str, str] | None]":
    """The root's manifest bytes and mtime, read as a regular file (never through a link, never a FIFO), or
    the problem."""
    path = os.path.join(root, MANIFEST_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, 0, problem("no_manifest", MANIFEST_NAME, "no manifest in the result root to adopt")
    except OSError as exc:
        return None, 0, problem("unreadable", MANIFEST_NAME, f"cannot open the manifest: {exc.strerror}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MANIFEST_MAX_BYTES:
            return None, 0, problem("not_regular", MANIFEST_NAME, "the manifest is not a regular file of sane size")
        chunks = []
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        return None, 0, problem("unreadable", MANIFEST_NAME, f"cannot read the manifest: {exc.strerror}")
    finally:
        os.close(fd)
    return b"".join(chunks), info.st_mtime_ns, None


def listed_sizes(data: bytes) -> "tuple[dict[str, int], list[dict[str, str]]]":
    """Each listed path with its size; the client judges every other rule of the manifest itself."""
    try:
        obj = json.loads(data.decode("utf-8"))
        entries = obj["files"]
        listed = {}  # type: dict[str, int]
        for entry in entries:
            path, size = entry["path"], entry["bytes"]
            if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool):
                raise TypeError(path)
            listed[path] = size
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}, [problem("manifest", MANIFEST_NAME, "not a manifest: files[] of {path, bytes} expected")]
    return listed, []


def adopt(root: str, run_id: str, roster: "list[str]", required: "list[str]") -> int:
    """Check the root's existing manifest against the tree for adoption; nothing is written (module doc)."""
    root = root.rstrip("/") or "/"
    problems = check_inputs(root, run_id, roster, required)
    if problems:
        return fail(problems)
    data, written_ns, issue = read_existing(root)
    if issue is not None or data is None:
        return fail([issue or problem("unreadable", MANIFEST_NAME, "cannot read the manifest")])
    print("MANIFEST_SHA256=" + hashlib.sha256(data).hexdigest())
    listed, problems = listed_sizes(data)
    if problems:
        return fail(problems)
    links = []  # type: list[dict[str, object]]
    files, problems = walk(root, roster, links, manifest_there=True)
    for link in links:
        problems.append(problem("link", shown(str(link["path"])), "a link, which this manifest cannot list "
                                "(the skill's builder refuses links): move it out of the result root"))
    problems.extend(check_required(root, roster, required))
    on_box = set(files)
    for path in sorted(on_box - set(listed)):
        problems.append(problem("unlisted", shown(path), "on the box but not in the manifest: written after it?"))
    for path in sorted(set(listed) - on_box):
        problems.append(problem("missing_on_box", shown(path), "in the manifest but not a file on the box"))
    for path in sorted(on_box & set(listed)):
        try:
            info = os.lstat(os.path.join(root, *path.split("/")))
        except OSError as exc:
            problems.append(problem("unreadable", shown(path), f"cannot stat: {exc.strerror}"))
            continue
        if info.st_size != listed[path]:
            problems.append(problem("size_differs", shown(path),
                                    f"{info.st_size} bytes on the box, {listed[path]} in the manifest"))
        elif info.st_mtime_ns > written_ns:
            problems.append(problem("changed_after_manifest", shown(path), "modified after the manifest was written"))
    if problems:
        return fail(problems)
    print("ADOPTABLE " + os.path.join(root, MANIFEST_NAME))
    return EXIT_OK


def fail(problems: "list[dict[str, str]]") -> int:
    sys.stderr.write(json.dumps(problems, ensure_ascii=False) + "\n")
    return EXIT_PROBLEMS


def main(params: object) -> int:
    errors = check_params(params)
    if errors:
        sys.stderr.write("usage: " + "; ".join(errors) + "\n")
        return EXIT_USAGE
    assert isinstance(params, dict)
    if params.get("adopt"):
        return adopt(params["root"], params["run_id"], list(params["roster"]), list(params["required"]))
    return build(params["root"], params["run_id"], list(params["roster"]), list(params["required"]),
                 params.get("ctl"))


if __name__ == "__main__":
    sys.exit(main(globals().get("PARAMS")))
