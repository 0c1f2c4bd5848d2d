"""`rgt mcp`: the MCP server over stdio, built from the tool table (tools.py), with the report, the recovery notes and
the docs as resources.

Every call runs under the agent's actor (`agent:<client name>`), returns one JSON document (escaped, secrets
scrubbed: redaction.py) and is bounded in time: a short tool answers within its bound or says it could not; a long
tool's work runs as a task kept here under (tool, subject), and a call that reaches its `timeout_s` returns
`state: running` while the work goes on; the next call with the same subject waits for that task instead of starting
another (docs/architecture.md §2: an action started is never cancelled by starting the same action again). Progress
the services post (pull, verify, build) goes to the waiting call as MCP progress notifications.

stdout is the protocol: the mcp package's stdio transport moves fd 1 aside for it, so a print anywhere else in the
process (a figure's build.py) goes to stderr. The package's own INFO log lines are kept off stderr (quiet_logging).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from remote_gpu_trainer import __version__
from remote_gpu_trainer.agents import redaction
from remote_gpu_trainer.agents.calls import Call, Figure, KeptSession, Outcome, ProgressBoard
from remote_gpu_trainer.agents.tools import LONG_DEFAULT_S, LONG_MAX_S, TOOLS, AgentTool, arguments_of, describe
from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.errors import ConfigError, GateRefused, RgtError, internal_error
from remote_gpu_trainer.services.inbox.model import agent_actor

Timeout = Annotated[int, Field(ge=1, le=LONG_MAX_S, description=f"return after this many seconds at most (default "
                                                                f"{LONG_DEFAULT_S}); the work goes on and the next "
                                                                "call waits for it")]
PROGRESS_EVERY_S = 0.25  # progress notifications at most this often per waiting call
INSTRUCTIONS = (
    "rgt carries one deep-learning run through RUN (rgt_run, rgt_watch), VERIFY (rgt_pull, rgt_verify, rgt_audit) "
    "and DELIVER (rgt_build, rgt_reconcile) on a GPU box. Renting, stopping, terminating a box and deciding a "
    "finding are requests a person approves: file them with rgt_request_*, then wait on rgt_requests. A result "
    "with isError carries the refusal in `error` (exit_code 1 failed, 2 usage or configuration, 3 the teardown "
    "gate refused, with its reasons).")
DOCS = Path(__file__).resolve().parents[2] / "docs"  # beside the package in a source checkout; absent when installed


@dataclass
class Job:
    """A long tool's work in flight: its task, where it posts progress, and when it started."""

    task: asyncio.Task[CallToolResult]
    board: ProgressBoard
    started: float
    started_at: str


@dataclass
class AgentServer:
    """The state the tools share: the project, the fallback client name, the long work in flight."""

    project_file: Path
    client_name: str | None = None
    jobs: dict[tuple[str, str], Job] = field(default_factory=dict)
    kept: dict[tuple[str, str], KeptSession] = field(default_factory=dict)

    def actor(self, ctx: Context | None) -> str:
        """`agent:<the MCP client's name>`, from its initialize (or request envelope) clientInfo; `--client-name`
        when the client sent none."""
        name = None
        try:
            params = ctx.request_context.session.client_params if ctx is not None else None
            name = params.client_info.name if params is not None else None
        except (AttributeError, ValueError):
            name = None
        # the name is the client's own text, kept as the actor of every request and event and printed by `rgt
        # events` and `rgt approve --list`: one holding a secret (a key pasted as the name) is not used
        names = [n for n in (name, self.client_name) if n and redaction.secret_argument({"name": n}) is None]
        return agent_actor(names[0] if names else None)

    def new_call(self, ctx: Context | None) -> Call:
        return Call(self.project_file, self.actor(ctx), ProgressBoard(asyncio.get_running_loop()))

    async def call(self, row: AgentTool, arguments: dict[str, Any], ctx: Context, timeout_s: int | None) -> \
            CallToolResult:
        subject = str(arguments.get(row.key) or "") if row.key else ""
        key = (row.name, subject)
        # a long call joins work in flight only when it asks for the same thing: every argument but its bound
        # (`rgt_build` of figure a and of figure b are two pieces of work, not one)
        same_work = (row.name, json.dumps({k: v for k, v in arguments.items() if k != "timeout_s"}, sort_keys=True,
                                          default=str))
        if not row.long:
            try:
                return await asyncio.wait_for(self.short(row, key, arguments, ctx), row.bound_s)
            except TimeoutError:
                return error_result(f"{row.name}: no answer within {row.bound_s:g} s (a box or a provider did not "
                                    "answer in time); nothing is left running; call it again", 1)
        job = self.jobs.get(same_work)
        if job is None:
            call = self.new_call(ctx)
            loop = asyncio.get_running_loop()
            job = Job(asyncio.create_task(perform(row, call, arguments)), call.board, loop.time(), iso_z(utc_now()))
            self.jobs[same_work] = job
        result = await wait_for_job(job, ctx, float(timeout_s or LONG_DEFAULT_S))
        if result is None:
            return running_result(row, subject, job)
        if self.jobs.get(same_work) is job:
            del self.jobs[same_work]
        return result

    async def short(self, row: AgentTool, key: tuple[str, str], arguments: dict[str, Any],
                    ctx: Context) -> CallToolResult:
        """A short tool's call; one that keeps its session gets the one kept for its subject, one call at a time."""
        call = self.new_call(ctx)
        if not row.keeps_session:
            return await perform(row, call, arguments)
        call.kept = self.kept.setdefault(key, KeptSession(self.project_file))
        async with call.kept.lock:
            return await perform(row, call, arguments)

    async def shutdown(self) -> None:
        """The client left: work still in flight is cancelled (a pull records itself as interrupted and resumes
        next time), and each call's session is closed."""
        tasks = [job.task for job in self.jobs.values()]
        self.jobs.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        kept, self.kept = list(self.kept.values()), {}
        for session in kept:
            await session.close()


async def perform(row: AgentTool, call: Call, arguments: dict[str, Any]) -> CallToolResult:
    """Run one tool's handler to its end: its document, or its refusal as one line; never an exception. A tool that
    changes anything writes one event with the agent as the actor when its work ended."""
    words = "cancelled (the client left or the call timed out)"
    try:
        try:
            secret = redaction.secret_argument(arguments)
            if secret is not None:
                raise ConfigError(f"{row.name}: the argument `{secret}` holds what looks like a secret (an API key, "
                                  "a token or the value of a credential variable): nothing was done; leave secrets "
                                  "out of what you pass")
            outcome = await row.handler(call, **arguments)
        except RgtError as exc:
            words = f"exit {exc.exit_code}: {' '.join(str(exc).split())}"
            return refusal_result(exc)
        except Exception as exc:  # noqa: BLE001 - the agent gets one line, never a traceback on the server's stderr
            words = internal_error(exc)
            return error_result(f"{row.name}: {internal_error(exc)}", 1)
        failure = outcome.failure
        words = "ok" if failure is None else f"exit {failure.exit_code}: {' '.join(str(failure).split())}"
        return document_result(outcome)
    finally:
        if row.changes:
            record(row, call, arguments, words)
        await call.close()


def record(row: AgentTool, call: Call, arguments: dict[str, Any], words: str) -> None:
    """The AGENT_TOOL event (state/events.py), through the call's session: skipped where nothing may be written
    (a read-only project folder) or no session opens (rgt.toml broken: the refusal said so already)."""
    from remote_gpu_trainer.state import events

    try:
        session = call.session()
        if session.folder_read_only:
            return
        events.agent_tool_called(session.db, tool=row.name, run_id=call.run_id, instance=call.instance,
                                 outcome=redaction.scrub(words[:500]), actor=call.actor,
                                 arguments=redaction.clean_arguments(arguments))
    except RgtError:
        return


async def wait_for_job(job: Job, ctx: Context, timeout_s: float) -> CallToolResult | None:
    """The job's result, or None when `timeout_s` passed first; its progress goes to this call meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen = 0
    while True:
        changed = job.board.changed()
        figure = job.board.figure
        if figure.version != seen:
            seen = figure.version
            await report(ctx, figure)
        if job.task.done():
            return job.task.result()
        left = deadline - loop.time()
        if left <= 0:
            return None
        waiter = asyncio.ensure_future(changed.wait())
        try:
            await asyncio.wait({job.task, waiter}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not job.task.done():  # at most one notification per PROGRESS_EVERY_S
            await asyncio.wait({job.task}, timeout=min(PROGRESS_EVERY_S, max(deadline - loop.time(), 0)))


async def report(ctx: Context, figure: Figure) -> None:
    message = redaction.scrub(figure.message) if figure.message else None
    try:
        await ctx.report_progress(figure.progress, figure.total, message)
    except Exception:  # noqa: BLE001 - a client that cannot take progress still gets the result
        return


def document_result(outcome: Outcome) -> CallToolResult:
    document = redaction.scrub(outcome.document)
    failure = outcome.failure
    if failure is None:
        return CallToolResult(content=[TextContent(type="text", text=_json(document))], structured_content=document)
    error = redaction.scrub(error_dict(failure))
    return CallToolResult(content=[TextContent(type="text", text=f"rgt: {error['message']}\n{_json(document)}")],
                          structured_content={**document, "error": error}, is_error=True)


def refusal_result(exc: RgtError) -> CallToolResult:
    error = redaction.scrub(error_dict(exc))
    lines = [f"rgt: {error['message']}", *(f"  - {reason}" for reason in error["reasons"])]
    if error["hint"]:
        lines.append(f"rgt: {error['hint']}")
    return CallToolResult(content=[TextContent(type="text", text="\n".join(lines))],
                          structured_content={"error": error}, is_error=True)


def error_result(message: str, exit_code: int) -> CallToolResult:
    error = redaction.scrub({"message": message, "exit_code": exit_code, "reasons": [], "hint": ""})
    return CallToolResult(content=[TextContent(type="text", text=f"rgt: {error['message']}")],
                          structured_content={"error": error}, is_error=True)


def error_dict(exc: RgtError) -> dict[str, Any]:
    """The refusal as the CLI says it (cli/main.py): one line, the exit code, a gate's reasons and hint."""
    reasons = list(exc.reasons) if isinstance(exc, GateRefused) else []
    hint = exc.hint if isinstance(exc, GateRefused) else ""
    return {"message": " ".join(str(exc).split()), "exit_code": exc.exit_code, "reasons": reasons, "hint": hint}


def running_result(row: AgentTool, subject: str, job: Job) -> CallToolResult:
    elapsed = int(asyncio.get_running_loop().time() - job.started)
    figure = job.board.figure
    document = redaction.scrub({
        "state": "running", "tool": row.name, "subject": subject or None, "started_at": job.started_at,
        "progress": None if figure.version == 0 else {"progress": figure.progress, "total": figure.total,
                                                      "message": figure.message},
        "note": f"still running after {elapsed} s; call the tool again to wait for it"})
    return CallToolResult(content=[TextContent(type="text", text=_json(document))], structured_content=document)


def _json(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, default=str)


# -- the server, generated from the table ------------------------------------------------------------------------

def build_server(state: AgentServer) -> MCPServer:
    """An MCPServer with one tool per row of tools.TOOLS and the resources; its logging kept off stderr."""
    with quiet_logging():
        server: MCPServer = MCPServer("rgt", title="remote-gpu-trainer", instructions=INSTRUCTIONS,
                                      version=__version__, log_level="WARNING")
    for row in TOOLS:
        server.add_tool(tool_function(state, row), name=row.name, description=describe(row),
                        annotations=ToolAnnotations(read_only_hint=not row.changes, destructive_hint=False,
                                                    open_world_hint=False))
    add_resources(server, state)
    return server


def tool_function(state: AgentServer, row: AgentTool) -> Any:
    """The function MCPServer registers for `row`: the handler's arguments (their annotations are the input
    schema), `timeout_s` for a long tool, and the MCP context; it hands everything to AgentServer.call."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [parameter.replace(kind=keyword) for _, parameter in arguments_of(row)]
    if row.long:
        parameters.append(inspect.Parameter("timeout_s", keyword, default=LONG_DEFAULT_S, annotation=Timeout))
    parameters.append(inspect.Parameter("ctx", keyword, annotation=Context))

    async def invoke(**arguments: Any) -> CallToolResult:
        ctx = arguments.pop("ctx")
        timeout_s = arguments.pop("timeout_s", None)
        return await state.call(row, arguments, ctx, timeout_s)

    invoke.__name__ = invoke.__qualname__ = row.name
    invoke.__doc__ = describe(row)
    invoke.__signature__ = inspect.Signature(parameters, return_annotation=CallToolResult)  # type: ignore[attr-defined]
    invoke.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": CallToolResult}
    return invoke


@contextmanager
def quiet_logging() -> Iterator[None]:
    """MCPServer calls logging.basicConfig with a rich handler on stderr, which would print a line for every request
    (at INFO) in the agent's log of the server: a handler on the root logger while it is built makes basicConfig a
    no-op. Afterwards the root logger is as it was: warnings reach stderr as they do in every other rgt verb."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        yield
    finally:
        root.removeHandler(guard)


def add_resources(server: MCPServer, state: AgentServer) -> None:
    @server.resource("rgt://report", name="report", mime_type="application/json",
                     description="The project's report as JSON (the document of rgt --report --format json).")
    async def report_resource() -> str:
        from remote_gpu_trainer.agents.project_tools import report_document

        call = state.new_call(None)
        try:
            return _json(redaction.scrub(await report_document(call)))
        finally:
            await call.close()

    @server.resource("rgt://recovery/{run}", name="recovery-note", mime_type="text/markdown",
                     description="A run's recovery note (.rgt/recovery/RUN.md): what happened to the run and what to "
                                 "do after a crash or a preemption; kept current by every look at the run.")
    def recovery_resource(run: str) -> str:
        return recovery_text(state, run)

    pages = sorted(path.stem for path in DOCS.glob("*.md")) if DOCS.is_dir() else []
    if pages:
        @server.resource("rgt://docs/{page}", name="docs", mime_type="text/markdown",
                         description="rgt's documentation pages, from the docs/ folder beside the package (present "
                                     "when rgt runs from a source checkout): " + ", ".join(pages))
        def docs_resource(page: str) -> str:
            if page not in pages:
                raise ResourceError(f"no docs page {page!r}: one of {', '.join(pages)}")
            return (DOCS / f"{page}.md").read_text(encoding="utf-8")


def recovery_text(state: AgentServer, run: str) -> str:
    from remote_gpu_trainer.config.project import load_project
    from remote_gpu_trainer.services.watch.recovery import note_path

    try:
        project = load_project(state.project_file)
        config = project.run(run)
    except RgtError as exc:
        raise ResourceError(" ".join(str(exc).split())) from None
    path = note_path(project, config.id)
    if not path.is_file():
        raise ResourceError(f"run {config.id} has no recovery note yet ({path}): rgt writes it at the first look at "
                            "the run (rgt_watch)")
    return str(redaction.scrub(path.read_text(encoding="utf-8", errors="replace"), keep_newlines=True))


async def serve(project_file: Path, client_name: str | None) -> None:
    """Serve the project over stdio until the client closes the stream."""
    state = AgentServer(project_file, client_name)
    server = build_server(state)
    try:
        await server.run_stdio_async()
    finally:
        await state.shutdown()
