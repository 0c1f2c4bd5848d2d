"""What the leakage checks read from member files (docs/verify.md §2, section D): the dHash and MinHash of V16
and the numeric rows and stored stats of V17. Every path is checked to stay under the project root first.

numpy and Pillow are imported inside the functions: an audit pays for them, the UI's start-up does not.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import SplitMember

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
TEXT_SUFFIXES = {".txt", ".md", ".text"}
BANDS = ((51, 13), (38, 13), (25, 13), (12, 13), (0, 12))  # (shift, width): 64 bits as 13/13/13/13/12
MINHASH_PERMS, MINHASH_ROWS, MINHASH_PRIME = 128, 4, (1 << 31) - 1

Pair = tuple[SplitMember, SplitMember, float]  # (test member, train member, distance or Jaccard estimate)


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


def media(root: Path, members: list[SplitMember], suffixes: set[str]) -> list[tuple[SplitMember, Path]]:
    """Members whose path has one of `suffixes` and is a file under the root (others are not V16's)."""
    found = []
    for member in members:
        if member.path and Path(member.path).suffix.lower() in suffixes:
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


# -- V17: numeric members and stored stats ---------------------------------------------------------------------

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
