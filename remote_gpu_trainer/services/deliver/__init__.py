"""DELIVER wing: building and checking what is delivered (build, claims, completeness, results, reconcile,
tables, figures).
"""
