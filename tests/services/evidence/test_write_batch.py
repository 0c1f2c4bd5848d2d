"""A pull's batch of small files (services/evidence/pull_local.write_batch): written at once, made durable together
(one syncfs of their file system, or an fsync of each where that is not to be had) and only then renamed into
place, each checked to be the very file written. Real files on the local disk."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from remote_gpu_trainer.audits.manifest import ManifestFile
from remote_gpu_trainer.fsutil import sync_filesystem
from remote_gpu_trainer.services.evidence.pull_local import write_batch


def items(root: Path, count: int) -> list[tuple[ManifestFile, Path, memoryview | None]]:
    out: list[tuple[ManifestFile, Path, memoryview | None]] = []
    for n in range(count):
        data = f"checkpoint {n}\n".encode() * 100
        out.append((ManifestFile(f"seed{n % 3}/ckpt{n}.pt", len(data), hashlib.sha256(data).hexdigest()),
                    root / f"seed{n % 3}" / f"ckpt{n}.pt", memoryview(data)))
    return out


def test_a_batch_lands_whole_with_one_sync_of_its_file_system(tmp_path: Path) -> None:
    synced: list[Path] = []

    def sync(folder: Path) -> bool:
        synced.append(folder)
        assert not list(tmp_path.rglob("*.pt")), "a name appeared before its bytes were made durable"
        return sync_filesystem(folder)

    batch = items(tmp_path, 30)
    written = write_batch(batch, sync=sync)
    assert [entry.path for entry, _, _ in written] == [entry.path for entry, _, _ in batch]
    assert len(synced) == 1 and sync_filesystem(tmp_path)  # one file system, one sync; syncfs is there
    for entry, target, info in written:
        assert hashlib.sha256(target.read_bytes()).hexdigest() == entry.sha256
        assert (info.st_ino, info.st_size) == (target.stat().st_ino, entry.bytes)
    assert not list(tmp_path.rglob("*.part"))


def test_without_syncfs_each_file_is_fsynced_and_a_part_swapped_meanwhile_is_not_taken(tmp_path: Path) -> None:
    """Where the sync is not to be had, each `.part` is fsynced through the descriptor it was written with; one
    replaced under its `.part` name before its rename is not reported written (the per-file path fetches it
    again), and bytes that do not hash to the manifest's are never written at all."""
    batch = items(tmp_path, 6)
    swapped = batch[2][1]
    batch[3] = (batch[3][0], batch[3][1], items(tmp_path, 2)[1][2])  # a good file's bytes, the wrong ones here

    def swap_then_refuse(folder: Path) -> bool:
        part = swapped.with_name(swapped.name + ".part")
        part.unlink()
        part.write_bytes(b"swapped in by someone else")
        return False

    written = write_batch(batch, sync=swap_then_refuse)
    assert [entry.path for entry, _, _ in written] == [batch[i][0].path for i in (0, 1, 4, 5)]
    assert not batch[3][1].exists() and not list(tmp_path.rglob("ckpt3.pt*"))
    for entry, target, _ in written:
        assert hashlib.sha256(target.read_bytes()).hexdigest() == entry.sha256


def test_a_batch_larger_than_a_chunk_syncs_once_per_chunk(tmp_path: Path) -> None:
    from remote_gpu_trainer.services.evidence.pull_local import CHUNK_FILES

    synced: list[Path] = []
    written = write_batch(items(tmp_path, CHUNK_FILES + 5), sync=lambda folder: synced.append(folder) is None)
    assert len(written) == CHUNK_FILES + 5 and len(synced) == 2


def test_sync_filesystem_says_false_where_it_cannot_sync(tmp_path: Path) -> None:
    assert sync_filesystem(tmp_path) is True  # Linux: syncfs(2)
    assert sync_filesystem(tmp_path / "missing") is False
    (tmp_path / "a-file").write_text("x")
    assert sync_filesystem(tmp_path / "a-file") is False  # not a folder
    assert os.path.exists(tmp_path / "a-file")
