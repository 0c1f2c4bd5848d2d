"""VERIFY section G, reproducibility and integrity: V29 re-derive, V30 determinism, V32 artifact truth,
V33 immutability (docs/verify.md §2; V31 reconcile lives in documents.py).

Each of these asks whether the files say what the run says: a number recomputes from the saved predictions,
a declared determinism is in the code, a "saved" line left a loadable file, and the pulled bytes are the
bytes the box sealed. V32 and V33 read the files they judge (that is their point); checkpoints are loaded
only by `remote_gpu_trainer.isolated.load_check` in a subprocess with a scrubbed environment and a timeout.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.collapse import recompute, split_rows
from remote_gpu_trainer.audits.catalogue.generated import differs, row_issues
from remote_gpu_trainer.audits.catalogue.load import file_sha256, finite
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    TestArtifacts,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.plain_yaml import YamlRefused, load_plain
from remote_gpu_trainer.audits.catalogue.smoke import (
    Issue,
    finish,
    integer,
    judged_or_skipped,
    merge,
    safe_load,
)
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME, path_problems
from remote_gpu_trainer.shipped_toml import ASSETS, read_asset
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import escape_control

SCAN_SKIP = {"runs", "venv", "node_modules", "site-packages", "__pycache__"}
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
SIGNATURES = ASSETS / "signatures.toml"


# -- V29 rederive -------------------------------------------------------------------------------------------
def rederive(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Every metrics.json value recomputes from results.parquet, and every EVIDENCE value from metrics.json:
    a number that does not was typed, or computed from something that was not saved."""
    tolerance = float(params.get("abs_tol", 1e-9)), float(params.get("rel_tol", 1e-6))
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        tests = [t for t in capsule.tests.values() if t.metrics is not None and t.results is not None]
        notes += [f"{t.metrics_path}: no per-item results" for t in capsule.tests.values() if t not in tests]
        if not tests:
            continue
        issues = [issue for test in tests for issue in _rederive_test(test, tolerance, notes)]
        evidence = [ref for t in tests for ref in (EvidenceRef(t.metrics_path, t.metrics_sha256),
                                                   EvidenceRef(t.results_path or "", t.results_sha256))]
        finish(findings, subjects, capsule.subject,
               merge("V29", capsule.subject, issues, evidence=evidence, integrity_class="ffp_tell"))
    for number in project.numbers:
        judged = row_issues(project, number, tolerance) if number.claim is not None else None
        if judged is not None:
            issues, refs = judged
            finish(findings, subjects, number.subject, merge("V29", number.subject, issues, evidence=refs,
                                                             integrity_class="ffp_tell"))
    return judged_or_skipped("V29", "rederive", findings, subjects, notes,
                             "no metrics.json with per-item results and no EVIDENCE values")


def _rederive_test(test: TestArtifacts, tolerance: tuple[float, float], notes: list[str]) -> list[Issue]:
    rows = split_rows(test)
    assert rows is not None
    if "condition" in rows.columns:  # the shuffled control is not the reported number's rows
        rows = rows[rows["condition"].astype(str) != "shuffled"]
    where = f"test {test.test_id}"
    issues = []
    if test.n is not None and len(rows) != test.n:
        issues.append(Issue("critical", f"not re-derivable from saved predictions: {where}: {len(rows)} result rows "
                                        f"for split {test.split}, metrics.json n = {test.n}",
                            {f"{test.test_id}.rows": len(rows), f"{test.test_id}.n": test.n}))
    blocks = (test.metrics or {}).get("metrics")
    for metric, block in (blocks or {}).items() if isinstance(blocks, Mapping) else ():
        stored = finite(block.get("value")) if isinstance(block, Mapping) else None
        if stored is None or not isinstance(block, Mapping):
            notes.append(f"{test.metrics_path}: {metric} has no finite value")
            continue
        recomputed, why = recompute(metric, block, rows)
        if recomputed is None and why.startswith("aggregate"):
            notes.append(f"{test.metrics_path}: {metric} not re-derived ({why})")
        elif recomputed is None:
            issues.append(Issue("critical", f"not re-derivable from saved predictions: {where}/{metric}: {why}",
                                {f"{test.test_id}.{metric}.stored": stored}))
        elif differs(recomputed, stored, tolerance):
            issues.append(Issue("critical", f"not re-derivable from saved predictions: {where}/{metric} stored "
                                            f"{stored!r}, recomputed {recomputed!r}",
                                {f"{test.test_id}.{metric}.stored": stored,
                                 f"{test.test_id}.{metric}.recomputed": recomputed}))
    return issues


# -- V30 determinism: what the code does -------------------------------------------------------------------
@dataclass
class CodeFacts:
    """What an AST scan of the project's Python files found, for the items of docs/verify.md §2 (V30)."""

    files: int = 0
    seeded: set[str] = field(default_factory=set)  # torch, numpy, random
    deterministic_algorithms: bool = False
    benchmark_not_false: list[str] = field(default_factory=list)  # where cudnn.benchmark is set to non-False
    cublas: bool = False  # CUBLAS_WORKSPACE_CONFIG set from the code
    loaders: list[tuple[str, int | None, bool]] = field(default_factory=list)  # where, num_workers, seeded
    worker_fns: set[str] = field(default_factory=set)  # names passed as worker_init_fn
    functions: dict[str, list[ast.AST]] = field(default_factory=dict)  # name -> defs, for worker_init_fn bodies
    datasets: list[tuple[str, ast.ClassDef]] = field(default_factory=list)  # where, class with __getitem__


def python_files(root: Path) -> Iterator[Path]:
    """The project's own modules: not under runs/, .rgt/, .venv/, hidden or vendored folders."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SCAN_SKIP)
        for name in sorted(files):
            if name.endswith(".py") and not os.path.islink(os.path.join(folder, name)):
                yield Path(folder) / name


def dotted(node: ast.AST) -> str:
    """`torch.backends.cudnn.benchmark` for an attribute chain, `name` for a name, '' otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def scan_code(root: Path) -> CodeFacts:
    facts = CodeFacts()
    for path in python_files(root):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        facts.files += 1
        where = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                _scan_call(node, f"{where}:{node.lineno}", facts)
            elif isinstance(node, ast.Assign):
                _scan_assign(node, f"{where}:{node.lineno}", facts)
            elif isinstance(node, ast.FunctionDef):
                facts.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef) and any(isinstance(b, ast.FunctionDef) and b.name == "__getitem__"
                                                        for b in node.body):
                facts.datasets.append((where, node))
    return facts


def _true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _scan_call(node: ast.Call, where: str, facts: CodeFacts) -> None:
    name = dotted(node.func)
    last = name.rsplit(".", 1)[-1]
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    if last in ("manual_seed", "manual_seed_all"):
        facts.seeded.add("torch")
    elif name in ("np.random.seed", "numpy.random.seed"):
        facts.seeded.add("numpy")
    elif name == "random.seed":
        facts.seeded.add("random")
    elif last in ("seed_everything", "set_seed"):
        facts.seeded |= {"torch", "numpy", "random"}
    if last == "use_deterministic_algorithms" and node.args and _true(node.args[0]):
        facts.deterministic_algorithms = True
    if last == "Trainer" and _true(keywords.get("deterministic")):
        facts.deterministic_algorithms = True
    if last in ("setdefault", "putenv") and node.args and isinstance(node.args[0], ast.Constant) \
            and node.args[0].value == "CUBLAS_WORKSPACE_CONFIG":
        facts.cublas = True
    if last == "DataLoader":
        workers = keywords.get("num_workers")
        count = 0 if workers is None else (workers.value if isinstance(workers, ast.Constant)
                                           and isinstance(workers.value, int) else None)
        facts.loaders.append((where, count, "generator" in keywords or "worker_init_fn" in keywords))
        if "worker_init_fn" in keywords:
            facts.worker_fns.add(dotted(keywords["worker_init_fn"]).rsplit(".", 1)[-1])


def _scan_assign(node: ast.Assign, where: str, facts: CodeFacts) -> None:
    for target in node.targets:
        if dotted(target).endswith("cudnn.benchmark") and not (isinstance(node.value, ast.Constant)
                                                                and node.value.value is False):
            facts.benchmark_not_false.append(where)
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                and target.slice.value == "CUBLAS_WORKSPACE_CONFIG":
            facts.cublas = True


RNG_FACTORIES = ("default_rng", "RandomState", "Random", "Generator")


def _dataset_items(facts: CodeFacts, old_torch: bool) -> list[str]:
    """Dataset classes that draw from an RNG object made in __init__ (every forked worker inherits the same
    stream) or, on torch < 1.9, from the global np.random, without a per-worker reseed."""
    items = []
    for where, cls in facts.datasets:
        if any(isinstance(n, ast.Call) and dotted(n.func).endswith("get_worker_info") for n in ast.walk(cls)):
            continue
        methods = {b.name: b for b in cls.body if isinstance(b, ast.FunctionDef)}
        getitem = methods["__getitem__"]
        used = {n.attr for n in ast.walk(getitem) if isinstance(n, ast.Attribute) and dotted(n.value) == "self"}
        for attr in sorted(_rng_attrs(methods.get("__init__")) & used):
            if not _reseeded(facts, attr):
                items.append(f"per-worker reseed of {cls.name}.{attr} ({where})")
        global_calls = [n for n in ast.walk(getitem) if isinstance(n, ast.Call)
                        and dotted(n.func).startswith(("np.random.", "numpy.random."))
                        and dotted(n.func).rsplit(".", 1)[-1] not in (*RNG_FACTORIES, "seed")]
        if old_torch and global_calls and not _reseeded(facts, None):
            items.append(f"worker reseed for global np.random in {cls.name}.__getitem__ ({where})")
    return items


def _rng_attrs(init: ast.FunctionDef | None) -> set[str]:
    attrs: set[str] = set()
    for node in ast.walk(init) if init is not None else ():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and dotted(node.value.func).rsplit(".", 1)[-1] in RNG_FACTORIES:
            attrs |= {t.attr for t in node.targets if isinstance(t, ast.Attribute) and dotted(t.value) == "self"}
    return attrs


def _reseeded(facts: CodeFacts, attr: str | None) -> bool:
    """A worker_init_fn that touches the dataset's `attr` (or, for the global stream, seeds numpy)."""
    for name in facts.worker_fns:
        for function in facts.functions.get(name, []):
            for node in ast.walk(function):
                if attr is not None and isinstance(node, ast.Attribute) and node.attr == attr:
                    return True
                if attr is None and isinstance(node, ast.Call) and dotted(node.func) in ("np.random.seed",
                                                                                         "numpy.random.seed"):
                    return True
    return False


def declared_deterministic(capsule: Capsule) -> bool:
    flags = capsule.flat_config
    return capsule.prov("determinism", "declared") is True or any(
        key.split(".")[-1] == "deterministic" and value is True for key, value in flags.items())


def missing_items(capsule: Capsule, facts: CodeFacts) -> list[str]:
    """The V30 items the code and launch environment do not achieve for this capsule."""
    items = [f"{lib} seed" for lib in ("torch", "numpy", "random") if lib not in facts.seeded]
    if not facts.deterministic_algorithms:
        items.append("torch.use_deterministic_algorithms(True)")
    if facts.benchmark_not_false:
        items.append(f"cudnn.benchmark False (set otherwise at {facts.benchmark_not_false[0]})")
    env = capsule.prov("command", "env")
    flags = capsule.prov("determinism", "flags")
    launch = (isinstance(env, Mapping) and "CUBLAS_WORKSPACE_CONFIG" in env) or (
        isinstance(flags, list) and any(str(f).startswith("CUBLAS_WORKSPACE_CONFIG") for f in flags))
    if not (launch or facts.cublas):
        items.append("CUBLAS_WORKSPACE_CONFIG in the launch environment")
    configured = max((integer(v) or 0 for k, v in capsule.flat_config.items()
                      if k.split(".")[-1] == "num_workers"), default=0)
    unseeded = [where for where, workers, seeded in facts.loaders
                if not seeded and (workers if workers is not None else configured) > 0]
    if unseeded:
        items.append(f"seeded DataLoader generator or worker_init_fn ({unseeded[0]})")
    version = re.match(r"(\d+)\.(\d+)", str(capsule.prov("hardware", "torch") or ""))
    old = version is not None and (int(version.group(1)), int(version.group(2))) < (1, 9)
    return items + _dataset_items(facts, old)


def determinism(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Declared determinism must be in the code; replicates of identical inputs must then agree exactly
    (undeclared, their spread is the run-to-run noise band)."""
    capsules = [c for c in project.capsules if c.run_record is not None or c.config is not None]
    if not capsules:
        return skipped("V30", "determinism", "no run.json or config.yaml under runs/<run>/<cell>/")
    declared = any(declared_deterministic(c) for c in capsules)
    facts = scan_code(project.root) if declared else CodeFacts()
    replicates = _replicate_issues(capsules)
    findings: list[Finding] = []
    subjects: list[str] = []
    notes = ["no project Python files to scan"] if declared and facts.files == 0 else []
    for capsule in capsules:
        issues = list(replicates.get(capsule.key, []))
        if declared_deterministic(capsule) and facts.files:
            missing = missing_items(capsule, facts)
            if missing:
                issues.append(Issue("warn", f"determinism declared, not achieved: {'; '.join(missing)}",
                                    {"missing": missing}))
        if capsule.key in replicates or (declared_deterministic(capsule) and facts.files):
            finish(findings, subjects, capsule.subject, merge("V30", capsule.subject, issues))
    return judged_or_skipped("V30", "determinism", findings, subjects, notes,
                             "no declared determinism and no replicates with equal provenance_hash")


def _replicate_issues(capsules: list[Capsule]) -> dict[str, list[Issue]]:
    groups: dict[str, list[Capsule]] = {}
    for capsule in capsules:
        if capsule.provenance_hash:
            groups.setdefault(capsule.provenance_hash, []).append(capsule)
    issues: dict[str, list[Issue]] = {}
    for members in (m for m in groups.values() if len(m) >= 2):
        values: dict[str, list[tuple[str, float]]] = {}
        for capsule in members:
            for test in capsule.tests.values():
                for metric in (test.metrics or {}).get("metrics") or {}:
                    if (value := test.metric_value(metric)) is not None:
                        values.setdefault(f"{test.test_id}/{metric}", []).append((capsule.key, value))
        declared = all(declared_deterministic(c) for c in members)
        for where, pairs in sorted(values.items()):
            band = max(v for _, v in pairs) - min(v for _, v in pairs)
            listed = ", ".join(f"{key}={value!r}" for key, value in pairs)
            if len(pairs) < 2 or (declared and band == 0):
                continue
            issue = (Issue("error", f"declared deterministic, but replicates with equal provenance_hash differ: "
                                    f"{where} {listed}", {f"{where}.values": dict(pairs)}) if declared else
                     Issue("info", f"run-to-run noise band: {where} spread {band:.6g} over {len(pairs)} replicates "
                                   f"with equal provenance_hash ({listed})", {f"{where}.band": band}))
            for key, _ in pairs:
                issues.setdefault(key, []).append(issue)
    return issues


# -- V32 artifact_truth -------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def claim_patterns() -> tuple[re.Pattern[str], ...]:
    """The saved/synced/uploaded regexes of log signatures S56 and S57 (assets/signatures.toml, a package file:
    parsed once per process, not on every audit)."""
    rows = read_asset(SIGNATURES).get("signature", [])
    return tuple(re.compile(row["pattern"]) for row in rows if row.get("id") in ("S56", "S57") and row.get("pattern"))


def claimed_paths(line: str, patterns: tuple[re.Pattern[str], ...]) -> list[str]:
    found = [group.strip("'\"`,;:()[]").rstrip(".") for pattern in patterns for match in pattern.finditer(line)
             for group in match.groups() if group]
    return list(dict.fromkeys(p for p in found if p))


def resolve_claim(root: Path, run: str, claimed: str, cells: list[str]) -> Path | None:
    """The local copy of a claimed path, never outside the project root: a relative path under runs/<run>/,
    its cells or the root; an absolute (box) path by its longest suffix of ≥ 2 components under runs/<run>/."""
    base = root / "runs" / run
    parts = [p for p in claimed.split("/") if p not in ("", ".")]
    if claimed.startswith("/"):
        candidates = [Path(claimed)] + [base.joinpath(*parts[i:]) for i in range(len(parts) - 1)]
    else:
        candidates = [base / claimed] + [base / cell / claimed for cell in cells] + [root / claimed]
    top = root.resolve()
    for candidate in candidates:
        try:
            real = candidate.resolve()
            real.relative_to(top)
        except (ValueError, OSError):
            continue
        if real.exists():
            return real
    return None


def artifact_problem(path: Path, timeout: float) -> str | None:
    """Why a claimed artifact is not what was claimed: empty, JSON that does not parse, or a checkpoint that
    does not safe-load (a flat state dict or non-finite values still count as loaded here)."""
    if path.is_dir():
        return None if any(f.is_file() and f.stat().st_size > 0 for f in path.rglob("*")) else "empty folder"
    if path.stat().st_size == 0:
        return "empty file (0 bytes)"
    if path.suffix.lower() == ".json":
        try:
            loads_strict(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            return f"JSON does not parse ({exc})"
    if path.suffix.lower() in CHECKPOINT_SUFFIXES:
        verdict = safe_load(path, timeout)
        if not verdict.get("ok") and verdict.get("error") not in ("no_state_key", "nonfinite"):
            detail = verdict.get("detail") or verdict.get("global") or ""
            return f"does not safe-load ({verdict.get('error')}{': ' + str(detail) if detail else ''})"
    return None


def artifact_truth(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A log line saying a file was saved or synced is a claim; the file must be there and load. An eval
    protocol set only on the command line is not frozen."""
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    patterns = claim_patterns()
    for run, lines in sorted(project.log_lines.items()):
        issues = _claim_issues(project, run, lines, patterns, float(params.get("timeout_s", 60.0)), notes)
        finish(findings, subjects, f"run:{run}", merge("V32", f"run:{run}", issues))
    for capsule in project.capsules:
        overrides = [(t, _unfrozen(capsule, t)) for t in capsule.tests.values() if t.metrics is not None]
        if not overrides:
            continue
        issues = [Issue("warn", f"freeze the protocol as a config: test {t.test_id} evaluated with CLI overrides "
                                f"absent from config.yaml: {' '.join(found)}", {f"{t.test_id}.overrides": found})
                  for t, found in overrides if found]
        evidence = [EvidenceRef(t.metrics_path, t.metrics_sha256) for t, _ in overrides]
        finish(findings, subjects, capsule.subject,
               merge("V32", capsule.subject, issues, evidence=evidence, integrity_class="qrp_tell"))
    return judged_or_skipped("V32", "artifact_truth", findings, subjects, notes,
                             "no raw log lines and no metrics.json")


def _claim_issues(project: ProjectEvidence, run: str, lines: tuple[tuple[int, str], ...],
                  patterns: tuple[re.Pattern[str], ...], timeout: float, notes: list[str]) -> list[Issue]:
    cells = [c.cell for c in project.run_capsules(run)]
    seen: set[str] = set()
    issues = []
    for number, text in lines:
        for claimed in claimed_paths(text, patterns):
            if claimed in seen:
                continue
            seen.add(claimed)
            if "://" in claimed:
                notes.append(f"run {run} line {number}: {claimed} is remote storage, not checked here")
                continue
            local = resolve_claim(project.root, run, claimed, cells)
            problem = "missing" if local is None else artifact_problem(local, timeout)
            if problem is not None:
                what = f"missing: {claimed}" if local is None else f"unloadable: {claimed} ({problem})"
                issues.append(Issue("critical", f"claimed but {what}, log line {number}",
                                    {claimed: {"line": number, "problem": problem}}))
    return issues


def _unfrozen(capsule: Capsule, test: TestArtifacts) -> list[str]:
    """metrics.json eval_command.overrides (`key=value`) that config.yaml does not already hold."""
    command = (test.metrics or {}).get("eval_command")
    raw = command.get("overrides") if isinstance(command, Mapping) else None
    config = capsule.flat_config
    found = []
    for override in raw if isinstance(raw, list) else []:
        key, _, text = str(override).lstrip("+~").partition("=")
        try:
            value = load_plain(text.encode("utf-8"))
        except YamlRefused:
            value = text
        if key not in config or config[key] != value:
            found.append(str(override))
    return found


# -- V33 immutability ---------------------------------------------------------------------------------------
def immutability(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """The pulled bytes are the bytes the box sealed in PULL_MANIFEST.json: any change, addition or removal
    since is mutated evidence (a re-run written into an existing run id shows up the same way)."""
    broken = sorted(p.path.split("/")[1] for p in project.problems
                    if re.fullmatch(rf"runs/[^/]+/{re.escape(MANIFEST_NAME)}", p.path))
    if not project.manifests and not broken:
        return skipped("V33", "immutability", f"no {MANIFEST_NAME} under runs/<run>/")
    findings: list[Finding] = []
    subjects: list[str] = []
    for run in broken:
        finish(findings, subjects, f"run:{run}", merge("V33", f"run:{run}", [Issue(
            "critical", f"evidence mutated: runs/{run}/{MANIFEST_NAME} no longer parses")], integrity_class="ffp_tell"))
    for run, manifest in sorted(project.manifests.items()):
        by_subject = _mutations(project.root / "runs" / run, run, manifest)
        cells = {c.subject for c in project.run_capsules(run)} | {s for s in by_subject if s.startswith("capsule:")}
        for subject in [f"run:{run}", *sorted(cells)]:
            issues = by_subject.get(subject, [])
            finish(findings, subjects, subject, merge("V33", subject, issues, integrity_class="ffp_tell"))
    return judged_or_skipped("V33", "immutability", findings, subjects, [], "")


def _manifest_files(manifest: Mapping[str, Any]) -> tuple[dict[str, tuple[int, str]], list[str]]:
    """path -> (bytes, sha256) of the manifest's well-formed entries, and the malformed entries."""
    entries = manifest.get("files")
    listed: dict[str, tuple[int, str]] = {}
    bad = [] if isinstance(entries, list) else ["files is not a list"]
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        row = entry if isinstance(entry, Mapping) else {}
        size, digest = integer(row.get("bytes")), str(row.get("sha256"))
        if path_problems(row.get("path")) or size is None or not re.fullmatch(r"[0-9a-f]{64}", digest):
            bad.append(f"files[{index}]")
        else:
            listed[str(row["path"])] = (size, digest)
    return listed, bad


def local_files(base: Path) -> dict[str, bool]:
    """Every entry under a run's local root, relative path -> is a regular file (links never followed); the
    manifest, the marker, rgt's marker temporaries and a pull's `.part` files are not capsule files."""
    found: dict[str, bool] = {}
    for folder, dirs, files in os.walk(base):
        rel = Path(folder).relative_to(base).as_posix()
        for name in [d for d in dirs if os.path.islink(os.path.join(folder, d))] + files:
            path = name if rel == "." else f"{rel}/{name}"
            if (rel == "." and (name in (MANIFEST_NAME, MARKER_NAME) or name.startswith(".rgt-tmp"))) \
                    or name.endswith(".part"):
                continue
            full = Path(folder) / name
            found[escape_control(path)] = full.is_file() and not full.is_symlink()  # a name that is not UTF-8, escaped
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    return found


def _mutations(base: Path, run: str, manifest: Mapping[str, Any]) -> dict[str, list[Issue]]:
    listed, bad = _manifest_files(manifest)
    local = local_files(base)
    changes: dict[str, dict[str, list[str]]] = {}

    def note(kind: str, path: str) -> None:
        subject = f"capsule:{run}/{path.split('/', 1)[0]}" if "/" in path else f"run:{run}"
        changes.setdefault(subject, {}).setdefault(kind, []).append(path)

    for path, (size, digest) in sorted(listed.items()):
        regular = local.pop(path, None)
        if regular is None:
            note("removed", path)
        elif not regular or (base / path).stat().st_size != size or file_sha256(base / path) != digest:
            note("changed", path)
    for path in sorted(local):
        note("added", path)
    issues = {subject: [Issue("critical", "evidence mutated: " + ", ".join(
        f"{len(paths)} {kind} ({', '.join(paths[:5])}{', …' if len(paths) > 5 else ''})"
        for kind, paths in kinds.items()), dict(kinds))] for subject, kinds in changes.items()}
    marker = _marker_mismatch(base)
    if bad or marker:
        issues.setdefault(f"run:{run}", []).append(Issue(
            "critical", f"evidence mutated: {MANIFEST_NAME} {marker or 'has malformed entries: ' + ', '.join(bad)}"))
    return issues


def _marker_mismatch(base: Path) -> str | None:
    """When PULL_VERIFIED.json is there, the manifest must still be the one it verified."""
    marker_path, manifest_path = base / MARKER_NAME, base / MANIFEST_NAME
    if not marker_path.is_file() or not manifest_path.is_file():
        return None
    try:
        marker = loads_strict(marker_path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return f"is unverifiable: {MARKER_NAME} does not parse"
    recorded = marker.get("manifest_sha256") if isinstance(marker, dict) else None
    if isinstance(recorded, str) and recorded != file_sha256(manifest_path):
        return f"is not the manifest {MARKER_NAME} verified (sha256 {recorded[:12]}…)"
    return None


CHECKS = {
    "V29": rederive,
    "V30": determinism,
    "V32": artifact_truth,
    "V33": immutability,
}
