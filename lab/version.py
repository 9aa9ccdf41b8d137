"""The package version, at the bottom layer so the store and indexes can stamp it without importing `lab`."""
from __future__ import annotations

__version__ = "0.1.0"
