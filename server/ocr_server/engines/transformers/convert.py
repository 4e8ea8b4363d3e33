"""The two checkpoint layouts: detect, translate the official config, map keys, convert once.

Most users download `deepseek-ai/DeepSeek-OCR-2` (remote-code config, `model.sam_model.*` /
`model.qwen2_model.*` keys, one tensor per expert). transformers (>= 5.23) already maps those keys
on load (`conversion_mapping.py`, entry "deepseek_ocr2": renames plus fusing experts), but only
once it is given a native `DeepseekOcr2Config`; the official config.json has model_type
"deepseek_vl_v2" which transformers does not know. So the engine translates the config in memory
and lets transformers map the keys: no copy of 6.8 GB is needed. `python -m ocr_server.convert SRC
DST` writes a native directory once, for deployments that prefer that (init container).

The config translation follows transformers' `convert_deepseek_ocr2_weights_to_hf.py`, with one
difference: the Qwen2 encoder shape is read from `vision_config.width.qwen2-0-5b` when present
(the tiny model writes it) and falls back to the real values (24 layers, 14 heads, 2 KV heads,
4864) that the upstream converter hard-codes.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from ..checkpoint import NATIVE_MODEL_TYPE, is_official_layout, read_config_json

# Keys of the official language_config that the native text config does not have.
_DEAD_TEXT_KEYS = (
    "auto_map", "architectures", "lm_head", "rm_head", "qk_nope_head_dim", "qk_rope_head_dim",
    "use_mla", "v_head_dim", "kv_lora_rank", "q_lora_rank", "model_type", "torch_dtype", "dtype",
    "first_k_dense_replace", "_name_or_path", "transformers_version", "moe_layer_freq",
    "scoring_func", "aux_loss_alpha", "seq_aux", "norm_topk_prob", "ep_size",
)


def translate_official_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Official remote-code config.json -> a dict for `DeepseekOcr2Config.from_dict`."""
    raw = copy.deepcopy(raw)
    lang = dict(raw.get("language_config") or {})
    first_k = int(lang.get("first_k_dense_replace", raw.get("first_k_dense_replace", 0)) or 0)
    n_layers = int(lang.get("num_hidden_layers", 12))
    rope_theta = float(lang.pop("rope_theta", 10000.0))
    text = {k: v for k, v in lang.items() if k not in _DEAD_TEXT_KEYS and v is not None}
    text["mlp_layer_types"] = ["dense"] * first_k + ["sparse"] * (n_layers - first_k)
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}

    width = (raw.get("vision_config") or {}).get("width", {})
    sam = width.get("sam_vit_b", {})
    qwen = width.get("qwen2-0-5b", {})
    sam_config = {
        "hidden_size": sam.get("width", 768),
        "num_hidden_layers": sam.get("layers", 12),
        "num_attention_heads": sam.get("heads", 12),
        "global_attn_indexes": sam.get("global_attn_indexes", [2, 5, 8, 11]),
        # The official file says [512, 1024]; that is stale, the real net_3 outputs 896
        # (the released weights' shapes). The last channel count must equal the encoder width.
        "downsample_channels": [sam.get("downsample_channels", [512])[0], qwen.get("dim", 896)],
    }
    if "mlp_dim" in sam:
        sam_config["mlp_dim"] = sam["mlp_dim"]
    if "output_channels" in sam:
        sam_config["output_channels"] = sam["output_channels"]
    encoder_config = {
        "hidden_size": qwen.get("dim", 896),
        "num_hidden_layers": qwen.get("layers", 24),
        "num_attention_heads": qwen.get("heads", 14),
        "num_key_value_heads": qwen.get("kv_heads", 2),
        "intermediate_size": qwen.get("intermediate_size", 4864),
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "max_position_embeddings": qwen.get("max_position_embeddings", 131072),
        "vocab_size": 1,
    }
    out: dict[str, Any] = {
        "model_type": NATIVE_MODEL_TYPE,
        "text_config": text,
        "vision_config": {"sam_config": sam_config, "encoder_config": encoder_config},
        "image_token_id": 128815,
        "tie_word_embeddings": False,
    }
    if raw.get("_name_or_path"):
        out["_name_or_path"] = raw["_name_or_path"]
    return out


def convert(src: str | Path, dst: str | Path) -> Path:
    """One-time conversion of an official directory to the native layout (model, tokenizer, processor)."""
    import torch
    from transformers import (
        DeepseekOcr2Config,
        DeepseekOcr2ForConditionalGeneration,
        DeepseekOcr2ImageProcessor,
        DeepseekOcr2Processor,
        PreTrainedTokenizerFast,
    )

    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError("SRC and DST must be different directories")
    raw = read_config_json(src)
    if not is_official_layout(raw):
        raise ValueError(f"{src} is already in the transformers-native layout (model_type {raw.get('model_type')!r})")
    config = DeepseekOcr2Config.from_dict(translate_official_config(raw))
    model, info = DeepseekOcr2ForConditionalGeneration.from_pretrained(
        str(src), config=config, dtype=torch.bfloat16 if raw.get("torch_dtype") == "bfloat16" else torch.float32,
        local_files_only=True, output_loading_info=True,
    )
    if info["missing_keys"] or info["unexpected_keys"]:
        raise RuntimeError(
            f"conversion refused: missing keys {sorted(info['missing_keys'])[:10]}, "
            f"unexpected keys {sorted(info['unexpected_keys'])[:10]}"
        )
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst, save_original_format=False)  # native key names, no mapping needed at load
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(src), local_files_only=True)
    tokenizer.padding_side = "left"
    DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessor(), tokenizer=tokenizer).save_pretrained(dst)
    for extra in ("README.md", "LICENSE"):
        if (src / extra).exists():
            (dst / extra).write_bytes((src / extra).read_bytes())
    return dst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ocr_server.convert",
        description="Convert an official deepseek-ai/DeepSeek-OCR-2 directory to the transformers-native layout.",
    )
    parser.add_argument("src")
    parser.add_argument("dst")
    args = parser.parse_args(argv)
    try:
        out = convert(args.src, args.dst)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 2
    print(f"converted {args.src} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
