"""DELIVER (docs/deliver.md): every shipped number, figure and table is generated from the immutable evidence
store (runs/, splits/) with its provenance and disclosures.

Modules here read and write the project's DELIVER files (EVIDENCE.json, figures/, tables/, reconcile.json,
completeness.json); they never touch the state database, a provider or the UI. Services gather what they need
from the state (findings, the meter, launch records) and hand it in.
"""
