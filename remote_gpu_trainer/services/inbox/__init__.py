"""The approval inbox (docs/agents.md): an agent asks, a person decides, the engine acts.

An agent (through `rgt mcp`, remote_gpu_trainer/agents/) may do everything that costs nothing and destroys
nothing; a rent, a stop, a teardown, a resume or a finding decision is a request filed here. A request records
what, why, the plan a person will be shown (price, what it destroys, what keeps billing) and the launches it was
filed under, and waits: a person approves it in the TUI's Approvals screen or with `rgt approve` at a terminal,
and only then does it run, through the same services as the person's own action, with the gate evaluated at that
moment. A spending allowance a person granted lets rents and resumes within it through; never a teardown, a stop
or a finding decision.

model.py: the words and the view of a request; plans.py: what a request would do, now; requests.py: filing and
reading; allowances.py: granting and using allowances; decide.py: a person's approval or rejection, and execution.
"""
