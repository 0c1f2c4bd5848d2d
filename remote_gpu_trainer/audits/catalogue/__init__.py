"""VERIFY: is the number real? The audit catalogue of docs/verify.md §2 as pure functions over parsed evidence.

- model.py: the inputs (capsules, splits, numbers) and the findings every check returns;
- load.py: reads a project's native capsule files into that model; readers/: trackers' own files;
- runner.py: assets/catalogue.toml's checks and the loop that runs them; metric_registry.py: directions;
- numbers.py: a reported number's per-seed values and their aggregates;
- one module per section of the catalogue: comparability, statistics, metric_sanity, leakage, collapse,
  smoke, integrity, each exporting CHECKS (leakage's V16 and V17 live in near_duplicates.py and
  fit_on_train.py, over split_members.py; V31 in documents.py runs reconcile/, shared with `rgt reconcile`).
"""
