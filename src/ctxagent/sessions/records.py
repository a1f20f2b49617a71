"""Typed transcript records, tagged by ``kind``, with one serializer: one record is one physical line
of ``transcript.jsonl``, the header (``session``) first. Header plus ``settings`` records fold into the
settings in force. A ``message`` carries its ``seq`` (0-based, in transcript order), its agent
``turn`` (one model call = one turn) and its token count (resume never re-tokenizes); a tool result
also its ``handle`` (:mod:`ctxagent.handles`, chosen once here). A ``compaction`` replaces messages
``start``..``end`` (inclusive seqs) *in the view only*: the originals stay in the transcript.
Progress, heartbeats and spinner state are never records.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

SCHEMA_VERSION = 1


def _message_shape(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` when its keys have the JSON types of an OpenAI-format message (ctxagent/messages.py).
    Raises ``ValueError`` naming the first that does not: the record is set aside like a damaged line
    (sessions/transcript.py) instead of failing every resume and inspect later."""
    content, calls = message.get("content"), message.get("tool_calls")
    problem = ""
    if not isinstance(message.get("role"), str):
        problem = "role is not a string"
    elif not (content is None or isinstance(content, str | bytes)  # bytes: built in Python, written as text
              or (isinstance(content, list) and all(isinstance(part, dict) for part in content))):
        problem = f"content is {type(content).__name__}, not text, null or a list of parts"
    elif not isinstance(message.get("tool_call_id") or "", str):
        problem = "tool_call_id is not a string"
    elif calls is not None and not isinstance(calls, list):
        problem = f"tool_calls is {type(calls).__name__}, not a list"
    elif bad := [i for i, item in enumerate(calls or []) if not _call_shape(item)]:
        problem = f"tool call {bad[0]} is not {{id: string, function: {{name: string, arguments: string}}}}"
    if problem:
        raise ValueError(f"a message whose {problem}")
    return message


def _call_shape(item: Any) -> bool:
    function = item.get("function") if isinstance(item, dict) else None
    return (isinstance(function, dict) and isinstance(item.get("id"), str)
            and isinstance(function.get("name"), str) and isinstance(function.get("arguments"), str))


def _tool_list_shape(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """An MCP tool list whose entries each have a string ``name`` and an object (or no) ``input_schema``."""
    for i, entry in enumerate(tools or []):
        if not isinstance(entry.get("name"), str) or not isinstance(entry.get("input_schema") or {}, dict):
            raise ValueError(f"tool {i} of the list has no string name or an input_schema that is not an object")
    return tools


Message = Annotated[dict[str, Any], AfterValidator(_message_shape)]


def now() -> float:
    """Seconds since the epoch, the timestamp every record carries."""
    return round(time.time(), 3)


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)
    ts: float = Field(default_factory=now)


class Settings(BaseModel):
    """The settings a session runs with: one definition, held by the header (:class:`SessionHeader`)
    and changed by ``settings`` records (:class:`SettingsRecord`); their fold is the settings in force.

    ``model``: a litellm model name or ``scripted:PATH`` (absolute); ``profile``: a bundled name or an
    absolute path, ``profile_text`` a profile file's YAML (resume survives its deletion);
    ``context_window`` and ``max_output_tokens`` (the reply reserve; None: the profile's) in tokens;
    ``workdir`` absolute (None in sessions older than it); ``tools``: ``--tools`` specs, absolute;
    ``limits``: session limits the command line set (``--session-limit``; None removes the profile's);
    ``mcp_config``: ``--mcp-config FILE``, absolute (re-read, its values never recorded), with the
    sha256 of its bytes when recorded (a resume refuses a changed one).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    model: str
    profile: str
    context_window: int
    path: Literal["batch", "interactive"] = "batch"
    api_base: str | None = None
    workdir: str | None = None
    tools: tuple[str, ...] = ()
    profile_text: str | None = None
    limits: dict[str, int | float | None] = Field(default_factory=dict)
    mcp_config: str | None = None
    mcp_config_sha256: str | None = None
    max_output_tokens: int | None = None

    @field_validator("limits", mode="before")
    @classmethod
    def _no_limits(cls, value: Any) -> Any:
        return {} if value is None else value  # headers before 2026-12 wrote null for none

    @classmethod
    def of(cls, header: Settings) -> Settings:
        """The settings of ``header`` (a :class:`SessionHeader`), without its other fields."""
        return cls.model_construct(**{name: getattr(header, name) for name in cls.model_fields})

    def changed(self, record: SettingsRecord) -> Settings:
        """These settings with ``record``'s changes in force."""
        return self.model_copy(update=record.changes)

    def differences(self, wanted: Settings) -> dict[str, Any]:
        """The fields of ``wanted`` that differ from these (the changes of a ``settings`` record)."""
        return {name: getattr(wanted, name) for name in Settings.model_fields
                if getattr(wanted, name) != getattr(self, name)}


class SessionHeader(Settings, _Record):
    """The first line of a transcript: the settings a session was started with, its name and schema."""

    kind: Literal["session"] = "session"
    schema_version: int = SCHEMA_VERSION
    name: str


def _valid(key: str, value: Any) -> Any:
    """``value`` validated as setting ``key`` (any value of a key that is no setting); ``ValueError``
    naming the setting when it is not one (a resume writes one settings record: no validator is kept)."""
    if key not in Settings.model_fields:
        return value
    try:
        return TypeAdapter(Settings.model_fields[key].annotation or Any).validate_python(value)
    except ValueError as err:
        raise ValueError(f"setting {key}: {str(err).splitlines()[-1].strip()}") from None


class SettingsRecord(_Record):
    """A change of the session's settings: the fields of :class:`Settings` that changed, each as the
    field is (``{"kind": "settings", "model": "openai/gpt-4o"}``). A field absent or null did not
    change (records written before 2026-12 list every field, null when unchanged); a key that is no
    setting (a newer version's) is kept and ignored. Raises ``ValidationError`` for a bad value."""

    kind: Literal["settings"] = "settings"

    @model_validator(mode="before")
    @classmethod
    def _changes_only(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: _valid(key, value) for key, value in data.items() if value is not None}

    @property
    def changes(self) -> dict[str, Any]:
        """The settings this record changes, by field name."""
        return {key: value for key, value in (self.model_extra or {}).items() if key in Settings.model_fields}


class FileTouch(BaseModel):
    """What a file tool did to one file (the file-activity ledger, agent/activity.py): ``path`` absolute;
    ``sha256`` the hex digest of the file's bytes right after the call ("" when it could not be read);
    ``args`` the call's other arguments as canonical JSON (lines 1-40 are not the whole file)."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)
    path: str
    op: Literal["read", "write"]
    sha256: str = ""
    args: str = ""


class MessageRecord(_Record):
    """One message of the transcript. An assistant reply whose tool calls were read from its text
    (agent/text_calls.py) also carries ``written``: that text as the model wrote it (an extra field,
    present only on those records)."""

    kind: Literal["message"] = "message"
    seq: int
    turn: int
    tokens: int
    message: Message
    handle: str | None = None  # tool results: the handle of the full value (ctxagent.handles)
    offloaded: bool = False  # tool results: the full value was stored when the record was written
    file: FileTouch | None = None  # tool results of file tools: the file read or written


class OutputRecord(_Record):
    """Metadata of one offloaded tool output: ``path`` relative to the session folder, sizes in bytes,
    lines and tokens."""

    kind: Literal["output"] = "output"
    handle: str
    call_id: str
    tool: str
    path: str
    bytes: int
    lines: int
    tokens: int
    tokens_exact: bool = True
    sha256: str
    binary: bool = False
    arguments: str = ""
    # what the stored value is (added with structured values; older records default to text):
    type: Literal["text", "bytes", "json", "ndarray"] = "text"
    length: int | None = None  # items of a JSON list, keys of a JSON object
    shape: list[int] | None = None  # of an ndarray
    dtype: str | None = None  # of an ndarray, numpy's name (``float32``)


class UsageRecord(_Record):
    kind: Literal["usage"] = "usage"
    turn: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    estimated_prompt_tokens: int
    cost_usd: float | None = None
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    cache_creation_tokens: int = 0  # of prompt_tokens, written to the cache (Anthropic)
    calls: int = 1  # model calls the record sums (a sub-agent's spend: all of its calls)


class CompactionRecord(_Record):
    kind: Literal["compaction"] = "compaction"
    strategy: str
    start: int
    end: int
    message: Message | None = None
    tokens: int = 0
    tokens_before: int = 0
    refs: list[str] = Field(default_factory=list)  # handles of the tool results in the range
    quotes: list[str] = Field(default_factory=list)  # user messages in the range, kept verbatim


class EndRecord(_Record):
    """The end of a run (or of one answer of an interactive run). ``wall_s``: seconds the run took
    since it started or since its previous end record (a session's wall time is their sum). A stop
    by a budget names the ``limit`` (``run.max_cost_usd``), the amount ``spent`` and the amount ``left``
    (in the limit's unit: tokens, US dollars or seconds)."""

    kind: Literal["end"] = "end"
    reason: str
    turn: int
    detail: str = ""
    wall_s: float | None = None
    limit: str | None = None
    spent: float | None = None
    left: float | None = None


class PermissionRecord(_Record):
    kind: Literal["permission"] = "permission"
    call_id: str
    tool: str
    arguments: str = ""  # the call's raw arguments, cut to 500 characters
    policy: str  # what asked, e.g. "permissions.kinds.exec: ask"
    decision: Literal["yes", "no", "always", "deny"]
    turn: int = 0


class NoteRecord(_Record):
    """Something the user should know that changed no state: a failed summary and its fallback,
    an escalated compaction, a loop-guard warning. ``source`` names what wrote it."""

    kind: Literal["note"] = "note"
    turn: int
    source: str
    text: str


class PinRecord(_Record):
    """A fact the user pinned (``/pin FACT`` in an interactive run): kept verbatim in every later
    request, like the agent's ``pin`` tool calls, and shown at once."""

    kind: Literal["pin"] = "pin"
    turn: int
    fact: str


class LessonsRecord(_Record):
    """The lessons block shown to this session (ctxagent/lessons/): chosen once, when it starts, and
    kept verbatim in the pins message of every request. ``ids`` and ``lines``: the lessons shown,
    one line each; ``text``: the block exactly as shown ("" for none). A later record replaces the
    block (a lesson forgotten meanwhile: the next request shows the block without it)."""

    kind: Literal["lessons"] = "lessons"
    scope: str = ""
    ids: list[str] = Field(default_factory=list)
    lines: list[str] = Field(default_factory=list)
    text: str = ""


class ToolsRecord(_Record):
    """The tools a session offers beyond its profile's: an MCP ``server``'s tool list the first time
    it was listed (``tools``: ``[{"name", "description", "input_schema"}]``), or deferred tools a
    ``find_tools`` call loaded (``loaded``: tool names). Resume offers exactly these."""

    kind: Literal["tools"] = "tools"
    server: str | None = None
    tools: Annotated[list[dict[str, Any]] | None, AfterValidator(_tool_list_shape)] = None
    loaded: list[str] | None = None


Record = Annotated[
    SessionHeader | SettingsRecord | MessageRecord | OutputRecord | UsageRecord | CompactionRecord | EndRecord
    | PermissionRecord | NoteRecord | PinRecord | ToolsRecord | LessonsRecord,
    Field(discriminator="kind"),
]


@functools.cache
def adapter() -> TypeAdapter[Any]:
    """pydantic's validator of any record (built on first use)."""
    return TypeAdapter(Record)


def dumps(record: _Record) -> str:
    """One record as one line of JSON (no newline inside: JSON escapes every control character)."""
    return json.dumps(record.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))


def loads(line: str | bytes) -> Any:
    """Parse one line back into its record type (extras kept). Raises ``ValueError`` on anything malformed.

    A msgspec decoder was tried for resume (issue 18) and removed: 137 MB/s against pydantic-core's
    132 MB/s on a realistic 20 MB transcript (benchmarks/resume_floor.py)."""
    return adapter().validate_json(line)
