"""Where the answers come from: a local Hugging Face causal language model, or any
server that speaks OpenAI's chat completions API (vLLM, llama.cpp, TGI, ...).

A backend answers a chunk of `chunk_size` chats (`answer`), yielding each answer (a text
or a `RequestFailed`) with its chat's index as soon as it has it, so that the caller can
save it before the next arrives. `settings` are what changes its answers (not where or
how fast it runs).
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Protocol

from oodmol.errors import UserError
from oodmol.llm.prompt import Message, plain_text


class RequestFailed(Exception):
    """One molecule's request failed even after its retries; a later run asks again."""


class BackendError(UserError, RuntimeError):
    """A failure that retrying cannot mend (a wrong model name, URL or API key)."""


class Backend(Protocol):
    chunk_size: int

    def settings(self) -> dict: ...

    def answer(self, chats: list[list[Message]]) -> Iterator[tuple[int, str | RequestFailed]]: ...


class HFBackend:
    """A `transformers` causal LM with greedy decoding and at most `max_new_tokens`.

    Chats are rendered with the tokenizer's chat template where it has one
    (`chat_template=auto`; `true` insists, `false` never uses it), otherwise as plain text
    (`prompt.plain_text`). Batches are padded on the left, so every prompt ends where
    generation starts.
    """

    def __init__(
        self,
        model: str,
        max_new_tokens: int = 24,
        batch_size: int = 8,
        device: str = "auto",
        dtype: str = "auto",
        chat_template: str | bool = "auto",
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError(
                f"max_new_tokens ({max_new_tokens}) and batch_size ({batch_size}) must be ≥ 1"
            )
        if model.startswith((".", "/", "~")) and not Path(model).expanduser().is_dir():
            raise BackendError(f"hf.model={model}: no such folder")
        self.name = model
        self.max_new_tokens = max_new_tokens
        self.chunk_size = batch_size
        self.dtype = dtype
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
        except OSError as error:  # no such hub id offline, or a folder without a tokenizer
            raise BackendError(f"hf.model={model}: cannot load its tokenizer ({error})") from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            if self.tokenizer.eos_token is None:
                raise BackendError(f"the tokenizer of {model} has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat_template is True and not has_template:
            raise BackendError(f"chat_template=true, but the tokenizer of {model} has none")
        self.use_template = has_template and chat_template is not False
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        try:
            self.model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
        except OSError as error:
            raise BackendError(f"hf.model={model}: cannot load the model ({error})") from None
        self.model.to(self.device).eval()

    def settings(self) -> dict:
        return {
            "backend": "hf",
            "model": self.name,
            "max_new_tokens": self.max_new_tokens,
            "dtype": self.dtype,
            "chat_template": self.use_template,
        }

    def render(self, chat: list[Message]) -> str:
        if self.use_template:
            return self.tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=True
            )
        return plain_text(chat)

    def answer(self, chats: list[list[Message]]) -> Iterator[tuple[int, str | RequestFailed]]:
        import torch

        encoded = self.tokenizer(
            [self.render(chat) for chat in chats],
            return_tensors="pt",
            padding=True,
            add_special_tokens=not self.use_template,  # a template writes its own
        ).to(self.device)
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        new_tokens = output[:, encoded["input_ids"].shape[1] :]
        yield from enumerate(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))


# HTTP statuses worth asking again: the server is busy, overloaded or failed for a moment
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class OpenAIBackend:
    """POST `<base_url>/chat/completions` (temperature 0, `max_tokens`), `concurrency`
    requests at a time. Each request has `timeout_s` per socket operation and is tried
    `1 + max_retries` times, waiting `backoff_s`, then twice as long, ... in between, when
    the connection fails, times out, or the server answers a retryable status or a body
    without an answer; any other HTTP error (400, 401, 404: a wrong model, key or URL)
    stops the run. The API key, if any, is read from the environment variable
    `api_key_env`."""

    def __init__(
        self,
        model: str,
        base_url: str,
        max_new_tokens: int = 24,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        concurrency: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_retries < 0 or concurrency < 1 or timeout_s <= 0 or max_new_tokens < 1:
            raise ValueError(
                f"need max_retries ≥ 0 ({max_retries}), concurrency ≥ 1 ({concurrency}), "
                f"timeout_s > 0 ({timeout_s}) and max_new_tokens ≥ 1 ({max_new_tokens})"
            )
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_new_tokens = max_new_tokens
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.chunk_size = concurrency * 4
        self.concurrency = concurrency
        self.sleep = sleep

    def settings(self) -> dict:
        return {"backend": "openai", "model": self.model, "max_new_tokens": self.max_new_tokens}

    def answer(self, chats: list[list[Message]]) -> Iterator[tuple[int, str | RequestFailed]]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            index = {pool.submit(self._answer_or_failure, chat): i for i, chat in enumerate(chats)}
            for future in as_completed(index):
                yield index[future], future.result()

    def _answer_or_failure(self, chat: list[Message]) -> str | RequestFailed:
        try:
            return self.ask(chat)
        except RequestFailed as failure:
            return failure

    def ask(self, chat: list[Message]) -> str:
        """One chat's answer, retried as the class says."""
        body = json.dumps(
            {
                "model": self.model,
                "messages": chat,
                "temperature": 0,
                "max_tokens": self.max_new_tokens,
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        problems = []
        for attempt in range(1 + self.max_retries):
            if attempt:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return _content(response.read())
            except urllib.error.HTTPError as error:
                if error.code not in RETRY_STATUSES:
                    detail = error.read()[:300].decode(errors="replace")
                    raise BackendError(f"{self.url} answered HTTP {error.code}: {detail}") from None
                problems.append(f"HTTP {error.code}")
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                http.client.HTTPException,
            ) as error:
                problems.append(type(error).__name__ + f" {getattr(error, 'reason', error)}")
            except ValueError as error:  # not JSON, or JSON without an answer
                problems.append(f"bad body ({error})")
        raise RequestFailed(f"{len(problems)} attempts failed: {'; '.join(problems)}")


def _content(body: bytes) -> str:
    """The answer's text in a chat completions response."""
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"no choices[0].message.content: {body[:200]!r}") from error
    if not isinstance(content, str):
        raise ValueError(f"content is not text: {content!r}")
    return content
