"""Profiles: bundled ones load; a bad one names the file, the line and the key."""

from __future__ import annotations

import pytest

from ctxagent.errors import ProfileError
from ctxagent.profile import bundled_names, load_profile, parse_profile


@pytest.mark.parametrize("name", bundled_names())
def test_bundled_profiles_validate(name):
    profile = load_profile(name)
    assert profile.target < profile.trigger
    assert profile.pipeline("batch")


@pytest.mark.parametrize("name", bundled_names())
def test_a_bundled_profile_reads_the_same_through_libyaml_as_through_pyyaml(name):
    """Bundled profiles are parsed by libyaml's loader when PyYAML has it (a run's start is ~5 ms
    faster); the data must be what PyYAML's own safe loader makes of them."""
    import yaml

    from ctxagent.profile import BUNDLED_LOADER, bundled_text

    text = bundled_text(name)
    assert yaml.load(text, Loader=BUNDLED_LOADER) == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("model: x\npreview:\n  head_lines: -3\n", 3, "preview.head_lines"),
        ("model: x\npipelines:\n  batch:\n    - strategy: truncate\n      trigger: 7\n", 5,
         "pipelines.batch.0.trigger"),
        ("model: x\n\nunknown_key: 1\n", 3, "unknown_key"),
        ("max_turns: many\n", 1, "max_turns"),
    ],
)
def test_bad_key_names_file_line_and_key(text, line, key):
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="my.yaml")
    err = info.value
    assert (err.path, err.line, err.key) == ("my.yaml", line, key)
    assert str(err).startswith(f"my.yaml:{line} (key '{key}')")


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("model: x\ntools: [shell\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"p\.yaml:3: invalid YAML"):
        load_profile(str(path))


def test_target_must_be_below_trigger():
    with pytest.raises(ProfileError, match="target"):
        parse_profile("target: 0.9\ntrigger: 0.8\n", source="p.yaml")


def test_missing_profile_lists_bundled_ones():
    with pytest.raises(ProfileError, match=r"bundled: .*default"):
        load_profile("/no/such/profile.yaml")


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ("pipelines:\n  batch:\n    - strategy: summarize\n", 3, "pipelines.batch.0.strategy", "calls an LLM"),
        ("pipelines:\n  batch:\n    - strategy: nope\n", 3, "pipelines.batch.0.strategy", "unknown strategy"),
        ("pipelines:\n  batch:\n    - strategy: truncate\n    - strategy: mask_observations\n      kep: 3\n",
         5, "pipelines.batch.1.kep", "no parameter 'kep'"),
        ("pipelines:\n  interactive:\n    - strategy: summarize\n      trigger: 0.7\n      keep_turns: 0\n",
         5, "pipelines.interactive.0.keep_turns", "turn in flight"),
        ("pipelines:\n  interactive:\n    - strategy: role_selective\n      llm: 1\n",
         4, "pipelines.interactive.0.llm", "parameter 'llm' of 'role_selective': input should be a valid boolean"),
        ("pipelines:\n  interactive:\n    - strategy: truncate\n      target_scale: 2\n",
         4, "pipelines.interactive.0.target_scale", "it accepts: keep_user_tokens, target"),
    ],
)
def test_pipeline_checks_name_line_and_key(text, line, key, words):
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="p.yaml")
    assert (info.value.line, info.value.key) == (line, key)
    assert words in str(info.value)


def test_batch_llm_allowed_when_the_profile_says_so():
    profile = parse_profile("allow_llm_in_batch: true\npipelines:\n  batch:\n    - strategy: summarize\n",
                            source="p.yaml")
    assert profile.pipeline("batch")[0].strategy == "summarize"
