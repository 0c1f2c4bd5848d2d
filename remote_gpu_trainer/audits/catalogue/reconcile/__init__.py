"""Reconcile: every number a document states beside a claim's anchor, against EVIDENCE.json (check V31 of
docs/verify.md §2; the algorithm is the DELIVER reconcile spec, docs/deliver.md §6, its output `reconcile.json`).

A document holds no number of its own: it is a rendering of EVIDENCE.json. Whatever was still typed by hand
is found here by anchor (an alias, or the metric's first word), read at the precision it was written with and
compared to the authoritative value, so a correctly rounded number passes and a stale one is a drift. A number
that rounds correctly but says less than the claim's precision (`1` or `31.4` for a value shown as `0.97` or
`31.42`) is a drift too, unless the sentence marks it approximate (`about 31`, `~31`, `≈ 31`): then it is a
coarse quote, reported and not failing.

- model.py: what reconcile reads and finds (documents, scalar claims, readings, drifts, notes) and the report;
- claims.py: EVIDENCE.json's scalar claims and the anchors that find them;
- text.py: a document's lines as a reader sees them, and the number after each anchor;
- compare.py: a reading against its claims, and `reconcile`, the whole run;
- files.py: the configured documents read from disk, never outside the project root.

Everything but files.py is a pure function of (EVIDENCE.json as parsed, documents as (path, text)). Nothing
here edits a document, and nothing blocks: the exit code (0 no drift, 1 drift, 2 unreadable input or nothing
to reconcile) is a status.
"""
