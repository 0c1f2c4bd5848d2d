"""V16 `near_duplicates` of section D, leakage (docs/verify.md §2): candidate near-duplicate (test, train) pairs
for review (T04), by a dHash of each image and a MinHash of each text's word 5-grams, bucketed so that large
splits are not compared pair by pair. Member files are read only under the project root.

numpy and Pillow are imported inside the functions: an audit pays for them, the UI's start-up does not.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import (
    CheckResult,
    Finding,
    ProjectEvidence,
    SplitMember,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.split_members import (
    inside_root,
    manifest_ref,
    member_hash,
    members_of,
    no_manifest,
)

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
TEXT_SUFFIXES = {".txt", ".md", ".text"}
BANDS = ((51, 13), (38, 13), (25, 13), (12, 13), (0, 12))  # (shift, width): 64 bits as 13/13/13/13/12
MINHASH_PERMS, MINHASH_ROWS, MINHASH_PRIME = 128, 4, (1 << 31) - 1

Pair = tuple[SplitMember, SplitMember, float]  # (test member, train member, distance or Jaccard estimate)


def near_duplicates(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Candidate near-duplicate (test, train) pairs: dHash within `hamming` bits, MinHash Jaccard ≥ `jaccard`.
    Pairs with equal content hashes are V14's exact duplicates and are not listed again."""
    if not project.splits:
        return no_manifest("V16", "near_duplicates", project)
    findings: list[Finding] = []
    judged: list[str] = []
    for manifest in project.splits:
        train, test = members_of(manifest, "train"), members_of(manifest, "test")
        if not train or not test:
            continue
        judged.append(manifest.subject)
        images, bad_images = image_pairs(project.root, train, test, int(params.get("hamming", 4)))
        texts, bad_texts = text_pairs(project.root, train, test, float(params.get("jaccard", 0.8)))
        listed: list[dict[str, Any]] = [
            {"kind": kind, "test": a.id, "train": b.id, key: score}
            for kind, key, pairs in (("image", "distance", images), ("text", "jaccard", texts))
            for a, b, score in pairs if member_hash(manifest, a) != member_hash(manifest, b)]
        listed.sort(key=lambda p: (p["kind"], p.get("distance", 0.0), -p.get("jaccard", 0.0), p["test"], p["train"]))
        if listed:
            findings.append(Finding(
                "V16", manifest.subject, "info", f"{len(listed)} near-duplicate candidate pair(s) between test and "
                "train: review them (tick T04); confirmed pairs count as duplicates",
                {"candidates": len(listed), "listed": listed[:int(params.get("listed", 200))],
                 "unreadable": bad_images + bad_texts}, manifest_ref(manifest)))
    if not judged:
        return skipped("V16", "near_duplicates", "no split manifest with both train and test members")
    return result("V16", "near_duplicates", findings, judged)


def media(root: Path, members: list[SplitMember], suffixes: set[str]) -> list[tuple[SplitMember, Path]]:
    """Members whose path has one of `suffixes` and is a file under the root (others are not V16's)."""
    found = []
    for member in members:
        if member.path and os.path.splitext(member.path)[1].lower() in suffixes:  # no Path per member
            path = inside_root(root, member.path)
            if path is not None:
                found.append((member, path))
    return found


# -- images: dHash with a 5-band index ----------------------------------------------------------------------
def dhash(path: Path) -> int | None:
    """64-bit difference hash: grayscale, resize to 9×8, bit = pixel brighter than its right neighbour."""
    import numpy as np
    from PIL import Image

    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L").resize((9, 8), Image.Resampling.LANCZOS), dtype=np.int16)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    value = 0
    for bit in (pixels[:, :-1] > pixels[:, 1:]).ravel():
        value = (value << 1) | int(bit)
    return value


def _band(value: int, band: int) -> tuple[int, int]:
    shift, width = BANDS[band]
    return band, (value >> shift) & ((1 << width) - 1)


def image_pairs(root: Path, train: list[SplitMember], test: list[SplitMember],
                hamming: int) -> tuple[list[Pair], int]:
    """(test, train, distance) image pairs within `hamming` bits, and how many images did not decode. With
    hamming < 5 a close pair shares ≥ 1 of the 5 bands exactly (pigeonhole), so only same-band buckets are
    compared; a wider threshold compares every pair."""
    files = {"train": media(root, train, IMAGE_SUFFIXES), "test": media(root, test, IMAGE_SUFFIXES)}
    hashed = {role: [(m, h) for m, p in found if (h := dhash(p)) is not None] for role, found in files.items()}
    unreadable = sum(len(files[role]) - len(hashed[role]) for role in files)
    buckets: dict[tuple[int, int], list[tuple[SplitMember, int]]] = {}
    for member, value in hashed["train"]:
        for band in range(len(BANDS)):
            buckets.setdefault(_band(value, band), []).append((member, value))
    pairs: dict[tuple[str, str], Pair] = {}
    for member, value in hashed["test"]:
        candidates = hashed["train"] if hamming >= len(BANDS) else [
            c for band in range(len(BANDS)) for c in buckets.get(_band(value, band), [])]
        for other, other_value in candidates:
            distance = (value ^ other_value).bit_count()
            if distance <= hamming:
                pairs[(member.id, other.id)] = (member, other, float(distance))
    return list(pairs.values()), unreadable


# -- text: MinHash over word 5-gram shingles, LSH bands of 4 rows ----------------------------------------------
@cache
def _permutations() -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return (rng.integers(1, MINHASH_PRIME, MINHASH_PERMS, dtype=np.uint64),
            rng.integers(0, MINHASH_PRIME, MINHASH_PERMS, dtype=np.uint64))


def minhash(text: str) -> Any:
    """MinHash signature of the word 5-gram shingles (a text under 5 words is one shingle)."""
    import numpy as np

    words = text.split()
    shingles = {" ".join(words[i:i + 5]) for i in range(max(1, len(words) - 4))} if words else {""}
    hashes = np.array([int.from_bytes(hashlib.blake2b(s.encode(), digest_size=4).digest(), "little")
                       for s in shingles], dtype=np.uint64)
    a, b = _permutations()
    return ((a[:, None] * hashes[None, :] + b[:, None]) % np.uint64(MINHASH_PRIME)).min(axis=1)


def text_pairs(root: Path, train: list[SplitMember], test: list[SplitMember],
               jaccard: float) -> tuple[list[Pair], int]:
    """(test, train, estimated Jaccard) text pairs at ≥ `jaccard`, and how many texts could not be read; LSH
    bands of 4 rows pick the candidates (a pair at 0.8 is missed with probability ≈ 1e-7)."""
    signed: dict[str, list[tuple[SplitMember, Any]]] = {"train": [], "test": []}
    unreadable = 0
    for role, members in (("train", train), ("test", test)):
        for member, path in media(root, members, TEXT_SUFFIXES):
            try:
                signed[role].append((member, minhash(path.read_text(encoding="utf-8", errors="replace"))))
            except OSError:
                unreadable += 1
    buckets: dict[tuple[int, bytes], list[tuple[SplitMember, Any]]] = {}
    for member, signature in signed["train"]:
        for band in range(0, MINHASH_PERMS, MINHASH_ROWS):
            buckets.setdefault((band, signature[band:band + MINHASH_ROWS].tobytes()), []).append((member, signature))
    pairs: dict[tuple[str, str], Pair] = {}
    for member, signature in signed["test"]:
        for band in range(0, MINHASH_PERMS, MINHASH_ROWS):
            for other, other_sig in buckets.get((band, signature[band:band + MINHASH_ROWS].tobytes()), []):
                estimate = float((signature == other_sig).mean())
                if estimate >= jaccard:
                    pairs[(member.id, other.id)] = (member, other, estimate)
    return list(pairs.values()), unreadable
