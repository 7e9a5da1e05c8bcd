"""Episode 15: serving a model to many users — the plumbing its cells call.

The lesson is in the episode's cells: the paged cache, the scheduler's arithmetic, the load client
and the metrics. Here is what a learner should not have to read: a model folder ``transformers
serve`` can load offline, starting that server on 127.0.0.1 and stopping it by PID (with a
deadline, and a sentence naming the cause when it does not start), and reading transformers'
prefix-hit counter.

The stand-in model, used offline or where the download fails, is SmolLM2-135M's decoder layers
with RANDOM weights and a 97-token vocabulary (the printable ASCII characters, an end-of-text and
an unknown token), so that a tokenizer can be built without a download and every token it writes
is a character a stream can send. Its speed is close to SmolLM2-135M's layers
(the real model's 49,152-token output layer is larger); its text is noise, and the episode says so.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import llm, settings

HOST = "127.0.0.1"
#: Seconds a server may take to load its model and answer /health before it is given up.
START_DEADLINE_S = 180
PRINTABLE = range(32, 127)   # the stand-in's tokens: printable ASCII, one character each
END_OF_TEXT = len(PRINTABLE)  # then <|endoftext|> and <unk> (any other character)
VOCAB = END_OF_TEXT + 2


# transformers' scheduler warns on every run that a flash kernel would be faster: true on a GPU
# that has one, and a line per cell otherwise
logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)


class ServerError(RuntimeError):
    """The server did not start or stopped; the message names the cause in one sentence."""


# --------------------------------------------------------------------------- the version it needs

#: The first transformers with ContinuousBatchingConfig and `transformers serve --cb-*` and /v1/completions.
NEEDS_TRANSFORMERS = (5, 15)


def require_transformers(version: str | None = None) -> str:
    """The installed transformers' version; a one-sentence RuntimeError where it is too old."""
    if version is None:
        import transformers
        version = transformers.__version__
    release = tuple(int(part) for part in version.split(".")[:2])
    if release < NEEDS_TRANSFORMERS:
        raise RuntimeError(
            f"This episode needs transformers 5.15 or newer (ContinuousBatchingConfig, and "
            f"`transformers serve` with /v1/completions and its --cb-* options); this runtime has "
            f"{version} (Kaggle's image has 5.0): run  pip install -U \"transformers>=5.15\"  "
            "in a new session, then Run all again.")
    return version


# --------------------------------------------------------------------------- the model folder

def _write_stand_in(folder: Path, layers: int) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models
    from tokenizers.pre_tokenizers import ByteLevel

    with llm._quiet_imports():
        from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
    symbol = ByteLevel.alphabet()       # byte-level BPE's printable stand-in for each byte
    as_symbol = {b: s for b in PRINTABLE for s in symbol if s.encode() == bytes([b])}
    as_symbol[32] = "\u0120"           # byte-level BPE writes a space as Ġ
    vocab = {as_symbol[b]: i for i, b in enumerate(PRINTABLE)}
    vocab.update({"<|endoftext|>": END_OF_TEXT, "<unk>": END_OF_TEXT + 1})
    # one token per character, so that a stream sends one event per token
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                          "{% endfor %}assistant:")
    transformers.utils.logging.disable_progress_bar()    # no "Writing model shards" bar
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=layers, vocab_size=VOCAB,
                              bos_token_id=END_OF_TEXT, eos_token_id=END_OF_TEXT,
                              pad_token_id=END_OF_TEXT, tie_word_embeddings=True,
                              architectures=["LlamaForCausalLM"])
    LlamaForCausalLM(config).save_pretrained(folder)


def stand_in_folder(layers: int) -> Path:
    """A folder ``transformers serve`` can load with no download (written once, atomically)."""
    from .data import cache

    folder = cache.folder("serving") / f"smollm2-{layers}-layers-ascii"
    if (folder / "model.safetensors").exists():
        return folder
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        _write_stand_in(staging, layers)
        try:
            staging.rename(folder)           # atomic: a folder is there whole, or not at all
        except OSError:
            if not (folder / "model.safetensors").exists():   # not another process's
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def model_folder(layers: int) -> tuple[Path, str]:
    """The folder the server loads and a sentence saying what it holds: SmolLM2-135M-Instruct
    from the Hub (pinned revision), or offline, or where the download fails, the stand-in with
    ``layers`` layers."""
    reason = "GPUCOURSE_OFFLINE=1" if settings.offline() else None
    if reason is None:
        try:
            folder = llm.download(llm.INSTRUCT_REPO_ID, llm.INSTRUCT_REVISION)
            return Path(folder), (f"{llm.INSTRUCT_REPO_ID} at revision {llm.INSTRUCT_REVISION[:7]} "
                                  f"({llm.LICENCE}), all 30 layers")
        except llm._download_errors() as exc:
            reason = f"the download failed: {type(exc).__name__}: {str(exc)[:160]}"
    settings.allow_stand_in(llm.INSTRUCT_REPO_ID, reason)
    return stand_in_folder(layers), (f"SmolLM2-135M's first {layers} layers with RANDOM weights and a "
                                     f"character vocabulary ({reason}); its text is noise")


# --------------------------------------------------------------------------- the server

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def _die_with_parent() -> None:
    """In the child, before exec: a SIGTERM when the notebook's kernel dies, however it dies."""
    os.setsid()                                    # its own process group, stopped as one
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _cause(log_text: str, folder: Path, port: int) -> str:
    """One sentence naming why the server stopped, from what it wrote."""
    lowered = log_text.lower()
    if "address already in use" in lowered or "errno 98" in lowered:
        return (f"port {port} on {HOST} is taken (a server from an earlier run, perhaps): stop it, "
                "or start with port=None to take a free port.")
    if "missing dependencies for serving" in lowered:
        return ("transformers' server needs its serving extras: pip install fastapi uvicorn "
                "openai (Colab has them).")
    if "no such option" in lowered:
        option = next((line for line in log_text.splitlines() if "No such option" in line), "")
        return (f"this transformers version lacks an option the course passes ({option.strip(' │')}); "
                "episode 15 needs transformers 5.15 or newer for `transformers serve`'s --cb-* options.")
    if "not a valid model identifier" in lowered or "does not appear to have a file" in lowered \
            or "can't load" in lowered or "no such file" in lowered:
        return f"the server could not load the model in {folder}: {_last_error(log_text)}"
    return f"the server stopped: {_last_error(log_text)}"


def _last_error(log_text: str) -> str:
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["(it wrote nothing)"])[-1][:240]


class Server:
    """``transformers serve`` in a process of its own, on 127.0.0.1; ``stop()`` ends it by PID."""

    def __init__(self, process: subprocess.Popen, port: int, log_path: Path, folder: Path):
        self.process, self.port, self.log_path, self.folder = process, port, log_path, folder
        self.url = f"http://{HOST}:{port}"
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to its process group, SIGKILL after ``timeout`` seconds; safe to call twice."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        atexit.unregister(self.stop)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running() else f"stopped ({self.process.returncode})"
        return f"Server({self.url}, pid {self.pid}, {state})"


def start_server(folder, *, device: str = "cpu", page_size: int = 16, pages: int = 512,
                 max_batch_tokens: int = 256, port: int | None = None,
                 deadline_s: float = START_DEADLINE_S) -> Server:
    """Start ``transformers serve folder --continuous-batching`` on 127.0.0.1 and wait for it.

    Returns once the server answers ``/health`` with its model loaded; raises ``ServerError``
    with one sentence naming the cause when the folder holds no model, the port is taken, or
    the server exits or stays silent past ``deadline_s`` (it is then stopped).
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ServerError(f"no model in {folder}: the folder needs a config.json (and weights "
                          "and a tokenizer); pass the folder model_folder() gives.")
    if port is None:
        port = free_port()
    elif port_taken(port):
        raise ServerError(_cause("address already in use", folder, port))
    # transformers 5.15-5.23 answer /v1/models with a 500 when the Hub's cache folder is missing
    hub_cache = Path(os.environ.get("HF_HUB_CACHE") or Path(tempfile.gettempdir()) / "gpucourse-hub")
    hub_cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_CACHE=str(hub_cache), HF_HUB_OFFLINE="1",
               TRANSFORMERS_NO_ADVISORY_WARNINGS="1", PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder),
               "--continuous-batching", "--device", device, "--host", HOST, "--port", str(port),
               "--cb-block-size", str(page_size), "--cb-num-blocks", str(pages),
               "--cb-max-batch-tokens", str(max_batch_tokens), "--log-level", "warning"]
    log_path = Path(tempfile.mkstemp(prefix=f"serve-{port}-", suffix=".log")[1])
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    server = Server(process, port, log_path, folder)
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if not server.running():
            server.stop()
            raise ServerError(_cause(server.log(), folder, port))
        with contextlib.suppress(OSError):
            if _get(server.url + "/health")[0] == 200:
                return server
        time.sleep(0.25)
    server.stop()
    raise ServerError(f"the server did not answer within {deadline_s:.0f} s (loading the model "
                      f"on {device}); its last line: {_last_error(server.log())}")


def warm_up(server: Server, prompt: str = "Hello", max_tokens: int = 4, timeout: float = 120) -> float:
    """One request, so that the first measured one does not pay for loading; its seconds."""
    body = json.dumps({"model": str(server.folder), "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    request = urllib.request.Request(server.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise ServerError(f"the warm-up request got HTTP {exc.code}: "
                          f"{exc.read().decode(errors='replace')[:200]}") from None
    return time.perf_counter() - started


# --------------------------------------------------------------------------- transformers' counters

def prefix_hit_tokens(manager) -> int | None:
    """Prompt tokens transformers' paged cache found already computed (its own counter), or None
    where this version keeps none (the counter is internal: ``PagedAttentionCache._total_prefix_length``
    in transformers 5.15)."""
    cache = getattr(getattr(manager, "batch_processor", None), "cache", None)
    return getattr(cache, "_total_prefix_length", None)


def collect(manager, request_ids, timeout: float = 600) -> list:
    """The finished outputs of ``request_ids``, in that order.

    ``manager.get_result(request_id=...)`` returns None (and puts the result back) when another
    request's output is first in the queue, so results are taken as they come.
    """
    waiting, done = set(request_ids), {}
    deadline = time.monotonic() + timeout
    while waiting:
        left = deadline - time.monotonic()
        output = manager.get_result(timeout=max(0.0, min(left, 5.0)))
        if output is None:
            if left <= 0:
                raise TimeoutError(f"{len(waiting)} of {len(request_ids)} requests not finished "
                                   f"after {timeout:.0f} s")
            continue
        if output.request_id in waiting and output.is_finished():
            waiting.discard(output.request_id)
            done[output.request_id] = output
    return [done[i] for i in request_ids]


def fits_the_cache(prompt_tokens: int, new_tokens: int, pages: int, page_size: int) -> None:
    """Refuse a request that no amount of waiting lets the cache hold, naming the sizes."""
    need = -(-(prompt_tokens + new_tokens) // page_size)
    if need > pages:
        raise ValueError(f"a request of {prompt_tokens:,} prompt + {new_tokens:,} new tokens needs "
                         f"{need:,} pages of {page_size} tokens, but the whole cache has {pages:,}: "
                         "it could never run; shorten it or give the cache more pages.")


# --------------------------------------------------------------------------- vLLM on a GPU (opt-in)

RECEIPT_FIGURE = "ep15.vllm_goodput"


def vllm_receipt_line() -> str:
    """What the course has from a vLLM run on a GPU: the recorded goodput, or one line saying none."""
    from . import reference

    found = reference.gpu_reference(RECEIPT_FIGURE)
    if found is None:
        return ("No GPU has run vLLM for this episode yet: on a T4, set TRY_VLLM = True in a fresh "
                "runtime to make the first receipt.")
    record, value = found
    return (f"vLLM on {record['hardware']['gpu_name']} ({record['date']}): goodput "
            f"{reference._format(value, 'requests/s')} under the SLO the receipt names.")


def bench_command(model: str, base_url: str, request_rate: float, slo_ttft_ms: float,
                  slo_tpot_ms: float, result_dir: Path, prompts: int = 200) -> list[str]:
    """``vllm bench serve`` with random prompts, Poisson arrivals and goodput under the SLO."""
    return ["vllm", "bench", "serve", "--backend", "vllm", "--model", model, "--base-url", base_url,
            "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "128",
            "--num-prompts", str(prompts), "--request-rate", str(request_rate), "--burstiness", "1",
            "--goodput", f"ttft:{slo_ttft_ms:g}", f"tpot:{slo_tpot_ms:g}",
            "--save-result", "--result-dir", str(result_dir)]


def receipt(result: dict, *, gpu_name: str, versions: dict, slo: dict, bandwidth_gbs: float | None,
            weight_bytes: int) -> dict:
    """The receipt of a ``vllm bench serve`` run: device, versions, SLO, goodput and an estimate of
    the memory bandwidth used (weights read once per decode step, at 1 / median TPOT steps a second)."""
    tpot_s = result.get("median_tpot_ms", 0) / 1e3
    mbu = (weight_bytes / tpot_s / (bandwidth_gbs * 1e9)) if tpot_s and bandwidth_gbs else None
    return {"device": gpu_name, "versions": versions, "slo_ms": slo,
            "request_rate": result.get("request_rate"), "goodput": result.get("request_goodput"),
            "throughput": result.get("request_throughput"),
            "output_tokens_per_s": result.get("output_throughput"),
            "p99_ttft_ms": result.get("p99_ttft_ms"), "p99_tpot_ms": result.get("p99_tpot_ms"),
            "bandwidth_utilisation_estimate": mbu}


def vllm_benchmark(model: str, request_rate: float, slo_ttft_ms: float, slo_tpot_ms: float) -> dict:
    """Install vLLM (it replaces this runtime's torch), serve ``model`` in float16, benchmark it with
    ``vllm bench serve`` and write a receipt under the course's data folder; returns the receipt."""
    from . import reference
    from .data import cache

    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "vllm"],
                         capture_output=True, text=True)
    if pip.returncode:
        raise ServerError(f"pip could not install vLLM: {_last_error(pip.stderr)}")
    port, folder = free_port(), cache.folder("serving", "vllm")
    log_path = folder / "vllm-serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["vllm", "serve", model, "--dtype", "half", "--host", HOST,
                                    "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    server = Server(process, port, log_path, Path(model))
    try:
        started = time.monotonic()
        while _safe_health(server.url) != 200:
            if not server.running() or time.monotonic() - started > 900:
                raise ServerError(f"vllm serve did not start: {_last_error(server.log())}")
            time.sleep(2)
        bench = subprocess.run(bench_command(model, server.url, request_rate, slo_ttft_ms,
                                             slo_tpot_ms, folder), capture_output=True, text=True)
        if bench.returncode:
            raise ServerError(f"vllm bench serve failed: {_last_error(bench.stderr or bench.stdout)}")
    finally:
        server.stop()
    result = json.loads(max(folder.glob("*.json"), key=lambda p: p.stat().st_mtime).read_text())
    import torch
    from importlib.metadata import version
    name = torch.cuda.get_device_name(0)
    from .feasibility import llama_parameters

    _, sheet = reference.gpu_model(name)
    made = receipt(result, gpu_name=name, versions={p: version(p) for p in ("vllm", "torch")},
                   slo={"ttft": slo_ttft_ms, "tpot": slo_tpot_ms},
                   bandwidth_gbs=(sheet or {}).get("memory_gbs"),
                   weight_bytes=2 * llama_parameters(llm.CONFIGS["SmolLM2-135M"]))
    (folder / "receipt.json").write_text(json.dumps(made, indent=1))
    print(json.dumps(made, indent=1))
    return made


def _safe_health(url: str) -> int | None:
    try:
        return _get(url + "/health")[0]
    except OSError:
        return None
