"""``ctxagent batch``'s machinery (the command itself: cli/batch.py): :mod:`.tasks` (the tasks file,
each task's command line, how its session stands; the Temporal backend in cluster/ shares it),
:mod:`.pool` (N task processes at a time on this machine), :mod:`.forkserver` (how a task process
starts), :mod:`.preload` and :mod:`.preload_litellm` (imported by the fork server only).

Imports nothing: the fork server imports it before :mod:`.preload`, whose set-up comes first.
"""
