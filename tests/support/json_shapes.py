"""The one check of a `--format json` document's shape: exactly these keys, each of one of its types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NONE = type(None)


def assert_shape(document: Any, shape: Mapping[str, tuple[type, ...]]) -> None:
    """Exactly these keys, each of one of its types (`type(...) in`, so a bool is never an int)."""
    assert isinstance(document, dict)
    assert set(document) == set(shape), f"keys {sorted(document)} != {sorted(shape)}"
    for key, types in shape.items():
        assert type(document[key]) in types, f"{key}: {type(document[key]).__name__} is not one of {types}"


# rgt-status/v1 (cli/schemas.py, docs/formats.md): `rgt status --format json`
STATUS = {"schema": (str,), "generated_at": (str,), "currency": (str,), "burn_per_hour": (float,),
          "complete": (bool,), "instances": (list,), "orphans": (list,), "projects": (list,), "errors": (list,)}
STATUS_BOX = {"project": (str,), "root": (str,), "name": (str,), "provider": (str,), "id": (str,), "state": (str,),
              "burn_per_hour": (float,), "cost_so_far": (float,), "currency": (str,), "estimate": (bool,),
              "idle_s": (float, NONE), "runs": (list,), "note": (str,)}
STATUS_RUN = {"id": (str,), "liveness": (str,), "detail": (str,)}
STATUS_ORPHAN = {"provider": (str,), "account": (str,), "id": (str,), "name": (str,), "state": (str,),
                 "price_per_hour": (float, NONE), "price_source": (str,), "currency": (str,), "bills": (bool,),
                 "mark": (str,), "burn_per_hour": (float,), "estimate": (bool,), "unknown_price": (bool,)}
STATUS_PROJECT = {"root": (str,), "name": (str, NONE), "status": (str,), "detail": (str,), "instances": (int,)}


def assert_status_document(document: Any) -> None:
    """Every level of an rgt-status/v1 document, and every error a string."""
    assert_shape(document, STATUS)
    assert document["schema"] == "rgt-status/v1"
    for box in document["instances"]:
        assert_shape(box, STATUS_BOX)
        for run in box["runs"]:
            assert_shape(run, STATUS_RUN)
    for orphan in document["orphans"]:
        assert_shape(orphan, STATUS_ORPHAN)
    for project in document["projects"]:
        assert_shape(project, STATUS_PROJECT)
    assert all(type(error) is str for error in document["errors"])
