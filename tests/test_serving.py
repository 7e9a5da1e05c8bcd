"""Episode 15's plumbing: the stand-in model folder, the server's start and stop and its faults,
a request the cache can never hold, the capacity plan and the vLLM receipt."""

import os
import socket

import pytest

from gpucourse import feasibility, serving


@pytest.fixture(scope="module")
def folder():
    path, about = serving.model_folder(layers=1)
    assert "RANDOM weights" in about
    return path


def test_the_stand_in_has_a_tokenizer_of_printable_characters(folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("Hi GPU!")["input_ids"]
    assert len(ids) == 7 and tokenizer.decode(ids) == "Hi GPU!"
    assert all(tokenizer.decode([i]).isprintable() for i in range(serving.END_OF_TEXT))


def test_a_server_starts_answers_and_is_stopped_by_pid(folder):
    server = serving.start_server(folder, page_size=16, pages=64, max_batch_tokens=64)
    try:
        assert server.running() and serving.warm_up(server) > 0
        with pytest.raises(serving.ServerError, match=f"port {server.port} .* is taken"):
            serving.start_server(folder, port=server.port)
    finally:
        server.stop()
    assert not server.running()
    with pytest.raises(ProcessLookupError):
        os.killpg(server.pid, 0)                 # nothing of it is left


def test_a_folder_without_a_model_is_named(tmp_path):
    with pytest.raises(serving.ServerError, match="no model in .*config.json"):
        serving.start_server(tmp_path)


def test_a_server_that_exits_is_reported_in_one_sentence(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(serving.ServerError) as caught:
        serving.start_server(tmp_path, deadline_s=120)
    assert "\n" not in str(caught.value)


def test_the_port_check():
    with socket.socket() as sock:
        sock.bind((serving.HOST, 0))
        sock.listen()
        assert serving.port_taken(sock.getsockname()[1])
    assert not serving.port_taken(serving.free_port())


def test_a_request_the_cache_can_never_hold_is_refused_with_its_sizes():
    serving.fits_the_cache(100, 28, pages=8, page_size=16)          # exactly 8 pages
    with pytest.raises(ValueError, match="100 prompt \\+ 29 new tokens needs 9 pages of 16.*has 8"):
        serving.fits_the_cache(100, 29, pages=8, page_size=16)


def test_capacity_rows():
    from gpucourse import llm

    rows = {r["gpu"]: r for r in feasibility.serving_capacity(llm.CONFIGS["SmolLM2-135M"], context=2048)}
    assert rows["T4"]["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert 0 < rows["T4"]["users"] < rows["L4"]["users"] < rows["H100 80GB"]["users"]
    # Little's law: the rate that keeps L_max users busy for 256 tokens each
    for row in rows.values():
        assert row["max_rate"] == pytest.approx(row["users"] / (256 * row["step_ms"] / 1e3))
    bigger = {r["gpu"]: r for r in feasibility.serving_capacity(llm.CONFIGS["Llama-3.2-1B"], context=2048)}
    assert bigger["T4"]["users"] < rows["T4"]["users"]


def test_the_receipt_and_the_benchmark_command(tmp_path):
    command = serving.bench_command("m", "http://127.0.0.1:1", 8, 2000, 50, tmp_path)
    assert command[:3] == ["vllm", "bench", "serve"]
    assert command[command.index("--goodput") + 1:][:2] == ["ttft:2000", "tpot:50"]
    made = serving.receipt({"median_tpot_ms": 10.0, "request_goodput": 3.5, "request_rate": 8},
                           gpu_name="Tesla T4", versions={"vllm": "x"}, slo={"ttft": 2000, "tpot": 50},
                           bandwidth_gbs=320, weight_bytes=320_000_000)
    assert made["goodput"] == 3.5 and made["bandwidth_utilisation_estimate"] == pytest.approx(0.1)
    assert "No GPU has run vLLM" in serving.vllm_receipt_line()


def test_an_old_transformers_is_named_in_one_sentence():
    assert serving.require_transformers("5.15.0") == "5.15.0"
    assert serving.require_transformers("6.0.1") == "6.0.1"
    with pytest.raises(RuntimeError, match=r"needs transformers 5.15 or newer.*has 5.0.0.*pip install -U") as caught:
        serving.require_transformers("5.0.0")
    assert "\n" not in str(caught.value)
