"""Parameter counts of the diffusion walkers (estimate/diffusion, pure Python) against the real diffusers and
transformers modules built on the meta device: every preset's components, and tiny variants of every class that
switch the options the presets do not (conv projections, no qk-norm, guidance embeddings, learned positions...)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from gpuscope.estimate.diffusion.components import parameter_count  # noqa: E402
from gpuscope.specs.diffusion import ComponentSpec, load_pipeline, preset_names  # noqa: E402


def _meta_count(comp: ComponentSpec) -> int:
    with torch.device("meta"):
        if comp.library == "diffusers":
            module = getattr(diffusers, comp.class_name).from_config(comp.config)
        else:
            cls = getattr(transformers, comp.class_name)
            module = cls(cls.config_class(**{k: v for k, v in comp.config.items() if k != "architectures"}))
    return sum(p.numel() for p in module.parameters())


def _distinct_components() -> list[tuple[str, str]]:
    """(preset, component) pairs, each distinct class + config once (the presets share text encoders and VAEs)."""
    seen, out = set(), []
    for p in preset_names():
        for name, comp in load_pipeline(p).components.items():
            key = (comp.class_name, json.dumps(comp.config, sort_keys=True))
            if key not in seen:
                seen.add(key)
                out.append((p, name))
    return out


PRESET_COMPONENTS = _distinct_components()


@pytest.mark.parametrize("preset,name", PRESET_COMPONENTS)
def test_preset_component_params_equal_meta_module(preset, name):
    comp = load_pipeline(preset).components[name]
    assert parameter_count(comp) == _meta_count(comp)


TINY = {
    "unet2d_conv_proj": ("diffusers", "UNet2DConditionModel", {
        "block_out_channels": [32, 64], "layers_per_block": 1, "attention_head_dim": 4, "cross_attention_dim": 24,
        "norm_num_groups": 8, "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "sample_size": 16}),
    "unet2d_text_time_linear": ("diffusers", "UNet2DConditionModel", {
        "block_out_channels": [32, 64, 64], "layers_per_block": 2, "attention_head_dim": [2, 4, 4],
        "transformer_layers_per_block": [1, 2, 3], "cross_attention_dim": 40, "norm_num_groups": 8,
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "use_linear_projection": True,
        "addition_embed_type": "text_time", "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 56}),
    "svd_unet": ("diffusers", "UNetSpatioTemporalConditionModel", {
        "block_out_channels": [32, 64], "layers_per_block": 1, "num_attention_heads": [2, 4],
        "cross_attention_dim": 24, "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 24,
        "down_block_types": ["CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"],
        "up_block_types": ["UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"], "num_frames": 4}),
    "sd3_plain": ("diffusers", "SD3Transformer2DModel", {
        "sample_size": 16, "patch_size": 2, "in_channels": 4, "num_layers": 3, "attention_head_dim": 8,
        "num_attention_heads": 2, "joint_attention_dim": 24, "caption_projection_dim": 16,
        "pooled_projection_dim": 12, "out_channels": 4, "pos_embed_max_size": 32}),
    "sd3_dual_rms": ("diffusers", "SD3Transformer2DModel", {
        "sample_size": 16, "patch_size": 2, "in_channels": 4, "num_layers": 3, "attention_head_dim": 8,
        "num_attention_heads": 2, "joint_attention_dim": 24, "caption_projection_dim": 16,
        "pooled_projection_dim": 12, "out_channels": 4, "pos_embed_max_size": 32,
        "dual_attention_layers": [0, 1], "qk_norm": "rms_norm"}),
    "flux_guidance": ("diffusers", "FluxTransformer2DModel", {
        "patch_size": 1, "in_channels": 16, "num_layers": 2, "num_single_layers": 2, "attention_head_dim": 8,
        "num_attention_heads": 2, "joint_attention_dim": 24, "pooled_projection_dim": 12, "guidance_embeds": True,
        "axes_dims_rope": [2, 3, 3]}),
    "cogvideox_learned_pos": ("diffusers", "CogVideoXTransformer3DModel", {
        "num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4, "out_channels": 4, "num_layers": 2,
        "text_embed_dim": 24, "time_embed_dim": 12, "sample_width": 8, "sample_height": 8, "sample_frames": 9,
        "max_text_seq_length": 6}),
    "vae_kl_quant": ("diffusers", "AutoencoderKL", {
        "block_out_channels": [32, 64], "layers_per_block": 1, "latent_channels": 4, "norm_num_groups": 8,
        "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2}),
    "vae_kl_no_attn": ("diffusers", "AutoencoderKL", {
        "block_out_channels": [32, 32, 64], "layers_per_block": 2, "latent_channels": 16, "norm_num_groups": 8,
        "down_block_types": ["DownEncoderBlock2D"] * 3, "up_block_types": ["UpDecoderBlock2D"] * 3,
        "mid_block_add_attention": False, "use_quant_conv": False, "use_post_quant_conv": False}),
    "vae_temporal": ("diffusers", "AutoencoderKLTemporalDecoder", {
        "block_out_channels": [32, 64], "layers_per_block": 2, "latent_channels": 4,
        "down_block_types": ["DownEncoderBlock2D"] * 2}),
    "vae_cogvideox": ("diffusers", "AutoencoderKLCogVideoX", {
        "block_out_channels": [32, 32, 64, 64], "layers_per_block": 1, "latent_channels": 4, "norm_num_groups": 8}),
    "clip_text_gelu": ("transformers", "CLIPTextModelWithProjection", {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "projection_dim": 24, "hidden_act": "gelu", "vocab_size": 99, "max_position_embeddings": 16}),
    "clip_vision": ("transformers", "CLIPVisionModelWithProjection", {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "projection_dim": 24, "image_size": 32, "patch_size": 8}),
    "t5_relu": ("transformers", "T5EncoderModel", {
        "d_model": 32, "d_ff": 64, "d_kv": 8, "num_heads": 4, "num_layers": 2, "vocab_size": 99,
        "feed_forward_proj": "relu"}),
    "t5_gated": ("transformers", "T5EncoderModel", {
        "d_model": 32, "d_ff": 64, "d_kv": 8, "num_heads": 4, "num_layers": 3, "vocab_size": 99,
        "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 16}),
}

ROLE = {"UNet2DConditionModel": "denoiser", "UNetSpatioTemporalConditionModel": "denoiser",
        "SD3Transformer2DModel": "denoiser", "FluxTransformer2DModel": "denoiser",
        "CogVideoXTransformer3DModel": "denoiser", "AutoencoderKL": "vae", "AutoencoderKLTemporalDecoder": "vae",
        "AutoencoderKLCogVideoX": "vae", "CLIPVisionModelWithProjection": "image_encoder"}


@pytest.mark.parametrize("case", sorted(TINY))
def test_tiny_variant_params_equal_meta_module(case):
    lib, cls, cfg = TINY[case]
    comp = ComponentSpec(case, ROLE.get(cls, "text_encoder"), lib, cls, json.loads(json.dumps(cfg)))
    assert parameter_count(comp) == _meta_count(comp)


def test_known_totals():
    """Published sizes the presets must reproduce (diffusers model cards / papers): SD 1.5 UNet 859,520,964 and
    SDXL UNet 2,567,463,684 parameters."""
    assert parameter_count(load_pipeline("sd-1.5").components["unet"]) == 859_520_964
    assert parameter_count(load_pipeline("sdxl").components["unet"]) == 2_567_463_684
