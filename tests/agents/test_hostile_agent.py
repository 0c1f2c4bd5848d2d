"""A hostile agent against `rgt mcp` (issue 28): the real `mcp` client over stdio, the server in its own process,
on a real sim project. What it tries: to put a secret into the event log and the inbox through the one thing the
server takes from the client unchecked (its name), and to slip a rent under an allowance's total by asking for a
vanishing number of hours. The person's side (an allowance granted) is set up through the inbox's service, as the
TUI or `rgt approve --allowance` would."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import Implementation

from remote_gpu_trainer.services.inbox import allowances
from remote_gpu_trainer.services.inbox.model import person_actor
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import project_text, seed_verdicts, sim_disk, write_text_project
from support.helpers import INSTANCE, RUN, run_rgt

SERVICE_SECRET = "correct-horse-battery-" + "staple-42"  # a secret only by its variable's name
RUNPOD_KEY = "rpa_" + "Q7f3K9x2M4p8R1t6W0z5" + "Yb2Nc4Dd"  # token-shaped
SECRETS = {"MY_SERVICE_TOKEN": SERVICE_SECRET, "RUNPOD_API_KEY": RUNPOD_KEY}


def _project(root: Path) -> Path:
    write_text_project(root, project_text())
    seed_verdicts(root)
    return root


@asynccontextmanager
async def connected(project: Path, stderr: Path, client_name: str) -> AsyncIterator[Client]:
    """`rgt mcp PROJECT` in its own process, spoken to by a client that calls itself `client_name`."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "remote_gpu_trainer", "mcp", str(project)],
                                   cwd=str(project), env={**os.environ, **SECRETS})
    with stderr.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog),
                          client_info=Implementation(name=client_name, version="1")) as client:
            yield client


def test_a_client_that_names_itself_with_a_secret_leaves_no_secret_in_the_log_or_the_inbox(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def ask(name: str) -> None:
        async with connected(root, tmp_path / "stderr.txt", name) as client:
            filed = await client.call_tool("rgt_request_stop", {"instance": INSTANCE, "why": "pause"})
            assert not filed.is_error, filed.content
            assert filed.structured_content["request"]["state"] == "pending"

    for name in (SERVICE_SECRET, RUNPOD_KEY):
        asyncio.run(ask(name))
    session = open_session(str(root))
    try:
        stored = [row.filed_by for row in session.db.request_rows()] + [e.actor for e in session.db.events()]
    finally:
        session.close()
    assert len(stored) >= 4 and all(actor.startswith("agent:") for actor in stored[:2]), stored
    shown = run_rgt("events", str(root), cwd=tmp_path).stdout + run_rgt("approve", "--list", str(root),
                                                                        cwd=tmp_path).stdout
    for secret in (SERVICE_SECRET, RUNPOD_KEY):
        assert not [actor for actor in stored if secret in actor], stored
        assert secret not in shown


def test_a_vanishing_number_of_hours_does_not_slip_a_rent_under_an_allowances_total(tmp_path: Path) -> None:
    """A penny's allowance must not rent a box that bills $0.89 an hour: what is counted is at least an hour."""
    root = _project(tmp_path / "p")
    session = open_session(str(root))
    try:
        allowances.grant(session, actor=person_actor("/dev/pts/4"), max_price_per_hour=1.0, total=0.01, hours=1)
    finally:
        session.close()

    async def rent() -> None:
        async with connected(root, tmp_path / "stderr.txt", "hostile") as client:
            filed = await client.call_tool("rgt_request_rent", {"run": RUN, "why": "a tiny bit", "hours": 1e-9})
            assert not filed.is_error, filed.content
            request = filed.structured_content["request"]
            assert request["state"] == "pending" and request["allowance"] is None, request
            assert "does not fit" in request["outcome"], request

    asyncio.run(rent())

    async def look() -> str:
        check = open_session(str(root))
        try:
            return (await instance_status(check, INSTANCE)).state
        finally:
            await check.close_transports()
            check.close()

    assert asyncio.run(look()) != "running" and not sim_disk(root).exists()


def test_a_flood_of_argument_text_is_refused_and_the_event_log_keeps_only_its_head(tmp_path: Path) -> None:
    """Every changing call is logged with its arguments: a megabyte `why` (refused) must not be kept whole in the
    append-only log, call after call, nor printed back by `rgt events --format json`."""
    root = _project(tmp_path / "p")
    flood = "x" * 1_000_000

    async def flood_it() -> None:
        async with connected(root, tmp_path / "stderr.txt", "hostile") as client:
            refused = await client.call_tool("rgt_request_stop", {"instance": INSTANCE, "why": flood})
            assert refused.is_error and "at most" in refused.content[0].text  # type: ignore[union-attr]

    asyncio.run(flood_it())
    session = open_session(str(root))
    try:
        logged = [e for e in session.db.events() if e.actor == "agent:hostile"]
        assert session.db.request_rows() == []
    finally:
        session.close()
    assert logged and all(len(str(e.detail)) < 5_000 for e in logged), [len(str(e.detail)) for e in logged]
    shown = run_rgt("events", "--format", "json", str(root), cwd=tmp_path).stdout
    assert len(shown) < 50_000
