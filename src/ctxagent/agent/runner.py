"""The ReAct turn loop: build the view, call the model, run the tools, append, repeat.

One-way: the runner uses sessions (records, store), strategies (through ``ContextState``), tools
and a model backend; it knows nothing of the CLI. It yields typed events (``agent/events.py``).

Ordering guarantees (DESIGN.md data flow): every record of a step is flushed and fsynced before
the next model request; tool results are appended in call order; a call left without a result
by a crash gets a synthetic "interrupted" result when the session is opened again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ctxagent.agent.context import ContextState, record_of
from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone
from ctxagent.agent.model import Model, Reply
from ctxagent.errors import ContextOverflowError, CtxagentError, LimitReached, ProviderError
from ctxagent.messages import Message, call_ids
from ctxagent.profile import Path_, Profile
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.strategies.base import Budget
from ctxagent.tokens import count_message, count_tools
from ctxagent.tools.toolset import Toolset

INTERRUPTED = "[ctxagent] interrupted: this tool call did not finish (the process stopped); run it again if needed"


@dataclass
class SessionState:
    """What the runner tracks about a session besides its view (all derived from the transcript)."""

    header: records.SessionHeader
    next_seq: int = 0
    turn: int = 0
    replies: int = 0
    scale: float = 1.0
    last_end: str | None = None
    open_calls: list[str] = field(default_factory=list)


def scan(items: list[Any], header: records.SessionHeader) -> SessionState:
    """Derive counters, calibration and open tool calls from loaded records."""
    state = SessionState(header)
    for item in items:
        if isinstance(item, records.MessageRecord):
            state.next_seq = item.seq + 1
            state.turn = max(state.turn, item.turn)
            state.last_end = None
            msg = item.message
            if msg.get("role") == "assistant":
                state.replies += 1
                state.open_calls = call_ids(msg)
            elif msg.get("role") == "tool" and msg.get("tool_call_id") in state.open_calls:
                state.open_calls.remove(msg["tool_call_id"])
        elif isinstance(item, records.UsageRecord) and item.estimated_prompt_tokens > 0:
            state.scale = min(2.0, max(0.5, item.prompt_tokens / item.estimated_prompt_tokens))
        elif isinstance(item, records.EndRecord):
            state.last_end = item.reason
    return state


class Runner:
    """Runs turns of one session. The caller holds the session's writer lock.

    ``path`` selects the profile's pipeline (``batch`` or ``interactive``).
    """

    def __init__(self, session: Session, profile: Profile, model: Model, toolset: Toolset,
                 items: list[Any], header: records.SessionHeader, path: Path_):
        self.session, self.profile, self.model, self.toolset = session, profile, model, toolset
        self.path = path
        self.state = scan(items, header)
        self.context = ContextState.from_records(
            items, transcript_path=str(session.transcript.path), model=header.model
        )
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        self.tool_specs = toolset.specs()
        self.tool_tokens = count_tools(self.tool_specs, header.model)
        self._close_open_calls()

    # -- appending ---------------------------------------------------------------------------
    def _message(self, message: Message, turn: int | None = None) -> records.MessageRecord:
        turn = self.state.turn if turn is None else turn
        rec = records.MessageRecord(seq=self.state.next_seq, turn=turn, message=message,
                                    tokens=count_message(message, self.state.header.model))
        self.state.next_seq += 1
        return rec

    def _append(self, *items: Any) -> None:
        self.session.transcript.append(items)
        for item in items:
            if isinstance(item, records.MessageRecord):
                self.context.add(item)

    def _close_open_calls(self) -> None:
        """Give every call left without a result (a crash mid-turn) a synthetic result."""
        if self.state.open_calls:
            results = [self._message({"role": "tool", "tool_call_id": cid, "content": INTERRUPTED})
                       for cid in self.state.open_calls]
            self._append(*results)
            self.state.open_calls = []

    # -- the loop ----------------------------------------------------------------------------
    def budget(self) -> Budget:
        p = self.profile
        return Budget(window=self.state.header.context_window, tools=self.tool_tokens,
                      reserved=p.max_output_tokens + p.margin_tokens, target=p.target,
                      trigger=p.trigger, scale=self.state.scale)

    def needs_input(self) -> bool:
        """Whether the session cannot continue without a new user message (it was answered)."""
        return self.state.last_end == "answered" or self.state.next_seq == 0

    def run(self, user_input: str | None = None, *, max_turns: int | None = None) -> Iterator[Event]:
        """Run until an answer or a bound; yields events, ends with :class:`Finished`.

        Raises the ``CtxagentError`` that ended the run (``LimitReached``, ``ProviderError``,
        ``ContextOverflowError``...) *after* writing an end record that names it.
        """
        if user_input is not None:
            if self.state.next_seq == 0:
                self._append(self._message({"role": "system", "content": self.profile.system_prompt}))
            self._append(self._message({"role": "user", "content": user_input}, self.state.turn + 1))
        limit = max_turns or self.profile.max_turns
        try:
            for _ in range(limit):
                reply = yield from self._step()
                if not reply.tool_calls:
                    answer = reply.content or ""
                    self._end("answered")
                    yield Finished("answered", answer, self.state.turn)
                    return
                yield from self._run_tools(reply)
            raise LimitReached(f"stopped after max_turns={limit} model calls; "
                               f"'ctxagent resume --session {self.session.name}' continues",
                               bound="max_turns")
        except KeyboardInterrupt:
            self._end("interrupted", "Ctrl-C")
            raise
        except CtxagentError as err:
            self._end(_reason(err), str(err))
            yield Finished(_reason(err), None, self.state.turn, str(err))
            raise

    def _step(self) -> Iterator[Event]:
        self.state.turn += 1
        budget = self.budget()
        built = self.context.build(self.profile.pipeline(self.path), budget, turn=self.state.turn)
        if built.compactions:
            self.session.transcript.append([record_of(c) for c in built.compactions])
            self.context.record(built.compactions)
            for comp in built.compactions:
                yield Compacted(comp)
        messages = [e.message for e in built.view]
        yield Requesting(self.state.turn, budget.total(built.view), budget.window, len(messages))
        reply: Reply = self.model.complete(messages, self.tool_specs)
        self._record_reply(reply, built.view)
        yield Replied(self.state.turn, reply)
        return reply

    def _record_reply(self, reply: Reply, view: list[Any]) -> None:
        items: list[Any] = [self._message(reply.message())]
        if reply.usage is not None:
            self._count_usage(reply)
            estimate = budget_estimate(view, self.tool_tokens)
            items.append(records.UsageRecord(
                turn=self.state.turn, model=self.model.name, prompt_tokens=reply.usage.prompt_tokens,
                completion_tokens=reply.usage.completion_tokens, estimated_prompt_tokens=estimate,
                cost_usd=reply.usage.cost_usd))
            if estimate and reply.usage.prompt_tokens:
                self.state.scale = min(2.0, max(0.5, reply.usage.prompt_tokens / estimate))
        self._append(*items)

    def _count_usage(self, reply: Reply) -> None:
        assert reply.usage is not None
        self.usage["prompt_tokens"] += reply.usage.prompt_tokens
        self.usage["completion_tokens"] += reply.usage.completion_tokens
        self.usage["cost_usd"] += reply.usage.cost_usd or 0.0

    def _run_tools(self, reply: Reply) -> Iterator[Event]:
        for call in reply.tool_calls:
            outcome = self.toolset.call(call)
            items: list[Any] = [self._message(
                {"role": "tool", "tool_call_id": call.id, "content": outcome.content})]
            if outcome.output is not None:
                items.insert(0, outcome.output)
            self._append(*items)
            handle = outcome.output.handle if outcome.output else None
            yield ToolDone(call, outcome.content, outcome.is_error, handle)

    def _end(self, reason: str, detail: str = "") -> None:
        self.state.last_end = reason
        self.session.transcript.append([records.EndRecord(reason=reason, turn=self.state.turn,
                                                          detail=detail[:2000])])


def budget_estimate(view: list[Any], tool_tokens: int) -> int:
    """Our uncalibrated prompt-token estimate of a request (view + tool schemas), tokens."""
    from ctxagent.tokens import PER_REQUEST

    return PER_REQUEST + sum(e.tokens for e in view) + tool_tokens


def _reason(err: CtxagentError) -> str:
    if isinstance(err, LimitReached):
        return err.bound
    if isinstance(err, ContextOverflowError):
        return "context_overflow"
    if isinstance(err, ProviderError):
        return "context_overflow" if err.exit_code == 5 else "provider_error"
    return "error"
