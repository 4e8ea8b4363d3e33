"""The vision tower and projector over a batch of views, layer by layer, for the slots decoder's prefill.

The same modules and order as transformers' DeepseekOcr2VisionModel.forward followed by the
projector (get_image_features), run here as a generator that yields after each SAM layer and each
encoder layer: the runner decodes a step between them, so a page's vision pass (seconds on a CPU,
tens of milliseconds on a GPU) does not stop the rows already decoding. The encoder's attention
mask is made here (the visual tokens see each other, a query sees every visual token and the
queries before it: transformers' causal mask with the visual tokens as one bidirectional block),
once per size and device, as a boolean mask: what transformers builds for SDPA.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

_MASKS: dict[tuple[int, torch.device], torch.Tensor] = {}


def encoder_mask(patches: int, device: torch.device) -> torch.Tensor:
    """[1, 1, 2p, 2p] bool: query i sees key j when j <= i or both are visual tokens."""
    key = (patches, device)
    mask = _MASKS.get(key)
    if mask is None:
        index = torch.arange(2 * patches, device=device)
        mask = ((index[None, :] <= index[:, None]) | ((index[:, None] < patches) & (index[None, :] < patches)))[None, None]
        _MASKS[key] = mask
    return mask


def layers(model: Any) -> int:
    """How many chunks `features` yields: SAM's layers and the encoder's."""
    tower = model.model.vision_tower
    encoder = tower.vision_encoder
    return len(tower.sam_encoder.layers) + len(encoder.layers[: encoder.config.num_hidden_layers])


def features(model: Any, pixel_values: torch.Tensor, out: list[torch.Tensor]) -> Iterator[None]:
    """[n, 3, s, s] views -> [n, tokens, text hidden], appended to `out` at the end; yields after each layer."""
    tower = model.model.vision_tower
    sam = tower.sam_encoder
    hidden = sam.patch_embed(pixel_values)
    if sam.pos_embed is not None:
        hidden = hidden + sam.interpolate_pos_encoding(hidden.shape[1], hidden.shape[2])
    for layer in sam.layers:
        hidden = layer(hidden)
        yield
    hidden = sam.proj(sam.neck(hidden)).flatten(2).transpose(1, 2)
    views, patches, _ = hidden.shape
    queries = tower.query_768_resolution.weight if patches <= 144 else tower.query_1024_resolution.weight
    hidden = torch.cat([hidden, queries.unsqueeze(0).expand(views, -1, -1)], dim=1)
    encoder = tower.vision_encoder
    position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
    mask = encoder_mask(patches, hidden.device)
    rotary = encoder.rotary_emb(hidden, position_ids)
    for layer in encoder.layers[: encoder.config.num_hidden_layers]:
        hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, position_embeddings=rotary)
        yield
    hidden = encoder.norm(hidden)[:, patches:, :]
    out.append(model.model.multi_modal_projector(hidden))
