"""OpenAI-compatible providers against a real HTTP server on 127.0.0.1, through the real openai client."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

from eidetica.errors import DimensionMismatch, InvalidInput, ProviderError
from eidetica.providers import HashEmbedder, OpenAIEmbedder, OpenAILLM, count_tokens
from eidetica.providers._openai import EXTRACTION_PROMPT, SUMMARY_PROMPT
from tests.support.openai_server import FakeOpenAI

FAST = {"backoff": 0.01}


def embedder(server: FakeOpenAI, **kw) -> OpenAIEmbedder:
    """An embedder on the fake server with fast retries and no cache."""
    model = kw.pop("model", "text-embedding-3-small")
    return OpenAIEmbedder(model, base_url=server.base_url, **{"dimensions": 64, "cache_size": 0, **FAST, **kw})


def llm(server: FakeOpenAI, **kw) -> OpenAILLM:
    """A chat LLM on the fake server with fast retries."""
    return OpenAILLM("fake-chat", base_url=server.base_url, **{**FAST, **kw})


# --- the server itself ----------------------------------------------------------------------------


def test_server_speaks_the_wire_format(fake_openai: FakeOpenAI) -> None:
    import openai

    assert fake_openai.base_url.startswith("http://127.0.0.1:") and fake_openai.base_url.endswith("/v1")
    client = openai.OpenAI(api_key="x", base_url=fake_openai.base_url, max_retries=0)
    # The client's default encoding (base64) and plain floats give the same vectors.
    a = client.embeddings.create(model="m", input=["hello there"], dimensions=32)
    b = client.embeddings.create(model="m", input=["hello there"], dimensions=32, encoding_format="float")
    np.testing.assert_allclose(a.data[0].embedding, b.data[0].embedding, atol=1e-6)
    np.testing.assert_allclose(b.data[0].embedding, HashEmbedder(32).embed(["hello there"])[0], atol=1e-6)
    chat = client.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == "OK"
    fake_openai.script_chat("scripted!")
    chat = client.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == "scripted!"
    assert [m.id for m in client.models.list()] == ["text-embedding-3-small", "fake-chat"]
    assert len(fake_openai.calls("/embeddings")) == 2


def test_server_buffers_its_responses(fake_openai: FakeOpenAI) -> None:
    from tests.support.openai_server import _Handler

    # Buffered writes: ~2-5 ms per round trip instead of the 44 ms of an unbuffered handler
    # (a speed, so measured in STACK.md, not asserted here).
    assert _Handler.wbufsize >= 1 << 16
    e = embedder(fake_openai)
    assert [e.embed([f"call {i}"]).shape for i in range(3)] == [(1, 64)] * 3


# --- embeddings ----------------------------------------------------------------------------------


def test_embeddings_basic_and_dimensions_honoured(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai, dimensions=48)
    v = e.embed(["I live in Paris", "The stock market fell"])
    assert v.shape == (2, 48) and v.dtype == np.float32
    body = fake_openai.calls("/embeddings")[-1].body
    assert body["dimensions"] == 48 and body["model"] == "text-embedding-3-small"
    assert body["input"] == ["I live in Paris", "The stock market fell"]
    assert e.model_id == "text-embedding-3-small" and e.dim == 48


def test_dim_from_the_model_table_or_one_probe(fake_openai: FakeOpenAI) -> None:
    known = OpenAIEmbedder("text-embedding-3-small", base_url=fake_openai.base_url)
    assert known.dim == 1536
    assert fake_openai.calls("/embeddings") == []
    unknown = OpenAIEmbedder("some-local-model", base_url=fake_openai.base_url)
    assert unknown.dim == fake_openai.default_dim
    assert unknown.dim == fake_openai.default_dim
    assert len(fake_openai.calls("/embeddings")) == 1
    assert unknown.embed(["x"]).shape == (1, fake_openai.default_dim)


def test_retries_after_429_honouring_retry_after(fake_openai: FakeOpenAI, monkeypatch) -> None:
    from eidetica.providers import _openai

    slept: list[float] = []  # what the retry loop waits, recorded rather than timed
    monkeypatch.setattr(_openai, "time", types.SimpleNamespace(sleep=slept.append))
    e = embedder(fake_openai, backoff=0.0)  # our own backoff is 0: any wait is the server's
    fake_openai.fail_next("429", times=2, retry_after=0.2)
    v = e.embed(["rate limited"])
    assert v.shape == (1, 64)
    assert slept == [pytest.approx(0.2), pytest.approx(0.2)]
    assert [r.fault for r in fake_openai.calls("/embeddings")] == ["429", "429", None]


@pytest.mark.parametrize("kind", ["500", "503", "malformed", "wrong_shape"])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_retries_after_server_errors_and_malformed_json(fake_openai: FakeOpenAI, kind: str) -> None:
    e = embedder(fake_openai)
    fake_openai.fail_next(kind, times=2)
    expected = embedder(fake_openai).embed(["flaky"])
    fake_openai.reset()
    fake_openai.fail_next(kind, times=2)
    np.testing.assert_allclose(e.embed(["flaky"]), expected, atol=1e-6)
    assert len(fake_openai.calls("/embeddings")) == 3


@pytest.mark.parametrize("kind", ["500", "429", "malformed"])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_gives_up_after_max_retries(fake_openai: FakeOpenAI, kind: str) -> None:
    e = embedder(fake_openai, max_retries=2)
    fake_openai.fail_next(kind, times=10)
    with pytest.raises(ProviderError, match="after 3 attempts"):
        e.embed(["never works"])
    assert len(fake_openai.calls("/embeddings")) == 3


def test_timeout_is_a_provider_error(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai, timeout=0.2, max_retries=1)
    # The server would answer in an hour: the call can only come back by timing out itself.
    fake_openai.fail_next("slow", times=5, delay=3600.0)
    out: list[BaseException] = []

    def call() -> None:
        try:
            e.embed(["slow server"])
        except BaseException as err:  # noqa: BLE001 - checked below
            out.append(err)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(120)  # a deadline, not a measurement
    assert not t.is_alive(), "the client waited for the server instead of timing out"
    assert len(out) == 1 and isinstance(out[0], ProviderError) and "timed out" in str(out[0])
    assert len(fake_openai.calls("/embeddings")) == 2  # two attempts (max_retries=1)


def test_one_slow_answer_then_success(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai, timeout=0.5, max_retries=3)
    fake_openai.fail_next("slow", delay=3.0)
    assert e.embed(["eventually"]).shape == (1, 64)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_client_errors_are_not_retried(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai, max_retries=4)
    fake_openai.fail_next("401")
    with pytest.raises(ProviderError, match="401"):
        e.embed(["unauthorised"])
    fake_openai.fail_next("400")
    with pytest.raises(ProviderError, match="400"):
        e.embed(["bad request"])
    assert len(fake_openai.calls("/embeddings")) == 2


def test_wrong_vector_length_from_the_server(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai)
    fake_openai.fail_next("bad_output")
    with pytest.raises(DimensionMismatch):
        e.embed(["short vectors"])


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_batching_preserves_order(fake_openai: FakeOpenAI) -> None:
    texts = [f"text number {i}" for i in range(10)]
    batched = embedder(fake_openai, batch_size=3).embed(texts)
    assert len(fake_openai.calls("/embeddings")) == 4
    assert [len(r.body["input"]) for r in fake_openai.calls("/embeddings")] == [3, 3, 3, 1]
    single = np.stack([embedder(fake_openai).embed([t])[0] for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-6)


def test_cache_avoids_repeat_requests(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai, cache_size=100)
    a = e.embed(["same", "same", "other"])
    b = e.embed(["other", "same"])
    assert len(fake_openai.calls("/embeddings")) == 1
    assert fake_openai.calls("/embeddings")[0].body["input"] == ["same", "other"]
    np.testing.assert_allclose(b, a[[2, 0]], atol=1e-7)


def test_empty_string_is_not_sent_empty(fake_openai: FakeOpenAI) -> None:
    # The API rejects "" (so does the fake server); the embedder sends a space instead.
    v = embedder(fake_openai).embed(["", "x"])
    assert v.shape == (2, 64)
    assert "" not in fake_openai.calls("/embeddings")[-1].body["input"]


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_server_with_a_smaller_context_than_configured(fake_openai: FakeOpenAI) -> None:
    small = FakeOpenAI(max_input_tokens=1000).start()
    try:
        e = embedder(small, max_retries=4)
        v = e.embed(["lorem ipsum dolor sit amet " * 2000])
        assert v.shape == (1, 64)
        sent = small.calls("/embeddings")[-1].body["input"][0]
        assert count_tokens(sent) <= 1000
    finally:
        small.stop()


def test_concurrent_requests(fake_openai: FakeOpenAI) -> None:
    e = embedder(fake_openai)
    out: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        out[i] = e.embed([f"parallel {i}", "shared"])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 6
    for v in out.values():
        np.testing.assert_allclose(v[1], out[0][1], atol=1e-7)


# --- API keys ------------------------------------------------------------------------------------


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_api_key_is_read_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(api_key="sk-test-123") as server:
        monkeypatch.setenv("EIDETICA_TEST_KEY", "sk-test-123")
        e = OpenAIEmbedder("m", base_url=server.base_url, api_key_env="EIDETICA_TEST_KEY", dimensions=16)
        assert e.embed(["authorised"]).shape == (1, 16)
        assert server.calls("/embeddings")[-1].headers["authorization"] == "Bearer sk-test-123"
        monkeypatch.setenv("EIDETICA_TEST_KEY", "sk-wrong")
        wrong = OpenAIEmbedder("m", base_url=server.base_url, api_key_env="EIDETICA_TEST_KEY", dimensions=16, **FAST)
        with pytest.raises(ProviderError, match="401"):
            wrong.embed(["refused"])
        chat = OpenAILLM("fake-chat", base_url=server.base_url, api_key_env="EIDETICA_TEST_KEY", **FAST)
        with pytest.raises(ProviderError, match="401"):
            chat.extract_facts("I live in Paris")


def test_missing_key(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> None:
    monkeypatch.delenv("EIDETICA_ABSENT_KEY", raising=False)
    # A server given by base_url may need no key: a placeholder is sent.
    e = OpenAIEmbedder("m", base_url=fake_openai.base_url, api_key_env="EIDETICA_ABSENT_KEY", dimensions=8)
    assert e.embed(["no key needed"]).shape == (1, 8)
    # OpenAI itself always needs one: fail at construction, naming the variable.
    with pytest.raises(ProviderError, match="EIDETICA_ABSENT_KEY"):
        OpenAIEmbedder("text-embedding-3-small", api_key_env="EIDETICA_ABSENT_KEY")
    with pytest.raises(ProviderError, match="EIDETICA_ABSENT_KEY"):
        OpenAILLM("gpt-4o-mini", api_key_env="EIDETICA_ABSENT_KEY")


def test_argument_validation(fake_openai: FakeOpenAI) -> None:
    with pytest.raises(InvalidInput):
        OpenAIEmbedder("", base_url=fake_openai.base_url)
    with pytest.raises(InvalidInput):
        OpenAIEmbedder("m", base_url=fake_openai.base_url, dimensions=0)
    with pytest.raises(InvalidInput):
        OpenAIEmbedder("m", base_url=fake_openai.base_url, max_retries=-1)
    with pytest.raises(InvalidInput):
        OpenAIEmbedder("m", base_url="ftp://example.com")
    with pytest.raises(InvalidInput):
        OpenAILLM("m", base_url=fake_openai.base_url, timeout=0)


# --- chat: extraction ----------------------------------------------------------------------------


def test_extraction_request_and_parsing(fake_openai: FakeOpenAI) -> None:
    facts = llm(fake_openai).extract_facts("hi! I live in Paris and I'm allergic to cats")
    assert [(f.content, f.category) for f in facts] == [("I live in Paris.", "location"), ("I'm allergic to cats.", "health")]
    body = fake_openai.calls("/chat/completions")[-1].body
    assert body["model"] == "fake-chat" and body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": EXTRACTION_PROMPT}
    assert body["messages"][1] == {"role": "user", "content": "hi! I live in Paris and I'm allergic to cats"}


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("NONE", []),
        (" none. ", []),
        ('{"facts": []}', []),
        ('```json\n{"facts": [{"content": "I have a dog.", "category": "Possession"}]}\n```', [("I have a dog.", "possession")]),
        ('{"facts": [{"content": "  I am  vegan "}]}', [("I am vegan", "general")]),
        ('{"facts": [{"content": "A", "category": "x"}, {"content": "a", "category": "y"}]}', [("A", "x")]),
    ],
)
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_extraction_reply_forms(fake_openai: FakeOpenAI, reply: str, expected: list) -> None:
    fake_openai.script_chat(reply)
    facts = llm(fake_openai).extract_facts("anything")
    assert [(f.content, f.category) for f in facts] == expected


@pytest.mark.parametrize(
    "bad",
    [
        "Sure! Here you go: I live in Paris",
        '{"facts": [{"category": "location"}]}',
        '{"facts": "I live in Paris"}',
        '{"fact": []}',
        "[]",
    ],
)
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_malformed_extraction_is_retried(fake_openai: FakeOpenAI, bad: str) -> None:
    fake_openai.script_chat(bad)
    facts = llm(fake_openai).extract_facts("I live in Paris")
    assert [f.content for f in facts] == ["I live in Paris."]
    assert len(fake_openai.calls("/chat/completions")) == 2


def test_malformed_extraction_gives_up(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next("bad_output", times=10)
    with pytest.raises(ProviderError, match="after 3 attempts.*malformed"):
        llm(fake_openai, max_retries=2).extract_facts("I live in Paris")
    assert len(fake_openai.calls("/chat/completions")) == 3


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_chat_retries_and_timeouts(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next("429")
    fake_openai.fail_next("500")
    fake_openai.fail_next("malformed")
    fake_openai.fail_next("wrong_shape")
    assert llm(fake_openai).extract_facts("I'm a nurse")[0].content == "I'm a nurse."
    fake_openai.fail_next("slow", times=3, delay=3.0)
    with pytest.raises(ProviderError, match="timed out"):
        llm(fake_openai, timeout=0.2, max_retries=1).extract_facts("I'm a nurse")


def test_empty_message_makes_no_request(fake_openai: FakeOpenAI) -> None:
    assert llm(fake_openai).extract_facts("  ") == []
    assert fake_openai.calls("/chat/completions") == []


# --- chat: summaries and contradictions ------------------------------------------------------------


def test_summary_request_carries_budget_and_previous_summary(fake_openai: FakeOpenAI) -> None:
    out = llm(fake_openai).summarize(
        [("user", "I live in Lyon."), ("assistant", "Noted.")], target_tokens=30, previous_summary="User is Sam."
    )
    assert "Sam" in out and "Lyon" in out
    body = fake_openai.calls("/chat/completions")[-1].body
    assert body["messages"][0]["content"] == SUMMARY_PROMPT.format(target_tokens=30)
    assert "Previous summary:\nUser is Sam." in body["messages"][1]["content"]
    assert "user: I live in Lyon." in body["messages"][1]["content"]


def test_overlong_summary_is_trimmed_to_budget(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(" ".join(f"Sentence number {i} says something." for i in range(200)))
    out = llm(fake_openai).summarize([("user", "hello")], target_tokens=25)
    assert 0 < count_tokens(out) <= 25
    assert out.endswith(".")  # cut at a sentence boundary


def test_summary_with_no_messages_makes_no_request(fake_openai: FakeOpenAI) -> None:
    assert llm(fake_openai).summarize([], target_tokens=10, previous_summary="Kept.") == "Kept."
    assert fake_openai.calls("/chat/completions") == []


def test_empty_summary_reply_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat("   ")
    assert llm(fake_openai).summarize([("user", "I live in Lyon.")], target_tokens=20)
    assert len(fake_openai.calls("/chat/completions")) == 2


@pytest.mark.parametrize(("reply", "expected"), [("YES", True), ("Yes.", True), ("no", False), ("NO - they are compatible", False)])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_contradiction_replies(fake_openai: FakeOpenAI, reply: str, expected: bool) -> None:
    fake_openai.script_chat(reply)
    assert llm(fake_openai).contradicts("I live in Paris", "I live in Rome") is expected
    assert "OLD: I live in Paris\nNEW: I live in Rome" == fake_openai.calls("/chat/completions")[-1].body["messages"][1]["content"]


def test_contradiction_unclear_reply_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat("Maybe?", "YES")
    assert llm(fake_openai).contradicts("I live in Paris", "I live in Rome") is True
    assert len(fake_openai.calls("/chat/completions")) == 2
