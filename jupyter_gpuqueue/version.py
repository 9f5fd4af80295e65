"""The package's version, in a module of its own: modules read it without importing the package's
``__init__`` (which imports the server extension lazily)."""

__version__ = "0.1.0"
