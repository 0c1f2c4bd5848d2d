"""Opening a project for work: its Session, the project remembered for `rgt status --all`, and the user's
log signatures checked at once.

A Session is the floor (services/session.py) and imports no service, so what opening a project does beyond
reading rgt.toml happens here, where both services it needs are in reach: the project registry
(services/project_registry.py) and the signature catalogue the log monitors classify with
(services/watch/monitors.py). The fleet views build Sessions directly: they read projects, they do not open them.
"""

from __future__ import annotations

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import load_project, resolve_project_file, user_config_dir
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.services import project_registry
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch import monitors


def open_session(project_arg: str | None, *, clock: Clock = utc_now, read_only: bool = False) -> Session:
    """The Session of the project `project_arg` names (found as resolve_project_file does), remembered in the
    registry; a bad user signature is refused now (RgtError), as a configuration error, not missed later."""
    session = Session(load_project(resolve_project_file(project_arg)), clock=clock, read_only=read_only)
    project_registry.remember(session.project.root, clock)  # so `rgt status --all` finds it later
    if session.project.signatures or (user_config_dir() / "signatures.d").is_dir():
        try:
            monitors.catalogue(session)
        except RgtError:
            session.close()
            raise
    return session
