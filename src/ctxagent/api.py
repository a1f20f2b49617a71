"""The public API, a thin layer over the internals (docs/api.md documents it, with examples):
:class:`Context` and :class:`Outputs` for a loop you run yourself, :func:`open_session` and
:class:`Session` for ctxagent's own loop. Import the names from ``ctxagent`` itself: this module may
move. Nothing here imports litellm: a model call does, when it happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ctxagent.agent.config import RunConfig
from ctxagent.agent.context import ContextState
from ctxagent.agent.events import Event, Finished
from ctxagent.agent.runner import SETTLE, Runner
from ctxagent.agent.setup import offload_policy, open_runner, resolve_window
from ctxagent.agent.turns import make_budget
from ctxagent.errors import UsageError
from ctxagent.handles import base_handle, new_handle
from ctxagent.messages import Message, ToolCall, pair_violations
from ctxagent.profile import load_profile
from ctxagent.sessions import records
from ctxagent.sessions import session as sessions
from ctxagent.sessions.redact import RedactingStore
from ctxagent.strategies.base import Compaction, Entry
from ctxagent.tokens import count_message, count_tools
from ctxagent.tools import values
from ctxagent.tools.base import ToolError
from ctxagent.tools.clean import plain
from ctxagent.tools.offload import OffloadPolicy, settle, store_text
from ctxagent.tools.permissions import Grants

PipelinePath = Literal["batch", "interactive"]  # which of the profile's pipelines runs
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Offloaded:
    """What :meth:`Outputs.offload` made of a value: ``content``, the text to put in the tool
    message (the value itself when it fits, else a middle-out preview naming the handle);
    ``handle`` (``"@abc"``) and ``path`` of the stored value, or None when nothing was stored."""

    content: str
    handle: str | None
    path: Path | None


class Outputs:
    """A folder of offloaded values, each under a handle (the layout of a session's ``outputs/``).

    ``limit_tokens``: the most tokens one tool message may cost; text over it less the envelope
    overhead is stored and previewed. ``model``: the litellm model string whose tokenizer counts.
    Files are written owner-only, with secrets replaced by ``[REDACTED:...]`` markers.
    """

    def __init__(self, directory: str | Path, *, limit_tokens: int = 20_000, model: str = ""):
        self.directory = Path(directory)
        self._store = RedactingStore(self.directory)
        self._policy = OffloadPolicy(limit_tokens=limit_tokens, model=model)
        self._by_call: dict[str, str] = {}

    def offload(self, value: Any, *, call_id: str = "", tool: str = "") -> Offloaded:
        """Settle a tool's ``value`` as ctxagent's own tools are (docs/api.md): text inline when it
        fits, else stored exactly and previewed; binary ``bytes``, JSON values and numpy arrays always
        stored. ``call_id`` (the tool call's id) names the handle. Raises ``TypeError`` for another
        type, ``OSError`` when the folder cannot be written."""
        content, record = settle(value, call=ToolCall(call_id, tool, ""), tool_name=tool, store=self._store,
                                 policy=self._policy, handle=new_handle(call_id or tool, self._store))
        if record is None:
            return Offloaded(content, None, None)
        self._by_call[call_id] = record.handle
        return Offloaded(content, record.handle, self._store.find(record.handle))

    def resolve(self, ref: str) -> Any:
        """The value ``ref`` names (``"@abc"``, or a part of a structured one: ``"@abc/key/0"``):
        text as ``str``, binary as ``bytes``, JSON as the parsed value, arrays as numpy arrays.
        Raises ``UsageError`` for a malformed or unknown handle or part (naming the nearest ones)."""
        try:
            parsed = values.parse_ref(ref) if isinstance(ref, str) else None
            if parsed is None:
                raise ToolError(f"{ref!r} is not a handle (@name, or @name/part for a part of a structured value)")
            return values.load(self._store, parsed)
        except ToolError as err:
            raise UsageError(str(err)) from None

    def resolve_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` (a tool call's, parsed) with every string that is exactly a handle, at any
        depth, replaced by its value (``"@@x"`` passes the text ``"@x"``): how ctxagent's tools take
        values by handle. Raises ``UsageError`` for an unknown handle (give its text to the model)."""
        try:
            return values.resolve_arguments(arguments, self._store)
        except ToolError as err:
            raise UsageError(str(err)) from None

    def handles(self) -> list[str]:
        """Every handle stored in the folder, oldest first (by when each was written)."""
        return self._store.handles()

    def handle_of(self, call_id: str) -> str | None:
        """The handle :meth:`offload` stored call ``call_id``'s value under (in this process, or
        found by its base name in the folder's metadata), or None."""
        found = self._by_call.get(call_id)
        if found is None and values.read_meta(self._store, base := base_handle(call_id)).get("call_id") == call_id:
            found = base
        return found


@dataclass(frozen=True)
class View:
    """What :meth:`Context.view` built: ``messages`` to send, oldest first (OpenAI format);
    ``compactions`` made by this call, whose ``start``..``end`` are indexes into the messages given
    (``message`` None: that range was dropped); ``offloaded``: handles whose original tool result
    this call wrote to the outputs folder (the view names them instead); ``tokens``: the request's
    budgeted total (prompt estimate, tool schemas and the reply's reserve) under ``window``, tokens."""

    messages: list[Message]
    compactions: list[Compaction]
    offloaded: list[str]
    tokens: int
    window: int


class Context:
    """The context management of one conversation, for your own agent loop: call :meth:`view`
    before each model request with the whole history; send ``view.messages`` instead (docs/api.md).

    ``profile``: a bundled profile's name or a YAML file, whose ``path`` pipeline runs. ``model``
    picks the tokenizer and, with no ``context_window`` (tokens) here or in the profile, the window
    (litellm's model info, else the server at ``api_base``). ``tools``: the tool schemas (OpenAI
    format) your requests send, counted in the budget. ``outputs``: the folder (:class:`Outputs`)
    where the originals of masked tool results are written; None keeps them nowhere.
    ``summarizer(text, max_tokens) -> summary``: the LLM call of summarizing strategies.
    ``transcript``: where you keep the whole history, as truncation notes name it.
    Raises ``ProfileError``/``UsageError`` for a bad profile or an unknown window.
    """

    def __init__(self, profile: str = "default", *, model: str = "", api_base: str | None = None,
                 context_window: int | None = None, path: PipelinePath = "batch",
                 tools: Sequence[Mapping[str, Any]] = (), outputs: str | Path | None = None,
                 summarizer: Callable[[str, int], str] | None = None, transcript: str = "transcript.jsonl"):
        self.profile = load_profile(profile)
        if not (context_window or self.profile.context_window or model):
            raise UsageError("the context window is unknown: give context_window (tokens) or a model litellm knows")
        self.model, self.path, self.transcript = model, path, transcript
        self.window = context_window or resolve_window(self.profile, model, api_base)
        self.outputs = None if outputs is None else Outputs(outputs, model=model)
        if self.outputs is not None:
            self.outputs._policy = offload_policy(self.profile, model, window=self.window)  # its limit and previews
        llm = path == "interactive" or self.profile.allow_llm_in_batch
        self._summarizer = summarizer if llm else None
        self._tool_tokens = count_tools([dict(t) for t in tools], model) if tools else 0
        self._reset()

    def _reset(self) -> None:
        self._state = ContextState(model=self.model, transcript_path=self.transcript)
        self._seen: list[Message] = []
        self._handles: set[str] = set()
        self._written: set[str] = set()
        self._replies = 0

    def view(self, messages: Sequence[Message]) -> View:
        """The view of the next request for ``messages`` (the whole history, oldest first, every tool
        call answered), as ``ctxagent run`` builds it within the BUDGET law. Pass the same history with
        new messages appended on each call: the view extends the last one until a compaction, and a
        history that does not extend it starts over (docs/api.md).

        Raises ``UsageError`` for a message that is not one, or a history that breaks PAIR;
        ``ContextOverflowError`` when the messages no strategy may drop (system, task, last user
        message) alone are over the trigger, or the view cannot fit the window.
        """
        messages = list(messages)
        if messages[:len(self._seen)] != self._seen:
            self._reset()
        _check(messages, len(self._seen))
        try:
            for seq in range(len(self._seen), len(messages)):
                self._state.add(self._record(seq, messages[seq]))
            self._seen = messages
            budget = make_budget(self.profile, self.window, self._tool_tokens)
            built = self._state.build([SETTLE, *self.profile.pipeline(self.path)], budget, turn=self._replies + 1,
                                      summarizer=self._summarizer, pins=self.profile.pins)
            self._state.record(built.compactions)
        except BaseException:
            self._reset()  # half-added messages: the next call starts over
            raise
        written = [self._write(entry) for entry in built.offloads]
        return View([e.message for e in built.view], built.compactions, [h for h in written if h],
                    budget.total(built.view), self.window)

    def _record(self, seq: int, message: Message) -> records.MessageRecord:
        role = message["role"]
        self._replies += role == "assistant"
        handle, offloaded = None, False
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            handle = self.outputs.handle_of(call_id) if self.outputs is not None else None
            offloaded = handle is not None and handle not in self._handles
            if not offloaded:
                handle = new_handle(call_id, _Taken(self._handles, self.outputs))
            self._handles.add(str(handle))
        turn = self._replies if role in ("tool", "system") else self._replies + (role == "user")
        return records.MessageRecord(seq=seq, turn=turn, message=message, tokens=count_message(message, self.model),
                                     handle=handle, offloaded=offloaded)

    def _write(self, entry: Entry) -> str | None:
        """Store the original of a tool result the view now names by handle; its handle (None if kept)."""
        if entry.handle is None or entry.offloaded or entry.handle in self._written or self.outputs is None:
            return None
        self._written.add(entry.handle)
        store_text(self.outputs._store, entry.handle, str(entry.message.get("tool_call_id") or ""),
                   str(entry.message.get("content") or ""), model=self.model)
        return entry.handle


@dataclass(frozen=True)
class _Taken:
    """The handles a new tool result may not take: those of the view, and those stored in ``outputs``."""

    handles: set[str]
    outputs: Outputs | None

    def __contains__(self, handle: object) -> bool:
        return handle in self.handles or (self.outputs is not None and self.outputs._store.taken(str(handle)))


def _check(messages: Sequence[Message], start: int) -> None:
    """``UsageError`` for a message from ``start`` on that is not one, or a history breaking PAIR.
    ``messages[:start]`` held PAIR with every call answered, so the whole does iff ``messages[start:]``
    does (a result opening it answers no open call either way): checking it alone keeps a session's
    checks linear, and the error, rare, is worded from the whole (its indexes)."""
    for index, message in enumerate(messages[start:], start):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise UsageError(f"message {index} is not an OpenAI-format message (a dict whose role is one of "
                             f"{', '.join(ROLES)}): {str(message)[:80]}")
    if start < len(messages) and pair_violations(messages[start:]) and (problems := pair_violations(messages)):
        raise UsageError("the messages break PAIR (every tool result follows its call, every call has one): "
                         + "; ".join(problems[:3]))


def open_session(name: str | None = None, *, model: str | None = None, api_base: str | None = None,
                 profile: str | None = None, context_window: int | None = None, workdir: str | Path | None = None,
                 tools: Sequence[str] = (), allow: Sequence[str] = (), path: PipelinePath = "batch",
                 lessons: bool = True) -> Session:
    """Open the session called ``name`` (a new one named by the time when None), as ``ctxagent run
    --session NAME`` does, holding its writer lock until :meth:`Session.close` (use ``with``).

    The arguments are ``ctxagent run``'s options (docs/api.md); an existing session keeps its own
    settings unless given here. ``model``: a litellm model string, or ``scripted:FILE``;
    ``context_window``: tokens; ``tools``: user tools as ``FILE.py:function``.

    Raises ``UsageError``/``ProfileError`` for a bad name, profile, model, folder or tool (nothing
    is left behind), ``SessionBusyError`` when another process holds the session.
    """
    session = sessions.Session.at(name or sessions.new_name())
    existed = session.root.exists()
    lock = contextlib.ExitStack()
    try:
        lock.enter_context(session.writer())
        runner = open_runner(session, RunConfig(profile_spec=profile, model_spec=model, api_base=api_base, path=path,
                                                workdir=Path(workdir).resolve() if workdir else None,
                                                tools=tuple(tools), context_window=context_window, lessons=lessons,
                                                grants=Grants(frozenset(allow))))
    except BaseException:
        lock.close()
        if not existed:
            sessions.discard_if_unstarted(session)
        raise
    return Session(session, runner, lock)


class Session:
    """An open ctxagent session (from :func:`open_session`): runs turns of ctxagent's agent loop,
    each request built by the profile, every record appended to ``transcript.jsonl``."""

    def __init__(self, session: sessions.Session, runner: Runner, lock: contextlib.ExitStack):
        self.name, self.directory = session.name, session.root
        self.outputs = Outputs(session.root / "outputs")
        self._runner, self._lock = runner, lock

    def stream(self, message: str | None = None, *, max_turns: int | None = None) -> Iterator[Event]:
        """Run until an answer or a bound, yielding typed events, then ``Finished``, then the lessons'
        ``Warned`` if learning failed. ``message``: the next user message (None resumes a run that
        stopped before answering). ``max_turns``: model calls at most (profile's default).

        Raises ``UsageError`` for an empty message or nothing to do; after ``Finished``, the
        ``CtxagentError`` that ended the run (``LimitReached``, ``ProviderError``,
        ``ContextOverflowError``...), with the session left resumable.
        """
        if message is not None and not (message := plain(message)).strip():
            raise UsageError("the message is empty")
        if message is None and self._runner.state.needs_input():
            raise UsageError(f"session {self.name!r} has nothing left to do; give a message")
        yield from self._runner.run(message, max_turns=max_turns)
        yield from self._runner.learn()

    def run(self, message: str | None = None, *, max_turns: int | None = None) -> Finished:
        """:meth:`stream` to its end; returns ``Finished`` (``answer``: the text, which may name
        handles that :attr:`outputs` resolves). Raises as :meth:`stream` does."""
        finished = [e for e in self.stream(message, max_turns=max_turns) if isinstance(e, Finished)]
        return finished[-1]

    def close(self) -> None:
        """Release the session's writer lock (idempotent)."""
        self._lock.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

