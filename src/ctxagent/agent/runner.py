"""The ReAct turn loop: build the view, call the model, run the tools, append, repeat.

One-way: the runner uses sessions (records, store), strategies (through ``ContextState``), tools
and a model backend; it knows nothing of the CLI. It yields typed events (``agent/events.py``).

Ordering guarantees (DESIGN.md data flow): every record of a step is flushed and fsynced before
the next model request; tool results are appended in call order; a call left without a result
by a crash gets a synthetic "interrupted" result when the session is opened again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ctxagent.agent.context import ContextState, check_protected, largest_parts, record_of, with_pins
from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting, ToolDone
from ctxagent.agent.model import Model, Reply
from ctxagent.errors import (
    ContextOverflowError,
    CtxagentError,
    LimitReached,
    ProviderContextError,
    ProviderError,
)
from ctxagent.messages import Message, call_ids
from ctxagent.profile import Path_, Profile, StrategyConfig
from ctxagent.sessions import records, redact
from ctxagent.sessions.session import Session, sessions_root
from ctxagent.sessions.store import handle_for
from ctxagent.strategies import registry
from ctxagent.strategies.base import Budget, Entry, groups
from ctxagent.tokens import calibration, count_message, count_tools
from ctxagent.tools.offload import store_text
from ctxagent.tools.permissions import Gate
from ctxagent.tools.toolset import ERROR_PREFIX, ToolOutcome, Toolset

MAX_RECOVERIES = 2  # emergency compactions per turn after a provider "context too long"
SUMMARIZER_SYSTEM = "You compress an agent's working transcript. Follow the instructions in the user message exactly."
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
    pins: list[str] = field(default_factory=list)
    stored: set[str] = field(default_factory=set)
    users: int = 0  # user messages so far
    answered: bool = False  # the last message is a final answer (no tool calls), end record or not

    def note(self, message: Message) -> None:
        """Track what decides whether the session needs a new user message."""
        self.users += message.get("role") == "user"
        self.answered = message.get("role") == "assistant" and not message.get("tool_calls")


def scan(items: list[Any], header: records.SessionHeader) -> SessionState:
    """Derive counters, calibration and open tool calls from loaded records."""
    state = SessionState(header)
    for item in items:
        if isinstance(item, records.MessageRecord):
            state.next_seq = item.seq + 1
            state.turn = max(state.turn, item.turn)
            state.last_end = None
            msg = item.message
            state.note(msg)
            if msg.get("role") == "assistant":
                state.replies += 1
                state.open_calls = call_ids(msg)
                state.pins.extend(pins_of(msg))
            elif msg.get("role") == "tool" and msg.get("tool_call_id") in state.open_calls:
                state.open_calls.remove(msg["tool_call_id"])
        elif isinstance(item, records.UsageRecord) and item.estimated_prompt_tokens > 0:
            state.scale = calibration(item.prompt_tokens, item.estimated_prompt_tokens)
        elif isinstance(item, records.EndRecord):
            state.last_end = item.reason
        elif isinstance(item, records.OutputRecord):
            state.stored.add(item.handle)
    return state


def pins_of(message: Message) -> list[str]:
    """Facts pinned by the ``pin`` tool calls of an assistant message (bad arguments ignored)."""
    found = []
    for call in message.get("tool_calls") or []:
        if call["function"]["name"] != "pin":
            continue
        try:
            fact = json.loads(call["function"]["arguments"]).get("fact")
        except (ValueError, AttributeError):
            continue
        if isinstance(fact, str) and fact.strip():
            found.append(fact.strip())
    return found


class Runner:
    """Runs turns of one session. The caller holds the session's writer lock.

    ``path`` selects the profile's pipeline (``batch`` or ``interactive``).
    """

    def __init__(self, session: Session, profile: Profile, model: Model, toolset: Toolset,
                 items: list[Any], header: records.SessionHeader, path: Path_,
                 summarizer_model: Callable[[], Model] | None = None):
        self.session, self.profile, self.model, self.toolset = session, profile, model, toolset
        self.path = path
        self._summarizer_model = summarizer_model
        self.state = scan(items, header)
        self.context = ContextState.from_records(
            items, transcript_path=str(session.transcript.path), model=header.model
        )
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        self.tool_specs = toolset.specs()
        self.tool_tokens = count_tools(self.tool_specs, header.model)
        # permissions (tools/permissions.py): the profile's; the CLI adds --allow grants and a prompt
        self.gate = Gate(profile.permissions, path, workdir=toolset.ctx.workdir, readable=[session.store.root],
                         protected=[sessions_root()])
        self._close_open_calls()

    # -- appending ---------------------------------------------------------------------------
    def _message(self, message: Message, turn: int | None = None) -> records.MessageRecord:
        turn = self.state.turn if turn is None else turn
        if self.profile.redact == "always":  # the model never sees a secret either (README "Secrets")
            message = redact.default().value(message)
        rec = records.MessageRecord(seq=self.state.next_seq, turn=turn, message=message,
                                    tokens=count_message(message, self.state.header.model))
        self.state.next_seq += 1
        return rec

    def _append(self, *items: Any) -> None:
        self.session.transcript.append(items)
        for item in items:
            if isinstance(item, records.MessageRecord):
                self.context.add(item)
                self.state.note(item.message)

    def _close_open_calls(self) -> None:
        """Give every call left without a result (a crash mid-turn) a synthetic result, and
        delete the spool files a killed tool left in the output store."""
        self.session.store.clean_spools()
        if self.state.open_calls:
            results = [self._message({"role": "tool", "tool_call_id": cid, "content": INTERRUPTED})
                       for cid in self.state.open_calls]
            self._append(*results)
            self.state.open_calls = []

    # -- the loop ----------------------------------------------------------------------------
    def budget(self) -> Budget:
        return make_budget(self.profile, self.state.header.context_window, self.tool_tokens, self.state.scale)

    def needs_input(self) -> bool:
        """Whether the session cannot continue without a new user message: it was answered (even
        if a crash lost the end record), or its task was never recorded."""
        return self.state.last_end == "answered" or self.state.answered or self.state.users == 0

    def run(self, user_input: str | None = None, *, max_turns: int | None = None) -> Iterator[Event]:
        """Run until an answer or a bound; yields events, ends with :class:`Finished`.

        Raises the ``CtxagentError`` that ended the run (``LimitReached``, ``ProviderError``,
        ``ContextOverflowError``...) *after* writing an end record that names it.
        """
        if user_input is not None:
            self._check_fits(user_input)
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
            self._end(err.status, str(err))
            yield Finished(err.status, None, self.state.turn, str(err))
            raise

    def pins(self) -> list[str]:
        """Pinned facts: the profile's, then the agent's (``pin`` tool), without repeats."""
        return list(dict.fromkeys([*self.profile.pins, *self.state.pins]))

    def summarizer(self) -> Callable[[str, int], str] | None:
        """The LLM summarizer, only on paths where LLM strategies may run."""
        if self._summarizer_model is None:
            return None
        if self.path == "batch" and not self.profile.allow_llm_in_batch:
            return None
        return self._summarize

    def _summarize(self, text: str, max_tokens: int) -> str:
        assert self._summarizer_model is not None
        model = self._summarizer_model()
        reply = model.complete([{"role": "system", "content": SUMMARIZER_SYSTEM},
                                {"role": "user", "content": text}], [])
        if reply.usage is not None:
            self.session.transcript.append([records.UsageRecord(
                turn=self.state.turn, model=f"summarizer:{model.name}", prompt_tokens=reply.usage.prompt_tokens,
                completion_tokens=reply.usage.completion_tokens, estimated_prompt_tokens=0,
                cost_usd=reply.usage.cost_usd)])
        return reply.content or ""

    def _build(self, steps: list[Any], budget: Budget) -> Iterator[Event]:
        """Build the view with ``steps``, persist what it made (offloads, compactions)."""
        built = self.context.build(steps, budget, turn=self.state.turn, summarizer=self.summarizer(),
                                   pins=self.pins())
        self._materialize(built.offloads)
        if built.compactions:
            self.session.transcript.append([record_of(c) for c in built.compactions])
            self.context.record(built.compactions)
            for comp in built.compactions:
                yield Compacted(comp)
        return built.view

    def _materialize(self, entries: list[Any]) -> None:
        """Write to the output store the originals that the view now points at by handle."""
        for entry in entries:
            call_id = entry.message.get("tool_call_id") or ""
            handle = handle_for(call_id)
            if not call_id or handle in self.state.stored:
                continue
            record = store_text(self.session.store, handle, call_id, str(entry.message.get("content") or ""))
            self.session.transcript.append([record])
            self.state.stored.add(handle)

    def _check_fits(self, user_input: str) -> None:
        """Refuse, before writing anything, a user message that alone (with the system prompt, pins,
        tool schemas and reserve) is over the trigger: written, it would leave a session that no
        strategy can shrink and no resume can run. Raises ``ContextOverflowError``."""
        message = {"role": "user", "content": user_input}
        system = [] if self.state.next_seq else [{"role": "system", "content": self.profile.system_prompt}]
        probe = [*self.context.view, *(Entry(m, count_message(m, self.state.header.model), -1, -1, 0)
                                         for m in (*system, message))]
        check_protected(with_pins(probe, self.pins(), self.state.header.model), self.budget())

    def _step(self) -> Iterator[Event]:
        self.state.turn += 1
        budget = self.budget()
        view = yield from self._build(self.profile.pipeline(self.path), budget)
        sent: list[list[Message]] = []
        for attempt in range(MAX_RECOVERIES + 1):
            messages = [e.message for e in view]
            if messages in sent:
                raise ContextOverflowError("emergency compaction could not shrink the context any "
                                           "further; the identical request is not sent twice")
            sent.append(messages)
            yield Requesting(self.state.turn, budget.total(view), budget.window, len(messages))
            try:
                reply: Reply = self.model.complete(messages, self.tool_specs)
                if not reply.tool_calls and not (reply.content or "").strip():
                    raise ProviderError(f"model {self.model.name}: the reply has neither text nor tool calls")
                break
            except ProviderContextError as err:
                if attempt == MAX_RECOVERIES:
                    raise ContextOverflowError(
                        f"the provider still says the context is too long after {MAX_RECOVERIES} "
                        f"emergency compactions ({err}); we estimated {budget.total(view)} tokens "
                        f"for a {budget.window}-token window; largest parts: {largest_parts(view)}"
                    ) from err
                before = sum(e.tokens for e in view)
                budget = replace(budget, scale=budget.scale * 1.25)
                self.state.scale = budget.scale
                view = yield from self._build(emergency_steps(view, budget, attempt), budget)
                if sum(e.tokens for e in view) >= before:
                    raise ContextOverflowError(
                        f"the provider says the context is too long ({err}) and emergency compaction cannot "
                        f"make it smaller than {budget.total(view)} tokens; largest parts: {largest_parts(view)}"
                    ) from err
        self._record_reply(reply, view)
        yield Replied(self.state.turn, reply)
        return reply

    def _record_reply(self, reply: Reply, view: list[Any]) -> None:
        items: list[Any] = [self._message(reply.message())]
        if reply.usage is not None:
            self._count_usage(reply)
            estimate = self.budget().estimate(view)
            items.append(records.UsageRecord(
                turn=self.state.turn, model=self.model.name, prompt_tokens=reply.usage.prompt_tokens,
                completion_tokens=reply.usage.completion_tokens, estimated_prompt_tokens=estimate,
                cost_usd=reply.usage.cost_usd))
            if estimate and reply.usage.prompt_tokens:
                self.state.scale = calibration(reply.usage.prompt_tokens, estimate)
        self._append(*items)

    def _count_usage(self, reply: Reply) -> None:
        assert reply.usage is not None
        self.usage["prompt_tokens"] += reply.usage.prompt_tokens
        self.usage["completion_tokens"] += reply.usage.completion_tokens
        self.usage["cost_usd"] += reply.usage.cost_usd or 0.0

    def _run_tools(self, reply: Reply) -> Iterator[Event]:
        for call in reply.tool_calls:
            outcome = self._refused(call) or self.toolset.call(call)
            items: list[Any] = [self._message(
                {"role": "tool", "tool_call_id": call.id, "content": outcome.content})]
            if outcome.output is not None:
                items.insert(0, outcome.output)
            self._append(*items)
            handle = outcome.output.handle if outcome.output else None
            yield ToolDone(call, outcome.content, outcome.is_error, handle)

    def _refused(self, call: Any) -> ToolOutcome | None:
        """The error outcome of a call the permission gate refuses (None: it may run); the
        decisions that involved asking the user are written to the transcript first."""
        tool = self.toolset.tools.get(call.name)
        if tool is None:
            return None  # the toolset answers unknown tools
        try:
            refusal = self.gate.check_call(tool, call.arguments, call_id=call.id, turn=self.state.turn)
        except (ValueError, OSError) as err:  # e.g. a NUL byte in a path: the model's mistake, not ours
            refusal = f"{call.name} refused: its arguments cannot be checked ({err})"
        decisions = self.gate.take_decisions()
        if decisions:
            self.session.transcript.append(decisions)
        return None if refusal is None else ToolOutcome(ERROR_PREFIX + refusal, True)

    def _end(self, reason: str, detail: str = "") -> None:
        self.state.last_end = reason
        self.session.transcript.append([records.EndRecord(reason=reason, turn=self.state.turn,
                                                          detail=detail[:2000])])


def make_budget(profile: Profile, window: int, tool_tokens: int, scale: float = 1.0) -> Budget:
    """The budget of a request: ``window`` and ``tool_tokens`` in tokens, the profile's reserve,
    target and trigger, and the calibration ``scale``."""
    return Budget(window=window, tools=tool_tokens, reserved=profile.max_output_tokens + profile.margin_tokens,
                  target=profile.target, trigger=profile.trigger, scale=scale)


def emergency_steps(view: list[Any], budget: Budget, attempt: int) -> list[StrategyConfig]:
    """Overflow recovery: mask every tool result but the last unit's, then truncate to half the
    current size (a quarter on the second attempt), or to the target if that is lower. Both steps
    run whatever the triggers say: the provider has just told us our estimate was wrong."""
    last = groups(view)[-1] if view else []
    keep = sum(1 for i in last if view[i].role == "tool")
    target = min(budget.target, (0.5 if attempt == 0 else 0.25) * budget.total(view) / budget.window)
    steps = [StrategyConfig(strategy="truncate", trigger=0, target=round(target, 4))]
    if "mask_observations" in registry.names():
        steps.insert(0, StrategyConfig(strategy="mask_observations", trigger=0, keep=keep, min_tokens=0))
    return steps


