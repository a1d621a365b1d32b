"""Offline stand-ins for `oodmol llm`'s backends: a tiny randomly initialised causal LM
saved to disk, and a chat completions server on 127.0.0.1 whose answers a test scripts."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

QUESTION = re.compile(r"For SMILES: (\S+) predict")


def save_tiny_causal_lm(folder: Path, chat_template: str | None = None) -> Path:
    """A 2-layer GPT-2 (seeded random weights) with a byte-level tokenizer built here:
    every text, units such as g/cm³ included, has a tokenization; nothing is downloaded."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    eos = len(vocab)
    vocab["<|endoftext|>"] = eos
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>")
    if chat_template:
        fast.chat_template = chat_template
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=2048,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


# What the stub does for one request: answer a text, fail with an HTTP status, send a
# body that is not a chat completion, or answer after a delay (past the client's timeout)
Step = tuple[str, object]  # ("answer", text) | ("status", code) | ("garbage", None) | ("sleep", s)


@dataclass
class StubServer:
    """Answers POST /v1/chat/completions. `script[smiles]` is the list of steps for the
    successive requests about that molecule (the last step repeats); other molecules get
    `default(smiles)`. Every request's body and headers are kept in `requests`."""

    default: Callable[[str], str]
    script: dict[str, list[Step]] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    url: str = ""
    delay_s: float = 0.0  # before every answer

    def step(self, smiles: str) -> Step:
        steps = self.script.get(smiles)
        n = self.asked[smiles]
        self.asked[smiles] += 1
        if not steps:
            return ("answer", self.default(smiles))
        return steps[min(n, len(steps) - 1)]


@contextmanager
def stub_server(stub: StubServer) -> Iterator[StubServer]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server calls it by this name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            smiles = QUESTION.search(body["messages"][-1]["content"])[1]
            with lock:
                stub.requests.append({"body": body, "headers": dict(self.headers)})
                kind, value = stub.step(smiles)
            if self.path != "/v1/chat/completions" or body["model"] == "missing":
                return self._send(404, b'{"error": "no such model"}')
            time.sleep(stub.delay_s)
            if kind == "sleep":
                time.sleep(value)
                kind, value = "answer", "1.0"
            if kind == "status":
                return self._send(value, b'{"error": "scripted"}')
            if kind == "garbage":
                return self._send(200, b'{"choices": []}')
            reply = {"choices": [{"message": {"role": "assistant", "content": value}}]}
            self._send(200, json.dumps(reply).encode())

        def _send(self, status: int, payload: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out
                pass

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
