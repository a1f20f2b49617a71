"""ctxagent: a command-line agent runner that never loses its context."""

__version__ = "0.1.0"
