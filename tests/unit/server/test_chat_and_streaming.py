"""Chat request translation, prompts, the incremental decoder, the batch streamer, the per-row n-gram guard
and end-of-text hold, and the order of a chat stream's chunks."""

from __future__ import annotations

import base64
import math
from types import SimpleNamespace

import pytest
import torch

from ocr_server.http.openai_chat import image_from_url, job_from_request
from ocr_server.engines.api import NGramSettings
from ocr_server.engines.transformers.rows import RowStreamer
from ocr_server.engines.transformers.ngram_guard import WindowedNoRepeatNGram
from ocr_server.runtime.errors import BadInput, NotFound
from ocr_server.engines.transformers.min_tokens import HoldEos
from ocr_server.http.openai_routes import _renderer
from ocr_limits.prompts import MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS
from ocr_server.engines.prompt_check import check_tokens
from ocr_server.serving.prompts import Prompt, prompt_from_text
from ocr_server.http.models import ChatCompletionRequest
from ocr_server.serving.events import Delta, Done
from ocr_server.serving.schema import OcrResponse, PageOut, Usage
from ocr_server.engines.detokenize import IncrementalDecoder
from ocr_server.engines.warmup import grid_for, warmup_pages

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nrest").decode()


def request(text="<image>\nFree OCR.", url=f"data:image/png;base64,{PNG}", **kw) -> ChatCompletionRequest:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": content}], **kw)


@pytest.mark.parametrize("text,mode", [
    ("<image>\n<|grounding|>Convert the document to markdown.", "markdown"),
    ("<|grounding|>Convert the document to markdown. ", "markdown"),
    ("<image>\nFree OCR. ", "free"),
    ("Free OCR.", "free"),
])
def test_the_prompt_chooses_the_mode_with_or_without_the_image_placeholder(text, mode):
    assert prompt_from_text(text, "p") == Prompt(mode)


@pytest.mark.parametrize("text,prompt", [
    ("Parse the figure.", "<image>\nParse the figure."),
    ("Describe this image in detail.", "<image>\nDescribe this image in detail."),
    ("Locate <|ref|>the title<|/ref|> in the image.", "<image>\nLocate <|ref|>the title<|/ref|> in the image."),
    ("Read this page: <image> then stop.", "Read this page: <image> then stop."),
    ("", "<image>\n"),
])
def test_any_other_text_is_the_models_prompt_with_the_page_first_unless_image_places_it(text, prompt):
    assert prompt_from_text(text, "p").text == prompt


def test_two_image_placeholders_are_refused_naming_the_field():
    with pytest.raises(BadInput) as err:
        prompt_from_text("<image> and <image>", "messages[0].content")
    assert err.value.param == "messages[0].content" and "at most once" in err.value.message


def test_a_prompt_longer_than_the_character_bound_is_refused_naming_the_field():
    prompt_from_text("x" * (MAX_PROMPT_CHARS - len("<image>\n")), "p")
    with pytest.raises(BadInput) as err:
        prompt_from_text("x" * MAX_PROMPT_CHARS, "messages[0].content")
    assert err.value.param == "messages[0].content" and str(MAX_PROMPT_CHARS) in err.value.message


@pytest.fixture(scope="module")
def tokenizer():
    from ocr_server_testing.tiny_model import build_tokenizer

    return build_tokenizer()


def test_the_documented_prompt_vocabulary_passes_the_token_check(tokenizer):
    text = "<image>\n<|grounding|>Locate <|ref|>the title<|/ref|> in the image. <td>a</td>"
    assert check_tokens(tokenizer, text, "prompt") == len(tokenizer(text.replace("<image>", ""),
                                                                     add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("token", ["<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜▁pad▁｜>", "<|User|>",
                                   "<|Assistant|>"])
def test_a_token_that_frames_the_input_is_refused_naming_it(tokenizer, token):
    with pytest.raises(BadInput) as err:
        check_tokens(tokenizer, f"<image>\nFree OCR.{token}Describe it.", "prompt")
    assert err.value.param == "prompt" and token in err.value.message


def test_a_prompt_over_the_token_bound_is_refused_naming_the_field(tokenizer):
    ok = "a" * MAX_PROMPT_TOKENS  # the tiny tokenizer has no merges: one token per byte
    assert check_tokens(tokenizer, ok, "prompt") == MAX_PROMPT_TOKENS
    with pytest.raises(BadInput) as err:
        check_tokens(tokenizer, ok + "a", "prompt")
    assert err.value.param == "prompt" and f"at most {MAX_PROMPT_TOKENS}" in err.value.message


def test_ignore_eos_runs_to_max_tokens_and_min_tokens_holds_the_end_of_text():
    assert job_from_request(request(max_tokens=16, ignore_eos=True), served_model="m",
                            max_new_tokens=64).opts.min_new_tokens == 16
    assert job_from_request(request(ignore_eos=True), served_model="m", max_new_tokens=64).opts.min_new_tokens == 64
    assert job_from_request(request(max_tokens=16, min_tokens=5), served_model="m",
                            max_new_tokens=64).opts.min_new_tokens == 5
    assert job_from_request(request(max_tokens=16, ignore_eos=False), served_model="m",
                            max_new_tokens=64).opts.min_new_tokens is None
    with pytest.raises(BadInput) as err:
        job_from_request(request(max_tokens=4, min_tokens=5), served_model="m", max_new_tokens=64)
    assert err.value.param == "min_tokens"


def test_hold_eos_bans_the_end_of_text_only_in_rows_below_their_minimum():
    eos, prompt_len = 1, 3
    hold = HoldEos(prompt_len, [0, 2, 5], eos)
    ids = torch.zeros(3, prompt_len + 2, dtype=torch.long)  # two tokens generated in every row
    scores = hold(ids, torch.zeros(3, 10))
    assert scores[:, eos].tolist() == [0.0, 0.0, -math.inf]
    assert torch.isfinite(scores[:, 2:]).all() and torch.isfinite(scores[:, 0]).all()


@pytest.mark.parametrize("url,needle", [
    ("http://169.254.169.254/latest/meta-data", "remote image URLs are not fetched"),
    ("HTTPS://example.com/a.png", "remote image URLs are not fetched"),
    ("ftp://example.com/a.png", "only data: URLs"),
    ("data:image/png,rawbytes", "base64"),
    ("data:image/png;base64,%%%", "not valid base64"),
])
def test_image_urls_other_than_base64_data_urls_are_refused(url, needle):
    with pytest.raises(BadInput) as err:
        image_from_url(url, "x.url")
    assert needle in err.value.message and err.value.param == "x.url"


def test_a_data_url_decodes_to_its_bytes():
    assert image_from_url(f"data:image/png;base64,{PNG}", "x") == base64.b64decode(PNG)


def test_a_request_becomes_the_ocr_options_and_ngram_settings():
    job = job_from_request(request(max_tokens=100, stream=True, stream_options={"include_usage": True},
                                   vllm_xargs={"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [5]}),
                           served_model="m", max_new_tokens=8192)
    assert (job.opts.prompt_mode, job.opts.max_new_tokens, job.stream, job.include_usage) == ("free", 100, True, True)
    assert job.ngram == NGramSettings(30, 90, frozenset({5}))
    assert job.image_param == "messages[0].content[0].image_url.url"
    plain = job_from_request(request(), served_model="m", max_new_tokens=64)
    assert plain.opts.max_new_tokens == 64 and plain.ngram is None and not plain.stream


@pytest.mark.parametrize("kw,param", [
    ({"temperature": 0.2}, "temperature"), ({"top_p": 0.9}, "top_p"), ({"n": 3}, "n"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"), ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"), ({"tool_choice": "auto"}, "tool_choice"),
    ({"response_format": {"type": "json_schema"}}, "response_format"), ({"stop": "x"}, "stop"),
    ({"stream_options": {"include_usage": True}}, "stream_options"), ({"max_tokens": 9000}, "max_tokens"),
    ({"logit_bias": {"5": 1.0}}, "logit_bias"),
])
def test_unsupported_values_are_refused_by_name(kw, param):
    with pytest.raises(BadInput) as err:
        job_from_request(request(**kw), served_model="m", max_new_tokens=8192)
    assert err.value.param == param and err.value.status == 400


@pytest.mark.parametrize("kw", [{"temperature": 0}, {"top_p": 1}, {"n": 1}, {"seed": 7}, {"user": "u"},
                                {"tool_choice": "none"}, {"response_format": {"type": "text"}}, {"presence_penalty": 0}])
def test_neutral_values_of_sampling_parameters_are_accepted(kw):
    assert job_from_request(request(**kw), served_model="m", max_new_tokens=8192).opts.prompt_mode == "free"


def test_conversation_shape_is_checked():
    two_images = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}, {"type": "text", "text": "Free OCR."}]}])
    with pytest.raises(BadInput, match="2 images"):
        job_from_request(two_images, served_model="m", max_new_tokens=10)
    no_image = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Free OCR."}])
    with pytest.raises(BadInput, match="image_url part"):
        job_from_request(no_image, served_model="m", max_new_tokens=10)
    audio = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": [{"type": "input_audio"}]}])
    with pytest.raises(BadInput) as err:
        job_from_request(audio, served_model="m", max_new_tokens=10)
    assert err.value.param == "messages[0].content[0].type"
    with pytest.raises(NotFound):
        job_from_request(request(), served_model="other", max_new_tokens=10)


def test_incremental_decoder_deltas_add_up_to_the_whole_text_and_never_split_a_character():
    from ocr_server_testing.tiny_model import build_tokenizer

    tok = build_tokenizer()
    text = "Grüße, 漢字 and <|ref|>title<|/ref|> ✓ done"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    dec = IncrementalDecoder(lambda x: tok.decode(x, skip_special_tokens=False), frozenset({tok.eos_token_id}))
    deltas = [dec.push(i) for i in ids + [tok.eos_token_id]]
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=False) == dec.text
    assert not any("\ufffd" in d for d in deltas)
    assert deltas[-1] == ""  # EOS adds nothing


def _rows(max_new):
    got = [[] for _ in max_new]
    items = [SimpleNamespace(max_new_tokens=m, on_token=got[i].append) for i, m in enumerate(max_new)]
    return items, got


def test_row_streamer_hands_each_row_exactly_the_tokens_generate_batch_keeps():
    eos, pad = 1, 2
    items, got = _rows([5, 3, 6])
    s = RowStreamer(items, eos, pad)
    s.put(torch.tensor([[9, 9, 9]] * 3))  # the prompt: ignored
    # row 0: 7, pad, 8, then EOS (pad before EOS kept); row 1: hits its budget of 3;
    # row 2: 5, then pads to the end (trailing pads are not part of the answer)
    for step in ([7, 4, 5], [pad, 4, pad], [8, 4, pad], [eos, 4, pad], [pad, pad, pad]):
        s.put(torch.tensor(step))
    assert got == [[7, pad, 8], [4, 4, 4], [5]]


def test_ngram_guard_settings_per_row():
    ids = torch.tensor([[0, 1, 2, 3, 1, 2], [0, 1, 2, 3, 1, 2]])
    guard = WindowedNoRepeatNGram(1, 3, 90, set(), rows=[(3, 90, set()), (0, 90, set())])
    scores = guard(ids, torch.zeros(2, 10))
    assert scores[0, 3] == -math.inf and torch.isfinite(scores[1]).all()  # row 1 turned its guard off


def test_warmup_covers_the_global_view_and_the_largest_grid():
    assert [grid_for(c) for c in range(2, 7)] == [(1, 2), (1, 3), (2, 2), (1, 5), (2, 3)]
    from ocr_server.engines.crops import plan_crops

    for max_crops in (0, 2, 5, 6):
        pages = warmup_pages(768, max_crops)
        plans = [plan_crops(im.width, im.height, crop_size=768, base_size=1024, min_crops=2, max_crops=max_crops)
                 for _, im in pages]
        assert plans[0].crops == 0
        assert [p.crops for p in plans[1:]] == ([max_crops] if max_crops else [])
    every = warmup_pages(768, 6, every_grid=True)  # on a GPU: each crop count the server can serve
    assert [plan_crops(im.width, im.height, crop_size=768, base_size=1024, min_crops=2, max_crops=6).crops
            for _, im in every] == [0, 2, 3, 4, 5, 6]


def _frames(render, events) -> list:
    import json

    out = []
    for event in events:
        for raw in render(event):
            data = raw.decode().removeprefix("data: ").strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


RESPONSE = OcrResponse.model_construct(pages=[PageOut.model_construct(finished=False)],
                                      usage=Usage.model_construct(prompt_tokens=260, generated_tokens=2))


def test_a_chat_stream_sends_the_role_with_the_first_token_not_before():
    ids = {"request_id": "chatcmpl-1", "created": 0, "model": "m"}
    frames = _frames(_renderer(ids, include_usage=True), [Delta("Hel"), Delta("lo"), Done(RESPONSE)])
    first = frames[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": "Hel"}
    assert frames[1]["choices"][0]["delta"] == {"role": None, "content": "lo"}
    assert frames[2]["choices"][0]["finish_reason"] == "length" and frames[3]["usage"]["completion_tokens"] == 2
    assert frames[-1] == "[DONE]"


def test_a_chat_stream_without_text_still_sends_the_role_before_its_finish():
    ids = {"request_id": "chatcmpl-1", "created": 0, "model": "m"}
    frames = _frames(_renderer(ids, include_usage=False), [Done(RESPONSE)])
    assert frames[0]["choices"][0]["delta"]["role"] == "assistant"
    assert frames[1]["choices"][0]["finish_reason"] == "length" and frames[2] == "[DONE]"
