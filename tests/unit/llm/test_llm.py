"""`oodmol llm`'s parts: the number parser, BOOM's prompt and few-shot examples, the
resumable answers file, and both backends against offline stand-ins (a tiny random
causal LM, a scripted chat completions server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate
from llm_helpers import StubServer, save_tiny_causal_lm, stub_server

from oodmol.cli.llm import main
from oodmol.config import compose_config
from oodmol.llm.answers import AnswerLog, AnswerLogError
from oodmol.llm.backends import BackendError, HFBackend, OpenAIBackend, RequestFailed
from oodmol.llm.parse import first_number
from oodmol.llm.prompt import FewShot, PromptSpec, conversation, plain_text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The density is 1.2345 g/cm3", 1.2345),
        ("-12.5", -12.5),
        ("1e-3", 0.001),
        ("no idea", None),
        ("1,234.5", 1234.5),
        ("\u22120.2500 Ha", -0.25),  # Unicode minus
        ("+2.5E+02 kcal/mol", 250.0),
        (".5", 0.5),
        ("For SMILES CC1=CC(O)=C1 the value is 0.7", 0.7),  # ring digits are no number
        ("H2O: 3.0", 3.0),
        ("(-3.5)", -3.5),
        ("1e999", None),  # not finite
        ("", None),
    ],
)
def test_first_number_known_answers(text: str, value: float | None) -> None:
    assert first_number(text) == value


def _task_spec(name: str) -> PromptSpec:
    cfg = compose_config("llm", [f"task={name}", "backend=hf", "hf.model=m", "out=o.csv"])
    task = instantiate(cfg.task)
    return PromptSpec(task.property, task.description, task.units)


def test_prompt_is_booms_word_for_word_with_the_tasks_units() -> None:
    """BOOM's appendix E prompt; density in g/cm³ and HoF in kcal/mol (BOOM's Tables 2
    and 10 print these two units swapped)."""
    assert _task_spec("csd10k_density").question("CCO") == (
        "Only return a floating point number with 4 digits after the decimal point. "
        "For SMILES: CCO predict the crystal density (DFT crystal density of CSD-derived "
        "CHNO molecules (10k set)) in g/cm³ value:"
    )
    assert _task_spec("csd10k_hof").question("C").endswith(") in kcal/mol value:")
    assert _task_spec("qm9_homo").question("C").endswith(") in Ha value:")


def test_prompt_without_units_is_refused() -> None:
    with pytest.raises(ValueError, match=r"units.*prompt\.units="):
        PromptSpec("y", "", "")


def test_few_shot_examples_are_training_molecules_fixed_per_molecule() -> None:
    smiles = np.array([f"C{'C' * i}O" for i in range(30)])
    values = np.arange(30) / 7
    shots = FewShot(smiles, values, k=3, seed=5)
    first = shots.examples(101)
    assert first == shots.examples(101)  # the same on a rerun, in any order
    assert len({tuple(shots.examples(i)) for i in range(10)}) > 1  # drawn per molecule
    assert FewShot(smiles, values, 3, seed=6).examples(101) != first
    assert len({s for s, _ in first}) == 3
    for s, v in first:
        assert values[list(smiles).index(s)] == v
    chat = conversation(PromptSpec("p", "", "u"), "CCN", first)
    assert [m["role"] for m in chat] == ["user", "assistant"] * 3 + ["user"]
    assert chat[1]["content"] == f"{first[0][1]:.4f}"
    assert chat[-1]["content"].endswith("For SMILES: CCN predict the p in u value:")
    with pytest.raises(ValueError, match="between 0 and the 30 training molecules"):
        FewShot(smiles, values, k=31, seed=0)


def test_plain_text_puts_answers_after_their_questions() -> None:
    chat = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "1.0000"},
        {"role": "user", "content": "Q2"},
    ]
    assert plain_text(chat) == "Q1 1.0000\nQ2"


def test_answer_log_drops_a_cut_line_and_refuses_other_settings(tmp_path: Path) -> None:
    path = tmp_path / "a.answers.jsonl"
    log = AnswerLog(path, {"model": "m", "shots": 0})
    log.append([{"mol_id": 3, "answer": "1.5", "value": 1.5}])
    with path.open("a") as file:  # a run killed while writing
        file.write('{"mol_id": 4, "answ')
    again = AnswerLog(path, {"model": "m", "shots": 0})
    assert list(again.records) == [3]
    again.append([{"mol_id": 4, "answer": "x", "value": None}])
    assert list(AnswerLog(path, {"model": "m", "shots": 0}).records) == [3, 4]
    with pytest.raises(AnswerLogError, match=r"shots: 0 there, 2 now"):
        AnswerLog(path, {"model": "m", "shots": 2})


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def _in_order(backend, chats: list) -> list:
    """A backend's answers in the chats' order (it yields them as they come)."""
    replies = dict(backend.answer(chats))
    assert sorted(replies) == list(range(len(chats)))
    return [replies[i] for i in range(len(chats))]


def _greedy(backend: HFBackend, text: str, add_special_tokens: bool) -> str:
    """The reference: argmax of the next-token logits, one token at a time, until the
    token budget or the end-of-text token."""
    import torch

    ids = backend.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
    new = []
    with torch.no_grad():
        for _ in range(backend.max_new_tokens):
            logits = backend.model(torch.tensor([ids + new])).logits[0, -1]
            token = int(logits.argmax())
            if token == backend.tokenizer.eos_token_id:
                break
            new.append(token)
    return backend.tokenizer.decode(new, skip_special_tokens=True)


CHATS = [
    conversation(PromptSpec("crystal density", "", "g/cm³"), smiles, examples)
    for smiles, examples in [("CCO", []), ("c1ccccc1O", [("CC", 0.5)]), ("C#N", [])]
]


def test_hf_backend_answers_by_greedy_decoding(tiny_lm: Path, one_thread) -> None:
    """Batched (left-padded) answers equal a token-by-token argmax reference, prompt
    left out of the answer."""
    backend = HFBackend(str(tiny_lm), max_new_tokens=6, batch_size=3, device="cpu")
    assert backend.settings()["chat_template"] is False
    answers = _in_order(backend, CHATS)
    assert answers == [_greedy(backend, plain_text(c), True) for c in CHATS]
    assert answers == [_in_order(backend, [c])[0] for c in CHATS]


def test_hf_backend_uses_the_tokenizers_chat_template(
    tiny_lm: Path, tmp_path: Path, one_thread
) -> None:
    template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    folder = save_tiny_causal_lm(tmp_path / "chat", chat_template=template)
    backend = HFBackend(str(folder), max_new_tokens=4, device="cpu")
    assert backend.render(CHATS[1]) == (
        f"<user>{CHATS[1][0]['content']}\n<assistant>0.5000\n<user>{CHATS[1][2]['content']}\n"
        "<assistant>"
    )
    assert _in_order(backend, CHATS[:1]) == [_greedy(backend, backend.render(CHATS[0]), False)]
    with pytest.raises(BackendError, match="chat_template=true"):
        HFBackend(str(tiny_lm), chat_template=True, device="cpu")


def _chat(smiles: str) -> list[dict]:
    return conversation(PromptSpec("p", "", "u"), smiles, [])


def test_openai_backend_retries_what_can_be_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A good answer; a 500, a malformed body and a timeout each followed by an answer;
    a server that keeps failing; the key from the environment; backoff doubling."""
    monkeypatch.setenv("STUB_KEY", "sk-test")
    stub = StubServer(
        default=lambda s: f"{len(s)}.0000",
        script={
            "C500": [("status", 500), ("answer", "2.5")],
            "Cbad": [("garbage", None), ("answer", "abc")],
            "Cslow": [("sleep", 2.0), ("answer", "3.25")],
            "Cdown": [("status", 503)],
        },
    )
    waits: list[float] = []
    with stub_server(stub):
        backend = OpenAIBackend(
            "tiny",
            stub.url,
            api_key_env="STUB_KEY",
            timeout_s=0.5,
            max_retries=2,
            backoff_s=0.01,
            concurrency=2,
            sleep=waits.append,
        )
        answers = _in_order(backend, [_chat(s) for s in ("CCO", "C500", "Cbad", "Cslow", "Cdown")])
    assert answers[:4] == ["3.0000", "2.5", "abc", "3.25"]
    assert isinstance(answers[4], RequestFailed)
    assert str(answers[4]) == "3 attempts failed: HTTP 503; HTTP 503; HTTP 503"
    assert dict(stub.asked) == {"CCO": 1, "C500": 2, "Cbad": 2, "Cslow": 2, "Cdown": 3}
    assert sorted(waits) == [0.01, 0.01, 0.01, 0.01, 0.02]
    request = stub.requests[0]
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"]["temperature"] == 0 and request["body"]["max_tokens"] == 24


def test_openai_backend_stops_on_errors_retrying_cannot_mend() -> None:
    with stub_server(StubServer(default=lambda s: "1.0")) as stub:
        backend = OpenAIBackend("missing", stub.url, api_key_env=None, sleep=lambda s: None)
        with pytest.raises(BackendError, match="HTTP 404"):
            backend.ask(_chat("CCO"))
        assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["out=o.csv"], "backend=... is required"),
        (["backend=gpt", "out=o.csv"], "backend='gpt'; one of hf, openai"),
        (["backend=openai", "out=o.csv"], "openai.model=... is required"),
        (["task=nope", "backend=hf", "out=o.csv"], "task=nope: there is no task 'nope'"),
    ],
)
def test_usage_errors_are_named_before_any_data_is_read(
    args: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_help_says_how_to_run_and_score(capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    assert "oodmol evaluate task=csd10k_density split=ood predictions=llm.csv" in (
        capsys.readouterr().out
    )


def test_hf_backend_names_a_missing_model_folder(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no such folder"):
        HFBackend(str(tmp_path / "nowhere"))
