"""A caller's prompt, tokenized as the engine will: no token that frames a sequence or a turn, and bounded.

A caller may use the prompt vocabulary the model documents (`<|grounding|>`, `<|ref|>`, `<|det|>`,
table tags) but none of the tokens that frame a sequence or a turn (begin/end of sentence,
padding, `<|User|>`): a caller writing those would make the model read a prompt it was never given.
Both engines check with their own tokenizer (OcrEngine.check_prompt).
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from ocr_limits.prompts import IMAGE, MAX_PROMPT_TOKENS

from ..runtime.errors import BadInput

# The special tokens a prompt may contain: the image placeholder and the documented prompt vocabulary.
ALLOWED_SPECIAL = frozenset({IMAGE, "<|grounding|>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>",
                             "<td>", "</td>", "<tr>", "</tr>"})


class AddedToken(Protocol):
    content: str
    special: bool


class Tokenizer(Protocol):
    """What is read of a transformers tokenizer here."""

    @property
    def added_tokens_decoder(self) -> Mapping[int, AddedToken]: ...

    def __call__(self, text: str, add_special_tokens: bool = ...) -> Mapping[str, Sequence[int]]: ...


def check_tokens(tokenizer: Tokenizer, text: str, param: str) -> int:
    """Tokenize a caller's prompt as the engine will; refuse framing special tokens and too many
    tokens. Returns the text's token count (the image placeholder not counted)."""
    ids = tokenizer(text.replace(IMAGE, ""), add_special_tokens=False)["input_ids"]
    specials = {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for i in ids:
        if i in specials and specials[i] not in ALLOWED_SPECIAL:
            raise BadInput(f"{param}: the prompt contains the special token {specials[i]!r}, which frames the model's "
                           f"input and may not be sent; allowed: {', '.join(sorted(ALLOWED_SPECIAL))}", param=param)
    if len(ids) > MAX_PROMPT_TOKENS:
        raise BadInput(f"{param}: the prompt text is {len(ids)} tokens; at most {MAX_PROMPT_TOKENS}", param=param)
    return len(ids)
