"""`.rgt/state.db`, one module per group of tables.

db.py (StateDB, the one handle: open, close, twin), store.py (the shared connection and write transaction),
migrations.py (the schema and its upgrade ladder), events.py (the append-only event log: EventKind and one
writer per event), billing.py (instance snapshots, meter samples), evidence.py (verification and manifest
records), caches.py (file hashes, checkpoint load checks), launches.py (the launch record and log), checks.py
(environment audit records, checklist ticks), run_logs.py (log cursors, metric series, log findings).
"""
