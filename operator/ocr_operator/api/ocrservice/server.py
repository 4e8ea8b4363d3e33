"""spec.engine's neighbours: which model the server loads (spec.model) and how it runs (spec.inference).

Every field here that the server reads names its ocr_limits setting, which holds the env name,
the key in the server's config.yaml, the default and the bounds (the server reads them there too),
so the operator renders exactly what the server validates.
"""

from __future__ import annotations

from ocr_limits import CROP_TOKENS, GLOBAL_TOKENS, MAX_CROPS, MIN_CROPS, TOKEN_CEILING, TOKEN_FLOOR, TRANSFORMERS, VLLM
from ocr_limits.settings import MODEL_REVISION

from ..fields import Constraints, Rule, api, model
from .source import ModelSource

ABSOLUTE = "^/.*"


@model
class PvcSource:
    claim_name: str = api("Name of the PersistentVolumeClaim in this namespace.", min_length=1, max_length=253,
                          required=True)
    sub_path: str | None = api("Sub-directory of the volume to mount.", max_length=4096)
    read_only: bool = api("Mount read-only (weights are only read at start).", default=True)


@model
class Model:
    __rules__ = (Rule("!(has(self.pvc) && has(self.path))",
                      "spec.model.pvc and spec.model.path are mutually exclusive: weights come from a "
                      "PersistentVolumeClaim mounted at cacheDir, or from a path inside the image", ".path",
                      lambda m: m.pvc is None or m.path is None),
                 Rule("!has(self.source) || (!has(self.pvc) && !has(self.path))",
                      "spec.model.source is mutually exclusive with spec.model.pvc and spec.model.path: the weights "
                      "come from one place", ".source",
                      lambda m: m.source is None or (m.pvc is None and m.path is None)))

    name: str = api("Model name ({env}); the server looks for weights in cacheDir/<name> unless path is set.",
                    setting="MODEL_NAME", min_length=1, max_length=253)
    revision: str | None = api("Revision of the weights (a tag or commit) the server reports in /health and in "
                               "results.", setting=MODEL_REVISION, max_length=128)
    cache_dir: str = api("Directory of the weights cache inside the container ({env}); the PVC, when set, is "
                         "mounted here.", setting="CACHE_DIR", pattern=ABSOLUTE, max_length=4096)
    path: str | None = api("Absolute path of the weights inside the image ({env}); use instead of pvc when the "
                           "image carries the weights.", setting="MODEL_PATH", pattern=ABSOLUTE, max_length=4096)
    pvc: PvcSource | None = api("PersistentVolumeClaim holding the weights cache, mounted at cacheDir.")
    source: ModelSource | None = api(
        "Where the weights come from instead of pvc or path: an OCI image mounted read-only at cacheDir/<name>, or "
        "an S3 prefix fetched into a cache volume.")
    checksums: tuple[tuple[str, str], ...] = api(
        "Expected sha256 of weight files, by path relative to the model directory (`python -m "
        "ocr_server.checksums DIR` prints this block). The server verifies every listed file before it loads the "
        "model and exits naming the first missing or different file, so the pod fails and the rollback takes "
        "over; the list also goes on the pods (annotation ocr.causalflow.dev/model-checksums), so a change rolls "
        "them.", max_properties=64, item=Constraints(pattern="^[0-9a-f]{64}$"))


TRANSFORMERS_CROPS = (TRANSFORMERS.default_max_visual_tokens - GLOBAL_TOKENS) // CROP_TOKENS


@model
class Inference:
    """spec.inference, the server's model/runtime settings.

    Contract with the server (ocr_server's config), checked for every CRD-valid combination by
    tests/unit/test_config_contract.py: whatever the CRD (and `parse`) accepts renders a
    config.yaml the server starts with, and each default here is the server's own default.
    The model fixes the layout: 768 px crops (144 tokens) beside one 1024 px global view (256),
    so inputSize < baseSize; visual tokens are 256 + 144 per crop with 0 or 2..6 crops (ocr_limits)."""

    __rules__ = (Rule("!has(self.inputSize) || !has(self.baseSize) || self.inputSize < self.baseSize",
                      "spec.inference.inputSize (local crop) must be smaller than spec.inference.baseSize (global "
                      "view): DeepSeek-OCR 2 reads 768 px crops (144 tokens each) beside one 1024 px global view "
                      "(256 tokens), and the server refuses any other layout at startup", ".inputSize",
                      lambda i: i.input_size < i.base_size),)

    input_size: int = api("Side of each local crop in pixels ({env}); the model has learned queries for 768 (144 "
                          "tokens) and 1024 (256 tokens) only.", setting="INPUT_SIZE")
    base_size: int = api("Side of the global view in pixels ({env}).", setting="BASE_SIZE")
    min_visual_tokens: int = api(
        f"Smallest visual token budget per image ({{env}}), {TOKEN_FLOOR}..{TOKEN_CEILING}: {GLOBAL_TOKENS} (global "
        f"view) + {CROP_TOKENS} per crop with {MIN_CROPS}..{MAX_CROPS} crops; at most "
        f"{VLLM.highest_min_visual_tokens} with spec.engine {VLLM.name}.", setting="MIN_VISUAL_TOKENS")
    # None: the engine's default (1024, or 1120 with vLLM), filled in by OcrServiceSpec.
    max_visual_tokens: int | None = api(
        f"Largest visual token budget per image ({{env}}), {TOKEN_FLOOR}..{TOKEN_CEILING} ({TOKEN_CEILING} = global "
        f"view + {MAX_CROPS} crops). Unset, it follows spec.engine: {TRANSFORMERS.default_max_visual_tokens} with "
        f"{TRANSFORMERS.name} (up to {TRANSFORMERS_CROPS} crops), {VLLM.default_max_visual_tokens} with {VLLM.name}, "
        f"which serves only {VLLM.fixed_max_visual_tokens}.", setting="MAX_VISUAL_TOKENS")
    concurrency: int = api("Requests processed at once per pod ({env}).", setting="CONCURRENCY")
    batch_size: int = api("Largest batch sent to the GPU ({env}): a generate() batch, the slots decoder's slots on "
                          "a CPU when decodeSlots is 0, or vLLM's max_num_seqs.", setting="BATCH_SIZE")
    # 0: the server's own choice (64 on a GPU); left out of config.yaml then, so the config (and
    # the revision) of an OcrService made before the field stays as it was.
    decode_slots: int = api(
        "Pages the transformers engine's slots decoder runs at once ({env}), each with its own slot of a KV cache "
        "sized for the longest prompt plus maxNewTokens; 0 lets the server choose (64 on a GPU, about 37 GiB of KV "
        "for the full-size model with maxNewTokens 8192, sized for an H200; batchSize on a CPU). Lower it on a GPU "
        "with less memory: a cache that does not fit stops the server at start-up, naming {env}. Unused with "
        "spec.engine vllm.", setting="DECODE_SLOTS", omit_default=True)
    timeout_seconds: int = api("Deadline of one request in seconds ({env}); later requests get 504.",
                               setting="TIMEOUT_SEC")
    max_new_tokens: int = api("Largest number of generated tokens per image ({env}); at most 8192, the model's "
                              "context.", setting="MAX_NEW_TOKENS")
