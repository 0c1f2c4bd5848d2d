"""Figures: figure.json's spec, the built-in kinds, custom build.py, marks, streaming reduction, the pixel gate
and the build.
"""
