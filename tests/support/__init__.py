"""Helpers the tests share (no fixtures: those are in the conftest files)."""
