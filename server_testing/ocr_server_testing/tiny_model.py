"""Write a complete, tiny, randomly initialised DeepSeek-OCR-2 model directory.

`python -m ocr_server_testing.tiny_model DIR [--layout native|official] [--for-vllm] [--seed N] [--loop]`

The model is transformers' real `DeepseekOcr2ForConditionalGeneration` (same modules, same key
names, same 144/256 query embeddings, so the same visual token counts as the real model) with tiny
widths and 2 layers per stack. The tokenizer keeps the real special tokens at their real ids
(BOS 0, EOS 1, PAD 2, <image> 128815 ... <|Assistant|> 128826) and the real embedding size 129280;
ordinary text is byte-level, and the ids in between are filler entries. Its OUTPUT TEXT IS
MEANINGLESS: the weights are random. Everything that serves it says so: its README.md carries the
server's marker (ocr_server.engines.tiny_marker), which the server reads at load.

`--layout official` writes the layout of the `deepseek-ai/DeepSeek-OCR-2` upload instead: a
remote-code style `config.json` (model_type deepseek_vl_v2, language_config/vision_config) and
`model.sam_model.*` / `model.qwen2_model.*` / per-expert keys in one safetensors shard with an
index. The server must translate it at load time (see ocr_server.convert).

`--for-vllm` writes the official layout with the REAL vision tower sizes (SAM ViT-B: width 768,
12 layers; Qwen2 encoder: width 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864;
projector input 896) and a tiny language model (width 64, 2 heads of 32: vLLM's CPU attention
needs head_dim >= 32). vLLM's `DeepseekOCR2ForCausalLM` hard-codes the vision tower and reads only
the language model's sizes from config.json, so a model tiny everywhere does not load there; this
one loads in both engines from the same directory (about 470 M parameters, 0.9 GB in bf16).
Random weights give near-uniform logits, where two engines' different kernels could flip a greedy
choice; its output head is scaled (HEAD_SCALE) so that the greedy margins are far above that
numerical noise. Its output is just as meaningless.
"""

from __future__ import annotations

import argparse
import json
import string
import sys
from pathlib import Path

from ocr_server.engines.tiny_marker import TINY_MARKER, TINY_MODEL_NAME

from .official_layout import native_to_official_state_dict

TINY_NOTICE = (
    f"{TINY_MARKER}: randomly initialised weights with the real DeepSeek-OCR-2 architecture "
    "and key names but tiny widths. Its output text is meaningless. For tests and demos only."
)

# The real special tokens and ids (the released tokenizer of deepseek-ai/DeepSeek-OCR-2).
SPECIAL_TOKENS: dict[str, int] = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<｜▁pad▁｜>": 2,
    "<image>": 128815,
    "<|ref|>": 128816,
    "<|/ref|>": 128817,
    "<|det|>": 128818,
    "<|/det|>": 128819,
    "<|grounding|>": 128820,
    "<td>": 128821,
    "</td>": 128822,
    "<tr>": 128823,
    "</tr>": 128824,
    "<|User|>": 128825,
    "<|Assistant|>": 128826,
}
VOCAB_SIZE = 129280  # real embedding rows; the tokenizer's highest id is 128826

TINY_SAM = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 1,  # the global-attention rel-pos bias is heads x 4096^2: keep CPU tests fast
    "global_attn_indexes": [1],
    "mlp_dim": 64,
    "output_channels": 32,
    "downsample_channels": [32, 64],
    "window_size": 14,
}
TINY_ENCODER = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 4096,
    "vocab_size": 1,
}
TINY_TEXT = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 8192,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "topk_method": "greedy",
    "n_group": 1,
    "topk_group": 1,
}


# --for-vllm: the real DeepSeek-OCR-2 vision tower (what vLLM hard-codes) and a tiny language model.
REAL_SAM = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "global_attn_indexes": [2, 5, 8, 11],
    "downsample_channels": [512, 1024],  # as in the official file; the translation makes the last 896
}
REAL_ENCODER = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
}
VLLM_TEXT = {**TINY_TEXT, "num_attention_heads": 2, "num_key_value_heads": 2}  # head_dim 32
HEAD_SCALE = 50.0  # lm_head multiplier of the --for-vllm model: sharp logits, large greedy margins
LOOP_EMBEDDING = 1000.0  # make_it_loop: far above what the random layers add to the residual stream


def _byte_level_alphabet() -> list[str]:
    from tokenizers import pre_tokenizers

    return sorted(pre_tokenizers.ByteLevel.alphabet())


def build_tokenizer():
    """A byte-level BPE tokenizer: real special tokens at real ids, bytes, then filler entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {tok: i for tok, i in SPECIAL_TOKENS.items() if i < 3}
    next_id = 3
    for ch in _byte_level_alphabet():
        vocab[ch] = next_id
        next_id += 1
    # Filler entries up to the first special id: short alphanumeric strings, so that random
    # ids decode to visible (meaningless) text. They have no merges, so encoding never emits them.
    alphabet = string.ascii_letters + string.digits
    n = 0
    first_special = min(i for i in SPECIAL_TOKENS.values() if i >= 3)
    while next_id < first_special:
        a, b = divmod(n, len(alphabet))
        a1, a2 = divmod(a, len(alphabet))
        word = "Ġ" + alphabet[a2 % len(alphabet)] + alphabet[b] + ("" if a1 == 0 else alphabet[a1 % len(alphabet)])
        if word not in vocab:
            vocab[word] = next_id
            next_id += 1
        n += 1
    for tok, i in SPECIAL_TOKENS.items():
        vocab[tok] = i

    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    bos = "<｜begin▁of▁sentence｜>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, 0)]
    )
    specials = [t for t, _ in sorted(SPECIAL_TOKENS.items(), key=lambda kv: kv[1])]
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token="<｜end▁of▁sentence｜>",
        pad_token="<｜▁pad▁｜>",
        padding_side="left",
        model_max_length=8192,
    )
    for t, i in SPECIAL_TOKENS.items():
        got = fast.convert_tokens_to_ids(t)
        if got != i:
            raise RuntimeError(f"tiny tokenizer: {t!r} got id {got}, expected {i}")
    return fast


def tiny_official_config(for_vllm: bool = False) -> dict:
    """The official remote-code config.json shape (deepseek-ai/DeepSeek-OCR-2), shrunk.

    The official file does not state the Qwen2 encoder depth/heads (the converter hard-codes
    24/14/2/4864); we add them under vision_config.width.qwen2-0-5b so the tiny model can be
    translated; ocr_server.convert falls back to the real values when they are absent.
    """
    sam_sizes, encoder_sizes = (REAL_SAM, REAL_ENCODER) if for_vllm else (TINY_SAM, TINY_ENCODER)
    lang = dict(VLLM_TEXT if for_vllm else TINY_TEXT)
    lang.update({"use_mla": False, "kv_lora_rank": None, "q_lora_rank": None, "qk_nope_head_dim": 0,
                 "qk_rope_head_dim": 0, "v_head_dim": 0, "model_type": "deepseek_v2",
                 "torch_dtype": "float32", "rope_theta": 10000.0, "rms_norm_eps": 1e-6})
    top = {k: v for k, v in lang.items() if k not in ("model_type",)}
    return {
        "_name_or_path": TINY_MODEL_NAME,
        "architectures": ["DeepseekOCR2ForCausalLM"],
        "auto_map": {
            "AutoConfig": "modeling_deepseekocr2.DeepseekOCR2Config",
            "AutoModel": "modeling_deepseekocr2.DeepseekOCR2ForCausalLM",
        },
        "model_type": "deepseek_vl_v2",
        "candidate_resolutions": [[1024, 1024]],
        "global_view_pos": "head",
        "tile_tag": "2D",
        "torch_dtype": "float32",
        "language_config": lang,
        "projector_config": {"input_dim": encoder_sizes["hidden_size"], "n_embed": lang["hidden_size"],
                             "projector_type": "linear"},
        "vision_config": {
            "image_size": 1024,
            "model_name": "deepencoderv2",
            "width": {
                "qwen2-0-5b": {
                    "dim": encoder_sizes["hidden_size"],
                    "layers": encoder_sizes["num_hidden_layers"],
                    "heads": encoder_sizes["num_attention_heads"],
                    "kv_heads": encoder_sizes["num_key_value_heads"],
                    "intermediate_size": encoder_sizes["intermediate_size"],
                },
                "sam_vit_b": {
                    "downsample_channels": sam_sizes["downsample_channels"],
                    "global_attn_indexes": sam_sizes["global_attn_indexes"],
                    "heads": sam_sizes["num_attention_heads"],
                    "layers": sam_sizes["num_hidden_layers"],
                    "width": sam_sizes["hidden_size"],
                    # the real SAM ViT-B's MLP (3072) and neck (256) are the translation's defaults
                    **({} if for_vllm else {"mlp_dim": sam_sizes["mlp_dim"], "output_channels": sam_sizes["output_channels"]}),
                },
            },
        },
        "_tiny_random_notice": TINY_NOTICE,
        **{k: v for k, v in top.items() if k in ("vocab_size", "hidden_size", "num_hidden_layers")},
    }


def make_it_loop(model) -> None:
    """Weights that repeat <td> until the token budget ends, whatever the page: every token's
    embedding gets a large constant in one dimension, which then dominates the last hidden state
    after the final norm (positive), and the output head keeps only <td>'s row, reading that
    dimension; every other logit is 0. <td> is on the n-gram guard's whitelist (tables repeat their
    cell tags), so the guard lets the loop run: the server's outcome is `loop`."""
    import torch

    with torch.no_grad():
        dim = 0
        model.get_input_embeddings().weight[:, dim] = LOOP_EMBEDDING
        head = model.get_output_embeddings().weight
        head.zero_()
        head[SPECIAL_TOKENS["<td>"], dim] = 1.0


VANISHING_STD = 1e-6  # weights drawn this small carry nothing of their input


def build_model(seed: int = 0, for_vllm: bool = False, loop: bool = False):
    """The native model with the tiny (or --for-vllm) config, float32, seeded; `loop`: make_it_loop."""
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration

    from ocr_server.engines.transformers.convert import translate_official_config

    config = DeepseekOcr2Config.from_dict(translate_official_config(tiny_official_config(for_vllm)))
    torch.manual_seed(seed)
    model = DeepseekOcr2ForConditionalGeneration(config).eval()
    # Random init leaves some tensors at zero (pos_embed, rel_pos), and SAM's config draws its
    # weights with a standard deviation of 1e-10 (its initializer_range, fit for loading trained
    # weights over): with those the vision tower's output hardly depends on the page, so every page
    # would read the same and a test could not tell one page's tokens from another's. Give them
    # values so that the tiny model exercises them like real weights would.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name or p.dim() == 0:
                continue
            if torch.count_nonzero(p) == 0 or (p.numel() > 1 and float(p.std()) < VANISHING_STD):
                p.normal_(0.0, 0.02)
        if for_vllm:
            model.lm_head.weight.mul_(HEAD_SCALE)
    if loop:
        make_it_loop(model)
    return model


def write_readme(out: Path, layout: str) -> None:
    extra = ("The vision tower has the real sizes (so vLLM loads it); the language model is tiny and its "
             f"output head is scaled by {HEAD_SCALE:g} for large greedy margins. The output is still meaningless.\n\n"
             if layout == "official-for-vllm" else "")
    (out / "README.md").write_text(
        f"# {TINY_MODEL_NAME} ({layout} layout)\n\n{TINY_NOTICE}\n\n{extra}"
        # No absolute path here: the folder's bytes must not depend on where it was written (the
        # image harness keys the baked-model image by them, so every checkout would re-import it).
        "Written by `python -m ocr_server_testing.tiny_model`. Serve it with "
        "`MODEL_PATH=<this folder> python -m ocr_server`.\n"
    )


def write_tiny_model(out_dir: str | Path, layout: str = "native", seed: int = 0, for_vllm: bool = False,
                     loop: bool = False) -> Path:
    """Write the tiny model directory in the given checkpoint layout and return its path.

    for_vllm: the official layout with the real vision tower (vLLM loads only that), weights
    stored in bf16 (half the bytes; both engines upcast them exactly to float32 on a CPU)."""
    from transformers import DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if for_vllm:
        layout = "official"
    model = build_model(seed, for_vllm, loop)
    tokenizer = build_tokenizer()
    if layout == "native":
        model.config.name_or_path = TINY_MODEL_NAME
        model.save_pretrained(out, save_original_format=False)  # native key names (transformers defaults to the original ones)
        processor = DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tokenizer)
        processor.save_pretrained(out)
    elif layout == "official":
        from safetensors.torch import save_file

        import torch

        state = native_to_official_state_dict(model.state_dict())
        if for_vllm:
            state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
        shard = "model-00001-of-000001.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(out / shard), metadata={"format": "pt"})
        total = sum(v.numel() * v.element_size() for v in state.values())
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": {k: shard for k in sorted(state)}}, indent=1)
        )
        (out / "config.json").write_text(json.dumps(tiny_official_config(for_vllm), indent=2))
        tokenizer.save_pretrained(out)
        # The official upload's processor_config.json belongs to its remote code; keep a marker.
        (out / "processor_config.json").write_text(
            json.dumps({"processor_class": "DeepseekOCR2Processor", "image_mean": [0.5] * 3,
                        "image_std": [0.5] * 3, "normalize": True}, indent=2)
        )
    else:
        raise ValueError(f"layout must be 'native' or 'official', got {layout!r}")
    write_readme(out, "official-for-vllm" if for_vllm else layout)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--layout", choices=["native", "official"], default="native")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--for-vllm", action="store_true",
                        help="official layout with the real vision tower sizes and a tiny language model: loads in both engines")
    parser.add_argument("--loop", action="store_true",
                        help="weights that repeat <td> until the token budget ends (make_it_loop): the server's outcome loop")
    args = parser.parse_args(argv)
    out = write_tiny_model(args.dir, args.layout, args.seed, for_vllm=args.for_vllm, loop=args.loop)
    print(f"wrote {'for-vllm' if args.for_vllm else args.layout} tiny model to {out}. {TINY_NOTICE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
