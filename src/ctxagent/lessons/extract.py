"""Deterministic lessons from a transcript (no LLM), and whether a later session confirmed or
contradicted one (:func:`judge`). The rules read an answered session's tool calls and results
(docs/lessons.md): ``flag`` (a failed command worked with flags added, no file written in between),
``error_fix`` (a failed command worked again after another one) and ``read_first`` (the file read first).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxagent.lessons.model import Lesson, Vote, new_lesson
from ctxagent.messages import loads_json
from ctxagent.sessions import records

ERROR_PREFIX = "ERROR: "  # ctxagent.tools.base.ERROR_PREFIX: a tool call that failed
_EXIT = re.compile(r"^exit code: (-?\d+)")
_OPERATORS = frozenset("();<>|&")
_REDIRECTIONS = frozenset({">", ">>", ">&", "<", "&>", ">|", "&>>"})
_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")  # a leading VAR=value of a simple command
PRIORS = {"flag": 0.6, "error_fix": 0.5, "read_first": 0.35}
WRITERS = frozenset({"write_file"})  # tools that change files (a shell command may too: not counted)


@dataclass(frozen=True)
class Attempt:
    """One tool call and its result: seq numbers of both messages, ``ok`` (no error; for a shell
    command, exit code 0), the shell exit code (None for other tools or no exit line), the output."""

    tool: str
    args: dict[str, Any]
    call_seq: int
    result_seq: int
    ok: bool
    exit_code: int | None
    output: str

    @property
    def seqs(self) -> list[int]:
        return [self.call_seq, self.result_seq]


def attempts(items: Iterable[Any]) -> list[Attempt]:
    """The tool calls of ``items`` (transcript records, oldest first) paired with their results."""
    calls: dict[str, tuple[str, dict[str, Any], int]] = {}
    out = []
    for record in items:
        if not isinstance(record, records.MessageRecord):
            continue
        msg = record.message
        if msg.get("role") == "assistant":
            for call in msg.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[str(call.get("id"))] = (str(function.get("name")), _args(function.get("arguments")), record.seq)
        elif msg.get("role") == "tool" and str(msg.get("tool_call_id")) in calls:
            name, args, seq = calls.pop(str(msg.get("tool_call_id")))
            content = str(msg.get("content") or "")
            match = _EXIT.match(content)
            code = int(match.group(1)) if match else None
            ok = not content.startswith(ERROR_PREFIX) and (name != "shell" or code == 0)
            out.append(Attempt(name, args, seq, record.seq, ok, code, content))
    return out


def _args(text: Any) -> dict[str, Any]:
    try:
        value = loads_json(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def words_of(attempt: Attempt) -> list[str] | None:
    """A simple shell command's words (None: not a shell call, unparsable, or with operators)."""
    command = attempt.args.get("command")
    if attempt.tool != "shell" or not isinstance(command, str):
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = _without_redirections(list(lexer))
    except ValueError:
        return None
    while words and _ASSIGNMENT.match(words[0]):  # LANG=C ./tool: the program is ./tool
        words = words[1:]
    return words if words and not any(set(w) <= _OPERATORS for w in words) else None


def _without_redirections(words: list[str]) -> list[str]:
    """``words`` without redirections (``2>&1``, ``> out.txt``): they do not change what a command needs."""
    out: list[str] = []
    rest = iter(words)
    for word in rest:
        if word not in _REDIRECTIONS:
            out.append(word)
            continue
        if out and out[-1].isdigit():  # the 2 of 2>&1
            out.pop()
        next(rest, None)  # its target
    return out


def program_of(words: list[str]) -> str:
    """The program a command runs: its first word, and a subcommand (a bare lowercase word) after it."""
    rest = [w for w in words[1:] if not w.startswith("-")]
    return " ".join(words[:1] + rest[:1]) if rest and _SUBCOMMAND.match(rest[0]) else words[0]


def error_line(output: str) -> str:
    """The line of a failed command's output that says what went wrong (160 characters at most)."""
    lines = [line.strip() for line in output.splitlines()[1:] if line.strip()]
    line = next((x for x in lines if "error" in x.lower()), lines[0] if lines else "")
    return line[:160]


def extract(items: Iterable[Any], *, session: str, scope: str, workdir: Path) -> list[Lesson]:
    """The candidate lessons of an answered session's records (one per rule key)."""
    done = attempts(items)
    shells = _shells(done)
    found = [*_flags(done, shells, session, scope), *_fixes(shells, session, scope),
             *_read_first(done, session, scope, workdir)]
    by_key: dict[str, Lesson] = {}
    for lesson in found:
        if (old := by_key.get(lesson.key)) is not None:  # one session, one rule: its records joined
            seqs = sorted({*old.evidence[0].seqs, *lesson.evidence[0].seqs})
            lesson = old.model_copy(update={"evidence": [old.evidence[0].model_copy(update={"seqs": seqs})]})
        by_key[lesson.key] = lesson
    return list(by_key.values())


def _shells(done: list[Attempt]) -> list[tuple[Attempt, list[str]]]:
    return [(a, w) for a in done if (w := words_of(a)) is not None]


def _flags(done: list[Attempt], shells: list[tuple[Attempt, list[str]]], session: str, scope: str) -> Iterator[Lesson]:
    for i, (fail, fw) in enumerate(shells):
        if fail.exit_code in (None, 0):
            continue
        win = next(((a, w) for a, w in shells[i + 1:] if w[0] == fw[0] and a.ok), None)
        if win is None:
            continue
        ok, sw = win
        added = [w for w in sw if w not in fw]
        removed = [w for w in fw if w not in sw]
        if not any(w.startswith("-") for w in added) or not all(w.startswith("-") for w in removed):
            continue
        if any(a.tool in WRITERS and fail.result_seq < a.call_seq < ok.call_seq for a in done):
            continue  # a file changed in between: that, not the flag, may be what made it work
        program, fix = program_of(fw), " ".join(added)
        error = error_line(fail.output)
        rule = (f"`{program}` needs `{fix}` here: `{shlex.join(fw)}` failed (exit {fail.exit_code}"
                f"{': ' + error if error else ''}); `{shlex.join(sw)}` worked.")
        named = added[0] in fail.output  # the error named the flag: surer
        yield new_lesson("flag", f"flag\x00{program}\x00{fix}", rule, [*fail.seqs, *ok.seqs],
                         f"failed at #{fail.call_seq}, worked with {fix} at #{ok.call_seq}", session=session,
                         scope=scope, program=program, tokens=added, prior=0.7 if named else PRIORS["flag"])


def _fixes(shells: list[tuple[Attempt, list[str]]], session: str, scope: str) -> Iterator[Lesson]:
    for i, (fail, fw) in enumerate(shells):
        if fail.exit_code in (None, 0):
            continue
        again = next((j for j in range(i + 1, len(shells)) if shells[j][1] == fw), None)
        if again is None or not shells[again][0].ok:
            continue
        fixes = [(a, w) for a, w in shells[i + 1:again] if a.ok and w[0] != fw[0]]
        if not fixes:
            continue
        fix, cw = fixes[-1]
        error = error_line(fail.output) or f"exit {fail.exit_code}"
        command = shlex.join(cw)
        rule = f"When `{shlex.join(fw)}` fails with \"{error}\", run `{command}` first: it fixed it."
        yield new_lesson("error_fix", f"error_fix\x00{program_of(fw)}\x00{command}", rule,
                         [*fail.seqs, *fix.seqs, *shells[again][0].seqs], f"fixed by #{fix.call_seq}",
                         session=session, scope=scope, prior=PRIORS["error_fix"], program=program_of(fw), tokens=cw)


def _reads(done: list[Attempt]) -> list[Attempt]:
    return [a for a in done if a.tool == "read_file" and a.ok and isinstance(a.args.get("path"), str)]


def _read_first(done: list[Attempt], session: str, scope: str, workdir: Path) -> Iterator[Lesson]:
    for first in _reads(done)[:1]:  # the first file read, if any
        path = relative(str(first.args["path"]), workdir)
        rule = f"Read `{path}` first: earlier sessions here started there."
        yield new_lesson("read_first", f"read_first\x00{path}", rule, first.seqs, f"read first at #{first.call_seq}",
                         session=session, scope=scope, prior=PRIORS["read_first"], program="read_file", path=path)


def relative(path: str, workdir: Path) -> str:
    """``path`` (as a tool got it) relative to ``workdir`` when inside it, else as given."""
    full = Path(path) if Path(path).is_absolute() else workdir / path
    try:
        return full.resolve().relative_to(workdir.resolve()).as_posix()
    except ValueError:
        return path


def judge(lesson: Lesson, done: list[Attempt], *, session: str, workdir: Path) -> Vote | None:
    """What the session whose attempts are ``done`` did about ``lesson``: a vote, or None when it
    did nothing the lesson speaks of. A contradiction wins over a confirmation."""
    confirm: list[int] = []
    contradict: list[int] = []
    if lesson.kind == "flag":
        for attempt, words in _shells(done):
            rest = [w for w in words if w not in lesson.tokens]
            if not attempt.ok or not rest or program_of(rest) != lesson.program:
                continue
            has = all(t in words for t in lesson.tokens)
            (confirm if has else contradict if not any(t in words for t in lesson.tokens) else []).extend(attempt.seqs)
    elif lesson.kind == "error_fix":
        confirm = [s for a, w in _shells(done) if a.ok and w == lesson.tokens for s in a.seqs]
    elif lesson.kind == "read_first":
        reads = _reads(done)
        paths = [relative(str(a.args["path"]), workdir) for a in reads]
        if reads and paths[0] == lesson.path:
            confirm = reads[0].seqs
        elif reads and lesson.path not in paths:
            contradict = reads[0].seqs
    if contradict:
        return Vote(session=session, verdict="contradicted", seqs=sorted(set(contradict)))
    return Vote(session=session, verdict="confirmed", seqs=sorted(set(confirm))) if confirm else None

