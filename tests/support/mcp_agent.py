"""An agent talking to `rgt mcp` as a real one does: the `mcp` package's own client, over stdio, with the server in
its own process (`python -m remote_gpu_trainer mcp PROJECT`). Its stderr goes to a file the test reads, and every
result the agent received is kept, so a test can say what it never saw (a secret) across all of them."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, Implementation

CLIENT_NAME = "pytest agent/1"  # sanitized by the server to agent:pytest-agent-1
ACTOR = "agent:pytest-agent-1"


@dataclass
class Agent:
    client: Client
    seen: list[str] = field(default_factory=list)  # every result's text and structured content, as received
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append((progress, total, message))

        result = await self.client.call_tool(name, arguments or {}, progress_callback=on_progress)
        self.seen += [block.text for block in result.content if hasattr(block, "text")]
        self.seen.append(json.dumps(result.structured_content))
        return result

    async def document(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """The tool's document; the call must have succeeded."""
        result = await self.call(name, arguments)
        assert not result.is_error, result.content
        document: dict[str, Any] = result.structured_content
        return document


@asynccontextmanager
async def agent(project: Path, stderr: Path, env: dict[str, str] | None = None) -> AsyncIterator[Agent]:
    """`rgt mcp PROJECT` in its own process with this test's environment (plus `env`), its stderr in `stderr`."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "remote_gpu_trainer", "mcp", str(project)],
                                   cwd=str(project), env={**os.environ, **(env or {})})
    with stderr.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog),
                          client_info=Implementation(name=CLIENT_NAME, version="1")) as client:
            yield Agent(client)
