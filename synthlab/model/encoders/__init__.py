"""Encoders: how indices enter the model (axis 2 of docs/architecture.md), one family per file."""
