"""The prompts the model reads beside a page: the two modes and the bounds of a caller's own text.

The server builds its prompt from these, and the OcrBatch worker (and its CRD, through the batch
limits) checks an OcrBatch's mode and prompt against the same values, so a batch the API server
accepts is one the server serves. Pure data.
"""

from __future__ import annotations

IMAGE = "<image>"  # where the page goes in a prompt
PROMPTS = {
    "markdown": f"{IMAGE}\n<|grounding|>Convert the document to markdown.",  # grounded layout
    "free": f"{IMAGE}\nFree OCR.",  # plain text
}
MODES = tuple(PROMPTS)  # the prompt_mode values: markdown, free
MAX_PROMPT_CHARS = 8192  # a caller's prompt, with the `<image>` placeholder
MAX_PROMPT_TOKENS = 1024  # its tokens; the page's (up to 1121) come on top
