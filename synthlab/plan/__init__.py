"""What to run: sweep files, presets, the grid cells they expand into, the papers' numbers and
claims as data, seeds. Built on core and model; nothing here trains.
"""
