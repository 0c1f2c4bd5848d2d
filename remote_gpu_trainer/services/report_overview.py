"""The Overview `rgt --report` prints and the agents' rgt_report returns (cli/faces.py, agents/project_tools.py): one
path for both, so the two faces never differ in what they asked or read."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from remote_gpu_trainer.services.deliver.results import results_view
from remote_gpu_trainer.services.overview import build, observe

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import Overview


async def report_overview(session: Session) -> Overview:
    """The Overview `rgt --report` prints (and the agents' rgt_report returns): every box asked and every log
    caught up, with the results the report opens with (services/deliver/results.py, built for the report only).
    The logs are read while the boxes are asked (observe's `catch_up`), so each box is asked its status once."""
    seen = await observe(session, catch_up=True)
    overview = await build(session, seen)
    return dataclasses.replace(overview, results=await asyncio.to_thread(results_view, session, seen))
