"""Encoders: how indices enter the model (axis 2 of ARCHITECTURE.md), one family per file."""
