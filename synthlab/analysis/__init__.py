"""Result records -> tables, grids, learning-curve plots, the claims judged with calibrated
statistics, and the results report.
"""
