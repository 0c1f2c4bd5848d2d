"""`rgt status [PROJECT] [--all]`: every box in one view, with the orphans of the cloud accounts
(docs/remote-ops.md §9.3). services/fleet/status.py gathers it; this prints it and picks the exit code:
0 when everything was asked and no orphan bills, 1 when a project or an account could not be asked or an
orphan bills, 2 for bad usage."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from remote_gpu_trainer.cli import printers, schemas
from remote_gpu_trainer.cli.sessions import run_sync
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError
from remote_gpu_trainer.fleet_views import FleetView
from remote_gpu_trainer.text import (
    BOX_COLUMNS,
    ORPHAN_COLUMNS,
    box_notes,
    escape_control,
    fleet_rows,
    fleet_summary,
    orphan_cells,
    project_line,
)


def status(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.config.project import resolve_project_file
    from remote_gpu_trainer.services import project_registry
    from remote_gpu_trainer.services.fleet import status as fleet

    if args.all and args.project is not None:
        raise ConfigError("rgt status: give PROJECT or --all, not both (see rgt status --help)")
    if args.timeout <= 0:
        raise ConfigError(f"rgt status: --timeout must be more than 0 seconds, not {args.timeout:g}")
    if args.all:
        roots = fleet.registered_roots()
    else:
        roots = [resolve_project_file(args.project).parent]
        project_registry.remember(roots[0])  # opened: `rgt status --all` lists it from now on
    view = run_sync(fleet.fleet_view(roots, timeout_s=args.timeout, known_roots=fleet.registered_roots()))
    if args.format == "json":
        printers.print_json(schemas.status_document(view))
    else:
        print("\n".join(status_lines(view)))
    return EXIT_OK if view.complete else EXIT_FAILED


def status_lines(view: FleetView) -> list[str]:
    """The instances table, the boxes' notes, the orphans, the projects, the accounts that were not listed."""
    lines = [f"rgt status · {iso_z(view.generated_at)} · {fleet_summary(view)}"]
    lines += table(BOX_COLUMNS, fleet_rows(view)) if view.instances else ["no instances"]
    lines += [f"  {note}" for note in box_notes(view)]
    if view.orphans:
        lines += ["", "orphans (listed by a cloud account, named by no project):"]
        lines += table(ORPHAN_COLUMNS, [orphan_cells(o) for o in view.orphans])
    lines += ["", "projects:"] + [f"  {project_line(p)}" for p in view.projects]
    if view.account_errors:
        lines += ["", "accounts not listed:"] + [escape_control(f"  ✖ {error}") for error in view.account_errors]
    return lines


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; the last column is not padded."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]
