"""Which configurations run, on which workload: no management, ctxagent's offloading alone, every
ctxagent strategy alone, every bundled profile's pipelines (both paths), and the peers.

Sizes: the full run uses gpt-4o-mini's 128,000-token window (what litellm's model info says for the
bundled profiles' model; hard-coded here so the benchmark never imports litellm) and the profiles as
they are. ``quick`` scales the window to 32,000 tokens and the tool-result limit to 4,000 tokens, so
that 150 turns exercise the same compactions that 500 do at full size.

Workloads 7 and 8 (issue 9, :func:`sized_sessions`) always use a 32,000-token window (the profile's
``context_window`` set to it, as a user would; everything else as bundled), 500 turns (150 quick).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctxagent
from benchmarks import peers
from benchmarks.harness import (
    MODEL,
    CtxagentRun,
    Manager,
    PlainManager,
    Prepared,
    RunResult,
    View,
    drive,
    offload_all,
    prepare,
)
from benchmarks.workloads import FITS, SIZED, coding_session, repeated_calls, sized_session
from ctxagent.profile import Profile, StrategyConfig, bundled_names, load_profile
from ctxagent.tokens import PER_REQUEST

FULL_WINDOW = 128_000  # gpt-4o-mini, litellm model info (FIELD-NOTES.md)
QUICK_WINDOW = 32_000
QUICK_TOOL_LIMIT = 4_000
SIZED_WINDOW = 32_000  # workloads 7 and 8 (issue 9), full and quick alike
VIEW_ONLY = ("mask_observations", "prune", "dedupe", "role_selective")  # recomputed every request: trigger 0
EVERY_TURNS = {"distill": 5}  # distill's docstring: "Run it with every_turns: 5"


@dataclass
class Setup:
    """One profile at the benchmark's size: window, budget, tool-schema tokens, offload policy."""

    label: str
    profile: Profile
    window: int
    tool_tokens: int
    budget: Any
    policy: Any
    problem: str | None = None

    @property
    def reserved(self) -> int:
        return int(self.budget.reserved)


def profiles() -> list[tuple[str, Profile, str | None]]:
    """Bundled profiles, then the upcoming ``*.yaml.new`` versions; with the profile-load check's
    complaint when a pipeline does not pass it."""
    folder = Path(ctxagent.__file__).parent / "profiles"
    found: list[tuple[str, Profile, str | None]] = []
    specs = [(name, name) for name in bundled_names()]
    specs += [(p.name.removesuffix(".yaml.new") + " (.new)", str(p)) for p in sorted(folder.glob("*.yaml.new"))]
    for label, spec in specs:
        profile = load_profile(spec)
        found.append((label, profile, _check(profile, spec)))
    return found


def _check(profile: Profile, source: str) -> str | None:
    try:
        from ctxagent.strategies.checks import check_pipelines
    except ImportError:
        return None
    try:
        check_pipelines(profile, source)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def setup(label: str, profile: Profile, quick: bool, root: Path, problem: str | None = None,
          window: int | None = None) -> Setup:
    """``profile`` at the benchmark's size: the quick sizes, or only ``window`` (tokens) when given."""
    from ctxagent.agent.runner import make_budget
    from ctxagent.agent.setup import offload_policy
    from ctxagent.sessions.store import OutputStore
    from ctxagent.tokens import count_tools
    from ctxagent.tools.base import ToolContext
    from ctxagent.tools.toolset import make_toolset

    update: dict[str, Any] = {"context_window": QUICK_WINDOW if quick else profile.context_window or FULL_WINDOW}
    if window is not None:
        update = {"context_window": window}
    elif quick:
        update["tool_result_limit"] = min(profile.tool_result_limit, QUICK_TOOL_LIMIT)
    profile = profile.model_copy(update=update)
    window = int(profile.context_window or FULL_WINDOW)
    policy = offload_policy(profile, MODEL)
    toolset = make_toolset(profile.tools, ToolContext(OutputStore(root / "unused"), root), policy)
    tool_tokens = count_tools(toolset.specs(), MODEL)
    return Setup(label, profile, window, tool_tokens, make_budget(profile, window, tool_tokens), policy, problem)


@dataclass
class Config:
    name: str
    group: str  # baseline | strategy | profile | peer
    make: Any  # (prepared, setups cache, root) -> Manager


def steps_of(name: str) -> list[StrategyConfig]:
    extra: dict[str, Any] = {}
    if name in VIEW_ONLY:
        extra["trigger"] = 0
    if name in EVERY_TURNS:
        extra["every_turns"] = EVERY_TURNS[name]
    return [StrategyConfig(strategy=name, **extra)]


class Runner:
    """Runs configurations over one trace, caching the preparation and offloading per policy."""

    def __init__(self, prep: Prepared, quick: bool, root: Path):
        self.prep = prep
        self.quick = quick
        self.root = root
        self.offloads: dict[tuple[Any, ...], Any] = {}
        self.setups: dict[str, Setup] = {}
        self.results: list[RunResult] = []
        self.settle_seconds: dict[str, float] = {}
        self.capture: set[str] = set()  # configurations whose probe views are kept (--live)
        self.captured: dict[str, Any] = {}
        self._n = 0

    def offloaded(self, s: Setup) -> Any:
        key = (s.policy.limit_tokens, s.policy.head_lines, s.policy.tail_lines, s.policy.max_chars)
        if key not in self.offloads:
            self._n += 1
            self.offloads[key] = offload_all(self.prep, s.policy, self.root / f"settle{self._n}")
            self.settle_seconds[s.label] = self.offloads[key].seconds
        return self.offloads[key]

    def fresh(self, name: str) -> Path:
        self._n += 1
        return self.root / f"run{self._n}-{re.sub(r'[^A-Za-z0-9]+', '-', name)[:40]}"

    def run(self, manager: Manager, group: str, s: Setup, on_view: Any = None, probes: bool = True) -> RunResult:
        result = drive(self.prep, manager, group=group, window=s.window, tool_tokens=s.tool_tokens,
                       reserved=s.reserved, probes=probes, on_view=on_view)
        self.results.append(result)
        return result

    def ctxagent_run(self, name: str, s: Setup, path: str, steps: list[StrategyConfig] | None = None) -> CtxagentRun:
        """The real runner with ``s``'s profile on ``path`` (``steps``: the pipeline on both paths
        instead of the profile's), in a fresh session of its own."""
        profile = s.profile
        if steps is not None:
            profile = profile.model_copy(update={"pipelines": {"interactive": list(steps), "batch": list(steps)}})
        return CtxagentRun(name, self.prep, profile, path=path, window=s.window, root=self.fresh(name))

    def ctxagent(self, name: str, group: str, s: Setup, path: str, steps: list[StrategyConfig] | None = None,
                 on_view: Any = None, probes: bool = True) -> RunResult:
        run = self.ctxagent_run(name, s, path, steps)
        if name in self.capture and on_view is None:
            from benchmarks.live import capture_hook

            self.captured[name], on_view = capture_hook(run.store, run.policy, self.prep.trace.probes())
        result = run.drive(group=group, probes=probes, on_view=on_view)
        self.results.append(result)
        if s.problem:
            result.extra["profile_check"] = s.problem
        return result


LIVE_CONFIGS = ("profile default (interactive)", "profile default (batch)", "profile batch (both paths)",
                "profile minimal (both paths)")


def long_session(quick: bool, peers_on: bool = True, only: str | None = None, log: Any = print,
                 capture: bool = False, turns: int | None = None) -> tuple[Runner, dict[str, Setup]]:
    """Workloads 1 and 5: the long coding session with planted facts, every configuration (``turns``:
    500, 150 quick, unless given)."""
    turns = turns or (150 if quick else 500)
    root = Path(tempfile.mkdtemp(prefix="ctxagent-bench-"))
    base_profile = load_profile("default")
    prep = prepare(coding_session(turns), base_profile.system_prompt)
    runner = Runner(prep, quick, root)
    if capture:
        runner.capture = set(LIVE_CONFIGS)
    base = setup("default", base_profile, quick, root)
    setups = {label: setup(label, profile, quick, root, problem) for label, profile, problem in profiles()}

    def wanted(name: str) -> bool:
        return only is None or re.search(only, name) is not None

    def step(name: str) -> bool:
        if not wanted(name):
            return False
        log(f"  {name}")
        return True

    started = time.perf_counter()
    if step("no management"):
        runner.run(PlainManager("no management", prep.raw), "baseline", base)
    if step("offload only"):
        off = runner.offloaded(base)
        runner.run(PlainManager("offload only (no strategy)", off.messages, off.outputs), "baseline", base)
    from ctxagent.strategies import registry  # noqa: F401 (declares every strategy)
    from ctxagent.strategies.step import known

    for name in known():
        label = f"{name} alone"
        if step(label):
            runner.ctxagent(label, "strategy", base, "interactive", steps_of(name))
    run_profiles(runner, setups, step)
    if peers_on:
        run_peers(runner, base, wanted, step)
    runner.settle_seconds["_total_run_s"] = time.perf_counter() - started
    return runner, {"default": base, **setups}


def run_profiles(runner: Runner, setups: dict[str, Setup], step: Any) -> None:
    """Every bundled profile's pipelines, both paths (one row when they are the same)."""
    for label, s in setups.items():
        paths = s.profile.pipelines
        inter, batch = paths.get("interactive", []), paths.get("batch", [])
        same = [x.model_dump() for x in inter] == [x.model_dump() for x in batch]
        for path in ("interactive", "batch"):
            if same and path == "batch":
                continue
            name = f"profile {label} ({'both paths' if same else path})"
            if step(name):  # the runner gives LLM strategies the summarizer where the path allows it
                runner.ctxagent(name, "profile", s, path)


def sized_sessions(quick: bool, peers_on: bool = True, only: str | None = None,
                   log: Any = print, turns: int | None = None) -> list[tuple[str, Runner, Setup]]:
    """Workloads 7 and 8 (issue 9): every output ~1,500 (shell) or ~2,300 (logs) tokens, facts planted to
    the end, in a 32,000-token window; no management, every bundled profile (both paths), the peers
    (``turns``: 500, 150 quick, unless given). Then :data:`~benchmarks.workloads.FITS` (issue 34): 20 turns
    that never come near the window, where managing should cost nothing."""
    turns = turns or (150 if quick else 500)
    out = []
    for name in [*SIZED, *FITS]:
        log(f" {name}")
        root = Path(tempfile.mkdtemp(prefix=f"ctxagent-bench-{name}-"))
        base_profile = load_profile("default")
        prep = prepare(sized_session(name, FITS[name][2] if name in FITS else turns), base_profile.system_prompt)
        runner = Runner(prep, quick, root)
        base = setup("default", base_profile, quick, root, window=SIZED_WINDOW)
        setups = {label: setup(label, profile, quick, root, problem, window=SIZED_WINDOW)
                  for label, profile, problem in profiles()}

        def wanted(config: str) -> bool:
            return only is None or config == "no management" or re.search(only, config) is not None

        def step(config: str) -> bool:
            if wanted(config):
                log(f"  {config}")
            return wanted(config)

        started = time.perf_counter()
        if step("no management"):
            runner.run(PlainManager("no management", prep.raw), "baseline", base)
        run_profiles(runner, setups, step)
        if peers_on:
            run_peers(runner, base, wanted, step)
        runner.settle_seconds["_total_run_s"] = time.perf_counter() - started
        out.append((name, runner, base))
    return out


def run_peers(runner: Runner, s: Setup, wanted: Any, step: Any) -> None:
    have = peers.available()
    raw = runner.prep.raw
    budget_tokens = s.window - s.tool_tokens - s.reserved - PER_REQUEST
    half = int(s.window * s.profile.target) - s.tool_tokens - s.reserved - PER_REQUEST
    if have["langchain-core"]:
        for label, max_tokens, start_on in (("LC trim_messages (start_on=human, max=budget)", budget_tokens, "human"),
                                            ("LC trim_messages (start_on=human, max=50%)", half, "human"),
                                            ("LC trim_messages (no start_on, max=50%)", half, None)):
            if step(label):
                runner.run(peers.TrimMessages(label, raw, max_tokens=max_tokens, start_on=start_on), "peer", s)
    limit = int(s.policy.limit_tokens)  # ctxagent's offload threshold (tokens): the peers' equal offloading
    if have["langchain"]:
        trigger = int(s.window * 100_000 / 128_000)
        label = f"LC context editing (ClearToolUses {trigger // 1000}K, keep 3)"
        if step(label):
            runner.run(peers.ClearToolUses(label, raw, window=s.window, trigger=trigger,
                                              max_output=s.profile.reply_tokens(s.window)), "peer", s)
        label = f"LC context editing + offload at {limit // 1000}K (ClearToolUses {trigger // 1000}K, keep 3)"
        if step(label):
            off = runner.offloaded(s)
            runner.run(peers.ClearToolUses(label, off.messages, window=s.window, trigger=trigger,
                                           max_output=s.profile.reply_tokens(s.window), outputs=off.outputs), "peer", s)
    if have["deepagents"]:
        for label, summarize, evict in (("deepagents (eviction + summarization)", True, 20_000),
                                        ("deepagents (eviction only)", False, 20_000),
                                        (f"deepagents (eviction at {limit // 1000}K + summarization)", True, limit),
                                        (f"deepagents (eviction at {limit // 1000}K only)", False, limit)):
            if "at" in label.split()[1] and limit == 20_000:
                continue  # the same as the defaults
            if step(label):
                reply = s.profile.reply_tokens(s.window)
                runner.run(peers.DeepAgents(label, raw, window=s.window, root=runner.fresh(label), evict_tokens=evict,
                                            summarize=summarize, max_output=reply), "peer", s)


# --- workload 4 -----------------------------------------------------------------------------------

_SAME = re.compile(r"\[same result as turn (\d+), handle (@[A-Za-z0-9_.-]+)\]")
_FLAG = re.compile(r"\[this call was already made at turn (\d+); its result is handle (@[A-Za-z0-9_.-]+)\]")


class DedupeCheck:
    """Checks every view for wrong dedupes: a reference whose stored result differs from the result it
    replaced, or a reference standing for a result that changed (same call, different output)."""

    def __init__(self, prep: Prepared, manager: Any, changed: set[str]):
        self.prep = prep
        self.manager = manager
        self.changed = changed
        self.references: set[str] = set()
        self.flags: set[str] = set()
        self.wrong: list[str] = []
        self.changed_deduped: set[str] = set()
        self.unresolved: set[str] = set()

    def __call__(self, turn: int, view: View) -> None:
        for message in view.messages:
            if message.get("role") != "tool":
                continue
            content = str(message.get("content") or "")
            cid = str(message.get("tool_call_id"))
            if _FLAG.search(content):
                self.flags.add(cid)
            match = _SAME.search(content)
            if not match:
                continue
            self.references.add(cid)
            if cid in self.changed:
                self.changed_deduped.add(cid)
            original = str(self.prep.raw[cid][0]["content"])
            path = self.manager.store.path_of(match.group(2))
            if not path.is_file():
                self.unresolved.add(cid)
                continue
            stored = path.read_text(encoding="utf-8", errors="replace")
            if " ".join(stored.split()) != " ".join(original.split()) and cid not in self.wrong:
                self.wrong.append(cid)


def repeated(quick: bool, log: Any = print) -> dict[str, Any]:
    """Workload 4: what dedupe saves, and that it never stands in for a changed result."""
    turns = 90 if quick else 150
    root = Path(tempfile.mkdtemp(prefix="ctxagent-bench-dedupe-"))
    base_profile = load_profile("default")
    trace = repeated_calls(turns)
    prep = prepare(trace, base_profile.system_prompt)
    runner = Runner(prep, quick, root)
    base = setup("default", base_profile, quick, root)
    repeats = len(trace.notes["changed"]) + len(trace.notes["same"])  # type: ignore[arg-type]
    out: dict[str, Any] = {"turns": turns, "calls_repeating_earlier": repeats,
                           "repeats_with_changed_result": len(trace.notes["changed"]),
                           "repeats_with_same_result": len(trace.notes["same"]), "loop_turns": trace.notes["loop"],
                           "configs": []}
    changed = set(trace.notes["changed"])  # type: ignore[arg-type]
    log("  offload only")
    off = runner.offloaded(base)
    reference = runner.run(PlainManager("offload only (no strategy)", off.messages, off.outputs), "baseline", base,
                           probes=False)
    configs: list[tuple[str, Setup, list[StrategyConfig] | None]] = [("dedupe alone", base, steps_of("dedupe"))]
    for label, profile, problem in profiles():
        if any(x.strategy == "dedupe" for x in profile.pipeline("batch")):
            configs.append((f"profile {label} (batch)", setup(label, profile, quick, root, problem), None))
    for name, s, steps in configs:
        log(f"  {name}")
        run = runner.ctxagent_run(name, s, "batch", steps)
        check = DedupeCheck(prep, run, changed)
        result = run.drive(group="strategy", probes=False, on_view=check)
        runner.results.append(result)
        out["configs"].append({
            "name": name,
            "total_input_tokens": result.total(),
            "offload_only_tokens": reference.total(result.turns),
            "tokens_saved": reference.total(result.turns) - result.total(),
            "saved_pct": 100.0 * (1 - result.total() / reference.total(result.turns)) if result.turns else 0.0,
            "results_replaced_by_reference": len(check.references),
            "repeated_calls_flagged": len(check.flags),
            "wrong_references": len(check.wrong),
            "changed_results_deduped": len(check.changed_deduped),
            "unresolved_handles": len(check.unresolved),
            "pair_violation_requests": result.pair_violation_requests,
            "stopped_at": result.stopped_at,
            "error": result.error,
            "overhead_ms_p50": sorted(result.overhead_ms)[len(result.overhead_ms) // 2] if result.overhead_ms else 0,
        })
    shutil.rmtree(root, ignore_errors=True)
    return out
