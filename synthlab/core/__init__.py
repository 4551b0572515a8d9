"""The ground floor: typed run configuration, the errors the command line turns into exit
codes, files written together or not at all, and this process as a worker names itself.
Imports nothing of synthlab above it (the layer order: docs/architecture.md).
"""
