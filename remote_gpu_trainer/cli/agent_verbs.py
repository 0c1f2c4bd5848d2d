"""`rgt mcp [PROJECT]` and `rgt skill [--install DIR]`: the agent face from the command line (agents/).

`rgt mcp` is started by the agent's MCP client, never typed at a prompt: it checks the project (a broken rgt.toml
is refused now, exit 2, in one line on stderr) and then speaks the protocol on stdin and stdout until the client
closes them; it prints nothing else. `rgt skill` prints the skill an agent loads, generated from the tool table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from remote_gpu_trainer.errors import EXIT_OK


def mcp(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.config.project import load_project, resolve_project_file
    from remote_gpu_trainer.services import project_registry

    project = load_project(resolve_project_file(args.project))  # refused before the client waits on a handshake
    project_registry.remember(project.root)  # as opening a project does: `rgt status --all` lists it
    from remote_gpu_trainer.agents.mcp_server import serve

    asyncio.run(serve(project.file, args.client_name))
    return EXIT_OK


def skill(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.agents.skill import install_skill, skill_text

    if args.install is None:
        sys.stdout.write(skill_text())
        return EXIT_OK
    target, written = install_skill(args.install)
    print(f"{'wrote' if written else 'up to date:'} {target}")
    return EXIT_OK
