"""WATCH wing: following a running job (liveness, logs and their monitor, host signals, checkpoint cadence,
recovery notes).
"""
