"""What ``sessions show`` and ``sessions export`` read from a session: its facts, its transcript as
JSONL or Markdown (streamed), or its current view as OpenAI messages. The record models are imported
when a command runs, never for ``--help``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ctxagent.messages import loads_json
from ctxagent.sessions.outcome import Usage
from ctxagent.sessions.session import Session, status_of

if TYPE_CHECKING:
    from ctxagent.sessions import records

SETTINGS = ("model", "profile", "api_base", "context_window", "path", "workdir", "tools", "limits")


def facts(session: Session) -> dict[str, Any]:
    """Everything ``sessions show`` prints, from one pass over the transcript. Keys: ``name``,
    ``folder``, ``started_as`` (the header's name: the name before a rename), ``created`` and
    ``last_used`` (epoch seconds), ``settings`` (in force: the header's with every change applied),
    ``status``, ``turns``, ``messages``, ``tokens`` (prompt + completion), ``prompt_tokens``,
    ``completion_tokens``, ``cached_tokens``, ``cost_usd`` (None when no call had a price),
    ``calls`` (model calls), ``outputs`` and ``output_bytes`` (offloaded), ``compactions``, ``runs``
    (end records), ``wall_s`` (seconds, summed over runs)."""
    from ctxagent.sessions import records

    out: dict[str, Any] = {"name": session.name, "folder": str(session.root), "started_as": None,
                           "created": None, "last_used": None, "settings": {}, "status": "new", "turns": 0,
                           "messages": 0, "outputs": 0, "output_bytes": 0, "compactions": 0, "runs": 0,
                           "wall_s": 0.0}
    usage = Usage()
    last: list[Any] = []  # the last message and the end records after it: enough for status_of
    for record in session.transcript.records():
        out["last_used"] = record.ts
        if isinstance(record, records.SessionHeader):
            out["started_as"], out["created"] = record.name, record.ts
            out["settings"] = {key: getattr(record, key, None) for key in SETTINGS}
        elif isinstance(record, records.SettingsRecord):
            changed = {key: value for key in SETTINGS if (value := getattr(record, key, None)) is not None}
            out["settings"].update(changed)
        elif isinstance(record, records.MessageRecord):
            out["messages"] += 1
            out["turns"] = max(out["turns"], record.turn)
            last = [record]
        elif isinstance(record, records.UsageRecord):
            usage.add(record)
        elif isinstance(record, records.OutputRecord):
            out["outputs"] += 1
            out["output_bytes"] += record.bytes
        elif isinstance(record, records.CompactionRecord):
            out["compactions"] += 1
        elif isinstance(record, records.EndRecord):
            out["runs"] += 1
            out["wall_s"] += getattr(record, "wall_s", None) or 0.0
            last.append(record)
    out["status"] = "running" if session.running() else status_of(last)
    out["wall_s"] = round(out["wall_s"], 3)
    out.update(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
               tokens=usage.prompt_tokens + usage.completion_tokens, cached_tokens=usage.cached_tokens,
               cost_usd=round(usage.cost_usd, 6) if usage.priced else None, calls=usage.calls)
    return out


def when(ts: float | None) -> str:
    """Epoch seconds as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for None."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def usd(cost: float | None) -> str:
    """US dollars to four decimals; ``-`` for None (no price known)."""
    return "-" if cost is None else f"${cost:.4f}"


def show_lines(found: dict[str, Any]) -> list[str]:
    """The lines ``sessions show`` prints for ``found`` (:func:`facts`)."""
    settings = found["settings"]
    renamed = found["started_as"] and found["started_as"] != found["name"]
    rows: list[tuple[str, Any]] = [
        ("session", found["name"] + (f" (started as {found['started_as']})" if renamed else "")),
        ("folder", found["folder"]), ("status", found["status"]), ("created", when(found["created"])),
        ("last used", when(found["last_used"]))]
    rows += [(key.replace("_", " "), _inline(settings.get(key))) for key in SETTINGS]
    rows += [("turns", f"{found['turns']} ({found['messages']} messages; runs {found['runs']}, "
                       f"{found['wall_s']:.1f} s)"),
             ("tokens", f"{found['tokens']} ({found['prompt_tokens']} prompt, {found['cached_tokens']} of them cached; "
                        f"{found['completion_tokens']} completion; {found['calls']} model calls)"),
             ("cost", usd(found["cost_usd"])),
             ("outputs", f"{found['outputs']} offloaded ({found['output_bytes']:,} bytes)"),
             ("compactions", found["compactions"])]
    return [f"{label:<15}{value}" for label, value in rows]


def jsonl(session: Session) -> Iterator[str]:
    """The transcript's readable records, one JSON object per line, oldest first."""
    from ctxagent.sessions import records

    for record in session.transcript.records():
        yield records.dumps(record) + "\n"


def openai_messages(session: Session) -> str:
    """The messages the next request of ``session`` would send, as an indented JSON array of OpenAI chat
    messages. No model call; raises as :func:`ctxagent.agent.peek.next_request`."""
    from ctxagent.agent.peek import next_request
    from ctxagent.agent.replies import wire_message

    view = next_request(session).view
    return json.dumps([wire_message(e.message, openai_wire=True) for e in view], ensure_ascii=False, indent=2) + "\n"


def markdown(session: Session) -> Iterator[str]:
    """A readable transcript in Markdown: the settings, then every message, compaction and run end."""
    from ctxagent.sessions import records

    names: dict[str, str] = {}  # call id -> tool name
    for record in session.transcript.records():
        if isinstance(record, records.SessionHeader):
            yield f"# Session {session.name}\n\n"
            yield "".join(f"- {key.replace('_', ' ')}: {_inline(getattr(record, key, None))}\n" for key in SETTINGS)
            yield f"- created: {when(record.ts)}\n\n"
        elif isinstance(record, records.SettingsRecord):
            changed = {k: v for k in SETTINGS if (v := getattr(record, k, None)) is not None}
            yield f"*settings changed: {', '.join(f'{k} {_inline(v)}' for k, v in changed.items())}*\n\n"
        elif isinstance(record, records.MessageRecord):
            yield _message(record, names)
        elif isinstance(record, records.CompactionRecord):
            yield (f"> compaction ({record.strategy}): messages #{record.start}-#{record.end} replaced in the view "
                   f"({record.tokens_before} -> {record.tokens} tokens); the originals stay above\n\n")
        elif isinstance(record, records.EndRecord):
            detail = f": {record.detail}" if record.detail else ""
            yield f"*run ended: {record.reason} at turn {record.turn}{detail}*\n\n---\n\n"


def _message(record: records.MessageRecord, names: dict[str, str]) -> str:
    msg = record.message
    role = str(msg.get("role", "?"))
    parts = [f"## {role} · turn {record.turn} · #{record.seq} · {record.tokens} tokens"]
    if role == "tool":
        call_id = str(msg.get("tool_call_id", ""))
        handle = f", {record.handle}" + (" (offloaded)" if record.offloaded else "") if record.handle else ""
        parts.append(f"result of `{names.get(call_id, '?')}` ({call_id}{handle})")
    if role in ("tool", "system"):
        parts.append(_fence(_text(msg.get("content"))))
    elif text := _text(msg.get("content")):
        parts.append(text)
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        names[str(call.get("id", ""))] = str(fn.get("name", "?"))
        parts.append(f"call `{fn.get('name', '?')}` ({call.get('id', '')}):\n\n" + _fence(_pretty(fn.get("arguments")),
                                                                                          "json"))
    return "\n\n".join(parts) + "\n\n"


def _text(content: Any) -> str:
    """A message's content as text: a string as is, text parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "\n".join(str(p.get("text", "")) for p in content)
    return json.dumps(content, ensure_ascii=False, indent=2)


def _pretty(arguments: Any) -> str:
    """Tool call arguments, indented when they parse as JSON, else as stored."""
    if not isinstance(arguments, str):
        return json.dumps(arguments, ensure_ascii=False, indent=2)
    try:
        return json.dumps(loads_json(arguments), ensure_ascii=False, indent=2)
    except ValueError:
        return arguments


def _fence(text: str, lang: str = "") -> str:
    """``text`` in a fenced code block whose fence is longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _inline(value: Any) -> str:
    if value is None or value == [] or value == {}:
        return "-"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else str(value)
