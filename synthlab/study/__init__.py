"""A sweep: its cells scheduled as Optuna trials of one study, its storage, workers, launchers,
liveness, progress and dashboard.
"""
