"""AUDIT wing: the VERIFY catalogue as a service (audit runs, findings, checklist, splits, model probes,
acceptance).
"""
