"""The agent face: `rgt mcp`, a Model Context Protocol server over stdio, and `rgt skill`, the instructions an agent
loads to use it (docs/architecture.md §2).

An agent gets everything that costs nothing and carries a run through RUN, VERIFY and DELIVER; renting, stopping,
terminating and deciding a finding are requests a person approves. `tools.py` is the one table of tools: the server
(`mcp_server.py`) and the skill (`skill.py`) are generated from it. This package never imports the services that
rent, stop, terminate, resume or decide, nor the providers (an import-linter contract in pyproject.toml).
"""
