"""FLEET wing: every box of every project (status, orphans, the patrol, auto follow-ups, notifications, progress
line).
"""
