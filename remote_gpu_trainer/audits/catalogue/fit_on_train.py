"""V17 `fit_on_train_only` of section D, leakage (docs/verify.md §2): was each preprocessing artifact in a split
manifest's `fit_records[]` fitted on exactly the train ids? Recorded ids decide; without them the artifact's
per-feature stats are recomputed from the member files (read only under the project root) and compared.

numpy is imported inside the functions: an audit pays for it, the UI's start-up does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import file_sha256
from remote_gpu_trainer.audits.catalogue.model import (
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    SplitManifest,
    SplitMember,
    result,
    sha256_hex,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.split_members import ROLES, inside_root, manifest_ref, members_of


def fit_on_train_only(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Every `fit_records[]` artifact was fitted on exactly the train ids.

    With `fit_ids_sha256` (sha256 of the sorted ids joined by newlines; a trailing newline is accepted) the
    ids decide. Without it, the stats are recomputed when they can be: the artifact is a JSON object with
    per-feature `mean` and `std` lists, and every member is a numeric `.npy` or `.csv` file (a 1-D array is one
    row of features; an N-D array is rows of its last axis, so H×W×C images give per-channel stats; std has
    ddof 0). Anything else is "fit scope unknown".
    """
    manifests = [m for m in project.splits if m.fit_records]
    if not manifests:
        return skipped("V17", "fit_on_train_only", "no fit_records[] in any split manifest" if project.splits
                       else "no split manifest (splits/*.json)")
    findings = [f for m in manifests for record in m.fit_records if (f := _judge_fit(project, m, record))]
    return result("V17", "fit_on_train_only", findings, [m.subject for m in manifests])


def ids_sha256(ids: list[str]) -> set[str]:
    joined = "\n".join(sorted(ids))
    return {sha256_hex(joined.encode()), sha256_hex((joined + "\n").encode())}


def _judge_fit(project: ProjectEvidence, manifest: SplitManifest, record: Mapping[str, Any]) -> Finding | None:
    artifact = str(record.get("artifact") or "?")
    path = inside_root(project.root, artifact)
    refs = manifest_ref(manifest) + (EvidenceRef(artifact, file_sha256(path) if path is not None else None),)
    recorded = record.get("fit_ids_sha256")
    if isinstance(recorded, str):
        ids = {role: [m.id for m in members_of(manifest, role)] for role in ROLES}
        if recorded in ids_sha256(ids["train"]):
            return None
        scopes = {"train∪val": ids["train"] + ids["val"], "train∪val∪test": [m.id for m in manifest.members]}
        matched = next((name for name, chosen in scopes.items() if recorded in ids_sha256(chosen)), "not train")
        return Finding("V17", manifest.subject, "error", f"preprocessing fitted on non-train data: {artifact} "
                       f"(fit ids are {matched}, fit_split {record.get('fit_split')!r})",
                       {f"{artifact}.fit_scope": matched}, refs)
    fit_split = record.get("fit_split")
    if isinstance(fit_split, str) and fit_split.lower() != "train":
        return Finding("V17", manifest.subject, "error", f"preprocessing fitted on non-train data: {artifact} "
                       f"(fit_split {fit_split!r})", {f"{artifact}.fit_scope": fit_split}, refs)
    distances = _recomputed_distances(project, manifest, artifact)
    if isinstance(distances, str):
        return Finding("V17", manifest.subject, "warn", f"fit scope unknown: {artifact} ({distances})",
                       {f"{artifact}.fit_scope": "unknown"}, refs)
    d_train, d_all = distances
    if d_all + 1e-6 < d_train:
        return Finding("V17", manifest.subject, "error", f"preprocessing fitted on non-train data: {artifact} "
                       f"(d(all) {d_all:.3g} < d(train) {d_train:.3g})",
                       {f"{artifact}.d_train": d_train, f"{artifact}.d_all": d_all}, refs)
    return None


def _recomputed_distances(project: ProjectEvidence, manifest: SplitManifest,
                          artifact: str) -> tuple[float, float] | str:
    """(d(s_train), d(s_all)) with d(x) = ‖stored − x‖₂ / ‖x‖₂, or why the stats cannot be recomputed."""
    import numpy as np

    stored = stored_stats(project.root, artifact)
    if isinstance(stored, str):
        return stored
    train = numeric_rows(project.root, members_of(manifest, "train"))
    everything = numeric_rows(project.root, list(manifest.members))
    for rows in (train, everything):
        if isinstance(rows, str):
            return rows
        if rows.shape[1] * 2 != stored.size:
            return f"{rows.shape[1]} features in the members, {stored.size // 2} in the artifact"
    assert not isinstance(train, str) and not isinstance(everything, str)

    def distance(rows: Any) -> float:
        stats = np.concatenate([rows.mean(axis=0), rows.std(axis=0)])
        return float(np.linalg.norm(stored - stats) / max(float(np.linalg.norm(stats)), 1e-300))

    return distance(train), distance(everything)


# -- reading the artifact's stats and the members' numbers ----------------------------------------------------
def stored_stats(root: Path, artifact: str) -> Any:
    import numpy as np

    from remote_gpu_trainer.strict_json import loads_strict

    path = inside_root(root, artifact)
    if path is None or path.suffix.lower() != ".json":
        return "the artifact is not a JSON file under the project root"
    try:
        data = loads_strict(path.read_bytes())
        mean, std = np.asarray(data["mean"], dtype=float).ravel(), np.asarray(data["std"], dtype=float).ravel()
    except (OSError, ValueError, TypeError, KeyError):
        return "the artifact is not a JSON object of per-feature `mean` and `std` lists"
    if mean.size == 0 or mean.size != std.size:
        return "`mean` and `std` are empty or of different lengths"
    return np.concatenate([mean, std])


def numeric_rows(root: Path, members: list[SplitMember]) -> Any:
    """Every member's numbers stacked as rows × features, or why the members are not numeric files."""
    import numpy as np

    arrays = []
    for member in members:
        path = inside_root(root, member.path)
        if path is None or path.suffix.lower() not in {".npy", ".csv"}:
            return f"member {member.id} is not a numeric .npy/.csv file under the root"
        try:
            array = np.load(path, allow_pickle=False) if path.suffix.lower() == ".npy" else csv_array(path)
            array = np.asarray(array, dtype=float)
        except (OSError, ValueError):
            return f"member {member.id} does not read as numbers"
        arrays.append(array.reshape(1, -1) if array.ndim <= 1 else array.reshape(-1, array.shape[-1]))
    if not arrays or len({a.shape[1] for a in arrays}) != 1:
        return "no members, or members with different feature counts"
    return np.concatenate(arrays)


def csv_array(path: Path) -> Any:
    import numpy as np

    try:
        return np.loadtxt(path, delimiter=",", ndmin=2)
    except ValueError:
        return np.loadtxt(path, delimiter=",", ndmin=2, skiprows=1)  # a header row
