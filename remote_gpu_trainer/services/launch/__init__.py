"""LAUNCH wing: what starting a job on a box takes (rent, guards, network env, sentinel, environment audit,
launch, resume).
"""
