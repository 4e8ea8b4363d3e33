"""The official checkpoint layout written from a native model: the inverse of the server's load.

The server reads the `deepseek-ai/DeepSeek-OCR-2` upload (`model.sam_model.*` /
`model.qwen2_model.*` keys, one tensor per expert) by translating its config and letting
transformers map the keys (ocr_server.convert). Only the tiny model and the benchmark's
full-size random model go the other way, to write that layout from a native model; so this
half lives here, outside the product.
"""

from __future__ import annotations

import re
from typing import Any

# native key -> official key (the inverse of transformers' "deepseek_ocr2" renames).
_NATIVE_TO_OFFICIAL: list[tuple[str, str]] = [
    (r"^model\.vision_tower\.sam_encoder\.layers\.(\d+)\.layer_norm1\.", r"model.sam_model.blocks.\1.norm1."),
    (r"^model\.vision_tower\.sam_encoder\.layers\.(\d+)\.layer_norm2\.", r"model.sam_model.blocks.\1.norm2."),
    (r"^model\.vision_tower\.sam_encoder\.layers\.(\d+)\.attn\.", r"model.sam_model.blocks.\1.attn."),
    (r"^model\.vision_tower\.sam_encoder\.layers\.(\d+)\.mlp\.", r"model.sam_model.blocks.\1.mlp."),
    (r"^model\.vision_tower\.sam_encoder\.patch_embed\.projection\.", "model.sam_model.patch_embed.proj."),
    (r"^model\.vision_tower\.sam_encoder\.pos_embed", "model.sam_model.pos_embed"),
    (r"^model\.vision_tower\.sam_encoder\.neck\.conv1\.", "model.sam_model.neck.0."),
    (r"^model\.vision_tower\.sam_encoder\.neck\.layer_norm1\.", "model.sam_model.neck.1."),
    (r"^model\.vision_tower\.sam_encoder\.neck\.conv2\.", "model.sam_model.neck.2."),
    (r"^model\.vision_tower\.sam_encoder\.neck\.layer_norm2\.", "model.sam_model.neck.3."),
    (r"^model\.vision_tower\.sam_encoder\.proj\.conv1\.", "model.sam_model.net_2."),
    (r"^model\.vision_tower\.sam_encoder\.proj\.conv2\.", "model.sam_model.net_3."),
    (r"^model\.vision_tower\.vision_encoder\.layers\.", "model.qwen2_model.model.model.layers."),
    (r"^model\.vision_tower\.vision_encoder\.norm\.", "model.qwen2_model.model.model.norm."),
    (r"^model\.vision_tower\.query_768_resolution\.", "model.qwen2_model.query_768."),
    (r"^model\.vision_tower\.query_1024_resolution\.", "model.qwen2_model.query_1024."),
    (r"^model\.multi_modal_projector\.", "model.projector.layers."),
    (r"^model\.view_separator$", "model.view_seperator"),
    (r"^model\.language_model\.", "model."),
]


def native_to_official_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """Rename native keys to the official upload's names and split fused experts per expert."""
    out: dict[str, Any] = {}
    for key, tensor in state.items():
        new = key
        for pattern, repl in _NATIVE_TO_OFFICIAL:
            new, n = re.subn(pattern, repl, new)
            if n:
                break
        if new.endswith("mlp.experts.gate_up_proj"):
            prefix = new[: -len("gate_up_proj")]
            half = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = tensor[e, :half].clone()
                out[f"{prefix}{e}.up_proj.weight"] = tensor[e, half:].clone()
        elif new.endswith("mlp.experts.down_proj"):
            prefix = new[: -len("down_proj")]
            for e in range(tensor.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = tensor[e].clone()
        else:
            out[new] = tensor
    return out
