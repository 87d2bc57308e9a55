"""The inference client against a real vLLM server: sampling with token ids, teacher scoring, weight reload; and
the calls that change a server's state against a stub that fails them."""

import asyncio
import json
import shutil
import time
from dataclasses import replace

import psutil
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config import compose_config
from prime_rl.config.schema import Config
from prime_rl.config.timeouts import load_timeout_s
from prime_rl.inference.client import InferenceClient, InferenceError, Sampling
from prime_rl.models.chat import prompt_ids, turn_end_ids
from prime_rl.prepare import prepare_student
from prime_rl.protocol.run_dir import RunDir
from prime_rl.teacher.client import TeacherError
from prime_rl.teacher.scoring import check_top_k_served
from prime_rl.trainer.weights import export_weights
from tests.conftest import unused_port
from tests.http_stub import StubHandler, serve_stub, stub_url
from tests.vllm_server import serve

PROMPTS = [f"reverse: {w}" for w in ["abcdef", "xyz", "hello", "qwerty", "mnop", "zzyx", "kite", "robot"]]
GREEDY = Sampling(temperature=0.0, top_p=1.0, max_tokens=16)
VOCAB = Config().model.tiny.vocab_size
ENGINE = "VLLM::EngineCore"  # the engine process's title


@pytest.fixture(scope="module")
def student():
    path = prepare_student(Config())
    return path, AutoTokenizer.from_pretrained(path)


def hf_greedy(model, ids):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
    return out[0, len(ids) :].tolist()


async def vllm_greedy(client, tok):
    greedy = replace(GREEDY, stop_token_ids=turn_end_ids(tok))  # as the orchestrator samples the student
    groups = await client.complete("student", [prompt_ids(tok, p) for p in PROMPTS], 1, greedy)
    return [g[0].token_ids for g in groups]


async def until_running(client, timeout_s: float = 60) -> None:
    """Until the server's Prometheus metrics count a request as running (vLLM's /metrics, behind the key)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        metrics = (await client.http.get(f"{client.root}/metrics")).text
        running = [line for line in metrics.splitlines() if line.startswith("vllm:num_requests_running")]
        if running and float(running[0].rsplit(" ", 1)[1]) > 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request running after {timeout_s} s")


def forked_engine(url: str) -> bool:
    """Whether the engine process of the vLLM server at `url` (started by this test) was forked from its API server:
    then it holds the API server's listening socket too (a fork inherits open files; spawn execs the engine with only
    its pipes)."""
    port = int(url.rsplit(":", 1)[1])
    # every process, not only this test's descendants: the server factory forks the servers of the suite's runs
    listening = [p for p in psutil.process_iter() if port in listening_ports(p)]
    [api_server] = [p for p in listening if p.name() != ENGINE]
    [engine] = [p for p in api_server.children() if p.name() == ENGINE]
    return engine in listening


def listening_ports(p: psutil.Process) -> set[int]:
    try:
        return {c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:  # it exited while we looked
        return set()


@pytest.mark.vllm
def test_reload_then_scoring_and_tempered_sampling_match_transformers(student, tmp_path):
    path, tok = student
    original = AutoModelForCausalLM.from_pretrained(path).eval()
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    run_dir = RunDir(tmp_path / "run")
    export_weights(model, tok, run_dir, 1)

    async def scenario(url):
        client = InferenceClient(f"{url}/v1", max_retries=1)
        before = await vllm_greedy(client, tok)
        # the warm-started student as served: its raw completion (ids, text, logprobs) at T = 0
        plain = {"model": "student", "max_tokens": 16, "temperature": 0, "logprobs": 0, "return_token_ids": True}
        plain["stop_token_ids"] = turn_end_ids(tok)  # where transformers' generate stops: the model's own eos
        raw = [await client.post("/completions", {**plain, "prompt": prompt_ids(tok, p)}) for p in PROMPTS[:3]]
        # A request still running during the reload (one a client gave up on): preempted, not an error.
        long_request = {
            "model": "student",
            "prompt": [prompt_ids(tok, PROMPTS[0])] * 32,
            "max_tokens": 480,
            "ignore_eos": True,
        }
        running = asyncio.create_task(client.post("/completions", long_request))
        await until_running(client)  # the engine has it: its metrics count it as running
        assert not running.done()
        await client.reload_weights(str(run_dir.weights(1)))
        after = await vllm_greedy(client, tok)
        assert all(c["finish_reason"] == "length" for c in (await running)["choices"])
        ids = prompt_ids(tok, PROMPTS[0]) + after[0]
        [scores] = await client.prompt_logprobs("student", [ids])
        # opd's distill=topk: the whole vocabulary (the exact distribution), and a top 8, each beside the token's own
        [(_, whole)], [(top8_scores, top8)] = [
            await client.prompt_top_logprobs("student", [ids], k) for k in (VOCAB, 8)
        ]
        assert top8_scores == pytest.approx(scores, abs=1e-5)
        warm = Sampling(temperature=0.7, top_p=1.0, max_tokens=16, stop_token_ids=turn_end_ids(tok))
        sampled = await client.complete("student", [prompt_ids(tok, p) for p in PROMPTS[:4]], 2, warm)
        await client.close()
        return before, raw, after, ids, scores, sampled, whole, top8

    # A hub model's sampling defaults (Qwen3 ships top_k 20, Qwen2.5 a repetition penalty too) must not reach the
    # sampler: the trainer's pi knows only the temperature, so the logprobs checked below would differ. And like a
    # base model's, its eos is <|endoftext|>, not the <|im_end|> that ends its turns: sampling must stop there too.
    served = tmp_path / "served"
    shutil.copytree(path, served)
    defaults = json.loads((served / "generation_config.json").read_text())
    defaults |= {
        "top_k": 3,
        "min_p": 0.2,
        "repetition_penalty": 1.3,
        "eos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
    }
    (served / "generation_config.json").write_text(json.dumps(defaults))
    tokenizer_config = json.loads((served / "tokenizer_config.json").read_text())
    (served / "tokenizer_config.json").write_text(json.dumps(tokenizer_config | {"eos_token": "<|endoftext|>"}))
    with serve(served, tmp_path, extra_args=["--max-logprobs", str(VOCAB)]) as url:
        assert forked_engine(url)  # not spawned: the launcher's vLLM platform plugin (inference/cpu_platform.py)
        before, raw, after, ids, scores, sampled, whole, top8 = asyncio.run(scenario(url))
        # an external teacher asked for more logprobs per position than it serves: one line, before any process
        external = compose_config(
            ["training_mode=opd", "teacher=external", f"teacher.base_url={url}/v1", "teacher.model=student"]
            + ["trainer.loss.distill=topk", f"trainer.loss.distill_top_k={VOCAB + 1}", "teacher.max_retries=0"]
        )
        with pytest.raises(TeacherError) as too_many:
            check_top_k_served(external)
        assert too_many.value.keys == ["trainer.loss.distill_top_k"] and f"max allowed: {VOCAB}" in str(too_many.value)
    assert before == [hf_greedy(original, prompt_ids(tok, p)) for p in PROMPTS]  # the served student is transformers'
    for p, choice in zip(PROMPTS, (r["choices"][0] for r in raw)):
        prompt = prompt_ids(tok, p)
        with torch.no_grad():
            out = original.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
            logprobs = original(out).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
        greedy = out[0, len(prompt) :].tolist()
        assert choice["prompt_token_ids"] == prompt and choice["token_ids"] == greedy
        assert choice["text"] == tok.decode(greedy, skip_special_tokens=True)
        hf = [logprobs[i, t].item() for i, t in enumerate(greedy)]
        assert choice["logprobs"]["token_logprobs"] == pytest.approx(hf, abs=1e-3)
    expected = [hf_greedy(model, prompt_ids(tok, p)) for p in PROMPTS]
    assert after == expected  # the server now runs the exported weights
    assert any(out[-1] in turn_end_ids(tok) for out in after)  # stopped at <|im_end|>, which is kept
    assert before != after  # ... and they differ from the ones it started with
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    expected_scores = [hf[i - 1, t].item() for i, t in enumerate(ids) if i > 0]
    assert scores[0] is None and scores[1:] == pytest.approx(expected_scores, abs=1e-3)
    # each position's top k: the ids transformers ranks first, their logprobs, and at the whole vocabulary every id
    for i, (all_ids, all_logprobs) in enumerate(zip(whole.ids, whole.logprobs)):
        assert sorted(all_ids) == list(range(VOCAB))
        assert all_logprobs == pytest.approx(hf[i, all_ids].tolist(), abs=1e-3)
        assert top8.ids[i] == all_ids[:8] and top8.logprobs[i] == pytest.approx(all_logprobs[:8], abs=1e-5)
    # Sampled at T = 0.7, the server reports the sampling policy's logprobs (--logprobs-mode processed_logprobs):
    # the trainer's pi at T = 0.7, log_softmax(logits / 0.7), not the raw T = 1 logprobs.
    for p, group in zip(PROMPTS[:4], sampled):
        for c in group:
            full = prompt_ids(tok, p) + c.token_ids
            with torch.no_grad():
                warm = (model(torch.tensor([full])).logits[0] / 0.7).log_softmax(-1)
            start = len(full) - len(c.token_ids)
            trainer_pi = [warm[i - 1, full[i]].item() for i in range(start, len(full))]
            assert c.logprobs == pytest.approx(trainer_pi, abs=1e-3)


def test_client_gives_up_after_bounded_retries_on_a_refused_connection():
    client = InferenceClient(f"http://127.0.0.1:{unused_port()}", max_retries=2, backoff_s=0.01)

    async def call():
        try:
            await client.complete("student", [[1, 2]], 1, GREEDY)
        finally:
            await client.close()

    with pytest.raises(InferenceError, match="after 3 attempts"):
        asyncio.run(call())


class ControlEndpoint:
    """A stand-in vLLM server for the calls that change its state: `faults` maps a route to how it answers ("slow":
    after 1 s; "drop": the connection closed unanswered; a status), every other route answers at once; each route
    sent is recorded."""

    def __init__(self, faults: dict[str, str]):
        self.routes, endpoint = [], self

        class Handler(StubHandler):
            def do_POST(self):
                self.body()
                route = self.path.split("?")[0]
                endpoint.routes.append(route)
                fault = faults.get(route, "200")
                if fault == "slow":
                    time.sleep(1.0)
                    fault = "200"
                if fault == "drop":
                    self.close_connection = True
                else:
                    self.reply(int(fault), b'{"success": true}')

        self.server = serve_stub(Handler)
        self.url = stub_url(self.server) + "/v1"

    def run(self, call, timeout_s: float = 120.0) -> tuple[InferenceError | None, int]:
        """`call(client)` on a client of this endpoint that retries 3 times: (the error it ended in, requests sent)."""
        client = InferenceClient(self.url, timeout_s=timeout_s, max_retries=3, backoff_s=0.01)

        async def go():
            try:
                await call(client)
            finally:
                await client.close()

        try:
            asyncio.run(go())
            return None, client.stats.requests
        except InferenceError as e:
            return e, client.stats.requests
        finally:
            self.server.shutdown()


LOADS = {  # a call that changes the server's state, by its route
    "/collective_rpc": lambda client, weights: client.reload_weights(str(weights)),
    "/v1/load_lora_adapter": lambda client, weights: client.load_lora("adapter", str(weights)),
    "/sleep": lambda client, weights: client.sleep(weights),
    "/wake_up": lambda client, weights: client.wake_up(weights),
}


def test_a_load_is_timed_by_the_weights_it_loads(tmp_path):
    weights = tmp_path / "step_3"
    weights.mkdir()
    with open(weights / "model.safetensors", "wb") as f:
        f.truncate(16 * 10**9)  # sparse: only its size counts
    (weights / "config.json").write_text("{}")  # not weights
    assert load_timeout_s(weights) == pytest.approx(120 + 160)  # 16 GB at 100 MB/s
    assert load_timeout_s(tmp_path / "not_exported") == 120
    # a reload slower than the client's request timeout is waited for, as its weights allow, and sent once
    endpoint = ControlEndpoint({"/collective_rpc": "slow"})
    error, sent = endpoint.run(lambda client: client.reload_weights(str(weights)), timeout_s=0.3)
    assert error is None, error
    assert endpoint.routes == ["/collective_rpc", "/reset_prefix_cache"] and sent == 2


@pytest.mark.parametrize("route", LOADS)
@pytest.mark.parametrize(
    "fault, says", [("slow", "no answer within 0.3 s"), ("drop", "RemoteProtocolError after sending"), ("500", "500")]
)
def test_a_load_that_failed_after_sending_is_not_sent_again(route, fault, says, tmp_path, monkeypatch):
    monkeypatch.setattr("prime_rl.inference.client.load_timeout_s", lambda weights: 0.3)
    endpoint = ControlEndpoint({route: fault})
    error, sent = endpoint.run(lambda client: LOADS[route](client, tmp_path), timeout_s=0.3)
    assert isinstance(error, InferenceError) and says in str(error), error
    assert "not sent again: the server may still be loading" in str(error) and "\n" not in str(error)
    assert endpoint.routes == [route] and sent == 1  # no retry, and no cache reset after a failed load


def test_a_load_that_never_reached_the_server_is_sent_again(tmp_path):
    client = InferenceClient(f"http://127.0.0.1:{unused_port()}", max_retries=2, backoff_s=0.01)

    async def call():
        try:
            await client.reload_weights(str(tmp_path))
        finally:
            await client.close()

    with pytest.raises(InferenceError, match="could not connect after 3 attempts, last: ConnectError"):
        asyncio.run(call())
    assert client.stats.requests == 3


@pytest.mark.vllm
def test_a_tied_model_serves_exactly_the_exported_weights_after_each_update(tmp_path):
    """Qwen3 with tied embeddings and a BPE tokenizer: after each of two updates the server's greedy output and
    its logprobs are transformers' on the new weights. (vLLM's own reload_weights keeps the output layer it
    started with: the export has no lm_head tensor, so nothing rebuilds the head's CPU matmul.)"""
    path = prepare_student(compose_config(["model=tiny_qwen3"]))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    run_dir = RunDir(tmp_path / "run")
    prompts = [prompt_ids(tok, p) for p in PROMPTS]

    async def scenario(url):
        client = InferenceClient(f"{url}/v1", max_retries=1)
        served = []
        for step in (1, 2):
            torch.manual_seed(step)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            export_weights(model, tok, run_dir, step)
            await client.reload_weights(str(run_dir.weights(step)))
            greedy = [g[0].token_ids for g in await client.complete("student", prompts, 1, GREEDY)]
            scores = await client.prompt_logprobs("student", [p + g for p, g in zip(prompts, greedy)])
            served.append((greedy, scores, [hf_greedy(model, p) for p in prompts], hf_scores(model, prompts, greedy)))
        await client.close()
        return served

    with serve(path, tmp_path) as url:
        served = asyncio.run(scenario(url))
    for greedy, scores, expected, expected_scores in served:
        assert greedy == expected
        for s, e in zip(scores, expected_scores):
            assert s[1:] == pytest.approx(e, abs=1e-4)


def hf_scores(model, prompts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
    """transformers' logprob of every token after the first of prompt + completion."""
    out = []
    for p, c in zip(prompts, completions):
        ids = p + c
        with torch.no_grad():
            logprobs = model(torch.tensor([ids])).logits[0].log_softmax(-1)
        out.append([logprobs[i - 1, t].item() for i, t in enumerate(ids) if i > 0])
    return out
