"""The ReAct turn loop: build the view, call the model, run the tools, append, repeat; it yields typed
events (agent/events.py) and knows nothing of the CLI.

Ordering guarantees (DESIGN.md data flow): every record of a step is fsynced before the next model
request; tool results are appended in call order; a call a crash left without a result gets a synthetic
"interrupted" result when the session is opened again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxagent.agent.budgets import Breaker, session_limits
from ctxagent.agent.config import RunConfig
from ctxagent.agent.context import check_protected, compaction_of, largest_parts, record_of, room, with_pins
from ctxagent.agent.events import Compacted, Event, Finished, Replied, Requesting
from ctxagent.agent.model import Model, Reply
from ctxagent.agent.model_types import price_of
from ctxagent.agent.replies import empty_reply
from ctxagent.agent.sinks import MemorySink, Recorder, Sink, TranscriptSink
from ctxagent.agent.state import SessionState
from ctxagent.agent.text_calls import read_calls
from ctxagent.agent.tool_calls import CANCELLED, INTERRUPTED, Delegates, ToolCalls
from ctxagent.agent.turns import (
    NextRequest,
    emergency_steps,
    make_budget,
    same_prefix,
    summarizer_window,
    thrash_plan,
    usage_record,
    value_of,
    with_call_ids,
)
from ctxagent.dirs import own_dirs
from ctxagent.errors import ContextOverflowError, CtxagentError, LimitReached, ProviderContextError, ProviderError
from ctxagent.messages import Message, ToolCall
from ctxagent.profile import Path_, Profile, StrategyConfig
from ctxagent.sessions import records
from ctxagent.sessions.redact import RedactingStore
from ctxagent.sessions.session import Session, sessions_root
from ctxagent.sessions.transcript import TranscriptWarning
from ctxagent.strategies.base import Budget, Entry
from ctxagent.strategies.checkpoint import CheckpointStep
from ctxagent.strategies.settle import SettleStep
from ctxagent.tokens import count_message
from ctxagent.tools.builtin import kill_running
from ctxagent.tools.guard import guard
from ctxagent.tools.offload import settle
from ctxagent.tools.toolset import Toolset

if TYPE_CHECKING:
    from ctxagent.lessons.hooks import Learner

MAX_RECOVERIES = 2  # emergency compactions per turn after a provider "context too long"
EMPTY_REPLY_NUDGE = ("[ctxagent] Your last reply was empty. Reply now: answer the task from the tool results above, "
                     "quoting the exact value, or call a tool.")
"""Sent once after two empty replies in a row: Qwen2.5-Coder-1.5B often replies with nothing after a tool
result, and the same request gets nothing again."""
SUMMARIZER_SYSTEM = "You compress an agent's working transcript. Follow the instructions in the user message exactly."
CHECKPOINT_ON_STOP = CheckpointStep(trigger=0, target=0.01, llm=False, keep_turns=1)
"""The checkpoint a budget stop writes: the history before the last unit, deterministic (no LLM call)."""
SETTLE = SettleStep()  # first step of every build: the newest results, budgeted together (strategies/settle.py)


class Runner:
    """Runs turns of one session from its folded ``state`` within ``config``'s run limits and the session's;
    the caller holds the writer lock (not for a :meth:`peek`). Every record goes through :attr:`out` (ONE
    STATE); tools run behind the permission gate (tools/guard.py) and never write ctxagent's own folders nor
    the ``protected`` files. ``notices``: ``(source, text)`` warned when :meth:`run` starts; ``delegates``:
    makes the runner of ``delegate`` calls (None: not offered); ``learner``: lessons (None: off).
    """

    def __init__(self, session: Session, state: SessionState, profile: Profile, model: Model, toolset: Toolset,
                 config: RunConfig | None = None, *, sink: Sink | None = None,
                 summarizer_model: Callable[[], Model] | None = None, protected: Sequence[Path] = (),
                 notices: Sequence[tuple[str, str]] = (), delegates: Callable[[Runner], Delegates] | None = None,
                 learner: Learner | None = None):
        assert state.settings is not None, "a session state without header"
        config = config or RunConfig()
        self.session, self.state, self.profile, self.model = session, state, profile, model
        self.sink: Sink = sink or TranscriptSink(session)
        self.store = RedactingStore(session.store.root)  # the environment's secrets, read when it writes (a peek never)
        self.out = Recorder(state, self.sink, self.store, redact_always=profile.redact == "always")
        self._summarizer_model = summarizer_model
        self.notices = list(notices)
        self.breaker = Breaker(config.limits(profile), session_limits(profile.limits.session, state.settings.limits),
                               state, warn_at=profile.limits.warn_at, started=config.started)
        self.learner = learner
        self.stop = toolset.ctx.stop  # set: stop at the next step (shared with sub-agents and their tools)
        self.toolset = guard(toolset, profile.permissions, self.path, config.grants, readable=[session.store.root],
                             protected=[*own_dirs(), sessions_root(session.store_url), *protected])  # every call: gate
        self.delegator = delegates(self) if delegates is not None else None
        self.tools = ToolCalls(session, profile, self.toolset, self.out, self.stop, self.delegator)
        self.replies_at_start = state.replies  # this run's model calls = state.replies - this
        self.unlearned = False  # an answer came that learn() has not learned from yet
        self._ended = False  # the current run() wrote its end record
        self._close_open_calls()

    @property
    def path(self) -> Path_:
        assert self.state.settings is not None
        return self.state.settings.path

    @property
    def model_name(self) -> str:
        return self.out.model_name

    def _close_open_calls(self) -> None:
        """Give every call a crash left without a result a synthetic one; delete a killed tool's spool files."""
        if self.sink.writes_files:
            self.store.clean_spools()
        delegated = any(self.state.open_call(i).name == "delegate" for i in self.state.open_calls)
        if not (self.sink.writes_files and "delegate" in self.toolset.tools and delegated):
            self.tools.close_open_calls(INTERRUPTED)  # else run() resumes the sub-agents first
        for note in self.state.repair_notes() if self.sink.writes_files else []:  # PAIR repairs, said once
            warnings.warn(f"session {self.session.name}: {note.text}", TranscriptWarning, stacklevel=2)
            self.out.append(note)

    @property
    def output_tokens(self) -> int:
        """Tokens reserved for each reply (``--max-output-tokens``, the profile's, or sized to the window)."""
        assert self.state.settings is not None
        return self.profile.reply_tokens(self.state.settings.context_window, self.state.settings.max_output_tokens)

    def budget(self) -> Budget:
        assert self.state.settings is not None
        return make_budget(self.profile, self.state.settings.context_window, self.tools.tool_tokens, self.state.scale,
                           self.output_tokens)

    def spend(self) -> dict[str, Any]:
        """``{"run": usage, "session": usage}`` (:meth:`Spend.as_json` shape) of the spend so far."""
        return {"run": self.breaker.run_spend(self.state).as_json(),
                "session": self.breaker.session_spend(self.state).as_json()}

    def run(self, user_input: str | None = None, *, max_turns: int | None = None) -> Iterator[Event]:
        """Run until an answer or a bound; yields events, ends with :class:`Finished`.

        Raises the ``CtxagentError`` that ended the run (``LimitReached``, ``ProviderError``,
        ``ContextOverflowError``...) *after* writing an end record that names it.
        """
        limit = max_turns or self.profile.max_turns
        self._ended = False
        try:
            while self.notices:
                yield self.out.warn(*self.notices.pop(0))
            yield from self.tools.finish_open_calls()
            if self.learner is not None:  # the lessons block: chosen once at the start, forgotten ones dropped
                self.out.append(*self.learner.block(self.state.lessons, None if self.state.next_seq else user_input))
            if user_input is not None:  # refused before it is written: an end record says why
                self._check_fits(user_input)
                if self.state.next_seq == 0:
                    self.out.append(self.out.message({"role": "system", "content": self.profile.system_prompt}, 0))
                self.out.append(self.out.message({"role": "user", "content": user_input}, self.state.replies + 1))
            for _ in range(limit):
                reply = yield from self._step()
                if not reply.tool_calls:
                    self.unlearned = self.learner is not None and self.sink.writes_files  # learn() after it is shown
                    self._end("answered")
                    yield Finished("answered", reply.content or "", self.state.turn)
                    return
                yield from self.tools.run(reply)
            raise LimitReached(f"stopped after max_turns={limit} model calls; "
                               f"'ctxagent resume --session {self.session.name}' continues",
                               bound="max_turns")
        except KeyboardInterrupt:
            self._halt()
            self._end("interrupted", "Ctrl-C or a signal")
            raise
        except CtxagentError as err:
            self._end(err.status, str(err), **getattr(err, "fields", {}))
            yield Finished(err.status, None, self.state.turn, str(err))
            raise

    def _halt(self) -> None:
        """Stop everything this run started: sub-agents at their next step, every shell command's
        process group killed (a sub-agent's: the signal reached this thread only)."""
        self.stop.set()
        kill_running(self.stop)
        if self.delegator is not None:
            self.delegator.stop()

    def cancel(self) -> None:
        """After Ctrl-C cancelled a turn of an interactive session that goes on: the tool processes
        killed, every open call given :data:`CANCELLED` (PAIR), an ``interrupted`` end record written,
        the stop event cleared for the next :meth:`run`."""
        self._halt()
        self.tools.close_open_calls(CANCELLED)
        if not self._ended:  # Ctrl-C came while the CLI, not run(), was running: run() wrote no end record
            self._end("interrupted", "cancelled by the user (Ctrl-C)")
        self.stop.clear()

    @property
    def learn_asks_model(self) -> bool:
        """Whether :meth:`learn` would ask the model (the profile's ``lessons.llm`` where LLM calls may run)."""
        return self.unlearned and self.learner is not None and self.learner.config.llm and \
            self.summarizer() is not None

    def learn(self) -> Iterator[Event]:
        """Learn from the answers since the last call (lessons/hooks.py): called by the CLI once the
        answer is shown, never before (it may be a model call). Yields a :class:`Warned` on failure."""
        if not self.unlearned or self.learner is None:
            return
        self.unlearned = False
        warning = self.learner.finish(self.session.transcript.records(), self.state.lessons, self.summarizer())
        if warning:
            yield self.out.warn("lessons", warning)

    def pins(self, shown: bool = False) -> list[str]:
        """Every pinned fact, kept verbatim always: the profile's, the lessons block, the agent's (``pin``
        tool; ``shown``: as the view's pins message shows them, as of the last compaction that cut history:
        that message changes only when the prefix changes near the top anyway), then the file-activity
        ledger line as shown (a line that changed at every file read would restart the strategies'
        incremental folds each request)."""
        agents = self.state.shown_pins if shown else self.state.pins
        line = self.state.ledger.line(str(self.toolset.ctx.workdir), self.state.shown_files)
        return list(dict.fromkeys([*self.profile.pins, *self.state.lesson_pins, *agents, *([line] if line else [])]))

    def request(self) -> list[Entry]:
        """The view the next request sends as things stand: the base view with the pins message."""
        return with_pins(self.state.context.view, self.pins(shown=True), self.model_name)

    def last_request(self) -> list[Entry]:
        """The view of the last request sent (as the state remembers it)."""
        return with_pins(self.state.context.last_request(), self.pins(shown=True), self.model_name)

    def summarizer(self) -> Callable[[str, int], str] | None:
        """The LLM summarizer, only on paths where LLM strategies may run."""
        if self._summarizer_model is None or (self.path == "batch" and not self.profile.allow_llm_in_batch):
            return None
        return self._summarize

    def _summarize(self, text: str, max_tokens: int) -> str:
        assert self._summarizer_model is not None
        model = self._summarizer_model()
        reply = model.complete([{"role": "system", "content": SUMMARIZER_SYSTEM},
                                {"role": "user", "content": text}], [])
        if reply.usage is not None:
            self.out.append(usage_record(reply.usage, self.state.replies + 1, f"summarizer:{model.name}", 0))
        return reply.content or ""

    def peek(self, recorded: Sequence[records.CompactionRecord] | None = None) -> NextRequest:
        """The request :meth:`run` would send next, by the same code, with no write (a runner made with a
        :class:`MemorySink`) nor LLM call (a step that would call one shows its fallback); ``recorded``:
        the compaction records to show (None: the newest the state keeps)."""
        before = self.last_request()
        self._summarizer_model = None
        budget = self.budget()
        view = value_of(self._build(self.profile.pipeline(self.path), budget))
        compactions = [compaction_of(r) for r in self.sink.items if isinstance(r, records.CompactionRecord)] \
            if isinstance(self.sink, MemorySink) else []
        state = self.state
        return NextRequest(view, budget, compactions, list(state.recent_compactions if recorded is None else recorded),
                           self.path, self.profile, same_prefix(before, view), before, state.replies + 1,
                           state.lessons, dict(state.compactions))

    def _build(self, steps: list[Any], budget: Budget) -> Generator[Event, None, list[Entry]]:
        """Build the view with ``steps`` and record what it made; returns the request's view. The build
        checks BUDGET deciding with every pin shown; the request shows those or fewer, so it is no larger
        (and if the build compacts, the pins message is refreshed: a rebuild decides the same, IDENTITY)."""
        summarizer = self.summarizer()
        window = None if summarizer is None else summarizer_window(self.profile, budget.window)
        built = self.state.context.build([SETTLE, *steps], budget, turn=self.state.replies + 1, summarizer=summarizer,
                                         pins=self.pins(), summarizer_window=window)
        for warning in built.warnings:  # a summary failed and a fallback ran: said, never silent
            yield self.out.warn("compaction", warning)
        self.out.materialize(built.offloads)
        if built.compactions:
            self.out.append(*(record_of(c) for c in built.compactions))
            for comp in built.compactions:
                yield Compacted(comp)
            if self.learner is not None and self.sink.writes_files and any(  # lessons learned so far
                    c.strategy == "checkpoint" for c in built.compactions) and (
                    warning := self.learner.checkpoint(self.session.transcript.records())):
                yield self.out.warn("lessons", warning)
        return self.request()

    def _check_fits(self, user_input: str) -> None:
        """``ContextOverflowError``, before anything is written, for a user message that with the protected
        part is over the trigger: no strategy could shrink the session, no resume could run it."""
        message = {"role": "user", "content": user_input}
        system = [] if self.state.next_seq else [{"role": "system", "content": self.profile.system_prompt}]
        probe = [*self.state.context.view, *(Entry(m, count_message(m, self.model_name), -1, -1, 0)
                                               for m in (*system, message))]
        check_protected(with_pins(probe, self.pins(), self.model_name), self.budget())

    def _step(self) -> Generator[Event, None, Reply]:
        if self.stop.is_set():  # the parent of this sub-agent was stopped
            raise KeyboardInterrupt
        turn = self.state.replies + 1
        budget, escalation = yield from self._thrash_guard(self.budget())
        before = self.last_request()
        view = yield from self._build([*self.profile.pipeline(self.path), *escalation], budget)
        sent: list[list[Message]] = []
        nudged = False
        for attempt in range(MAX_RECOVERIES + 1):
            messages = [e.message for e in view]
            if messages in sent:
                raise ContextOverflowError("emergency compaction could not shrink the context any "
                                           "further; the identical request is not sent twice")
            sent.append(messages)
            yield from self._spend_check(view, budget)
            yield Requesting(turn, budget.total(view), budget.window, len(messages), same_prefix(before, view),
                             budget.reserved)
            try:
                reply: Reply = self.model.complete(messages, self.tools.tool_specs)
                if not reply.tool_calls and not (reply.content or "").strip():
                    raise ProviderError(f"model {self.model.name}: the reply has neither text nor tool calls")
                break
            except ProviderContextError as err:
                if attempt == MAX_RECOVERIES:
                    raise ContextOverflowError(
                        f"the provider still says the context is too long after {MAX_RECOVERIES} "
                        f"emergency compactions ({err}); we estimated {budget.total(view)} tokens "
                        f"for a {budget.window}-token window; largest parts: {largest_parts(view)}; to make room: "
                        f"{room(budget)}") from err
                before_tokens = sum(e.tokens for e in view)
                budget = replace(budget, scale=budget.scale * 1.25)  # this turn only: usage recalibrates
                view = yield from self._build(emergency_steps(view, budget, attempt), budget)
                if sum(e.tokens for e in view) >= before_tokens:
                    raise ContextOverflowError(
                        f"the provider says the context is too long ({err}) and emergency compaction cannot "
                        f"make it smaller than {budget.total(view)} tokens; largest parts: {largest_parts(view)}"
                    ) from err
            except ProviderError as err:  # twice nothing: asked once more, saying so (small local models do it)
                if nudged or attempt == MAX_RECOVERIES or not empty_reply(err):
                    raise
                nudged = True
                yield self.out.warn("empty reply", f"{err}; asking the model once more to answer or call a tool")
                self.out.append(self.out.message({"role": "user", "content": EMPTY_REPLY_NUDGE}, turn))
                view = yield from self._build([*self.profile.pipeline(self.path), *escalation], budget)
        reply = read_calls(reply, self.profile.text_tool_calls, self.tools.tool_specs)  # calls written as text
        reply = with_call_ids(reply, self.state.next_seq, self.state.call_ids)
        self._record_reply(reply, budget.estimate(view), turn)
        yield from self._spend_warnings()
        yield Replied(turn, reply)
        return reply

    def _thrash_guard(self, budget: Budget) -> Generator[Event, None, tuple[Budget, list[StrategyConfig]]]:
        """The budget and extra steps of this request under the thrash guard (turns.thrash_plan)."""
        budget, steps, warning = thrash_plan(self.profile, self.state.compaction_streak(), budget, self.session.name)
        if warning:
            yield self.out.warn("thrash guard", warning)
        return budget, steps

    def _spend_check(self, view: list[Entry], budget: Budget) -> Iterator[Event]:
        """Warn at 80% of a limit; before a request that would cross one, write a deterministic checkpoint
        (a breaker that trips must not spend) and raise ``LimitReached`` (agent/budgets.py)."""
        yield from self._spend_warnings()
        tokens, output = int(budget.estimate(view) * budget.scale + 0.5), self.output_tokens
        crossing = self.breaker.check(self.state, tokens, output, price_of(self.model, tokens, output))
        if crossing is not None:
            yield from self._build([CHECKPOINT_ON_STOP], budget)
            raise crossing.error(self.session.name)

    def _spend_warnings(self) -> Iterator[Event]:
        for text in self.breaker.due(self.state):  # at 80% of a limit, once per run
            yield self.out.warn("budget", text)

    def _record_reply(self, reply: Reply, estimate: int, turn: int) -> None:
        written = {} if reply.written is None else {"written": reply.written}  # calls read from the text
        items: list[Any] = [self.out.message(reply.message(), turn, **written)]
        if reply.usage is not None:
            items.append(usage_record(reply.usage, turn, self.model.name, estimate))
        self.out.append(*items)

    def pin(self, fact: str) -> None:
        """Pin ``fact`` for the rest of the session (a user's ``/pin``): recorded, shown at once."""
        self.out.append(records.PinRecord(turn=self.state.replies, fact=fact))

    def compact(self) -> Iterator[Event]:
        """Run the path's pipeline now, every step as if over its trigger (a user's ``/compact``);
        yields the compactions it recorded."""
        forced = {"trigger": 0, "every_turns": None, "min_turns": None}
        steps = [step.model_copy(update=forced) for step in self.profile.pipeline(self.path)]
        yield from self._build(steps, self.budget())

    def attach(self, text: str, name: str) -> str:
        """``text`` (piped into the run) as it goes into a user message: ``[name]`` then the text, offloaded
        like a tool output (a preview naming its handle) over the tool-result threshold."""
        content, record = settle(text, call=ToolCall(name, name, ""), tool_name=name, store=self.toolset.ctx.store,
                                 policy=self.toolset.policy, handle=self.state.new_handle(name))
        if record is not None:
            self.out.append(record)
        return f"[{name}]\n{content}"

    def _end(self, reason: str, detail: str = "", **fields: Any) -> None:
        self._ended = True
        self.out.append(records.EndRecord(reason=reason, turn=self.state.turn, detail=detail[:2000],
                                       wall_s=self.breaker.lap(), **fields))
