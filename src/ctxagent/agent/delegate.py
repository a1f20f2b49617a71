"""Sub-agents: the ``delegate`` tool runs a child agent as a session of its own, ``<parent>/<child>``.

Sources: seed "003" (token budgets for messages between agents, compression before transmission,
budget headers) and the pointer paper's meta-harness (pass pointers, not values, between steps).
Sessions, contracts, budgets, concurrency and failures: docs/agents.md, "Sub-agents". A child opens
with its parent's permission rules and grants (``GuardedToolset.inherited``, tools/guard.py) and never
prompts; its result over ``delegate.result_max_tokens`` is offloaded (tools/offload.py) under the
call's handle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ctxagent.agent.budgets import UNITS, Spend, shown
from ctxagent.agent.runner import Runner
from ctxagent.errors import CtxagentError
from ctxagent.messages import ToolCall
from ctxagent.profile_schema import DelegateConfig
from ctxagent.sessions import records
from ctxagent.sessions.outcome import Usage
from ctxagent.sessions.session import Session
from ctxagent.tokens import count_text
from ctxagent.tools.arguments import parse_arguments
from ctxagent.tools.base import ERROR_PREFIX, Stop, ToolError
from ctxagent.tools.offload import envelope_overhead, settle
from ctxagent.tools.permissions import Grants
from ctxagent.tools.toolset import ToolOutcome

PARENT_KEEPS = 0.9  # of what is left, the most all children together may get: the parent must still answer
MIN_CHILD = {"max_input_tokens": 1500}  # a child's budget below this could not even send its first request
Arguments = dict[str, Any] | ToolError  # a call's, as the permission gate parsed them (Verdict.arguments)
LEFT = "\x00left\x00"  # where a message to the parent says its remaining budget, filled in when it is collected
Opener = Callable[[Session, str | None, dict[str, float], Grants, Stop], Runner]
"""``opener(child_session, profile_spec, run_limits, grants, stop)``: the child's runner, opened with
``grants`` and sharing the parent's ``stop`` event (the caller holds its lock)."""


@dataclass
class _Child:
    """One delegate call being run: its call, handle, session, assignment, grants and outcome."""

    call: ToolCall
    handle: str
    session: Session
    grants: Grants = field(default_factory=Grants)  # the parent's (GuardedToolset.inherited)
    task: str = ""
    limits: dict[str, float] = field(default_factory=dict)
    outcome: ToolOutcome | None = None
    spend: Spend = field(default_factory=Spend)
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)  # set when _run has ended


class Delegator:
    """Runs the delegate calls of ``parent`` (a runner), opening children with ``opener``."""

    def __init__(self, parent: Runner, opener: Opener, config: DelegateConfig):
        self.parent, self.opener, self.config = parent, opener, config
        self._slots = threading.BoundedSemaphore(config.max_concurrent)
        self._running: list[_Child] = []

    def start(self, calls: Sequence[tuple[ToolCall, str, Arguments]]) -> dict[str, Callable[[], ToolOutcome]]:
        """Start the delegate calls the permission gate allowed (``(call, handle, arguments)``, the arguments
        as the gate parsed them: ``Verdict.arguments``); returns, by call id, a function that waits for the
        child's outcome (call them in call order, from the parent's thread)."""
        waits: dict[str, Callable[[], ToolOutcome]] = {}
        carved: dict[str, float] = {}
        for call, handle, arguments in calls:
            child = self._prepare(call, handle, arguments, carved)
            if child.outcome is None:
                child.thread = threading.Thread(target=self._run, args=(child,), daemon=True,
                                                name=f"ctxagent-{child.session.name}")
                self._running.append(child)
                child.thread.start()
            waits[call.id] = partial(self._collect, child)
        return waits

    def resume(self, call: ToolCall, handle: str) -> ToolOutcome:
        """The outcome of a delegate call left open by a parent that was killed: its child resumed
        (or its answer read when it had finished)."""
        try:
            arguments: Arguments = parse_arguments(call.name, call.arguments)
        except ToolError as err:
            arguments = err
        child = self._prepare(call, handle, arguments, {}, resuming=True)
        if child.outcome is None:
            self._run(child)
        return self._collect(child)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Wait (up to ``timeout_s`` in all) for running children to stop after the parent's stop
        event was set: each writes its end record at its next step."""
        deadline = time.monotonic() + timeout_s
        for child in list(self._running):  # never Thread.join here: on Python 3.11 a join interrupted
            child.done.wait(max(0.0, deadline - time.monotonic()))  # by a signal marks the thread ended

    def _prepare(self, call: ToolCall, handle: str, arguments: Arguments, carved: dict[str, float], *,
                 resuming: bool = False) -> _Child:
        """A child for ``call``, with its outcome already set when the call is refused."""
        child = _Child(call, handle, self.parent.session.child(handle.lstrip("@").replace(".", "-")),
                       grants=self.parent.toolset.inherited())  # taken on the parent's thread, as things stand
        refusal = self._refusal(child, arguments, carved, resuming)
        if refusal is not None:
            child.outcome = ToolOutcome(ERROR_PREFIX + f"delegate refused: {refusal}", True)
        return child

    def _refusal(self, child: _Child, arguments: Arguments, carved: dict[str, float], resuming: bool) -> str | None:
        """Why the call cannot start (bad arguments, contract, budget), or None; fills in the child."""
        if isinstance(arguments, ToolError):
            return str(arguments)
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return "give the sub-agent a 'task' (a non-empty string)"
        size = count_text(task, self.parent.model_name)
        if size > self.config.assignment_max_tokens:
            return (f"the assignment is {size:,} tokens, over the contract of {self.config.assignment_max_tokens:,} "
                    "(delegate.assignment_max_tokens); shorten it and pass large inputs as handles (@abc), "
                    "which the sub-agent can read")
        child.task = task.strip()
        for key in ("max_cost_usd", "max_input_tokens"):
            value = arguments.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                return f"{key} must be a number above 0, not {value!r}"
        if resuming and child.session.exists():
            return None  # the child keeps the limits it was given: its own header has them
        limits, short = self._carve(arguments, carved)
        child.limits = limits
        return short

    def _carve(self, arguments: dict[str, Any], carved: dict[str, float]) -> tuple[dict[str, float], str | None]:
        """The child's session limits carved out of the parent's remaining budget, and why none is left."""
        left = self.parent.breaker.left(self.parent.state)
        limits: dict[str, float] = {}
        for key in UNITS:
            asked = arguments.get(key)
            room = left.get(key)
            if room is not None:
                room = (room - carved.get(key, 0.0)) * (1 if key == "max_wall_s" else PARENT_KEEPS)
                share = room if key == "max_wall_s" else room * self.config.budget_share
                value = min(float(asked), room) if isinstance(asked, int | float) and asked > 0 else share
                if value < MIN_CHILD.get(key, 0) or value <= 0:
                    return {}, (f"too little of your budget is left to start a sub-agent ({key}: "
                                f"{shown(key, left[key])} left, {shown(key, value)} for it); do the task yourself")
            elif isinstance(asked, int | float) and asked > 0:
                value = float(asked)
            else:
                continue
            limits[key] = int(value) if key in ("max_input_tokens", "max_output_tokens_total") else value
            if key != "max_wall_s":
                carved[key] = carved.get(key, 0.0) + limits[key]
        return limits, None

    def _collect(self, child: _Child) -> ToolOutcome:
        """Wait for ``child``, record in the parent what it spent since last recorded (an earlier run, a
        resume), and return its outcome with the parent's budget left now."""
        if child.thread is not None:
            child.done.wait()  # interruptible by Ctrl-C without harm (see stop)
            self._running.remove(child)
        model = f"agent:{child.session.name}"
        s = child.spend.minus(Spend.of(self.parent.state.agents.get(model, Usage()), 0.0))
        if s.calls > 0 or s.prompt_tokens > 0:
            self.parent.out.append(records.UsageRecord(
                turn=self.parent.state.replies, model=model, prompt_tokens=s.prompt_tokens, calls=s.calls,
                completion_tokens=s.completion_tokens, estimated_prompt_tokens=0, cached_tokens=s.cached_tokens,
                cost_usd=s.cost_usd if s.priced else None))
        assert child.outcome is not None
        left = "your budget left: " + _left(self.parent)
        return replace(child.outcome, content=child.outcome.content.replace(LEFT, left, 1))

    def _run(self, child: _Child) -> None:
        """Run ``child`` to its answer (in its thread, or the parent's on resume); set its outcome (an error
        outcome on any failure)."""
        with self._slots:
            runner: Runner | None = None
            try:
                with child.session.writer():
                    runner = self.opener(child.session, self.config.profile,  # never the model's choice
                                         child.limits, child.grants, self.parent.stop)
                    answer = self._answer(child, runner)
                child.outcome = self._result(child, answer, runner)
            except CtxagentError as err:
                child.outcome = self._failure(child, err.status, str(err))
            except KeyboardInterrupt:
                child.outcome = self._failure(child, "interrupted", "the run was stopped")
            except Exception as err:  # a bug in a child must not take the parent down
                child.outcome = self._failure(child, "error", f"{type(err).__name__}: {err}")
            finally:
                if runner is not None:  # all it spent, every run of it: _collect records what is new
                    child.spend = Spend.of(runner.state.usage, runner.state.wall_s)
                child.done.set()

    def _answer(self, child: _Child, runner: Runner) -> str:
        """The child's answer: read when it had already answered, else run for it."""
        if runner.state.users and runner.state.needs_input():  # answered before the parent was killed
            return str(runner.state.context.view[-1].message.get("content") or "")
        message = None if runner.state.users else self._assignment(child, runner)
        answer = ""
        for event in runner.run(message, max_turns=self.config.max_turns):
            answer = getattr(event, "answer", None) or answer
        return answer

    def _assignment(self, child: _Child, runner: Runner) -> str:
        """The child's first message: the budget header, then the task."""
        size = count_text(child.task, self.parent.model_name)
        return (f"[ctxagent assignment from {self.parent.session.name}: {size:,} tokens (contract "
                f"{self.config.assignment_max_tokens:,}); your budget: {_left(runner)}; an answer over "
                f"{self.config.result_max_tokens:,} tokens reaches it as a preview and a handle, so put the "
                f"essentials first; handles (@abc) in the task are readable with read_output]\n\n{child.task}")

    def _result(self, child: _Child, answer: str, runner: Runner) -> ToolOutcome:
        """The parent's tool result: the budget header, then the answer inline or offloaded (over the contract)."""
        size = count_text(answer, self.parent.model_name)
        policy = self.parent.toolset.policy  # never over the tool-result limit, whatever the contract says
        limit = min(self.config.result_max_tokens + envelope_overhead(child.call.id, policy.model), policy.limit_tokens)
        policy = replace(policy, limit_tokens=limit)
        content, record = settle(answer, call=child.call, tool_name="delegate", store=self.parent.toolset.ctx.store,
                                 policy=policy, handle=child.handle)
        spent = runner.state.usage
        stored = f", stored as {child.handle} (over the contract of {self.config.result_max_tokens:,})" \
            if record is not None else ""
        header = (f"[ctxagent result of sub-agent {child.session.name}: {size:,} tokens{stored}; it spent "
                  f"{spent.prompt_tokens + spent.completion_tokens:,} tokens in {spent.calls} calls, "
                  f"{shown('max_cost_usd', spent.cost_usd)}; {LEFT}]")
        return ToolOutcome(f"{header}\n{content}", False, record)

    def _failure(self, child: _Child, status: str, detail: str) -> ToolOutcome:
        detail = detail.split("; 'ctxagent resume", 1)[0]  # a command for the user, not the model
        return ToolOutcome(f"{ERROR_PREFIX}sub-agent {child.session.name} stopped ({status}): {detail[:600]}; what "
                           f"it did is kept in its session {child.session.name}; {LEFT}", True)


def _left(runner: Runner) -> str:
    """What ``runner`` has left of each limit ("no limit" when none is set)."""
    return ", ".join(f"{k} {shown(k, v)}" for k, v in runner.breaker.left(runner.state).items()) or "no limit"
