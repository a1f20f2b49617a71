"""``python -m ctxagent``."""

from ctxagent.cli import main

main()
