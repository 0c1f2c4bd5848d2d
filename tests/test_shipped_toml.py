"""Shipped TOML assets parsed once per machine (remote_gpu_trainer/shipped_toml.py): what a cache hit returns is
what tomllib returns, a changed asset is parsed again, and a cache file that is not private is never believed."""

from __future__ import annotations

import marshal
import os
import tomllib
from pathlib import Path

from remote_gpu_trainer import shipped_toml

ASSETS = Path(shipped_toml.__file__).parent / "assets"


def cache_of(folder: Path) -> Path:
    [found] = folder.glob("asset-*.marshal")
    return found


def test_every_shipped_asset_reads_as_tomllib_parses_it_from_the_cache_too(tmp_path: Path) -> None:
    for path in [*ASSETS.glob("*.toml"), *(ASSETS / "profiles").glob("*.toml")]:
        parsed = tomllib.loads(path.read_text(encoding="utf-8"))
        folder = tmp_path / path.stem
        assert shipped_toml.read_asset(path, folder) == parsed  # parsed, then kept
        assert os.stat(cache_of(folder)).st_mode & 0o777 == 0o600
        assert shipped_toml.read_asset(path, folder) == parsed, path  # from the cache


def test_the_cache_is_believed_only_for_the_same_file_and_only_when_private(tmp_path: Path) -> None:
    asset = tmp_path / "table.toml"
    asset.write_text('[a]\nb = 1\n')
    folder = tmp_path / "cache"
    assert shipped_toml.read_asset(asset, folder) == {"a": {"b": 1}}
    cached = cache_of(folder)
    key, _ = marshal.loads(cached.read_bytes())
    cached.write_bytes(marshal.dumps((key, {"a": {"b": 2}})))  # what a later read would believe
    assert shipped_toml.read_asset(asset, folder) == {"a": {"b": 2}}  # so the cache is what is read
    cached.chmod(0o660)  # writable by the group: not believed, parsed again and replaced
    assert shipped_toml.read_asset(asset, folder) == {"a": {"b": 1}}
    cached.write_bytes(marshal.dumps((key, {"a": {"b": 2}})))
    cached.chmod(0o600)
    asset.write_text('[a]\nb = 3\n')  # an edited or upgraded asset: its size or time differ from the key's
    os.utime(asset, ns=(1, 1))
    assert shipped_toml.read_asset(asset, folder) == {"a": {"b": 3}}
    cached.write_bytes(b"\x00 not marshal")
    assert shipped_toml.read_asset(asset, folder) == {"a": {"b": 3}}


def test_a_table_marshal_cannot_hold_is_parsed_each_time(tmp_path: Path) -> None:
    asset = tmp_path / "dated.toml"
    asset.write_text("when = 2026-12-07T10:00:00Z\n")
    folder = tmp_path / "cache"
    first = shipped_toml.read_asset(asset, folder)
    assert first == tomllib.loads(asset.read_text()) and not folder.exists()
