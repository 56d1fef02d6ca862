"""The package version, in its own module so every layer can read it without the root."""

__version__ = "0.1.0"
