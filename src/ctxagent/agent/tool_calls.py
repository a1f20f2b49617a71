"""Running the tool calls of a reply for the runner: permissions, repeat notes, the loop guard, sub-agents."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ctxagent.agent import activity
from ctxagent.agent.events import Event, ToolDone, ToolStarted
from ctxagent.agent.model import Reply
from ctxagent.agent.replies import cut_call_error
from ctxagent.agent.sinks import Recorder
from ctxagent.agent.state import SessionState
from ctxagent.errors import LimitReached
from ctxagent.messages import ToolCall
from ctxagent.profile import Profile
from ctxagent.sessions import records
from ctxagent.sessions.session import Session
from ctxagent.tokens import count_tools
from ctxagent.tools.base import ERROR_PREFIX, Stop, ToolError
from ctxagent.tools.guard import GuardedToolset, Verdict
from ctxagent.tools.toolset import ToolOutcome

INTERRUPTED = "[ctxagent] interrupted: this tool call did not finish (the process stopped); run it again if needed"
CANCELLED = ("[ctxagent] interrupted: the user cancelled this turn (Ctrl-C) before this tool call finished; "
             "its output is lost; run it again if needed")


class Delegates(Protocol):
    """What the runner needs of the sub-agent runner (agent/delegate.py, which imports the runner)."""

    def start(self, calls: Sequence[tuple[ToolCall, str, dict[str, Any] | ToolError]]
              ) -> dict[str, Callable[[], ToolOutcome]]: ...
    def resume(self, call: ToolCall, handle: str) -> ToolOutcome: ...
    def stop(self, timeout_s: float = 5.0) -> None: ...


class ToolCalls:
    """Tool execution for a runner: ``toolset`` (behind the permission gate) under ``profile``'s repeat
    notes and loop guard, records appended by ``out``; ``delegator``: runs ``delegate`` calls (None: not offered)."""

    def __init__(self, session: Session, profile: Profile, toolset: GuardedToolset, out: Recorder, stop: Stop,
                 delegator: Delegates | None = None):
        self.session, self.profile, self.toolset, self.out = session, profile, toolset, out
        self.state: SessionState = out.state
        self.stop, self.delegator = stop, delegator
        self._tool_tokens: dict[tuple[str, ...], int] = {}  # by the deferred tools loaded (find_tools)

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The tool schemas of the next request: deferred ones once a ``find_tools`` call loaded them."""
        return self.toolset.specs(self.state.loaded_tools)

    @property
    def tool_tokens(self) -> int:
        """Tokens of :attr:`tool_specs` (counted once per set of loaded tools)."""
        key = tuple(self.state.loaded_tools)
        if key not in self._tool_tokens:
            self._tool_tokens[key] = count_tools(self.tool_specs, self.out.model_name)
        return self._tool_tokens[key]

    def run(self, reply: Reply) -> Iterator[Event]:
        """Run the calls of ``reply`` and append their results in call order (PAIR); allowed delegate calls
        start together first. Each call is checked by the gate before it is announced, so the user is
        asked once."""
        calls = reply.tool_calls
        handles = [self.state.new_handle(call.id) for call in calls]
        verdicts = {call.id: self._check(call) for call in calls
                    if call.name == "delegate" and self.delegator is not None}
        starting = [(call, handle, verdict.arguments or {}) for call, handle in zip(calls, handles, strict=True)
                    if (verdict := verdicts.get(call.id)) is not None and verdict.refusal is None]
        children = self.delegator.start(starting) if self.delegator is not None else {}
        for index, (call, handle) in enumerate(zip(calls, handles, strict=True)):
            repeats = self.state.streak(len(calls) - 1 - index)
            if 0 < self.profile.loop_guard < repeats:
                yield from self._stop_loop(calls[index:], repeats, handles[index:])
            verdict = verdicts.get(call.id) or self._check(call)
            repeat = verdict.refusal or self._repeat(call)
            cut = None if repeat else cut_call_error(reply, call)  # arguments cut at the output limit
            if not (repeat or cut):
                if self.stop.is_set():  # stopped (a sub-agent whose parent got Ctrl-C): start nothing new
                    raise KeyboardInterrupt
                yield ToolStarted(call)
            outcome = repeat or (ToolOutcome(cut, True) if cut else children[call.id]() if call.id in children
                                 else self.toolset.call(call, handle, verdict=verdict, turn=self.state.replies))
            if repeats == self.profile.loop_guard > 0:
                outcome = replace(outcome, content=outcome.content + activity.loop_warning(repeats))
                yield self.out.warn("loop guard", f"{call.name}: {repeats} identical calls in a row")
            touch = None if outcome.is_error or repeat else activity.touch_of(call, self.toolset.ctx.workdir)
            message = self.out.message({"role": "tool", "tool_call_id": call.id, "content": outcome.content},
                                    self.state.replies, handle=handle, offloaded=outcome.output is not None,
                                    file=touch)
            loaded = [records.ToolsRecord(loaded=list(outcome.loaded))] if outcome.loaded else []
            self.out.append(*outcome.decisions, *([outcome.output] if outcome.output is not None else []), message,
                         *loaded)
            yield ToolDone(call, outcome.content, outcome.is_error, handle if outcome.output else None,
                           denied=verdict.refusal is not None)

    def _repeat(self, call: Any) -> ToolOutcome | None:
        """A note instead of a repeat call whose result cannot have changed; the earlier result it names is
        stored first, so its handle resolves."""
        if not (self.profile.repeat_notes and activity.may_repeat(call.name)):  # no view scan for others
            return None
        verbatim = {e.handle: e for e in self.state.context.view
                    if e.handle is not None and e.kind == "message" and e.role == "tool"}
        repeat = activity.repeat_note(self.state.ledger, call, self.toolset.ctx.workdir, verbatim=set(verbatim),
                                      stored=self.state.stored, pure=self.state.pure)
        if repeat is None:
            return None
        note, handle = repeat
        self.out.materialize([verbatim[handle]] if handle in verbatim else [])
        return ToolOutcome(note, False)

    def _stop_loop(self, calls: Sequence[Any], repeats: int, handles: Sequence[str]) -> Iterator[Event]:
        """Answer ``calls`` (the looping one and the rest of its reply) without running them, then raise
        ``LimitReached``."""
        text = activity.loop_stop(repeats, self.session.name)
        for call, handle in zip(calls, handles, strict=True):
            self.out.append(self.out.message({"role": "tool", "tool_call_id": call.id, "content": ERROR_PREFIX + text},
                                       self.state.replies, handle=handle))
            yield ToolDone(call, text, True, None)
        raise LimitReached(f"loop guard: {calls[0].name} was called {repeats} times in a row with the same "
                           f"arguments; 'ctxagent resume --session {self.session.name}' continues", bound="loop_guard")

    def finish_open_calls(self) -> Iterator[Event]:
        """Results for the calls a killed run left open when one was a delegate call (the runner defers
        those): its sub-agent is resumed, the others get the interrupted note."""
        for call_id in list(self.state.open_calls):
            call = self.state.open_call(call_id)
            handle = self.state.new_handle(call_id)
            outcome = self.delegator.resume(call, handle) if self.delegator is not None and call.name == "delegate" \
                else ToolOutcome(INTERRUPTED, False)
            message = self.out.message({"role": "tool", "tool_call_id": call_id, "content": outcome.content},
                                    self.state.replies, handle=handle, offloaded=outcome.output is not None)
            self.out.append(*([outcome.output] if outcome.output is not None else []), message)
            yield ToolDone(call, outcome.content, outcome.is_error, handle if outcome.output else None)

    def close_open_calls(self, content: str) -> None:
        """Give every call still waiting for its result ``content`` as its result (PAIR)."""
        for call_id in list(self.state.open_calls):
            self.out.append(self.out.message({"role": "tool", "tool_call_id": call_id, "content": content},
                                             self.state.replies, handle=self.state.new_handle(call_id)))

    def _check(self, call: ToolCall) -> Verdict:
        """The permission gate's verdict on ``call`` (it may ask the user; the answers are recorded at once)."""
        verdict = self.toolset.check(call, turn=self.state.replies)
        if verdict.decisions:
            self.out.append(*verdict.decisions)
        return verdict
