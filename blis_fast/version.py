"""The package version (kept apart from ``blis_fast/__init__.py`` so that any layer may read it
without importing the package's facade)."""

__version__ = "0.1.0"
