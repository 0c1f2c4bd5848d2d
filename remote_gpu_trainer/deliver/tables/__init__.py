"""Tables: table.json's spec, the render, the parse gate and the build.
"""
