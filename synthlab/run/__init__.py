"""One run: resolve its config, train it (one model or stacked seeds), evaluate every split,
write its directory and its result record, reopen it later.
"""
