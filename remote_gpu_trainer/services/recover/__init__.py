"""RECOVER: a preempted run resumed or moved within limits a person approved once (docs/remote-ops.md §10.1).

approval.py holds the person's approval and what it is bound to; run.py gathers the facts, takes the one lock per
run, decides (audits/recover.py) and acts: a relaunch on the box that came back. Watchers (the TUI, `rgt watch`, the
patrol) call it when they see a preemption; the watch and fleet wings never import it (it imports the launch wing),
so their faces pass it in.
"""
