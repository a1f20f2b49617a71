"""The state of a session: one fold over its transcript records (ONE STATE, DESIGN.md).

:meth:`SessionState.apply` applies one record; :func:`fold` applies them all when a session is
opened, and the runner calls ``apply`` on every record it appends. Nothing else derives session
state, so a resumed session continues from exactly the state the live run had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxagent.agent import activity
from ctxagent.agent.context import ContextState, compaction_of
from ctxagent.collector import collector_paused
from ctxagent.handles import base_handle, new_handle
from ctxagent.messages import Message, ToolCall, call_ids, loads_json
from ctxagent.sessions import records
from ctxagent.sessions.outcome import Usage, is_answer
from ctxagent.sessions.records import Settings
from ctxagent.sessions.transcript import Transcript
from ctxagent.tokens import calibration, reported_prompt

REPAIR_SOURCE = "transcript repair"  # source of the note records of the fold's repairs to a damaged transcript
RECENT_COMPACTIONS = 10  # compaction records a state keeps whole (inspect context lists them; the rest are counted)

VIEW_STEPS = frozenset({"mask_observations", "prune", "dedupe", "role_selective", "settle"})
"""Steps that edit single results as they age, typically on every request (``trigger: 0``): their
compactions are the plan, not thrashing, so the thrash guard does not count them."""


@dataclass
class SessionState:
    """A session as its records say it is (see the module docstring). Mutated only by :meth:`apply`."""

    name: str = ""
    settings: Settings | None = None
    context: ContextState = field(default_factory=ContextState)
    next_seq: int = 0
    turn: int = 0  # the highest turn of any message
    replies: int = 0  # assistant messages (one model call each)
    users: int = 0  # user messages
    answered: bool = False  # the last message is a final answer (no tool calls)
    last_end: str | None = None  # reason of the end record after the last message, if any
    open_calls: list[str] = field(default_factory=list)  # calls of any reply still waiting for a result
    repairs: list[str] = field(default_factory=list)  # PAIR repairs the fold made that no note records yet
    pins: list[str] = field(default_factory=list)  # facts the agent pinned (pin tool), in order
    lessons: records.LessonsRecord | None = None  # the lessons block shown (lessons/), as last recorded
    mcp_tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # MCP server -> tool list, as recorded
    loaded_tools: list[str] = field(default_factory=list)  # deferred tools find_tools loaded, in order
    shown_pins: list[str] = field(default_factory=list)  # the agent's pins in the view: as of the last compaction
    handles: set[str] = field(default_factory=set)  # every handle taken
    call_ids: set[str] = field(default_factory=set)  # every tool call id of every reply
    stored: set[str] = field(default_factory=set)  # handles whose value is in the output store
    scale: float = 1.0  # calibration: provider prompt tokens / our estimate
    summaries: int = 0  # summarizer calls made (a scripted summarizer resumes after them)
    usage: Usage = field(default_factory=Usage)  # every call of the session (summaries, sub-agents too)
    wall_s: float = 0.0  # seconds the session's runs took, as their end records say
    agents: dict[str, Usage] = field(default_factory=dict)  # spend of each sub-agent recorded so far, by model
    ledger: activity.Ledger = field(default_factory=activity.Ledger)  # files read or written
    shown_files: list[activity.Touched] = field(default_factory=list)  # the ledger in the view (last compaction)
    pure: dict[str, tuple[str, int]] = field(default_factory=dict)  # signature -> (handle, turn), pure tools
    compacted_turns: int = 0  # consecutive requests that ran a reducing compaction (thrash guard)
    compactions: dict[str, int] = field(default_factory=dict)  # strategy -> compaction records
    recent_compactions: list[records.CompactionRecord] = field(default_factory=list)  # the newest RECENT_COMPACTIONS
    _compacted_at: int = field(default=-1, repr=False)  # the request (reply number + 1) of the last one
    _calls: dict[str, ToolCall] = field(default_factory=dict, repr=False)  # call id -> call, of the last reply
    _recent: list[tuple[int, ToolCall]] = field(default_factory=list, repr=False)  # (reply, call), oldest first
    _digests: dict[str, str] = field(default_factory=dict, repr=False)  # call id -> result digest, of _recent
    _open_sha: dict[str, str] = field(default_factory=dict, repr=False)  # open call id -> sha256 of its stored output
    _outputs: dict[str, str] = field(default_factory=dict, repr=False)  # call id -> handle, legacy records
    _owners: dict[str, Message] = field(default_factory=dict, repr=False)  # open call id -> its reply's message

    def apply(self, record: Any) -> None:
        """Advance the state by one transcript record (any kind; unknown kinds change nothing)."""
        step = _FOLD.get(type(record))
        if step is not None:
            step(self, record)

    def _compacted(self, record: records.CompactionRecord) -> None:
        self.context.record([compaction_of(record)])
        self.compactions[record.strategy] = self.compactions.get(record.strategy, 0) + 1
        self.recent_compactions = [*self.recent_compactions[1 - RECENT_COMPACTIONS:], record]
        if record.strategy in VIEW_STEPS:
            return
        # the pins message (2nd in every request) changes only when a step cut old history too: a mask
        # batch must not break the whole cached prefix for a new ledger line
        self.shown_pins = list(self.pins)
        self.shown_files = list(self.ledger.files.values())
        request = self.replies + 1  # the thrash guard counts consecutive requests that cut history
        if request != self._compacted_at:
            self.compacted_turns = self.compacted_turns + 1 if request == self._compacted_at + 1 else 1
            self._compacted_at = request

    def _output(self, record: records.OutputRecord) -> None:
        self.handles.add(record.handle)
        self.stored.add(record.handle)
        self._outputs[record.call_id] = record.handle
        if record.call_id in self._owners and record.sha256:  # the output of a call waiting for its result
            self._open_sha[record.call_id] = record.sha256

    def _end(self, record: records.EndRecord) -> None:
        self.last_end = record.reason
        self.wall_s += record.wall_s or 0.0

    def _note(self, record: records.NoteRecord) -> None:
        if record.source == REPAIR_SOURCE and record.text in self.repairs:
            self.repairs.remove(record.text)

    def _header(self, record: records.SessionHeader) -> None:
        self.name, self.settings = record.name, Settings.of(record)
        self.context.model = record.model

    def _lessons(self, record: records.LessonsRecord) -> None:
        self.lessons = record  # chosen once at the start; shown in every request's pins message

    def _pin(self, record: records.PinRecord) -> None:
        if record.fact.strip():
            self.pins = list(dict.fromkeys([*self.pins, record.fact.strip()]))
            self.shown_pins = list(self.pins)  # the user asked for it now: shown in the next request

    def _tools(self, record: records.ToolsRecord) -> None:
        if record.server is not None and record.tools is not None:
            self.mcp_tools[record.server] = list(record.tools)
        self.loaded_tools = list(dict.fromkeys([*self.loaded_tools, *(record.loaded or ())]))

    def _settings(self, record: records.SettingsRecord) -> None:
        if self.settings is not None:
            self.compacted_turns = 0  # new settings (say a profile after a thrash stop): the guard starts over
            self.settings = self.settings.changed(record)
            self.context.model = self.settings.model

    def streak(self, back: int) -> int:
        """The loop guard's count (:func:`ctxagent.agent.activity.streak`) of the call ``back`` places
        before the newest (0: the newest). Computed when asked: a fold does not canonicalize every call."""
        recent = self._recent[-activity.SIGNATURES_KEPT:]
        return activity.streak([activity.signature(call) for _, call in recent], len(recent) - 1 - back,
                               [reply for reply, _ in recent], [self._digests.get(call.id) for _, call in recent])

    @property
    def lesson_pins(self) -> list[str]:
        """The lessons block shown, as one pinned fact (none when no lesson is shown)."""
        return [self.lessons.text] if self.lessons is not None and self.lessons.text else []

    def open_call(self, call_id: str) -> ToolCall:
        """The tool call ``call_id`` of a reply still waiting for its result (``open_calls``)."""
        return next(call for call in _tool_calls(self._owners[call_id]) if call.id == call_id)  # its owner's

    def new_handle(self, call_id: str | None) -> str:
        """A handle no record of this session has taken yet, for a result of call ``call_id``."""
        return new_handle(call_id, self.handles)

    def repair_notes(self) -> list[records.NoteRecord]:
        """Note records of the fold's repairs that no note records yet (the notes say them once)."""
        return [records.NoteRecord(turn=self.turn, source=REPAIR_SOURCE, text=text) for text in self.repairs]

    def needs_input(self) -> bool:
        """Whether the session cannot go on without a new user message: it was answered (even if
        a crash lost the end record), or its task was never recorded."""
        return self.last_end == "answered" or self.answered or self.users == 0

    def _message(self, record: records.MessageRecord) -> None:
        msg = record.message
        role = msg.get("role")
        ids = call_ids(msg) if role == "assistant" else []
        if role == "tool":
            self._tool_result(record)
        elif ids and all(i in self.call_ids for i in ids):  # a duplicated line: its calls were made before
            self.repairs.append(f"assistant message #{record.seq} left out of the view: it repeats the tool calls "
                                f"{', '.join(ids)} of an earlier reply")
        else:
            if role == "assistant":
                self._reply(record)
            self.context.add(record)
        self.next_seq = record.seq + 1
        self.turn = max(self.turn, record.turn)
        self.last_end = None
        self.users += role == "user"
        self.answered = is_answer(msg)

    def _reply(self, record: records.MessageRecord) -> None:
        """An assistant message: its calls wait for results (with any still open before it)."""
        self.replies += 1
        ids = call_ids(record.message)
        self.open_calls.extend(ids)
        self._owners.update(dict.fromkeys(ids, record.message))
        self.call_ids.update(ids)
        self.pins.extend(p for p in pins_of(record.message) if p not in self.pins)
        self._signatures(record.message)

    def _tool_result(self, record: records.MessageRecord) -> None:
        """A tool result, paired with its call by id (PAIR), else repaired (the repair kept in ``repairs``)."""
        call_id = record.message.get("tool_call_id")
        what = f"tool result #{record.seq}"
        if not call_id and len(self.open_calls) == 1:
            call_id = self.open_calls[0]
            record = record.model_copy(update={"message": {**record.message, "tool_call_id": call_id}})
            self.repairs.append(f"{what} has no call id: it answers {call_id!r}, the only call waiting for a result")
        if not call_id or call_id not in self.open_calls:
            why = f"{len(self.open_calls)} calls are waiting" if not call_id else "it answers no call waiting for one"
            self.repairs.append(f"{what} ({call_id!r}) left out of the view: {why}")
            return
        self.open_calls.remove(call_id)
        handle, offloaded = self._handle_of(record, call_id)
        repair = self.context.add_result(record, self._owners.pop(call_id), handle, offloaded)
        if repair:
            self.repairs.append(repair)
        self._result(record, call_id, handle)

    def _handle_of(self, record: records.MessageRecord, call_id: str) -> tuple[str, bool]:
        """A tool result's handle and whether it was offloaded: the record's own, or (a record older than
        handles on records) its call's stored output's, else its call id's."""
        handle, offloaded = record.handle, record.offloaded
        if handle is None:
            stored = self._outputs.get(call_id)
            handle, offloaded = stored or base_handle(call_id), stored is not None
        self.handles.add(handle)
        if offloaded:
            self.stored.add(handle)
        return handle, offloaded

    def _signatures(self, message: Message) -> None:
        """Remember the calls of a reply for the loop guard and the repeat notes."""
        calls = _tool_calls(message)
        self._calls = {call.id: call for call in calls}
        self._recent += [(self.replies, call) for call in calls]
        if len(self._recent) > 2 * activity.SIGNATURES_KEPT:
            del self._recent[:-activity.SIGNATURES_KEPT]
            kept = {call.id for _, call in self._recent}
            self._digests = {k: v for k, v in self._digests.items() if k in kept}

    def _result(self, record: records.MessageRecord, call_id: str, handle: str) -> None:
        """A tool result: into the file ledger, and remembered when its tool is pure."""
        self.ledger.apply(record)
        stored = self._open_sha.pop(call_id, None)
        self._digests[call_id] = activity.result_digest(str(record.message.get("content") or ""),
                                                        stored if record.offloaded else None)
        call = self._calls.get(call_id)
        if call and call.name in activity.PURE_TOOLS and not activity.result_is_error(record.message):
            self.pure[activity.signature(call)] = (handle, record.turn)

    def compaction_streak(self) -> int:
        """How many requests in a row, up to the last one sent, made a reducing compaction."""
        return self.compacted_turns if self._compacted_at >= self.replies else 0

    def _usage(self, record: records.UsageRecord) -> None:
        self.usage.add(record)
        if record.model.startswith("agent:"):
            self.agents.setdefault(record.model, Usage()).add(record)
        if record.model.startswith("summarizer:"):
            self.summaries += 1
        elif record.estimated_prompt_tokens > 0:
            self.scale = calibration(reported_prompt(record.prompt_tokens, record.cached_tokens,
                                                     record.cache_creation_tokens), record.estimated_prompt_tokens)


_FOLD: dict[type, Callable[[SessionState, Any], None]] = {
    records.MessageRecord: SessionState._message,
    records.CompactionRecord: SessionState._compacted,
    records.OutputRecord: SessionState._output,
    records.UsageRecord: SessionState._usage,
    records.EndRecord: SessionState._end,
    records.NoteRecord: SessionState._note,
    records.SessionHeader: SessionState._header,
    records.LessonsRecord: SessionState._lessons,
    records.PinRecord: SessionState._pin,
    records.ToolsRecord: SessionState._tools,
    records.SettingsRecord: SessionState._settings,
}


def open_state(transcript: Transcript, *, repair: bool = False) -> SessionState:
    """The state of the session whose transcript is ``transcript``: a fold of every record it
    holds (``repair``: see :meth:`Transcript.records`, which says what it raises). A 10,000-message
    transcript (~20 MB) folds in ~0.3 s (benchmarks/resume_floor.py)."""
    return fold(transcript.records(repair=repair), transcript_path=str(transcript.path))


def fold(items: Iterable[Any], *, transcript_path: str = "transcript.jsonl") -> SessionState:
    """The state of a session whose records are ``items`` (oldest first). The collector is paused: the
    fold's objects all live on, and scanning them as they pile up took a third of a 10,000-message resume."""
    state = SessionState(context=ContextState(transcript_path=transcript_path))
    with collector_paused():
        for item in items:
            state.apply(item)
    return state


def pins_of(message: Message) -> list[str]:
    """Facts pinned by the ``pin`` tool calls of an assistant message (bad arguments ignored)."""
    found = []
    for call in _tool_calls(message):
        if call.name != "pin":
            continue
        try:
            fact = loads_json(call.arguments).get("fact")
        except (ValueError, AttributeError):
            continue
        if isinstance(fact, str) and fact.strip():
            found.append(fact.strip())
    return found


def _tool_calls(message: Message) -> list[ToolCall]:
    """The tool calls of an assistant message (a record's: records.py checked their shape)."""
    return [ToolCall(call["id"], call["function"]["name"], call["function"]["arguments"])
            for call in message.get("tool_calls") or []]
