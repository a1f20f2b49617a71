"""``ctxagent batch``'s machinery (the command itself: cli/batch.py; docs/batch.md).

Imports nothing: the fork server imports it before :mod:`.preload`, whose set-up comes first.
"""
