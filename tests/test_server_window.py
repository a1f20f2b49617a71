"""The context window from the model's server (agent/server_window.py): llama.cpp, vLLM, Ollama,
LM Studio, as each answers its own endpoint, played by the fake server's ``info`` routes."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from ctxagent.agent.server_window import describe_missing, server_root, server_window
from ctxagent.testing import FakeOpenAI

LLAMA_PROPS = {"default_generation_settings": {"n_ctx": 4096, "n_predict": -1}, "total_slots": 1}
LLAMA_MODELS = {"object": "list", "data": [{"id": "qwen2.5-coder-1.5b", "object": "model", "owned_by": "llamacpp",
                                            "meta": {"n_ctx": 8192, "n_ctx_train": 32768}}]}
VLLM_MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "owned_by": "vllm",
                                           "max_model_len": 32768}]}
OLLAMA_SHOW = {"parameters": "temperature 0.7\nnum_ctx                        8192\nstop \"<|im_end|>\"",
               "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}
OLLAMA_TRAINED_ONLY = {"parameters": "temperature 0.7", "model_info": {"qwen2.context_length": 32768}}
OLLAMA_PS = {"models": [{"name": "qwen2.5:latest", "model": "qwen2.5:latest", "context_length": 4096}]}
LM_STUDIO = {"object": "list", "data": [{"id": "qwen2.5-7b-instruct", "state": "loaded", "max_context_length": 32768,
                                         "loaded_context_length": 16384}]}


def window(info, model, path="/v1"):
    with FakeOpenAI(info=info) as server:
        base = server.base_url.removesuffix("/v1") + path
        found, asked = server_window(base, model)
        return found, asked, list(server.info_requests)


def test_llama_cpp_props_gives_one_slots_window_in_one_request():
    found, _, requests = window({"/props": LLAMA_PROPS, "/v1/models": LLAMA_MODELS}, "openai/qwen")
    assert found is not None and found.tokens == 4096  # the slot's n_ctx, not the model list's total
    assert "default_generation_settings.n_ctx" in found.source and requests == ["GET /props"]


def test_vllm_max_model_len_is_read_from_the_model_list_entry_of_the_model():
    listing = {"data": [{"id": "other", "max_model_len": 999}, *VLLM_MODELS["data"]]}
    found, _, requests = window({"/v1/models": listing}, "hosted_vllm/Qwen/Qwen2.5-7B-Instruct")
    assert found is not None and found.tokens == 32768 and "max_model_len" in found.source
    assert requests == ["GET /props", "GET /v1/models"]


def test_a_model_list_of_several_models_none_named_so_gives_no_window():
    listing = {"data": [{"id": "a", "max_model_len": 999}, {"id": "b", "max_model_len": 888}]}
    found, asked, _ = window({"/v1/models": listing}, "openai/c")
    assert found is None and "no entry for 'c'" in asked.text()


def test_ollama_num_ctx_from_its_parameters_wins_over_the_trained_length():
    found, _, requests = window({"/api/show": OLLAMA_SHOW}, "ollama/qwen2.5", path="")
    assert found is not None and found.tokens == 8192 and "num_ctx" in found.source
    assert requests == ["POST /api/show"]  # an ollama/ model asks Ollama's endpoints only


def test_ollama_without_num_ctx_takes_the_loaded_models_context_length():
    found, _, _ = window({"/api/show": OLLAMA_TRAINED_ONLY, "/api/ps": OLLAMA_PS}, "ollama/qwen2.5", path="")
    assert found is not None and found.tokens == 4096 and "/api/ps" in found.source


def test_ollama_trained_length_alone_is_never_taken_as_the_window_but_is_named():
    found, asked, _ = window({"/api/show": OLLAMA_TRAINED_ONLY, "/api/ps": {"models": []}}, "ollama/qwen2.5", path="")
    assert found is None and asked.trained == 32768
    text = describe_missing("ollama/qwen2.5", "http://127.0.0.1:11434", asked)
    assert "32,768" in text and "num_ctx" in text and "OLLAMA_CONTEXT_LENGTH" in text


def test_ollama_behind_its_openai_endpoint_is_found_after_the_others():
    found, _, requests = window({"/api/show": OLLAMA_SHOW}, "openai/qwen2.5")
    assert found is not None and found.tokens == 8192
    assert requests == ["GET /props", "GET /v1/models", "GET /api/v0/models", "POST /api/show"]


def test_lm_studio_loaded_context_length_not_the_models_maximum():
    found, _, _ = window({"/api/v0/models": LM_STUDIO}, "openai/qwen2.5-7b-instruct")
    assert found is not None and found.tokens == 16384 and "loaded_context_length" in found.source


def test_a_server_that_says_nothing_is_described_request_by_request():
    found, asked, _ = window({}, "openai/mystery")
    assert found is None and not asked.down
    text = describe_missing("openai/mystery", "http://x/v1", asked)
    assert "did not say it" in text and "/props: HTTP 404" in text and "no window field for 'fake'" in text


@pytest.mark.parametrize("bad", [True, 0, -5, "4096", None, 0.5, [4096]])
def test_a_window_field_that_is_not_a_positive_count_is_not_taken(bad):
    found, asked, _ = window({"/props": {"default_generation_settings": {"n_ctx": bad}}}, "openai/m")
    assert found is None and "no default_generation_settings.n_ctx" in asked.text()


def test_a_dead_server_costs_one_refused_connection_and_says_so():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    found, asked = server_window(f"http://127.0.0.1:{port}/v1", "openai/m")
    assert found is None and asked.down and len(asked.answers) == 1
    assert time.monotonic() - started < 1.5
    assert "did not answer" in describe_missing("openai/m", f"http://127.0.0.1:{port}/v1", asked)


def test_a_server_that_hangs_is_left_after_the_timeout_and_the_deadline_bounds_all():
    with socket.socket() as sock:  # accepts connections (the backlog) but never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        started = time.monotonic()
        found, asked = server_window(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", "openai/m", timeout_s=0.3,
                                     deadline_s=1.0)
    assert found is None and asked.down and time.monotonic() - started < 1.0


def test_the_probe_imports_no_litellm():
    code = "import sys, ctxagent.agent.server_window as w; print('litellm' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("base", "root"), [("http://h:8080/v1", "http://h:8080"), ("http://h:8080/v1/", "http://h:8080"),
                                            ("http://h:11434", "http://h:11434"), ("http://h/x/v1", "http://h/x")])
def test_server_root_drops_the_openai_path(base, root):
    assert server_root(base) == root
