"""The members of a split manifest as section D's leakage checks read them (docs/verify.md §2): by role (train,
val, test, whatever a manifest calls them), by content hash (recorded, else the bytes on disk), and as files
that stay under the project root. leakage.py, near_duplicates.py and fit_on_train.py share these.
"""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.audits.catalogue.model import (
    CheckResult,
    EvidenceRef,
    ProjectEvidence,
    SplitManifest,
    SplitMember,
    skipped,
)

VAL_NAMES = {"val", "valid", "validation", "dev"}
ROLES = ("train", "val", "test")


def role_of(split: str) -> str:
    """train / val / test as manifests spell them (`valid`, `validation`, `dev` are val)."""
    lowered = split.lower()
    return "val" if lowered in VAL_NAMES else lowered


def members_of(manifest: SplitManifest, role: str) -> list[SplitMember]:
    return [m for m in manifest.members if role_of(m.split) == role]


def member_hash(manifest: SplitManifest, member: SplitMember) -> str | None:
    """The recorded content hash; the on-disk one when the row records none (bytes decide)."""
    if member.sha256:
        return member.sha256
    return manifest.disk_sha256.get(member.path) if member.path else None


def manifest_ref(manifest: SplitManifest) -> tuple[EvidenceRef, ...]:
    return (EvidenceRef(manifest.path, manifest.sha256),)


def no_manifest(check: str, name: str, project: ProjectEvidence) -> CheckResult:
    """Skipped: no split manifest, naming the manifests that were there but could not be read."""
    unreadable = [f"{p.path}: {p.message}" for p in project.problems if p.path.startswith("splits/")]
    why = "no split manifest (splits/*.json)" + (f"; unreadable: {'; '.join(unreadable)}" if unreadable else "")
    return skipped(check, name, why)


def inside_root(root: Path, rel: str | None) -> Path | None:
    """The member's file when it exists and stays under the project root, else None."""
    if not rel:
        return None
    try:
        path = (root / rel).resolve()
        path.relative_to(root.resolve())
    except (OSError, ValueError):
        return None
    return path if path.is_file() else None

