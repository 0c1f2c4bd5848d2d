"""Section D of the catalogue, leakage (docs/verify.md §2): did test items, or statistics of them, reach training
or selection?

- V14 `split_hash_disjoint`: content hashes of train, val and test are disjoint; the manifest's rows exist and
  its recorded hashes are the bytes on disk (names trigger, bytes decide).
- V15 `case_duplicates`: paths and sibling folders that differ only by case (double ingestion on NTFS/APFS).
- V16 `near_duplicates`: dHash (images) and MinHash (text) candidates between test and train, for review (T04).
- V17 `fit_on_train_only`: preprocessing artifacts were fitted on the train ids only.
- V18 `selection_on_test`: no selection, per-epoch logging or repeated evaluation on test (a `qrp_tell`).
- V19 `holdout_structure`: a validation split that is held out by hash, group and time, and a val series that
  is not the train series.

Checks work on sets of the hashes the loader computed (fast for 100k members); V16 and V17 read member files
(near_duplicates.py, fit_on_train.py) and V15 compares files on a case-insensitive host, never following a path
out of the project root. One finding per (check, subject): the parts of a
subject's finding are joined by `_one_per_subject`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from remote_gpu_trainer.audits.catalogue.fit_on_train import fit_on_train_only
from remote_gpu_trainer.audits.catalogue.load import file_sha256
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    SplitManifest,
    result,
    sha256_hex,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.near_duplicates import near_duplicates
from remote_gpu_trainer.audits.catalogue.split_members import (
    ROLES,
    inside_root,
    manifest_ref,
    member_hash,
    members_of,
    no_manifest,
    role_of,
)

QRP = "qrp_tell"


# -- shared helpers ---------------------------------------------------------------------------------------------
def _hashes(manifest: SplitManifest, role: str) -> set[str]:
    return {h for m in members_of(manifest, role) if (h := member_hash(manifest, m)) is not None}


def _claims(project: ProjectEvidence, capsule: Capsule) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.claim for n in project.numbers if n.claim and capsule.key in n.cells))


# -- V14 split_hash_disjoint -----------------------------------------------------------------------------------
def split_hash_disjoint(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Content hashes disjoint across splits; rows exist; recorded hashes are the bytes on disk."""
    if not project.splits:
        return no_manifest("V14", "split_hash_disjoint", project)
    findings: list[Finding] = []
    for manifest in project.splits:
        counts = overlap_counts(manifest)
        parts = (_overlaps(manifest, counts, float(params.get("critical_fraction", 0.01)))
                 + _within_split(manifest) + _name_collisions(manifest) + _disk_truth(manifest)
                 + _malformed(project, manifest))
        findings += [replace(f, values={**counts, **f.values}) for f in parts]
    return result("V14", "split_hash_disjoint", findings, [m.subject for m in project.splits])


def overlap_counts(manifest: SplitManifest) -> dict[str, Any]:
    """|train∩test|, |val∩test|, |train∩val| over content hashes, and fraction_of_test_seen."""
    train, val, test = (_hashes(manifest, role) for role in ROLES)
    seen = len(test & train)
    return {"train_test": seen, "val_test": len(val & test), "train_val": len(train & val),
            "fraction_of_test_seen": seen / len(test) if test else None}


def _overlaps(manifest: SplitManifest, counts: Mapping[str, Any], critical: float) -> list[Finding]:
    found = []
    if counts["train_test"]:
        fraction = counts["fraction_of_test_seen"] or 0.0
        text = f"train∩test = {counts['train_test']} items ({100 * fraction:.1f} % of test)"
        found.append(Finding("V14", manifest.subject, "critical" if fraction >= critical else "error", text,
                             {}, manifest_ref(manifest)))
    if counts["val_test"]:
        found.append(Finding("V14", manifest.subject, "error", f"val∩test = {counts['val_test']} items", {},
                             manifest_ref(manifest)))
    if counts["train_val"]:
        found.append(Finding("V14", manifest.subject, "warn", f"train∩val = {counts['train_val']} items", {},
                             manifest_ref(manifest)))
    return found


def _within_split(manifest: SplitManifest) -> list[Finding]:
    """Members of one split with the same content hash (info: the split counts them twice)."""
    duplicates: dict[str, int] = {}
    for split in sorted({m.split for m in manifest.members}):
        hashes = [h for m in manifest.members if m.split == split and (h := member_hash(manifest, m)) is not None]
        if len(hashes) > len(set(hashes)):
            duplicates[split] = len(hashes) - len(set(hashes))
    if not duplicates:
        return []
    text = ", ".join(f"{split} {count}" for split, count in duplicates.items())
    return [Finding("V14", manifest.subject, "info", f"within-split duplicates: {text}",
                    {"within_split_duplicates": duplicates}, manifest_ref(manifest))]


def _name_collisions(manifest: SplitManifest) -> list[Finding]:
    """File names in more than one split whose bytes differ: names trigger, bytes decide (info only)."""
    by_name: dict[str, dict[str, set[str]]] = {}
    for member in manifest.members:
        digest = member_hash(manifest, member)
        if member.path and digest is not None:
            name = member.path.rsplit("/", 1)[-1]
            by_name.setdefault(name, {}).setdefault(member.split, set()).add(digest)
    names = sorted(name for name, splits in by_name.items()
                   if len(splits) > 1 and len(set().union(*splits.values())) > 1)
    if not names:
        return []
    return [Finding("V14", manifest.subject, "info", f"{len(names)} file name(s) in more than one split with "
                    f"different bytes (names trigger, bytes decide): {', '.join(names[:5])}",
                    {"name_collisions": len(names), "names": names[:20]}, manifest_ref(manifest))]


def _disk_truth(manifest: SplitManifest) -> list[Finding]:
    """Rows whose path does not exist (error) and recorded hashes that are not the bytes on disk (critical)."""
    missing = sorted({m.id for m in manifest.members
                      if (m.path is None and manifest.hash_unit == "file_bytes")
                      or (m.path is not None and manifest.disk_sha256.get(m.path) is None)})
    changed = sorted({m.id for m in manifest.members if manifest.hash_unit == "file_bytes" and m.path and m.sha256
                      and manifest.disk_sha256.get(m.path) not in (None, m.sha256)})
    found = []
    if missing:
        found.append(Finding("V14", manifest.subject, "error", f"{len(missing)} manifest row(s) whose path does "
                             f"not exist: fabricated/missing rows ({', '.join(missing[:5])})",
                             {"missing_rows": len(missing), "missing_ids": missing[:20]}, manifest_ref(manifest)))
    if changed:
        found.append(Finding("V14", manifest.subject, "critical", f"{len(changed)} recorded sha256 differ from the "
                             f"bytes on disk ({', '.join(changed[:5])})",
                             {"hash_mismatches": len(changed), "mismatch_ids": changed[:20]}, manifest_ref(manifest)))
    return found


def _malformed(project: ProjectEvidence, manifest: SplitManifest) -> list[Finding]:
    """Rows the loader could not read (no string id, a split that is not a list)."""
    problems = [p.message for p in project.problems if p.path == manifest.path]
    if not problems:
        return []
    return [Finding("V14", manifest.subject, "error", f"{len(problems)} malformed manifest row(s) not audited: "
                    f"{'; '.join(problems[:3])}", {"malformed_rows": len(problems)}, manifest_ref(manifest))]


# -- V15 case_duplicates ---------------------------------------------------------------------------------------
def case_duplicates(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Paths and sibling folders that differ only by case; on a case-insensitive host, pairs that are one file."""
    if not project.splits:
        return no_manifest("V15", "case_duplicates", project)
    findings: list[Finding] = []
    for manifest in project.splits:
        findings += _case_paths(manifest) + _case_siblings(manifest)
        if project.case_insensitive_fs:
            findings += _same_files(project, manifest)
    return result("V15", "case_duplicates", findings, [m.subject for m in project.splits])


def _casefold_groups(paths: set[str]) -> list[list[str]]:
    groups: dict[str, set[str]] = {}
    for path in paths:
        groups.setdefault(path.casefold(), set()).add(path)
    return sorted(sorted(group) for group in groups.values() if len(group) > 1)


def _case_paths(manifest: SplitManifest) -> list[Finding]:
    """Per split, relative paths equal under casefold (they collide on NTFS/APFS)."""
    collisions = {}
    for split in sorted({m.split for m in manifest.members}):
        groups = _casefold_groups({m.path for m in manifest.members if m.split == split and m.path})
        if groups:
            collisions[split] = groups
    if not collisions:
        return []
    count = sum(len(groups) for groups in collisions.values())
    example = " ~ ".join(next(iter(collisions.values()))[0])
    return [Finding("V15", manifest.subject, "warn", f"{count} case-only path collision(s) (files collide on "
                    f"NTFS/APFS): {example}", {"case_collisions": {s: g[:20] for s, g in collisions.items()}},
                    manifest_ref(manifest))]


def _case_siblings(manifest: SplitManifest) -> list[Finding]:
    """Sibling directories whose names differ only by case (`Train/`, `train/`): every file ingested twice."""
    children: dict[str, set[str]] = {}
    for member in manifest.members:
        parts = (member.path or "").split("/")
        for depth in range(len(parts) - 1):
            children.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
    pairs = [[f"{parent}/{name}" if parent else name for name in group]
             for parent, names in sorted(children.items()) for group in _casefold_groups(names)]
    if not pairs:
        return []
    return [Finding("V15", manifest.subject, "error", "double ingestion on case-insensitive FS: "
                    + "; ".join(" ~ ".join(p) for p in pairs[:5]), {"case_sibling_dirs": pairs[:20]},
                    manifest_ref(manifest))]


def _same_files(project: ProjectEvidence, manifest: SplitManifest) -> list[Finding]:
    """On a case-insensitive host, member paths equal under casefold that are one file (os.path.samefile)."""
    same = []
    for group in _casefold_groups({m.path for m in manifest.members if m.path}):
        first = inside_root(project.root, group[0])
        for other in group[1:]:
            path = inside_root(project.root, other)
            if first is not None and path is not None and os.path.samefile(first, path):
                same.append([group[0], other])
    if not same:
        return []
    return [Finding("V15", manifest.subject, "error", f"{len(same)} pair(s) of member paths are one file on this "
                    f"case-insensitive host: {' ~ '.join(same[0])}", {"same_file_pairs": same[:20]},
                    manifest_ref(manifest))]


# -- V18 selection_on_test -------------------------------------------------------------------------------------
def selection_on_test(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Test never chose anything: not the checkpoint, not the epoch, not a sweep's winner (docs/verify.md §2)."""
    if not project.capsules:
        return skipped("V18", "selection_on_test", "no run capsule (runs/<run>/<cell>/)")
    findings: list[Finding] = []
    for capsule in project.capsules:
        findings += _selected_on_test(capsule) + _test_columns(project, capsule) + _test_touched(capsule)
    findings = [replace(f, integrity_class=QRP, claims=_claims(project, c))
                for f in findings if (c := project.capsule(f.subject.removeprefix("capsule:"))) is not None]
    return result("V18", "selection_on_test", findings, [c.subject for c in project.capsules])


def _train_ref(project: ProjectEvidence, capsule: Capsule) -> tuple[EvidenceRef, ...]:
    rel = capsule.train_path or f"{capsule.path}/train.csv"
    path = inside_root(project.root, rel)
    return (EvidenceRef(rel, file_sha256(path) if path is not None else None),)


def _run_ref(capsule: Capsule) -> tuple[EvidenceRef, ...]:
    return (EvidenceRef(f"{capsule.path}/run.json", capsule.run_record_sha256),)


def _selected_on_test(capsule: Capsule) -> list[Finding]:
    """run.json `selection.split == "test"`, or a `sweep` record ranking trials by a test metric."""
    record = capsule.run_record or {}
    found = []
    selection = record.get("selection")
    if isinstance(selection, Mapping) and str(selection.get("split", "")).lower() == "test":
        found.append(Finding("V18", capsule.subject, "critical", "model selected on the test split "
                             f"(run.json selection.split = test, criterion {selection.get('criterion')!r})",
                             {"selection_split": "test"}, _run_ref(capsule)))
    sweep = record.get("sweep")
    rank = str(sweep.get("rank_by") or sweep.get("metric") or "") if isinstance(sweep, Mapping) else ""
    if isinstance(sweep, Mapping) and (str(sweep.get("split", "")).lower() == "test"
                                       or rank.lower().startswith(("test/", "test_"))):
        shown = rank or "split test"
        found.append(Finding("V18", capsule.subject, "critical", f"sweep ranked trials by a test metric ({shown})",
                             {"sweep_rank": shown}, _run_ref(capsule)))
    return found


def _test_columns(project: ProjectEvidence, capsule: Capsule) -> list[Finding]:
    """train.csv `test/*` columns filled on more than one row: test was looked at every epoch."""
    frame = capsule.train
    if frame is None:
        return []
    filled = {str(c): int(frame[c].notna().sum()) for c in frame.columns.tolist() if str(c).lower().startswith("test/")}
    logged = {c: n for c, n in filled.items() if n > 1}
    if not logged:
        return []
    return [Finding("V18", capsule.subject, "error", "per-epoch test evaluation in train.csv: "
                    + ", ".join(f"{c} on {n} rows" for c, n in sorted(logged.items())), {"test_columns": logged},
                    _train_ref(project, capsule))]


def _test_touched(capsule: Capsule) -> list[Finding]:
    """More than one metrics.json per test id, or a test of a checkpoint other than the one run.json names."""
    by_test: dict[str, list[str]] = {}
    for folder, test in capsule.tests.items():
        by_test.setdefault(str((test.metrics or {}).get("test_id") or folder), []).append(folder)
    repeated = {t: sorted(f) for t, f in by_test.items() if len(f) > 1}
    record = capsule.run_record or {}
    raw = record.get("checkpoints")
    checkpoints: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    used = {str(t.get("test_id")): str(t.get("checkpoint") or "best") for t in record.get("tests") or []
            if isinstance(t, Mapping)}
    superseded = {}
    for folder, test in capsule.tests.items():
        sha = (test.metrics or {}).get("checkpoint_sha256")
        names = [n for n, c in checkpoints.items() if isinstance(c, Mapping) and c.get("sha256") == sha and sha]
        if names and used.get(test.test_id, "best") not in names:
            superseded[folder] = names[0]
    if not repeated and not superseded:
        return []
    parts = [f"{len(f)} metrics.json for test {t}" for t, f in sorted(repeated.items())]
    parts += [f"test {t} evaluated checkpoint {n!r}" for t, n in sorted(superseded.items())]
    return [Finding("V18", capsule.subject, "warn", f"test touched before the end: {'; '.join(parts)}",
                    {"repeated_tests": repeated, "superseded_checkpoints": superseded}, _run_ref(capsule))]


# -- V19 holdout_structure -------------------------------------------------------------------------------------
def holdout_structure(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A validation split held out from train by hash, group and time; a val series that is not the train one;
    the split compared with the field's standard one."""
    capsules = [c for c in project.capsules if c.train is not None
                and any(str(col).lower().startswith("val/") for col in c.train.columns)]
    if not project.splits and not capsules:
        return skipped("V19", "holdout_structure", "no split manifest (splits/*.json) and no train.csv with val/ "
                                                   "columns")
    findings: list[Finding] = []
    for manifest in project.splits:
        findings += (_validation_held_out(manifest) + _groups_disjoint(manifest) + _temporal_order(manifest)
                     + _standard_split(manifest))
    for capsule in capsules:
        findings += _val_is_train(project, capsule)
    subjects = [m.subject for m in project.splits] + [c.subject for c in capsules]
    return result("V19", "holdout_structure", findings, subjects)


def _validation_held_out(manifest: SplitManifest) -> list[Finding]:
    if not members_of(manifest, "val"):
        return [Finding("V19", manifest.subject, "warn", "no validation split: selection had no held-out data",
                        {"val_members": 0}, manifest_ref(manifest))]
    shared = overlap_counts(manifest)["train_val"]
    if shared:
        return [Finding("V19", manifest.subject, "warn", f"validation not hash-disjoint from train: {shared} items "
                        "(V14)", {"train_val": shared}, manifest_ref(manifest))]
    return []


def _groups_disjoint(manifest: SplitManifest) -> list[Finding]:
    """When members carry `group`, no group key is in two splits (an entity in train and test leaks)."""
    groups: dict[str, set[str]] = {}
    for member in manifest.members:
        if member.group is not None:
            groups.setdefault(role_of(member.split), set()).add(member.group)
    roles = sorted(groups)
    shared = {f"{a}∩{b}": sorted(groups[a] & groups[b]) for i, a in enumerate(roles) for b in roles[i + 1:]
              if groups[a] & groups[b]}
    if not shared:
        return []
    text = ", ".join(f"{pair} {len(keys)} ({', '.join(keys[:3])})" for pair, keys in shared.items())
    return [Finding("V19", manifest.subject, "error", f"group keys shared across splits: {text}",
                    {"shared_groups": {pair: keys[:20] for pair, keys in shared.items()}}, manifest_ref(manifest))]


def _time(text: str | None) -> float | None:
    """A member's time as a number: ISO 8601 (a `Z` suffix allowed) or a plain number; None when neither."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _temporal_order(manifest: SplitManifest) -> list[Finding]:
    """method == temporal: max(train.time) < min(val.time) ≤ max(val.time) < min(test.time)."""
    if manifest.method != "temporal":
        return []
    times = {role: [_time(m.time) for m in members_of(manifest, role)] for role in ROLES}
    untimed = sum(t is None for values in times.values() for t in values)
    if untimed:
        return [Finding("V19", manifest.subject, "error", f"temporal split: {untimed} member(s) without a "
                        "parseable time", {"untimed": untimed}, manifest_ref(manifest))]
    spans = [(role, min(v), max(v)) for role in ROLES if (v := [t for t in times[role] if t is not None])]
    broken = [f"max({a}.time) ≥ min({b}.time)" for (a, _, a_max), (b, b_min, _) in zip(spans, spans[1:], strict=False)
              if not a_max < b_min]
    if not broken:
        return []
    return [Finding("V19", manifest.subject, "error", f"temporal order violated: {'; '.join(broken)}",
                    {"temporal_violations": broken}, manifest_ref(manifest))]


def data_sha256(manifest: SplitManifest) -> str:
    """sha256 of the sorted lines `{split}\\t{id}\\t{sha256}\\n` (the capsule's `data_sha256`)."""
    lines = sorted(f"{m.split}\t{m.id}\t{m.sha256 or ''}\n" for m in manifest.members)
    return sha256_hex("".join(lines).encode())


def _standard_split(manifest: SplitManifest) -> list[Finding]:
    """`standard_reference.sha256` is neither the members' data_sha256 nor the manifest file's hash."""
    reference = (manifest.standard_reference or {}).get("sha256")
    if not isinstance(reference, str) or reference in {data_sha256(manifest), manifest.sha256}:
        return []
    source = (manifest.standard_reference or {}).get("source") or "the standard reference"
    return [Finding("V19", manifest.subject, "info", f"non-standard split (differs from {source})",
                    {"standard_sha256": reference, "data_sha256": data_sha256(manifest)}, manifest_ref(manifest))]


def _val_is_train(project: ProjectEvidence, capsule: Capsule) -> list[Finding]:
    """A val/<m> series equal (|Δ| ≤ 1e-12) to train/<m>, train_<m> or <m> on ≥ 3 epochs: val ran on train data."""
    import pandas as pd

    frame = capsule.train
    assert frame is not None
    columns = {str(c).lower(): c for c in frame.columns.tolist()}
    same = []
    for lowered, column in columns.items():
        if not lowered.startswith("val/"):
            continue
        metric = lowered[4:]
        twin = next((columns[k] for k in (f"train/{metric}", f"train_{metric}", metric) if k in columns), None)
        if twin is None:
            continue
        val, train = pd.to_numeric(frame[column], errors="coerce"), pd.to_numeric(frame[twin], errors="coerce")
        both = val.notna() & train.notna()
        epochs = frame.loc[both, "epoch"].nunique() if "epoch" in frame.columns else int(both.sum())
        if epochs >= 3 and bool(((val[both] - train[both]).abs() <= 1e-12).all()):
            same.append(f"{column} = {twin} on {epochs} epochs")
    if not same:
        return []
    return [Finding("V19", capsule.subject, "error", f"val computed on training data: {'; '.join(same)}",
                    {"identical_series": same}, _train_ref(project, capsule),
                    claims=_claims(project, capsule))]


CHECKS = {"V14": split_hash_disjoint, "V15": case_duplicates, "V16": near_duplicates, "V17": fit_on_train_only,
          "V18": selection_on_test, "V19": holdout_structure}
