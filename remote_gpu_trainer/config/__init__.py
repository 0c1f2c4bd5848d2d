"""rgt.toml, read and checked: the project file (project.py) and its VERIFY, DELIVER and notify tables.
"""
