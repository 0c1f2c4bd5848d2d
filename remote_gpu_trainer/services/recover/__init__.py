"""RECOVER: a preempted run resumed or moved within limits a person approved once (docs/remote-ops.md §10.1).

approval.py holds the person's approval and what it is bound to; ledger.py reads back what recovery did (restarts,
spending, the preemption a watcher saw); run.py takes the locks of the box's runs, gathers the facts, decides
(audits/recover.py) and acts: a relaunch on the box that came back (or will), a stopped spot box started again
(start_box.py), or a replacement rented (replace.py; through a cloud provider's API in rent_cloud.py) with the
checkpoints kept home (checkpoint_home.py) pushed to it. Watchers (the TUI, `rgt watch`, the patrol) call it when they
see a preemption; the watch and fleet wings never import it (it imports the launch wing), so their faces pass it in.
"""
