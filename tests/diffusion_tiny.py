"""Tiny diffusers folders (model_index.json + component config.json) for the bench diffusion tests and for
research/scripts/gpu_diffusion.sh's CPU rehearsal: every denoiser kind gpuscope measures (UNet2DCondition as in
SD 1.5 and SDXL, UNetSpatioTemporal as in SVD, SD3's MMDiT, Flux's DiT, CogVideoX's 3-D transformer), their VAEs
and text or image encoders, all at a few thousand parameters.

    python tests/diffusion_tiny.py DIR      # writes DIR/<name>/ for each name in FOLDERS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CLIP = {"model_type": "clip_text_model", "hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 4,
        "num_hidden_layers": 2, "max_position_embeddings": 77, "vocab_size": 1000, "projection_dim": 32,
        "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}
T5 = {"model_type": "t5", "d_model": 32, "d_ff": 37, "d_kv": 8, "num_heads": 4, "num_layers": 2,
      "vocab_size": 1000, "feed_forward_proj": "gated-gelu", "is_encoder_decoder": True}
VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 4,
          "num_hidden_layers": 2, "image_size": 224, "patch_size": 14, "projection_dim": 32}
VAE = {"block_out_channels": [8, 16], "down_block_types": ["DownEncoderBlock2D"] * 2,
       "up_block_types": ["UpDecoderBlock2D"] * 2, "latent_channels": 4, "layers_per_block": 1,
       "norm_num_groups": 4, "sample_size": 32, "force_upcast": True}
UNET_SD = {"block_out_channels": [8, 16], "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
           "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "cross_attention_dim": 32, "layers_per_block": 1,
           "attention_head_dim": 2, "norm_num_groups": 4, "in_channels": 4, "out_channels": 4, "sample_size": 8}
UNET_XL = dict(UNET_SD, cross_attention_dim=64, addition_embed_type="text_time", addition_time_embed_dim=8,
               projection_class_embeddings_input_dim=80, transformer_layers_per_block=[1, 1])
UNET_SVD = {"block_out_channels": [32, 64],  # its ResNet blocks use 32 groups
            "down_block_types": ["CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"],
            "up_block_types": ["UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"],
            "cross_attention_dim": 32, "layers_per_block": 1, "num_attention_heads": [2, 2], "in_channels": 8,
            "out_channels": 4, "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 24,
            "num_frames": 4, "sample_size": 8}
SVD_VAE = {"block_out_channels": [32, 64], "down_block_types": ["DownEncoderBlock2D"] * 2, "latent_channels": 4,
           "layers_per_block": 1, "force_upcast": True}  # 32 groups in its decoder too
SD3 = {"sample_size": 8, "patch_size": 2, "in_channels": 4, "out_channels": 4, "num_layers": 2,
       "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 32, "caption_projection_dim": 16,
       "pooled_projection_dim": 64, "pos_embed_max_size": 16}
FLUX = {"patch_size": 1, "in_channels": 16, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
        "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32,  # 16 = 4 latent x 2x2
        "guidance_embeds": False, "axes_dims_rope": [4, 6, 6]}
COGVIDEOX = {"num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 4, "out_channels": 4,
             "time_embed_dim": 8, "text_embed_dim": 32, "num_layers": 1, "sample_width": 8, "sample_height": 8,
             "sample_frames": 9, "patch_size": 2, "temporal_compression_ratio": 4, "max_text_seq_length": 8,
             "use_rotary_positional_embeddings": True}
COGVAE = {"block_out_channels": [8, 16], "down_block_types": ["CogVideoXDownBlock3D"] * 2,
          "up_block_types": ["CogVideoXUpBlock3D"] * 2, "latent_channels": 4, "layers_per_block": 1,
          "norm_num_groups": 4, "temporal_compression_ratio": 4}

D, T = "diffusers", "transformers"
FOLDERS = {
    "tiny-sd": ("StableDiffusionPipeline", {"unet": (D, "UNet2DConditionModel", UNET_SD),
                                            "vae": (D, "AutoencoderKL", VAE),
                                            "text_encoder": (T, "CLIPTextModel", CLIP),
                                            "scheduler": (D, "PNDMScheduler", None)}),
    "tiny-sdxl": ("StableDiffusionXLPipeline", {"unet": (D, "UNet2DConditionModel", UNET_XL),
                                                "vae": (D, "AutoencoderKL", VAE),
                                                "text_encoder": (T, "CLIPTextModel", CLIP),
                                                "text_encoder_2": (T, "CLIPTextModelWithProjection", CLIP),
                                                "scheduler": (D, "EulerDiscreteScheduler", None)}),
    "tiny-svd": ("StableVideoDiffusionPipeline", {"unet": (D, "UNetSpatioTemporalConditionModel", UNET_SVD),
                                                  "vae": (D, "AutoencoderKLTemporalDecoder", SVD_VAE),
                                                  "image_encoder": (T, "CLIPVisionModelWithProjection", VISION),
                                                  "scheduler": (D, "EulerDiscreteScheduler", None)}),
    "tiny-sd3": ("StableDiffusion3Pipeline", {"transformer": (D, "SD3Transformer2DModel", SD3),
                                              "vae": (D, "AutoencoderKL", VAE),
                                              "text_encoder": (T, "CLIPTextModelWithProjection", CLIP),
                                              "text_encoder_2": (T, "CLIPTextModelWithProjection", CLIP),
                                              "text_encoder_3": (T, "T5EncoderModel", T5),
                                              "scheduler": (D, "FlowMatchEulerDiscreteScheduler", None)}),
    "tiny-flux": ("FluxPipeline", {"transformer": (D, "FluxTransformer2DModel", FLUX),
                                   "vae": (D, "AutoencoderKL", VAE),
                                   "text_encoder": (T, "CLIPTextModel", CLIP),
                                   "text_encoder_2": (T, "T5EncoderModel", T5),
                                   "scheduler": (D, "FlowMatchEulerDiscreteScheduler", None)}),
    "tiny-cogvideox": ("CogVideoXPipeline", {"transformer": (D, "CogVideoXTransformer3DModel", COGVIDEOX),
                                             "vae": (D, "AutoencoderKLCogVideoX", COGVAE),
                                             "text_encoder": (T, "T5EncoderModel", T5),
                                             "scheduler": (D, "CogVideoXDDIMScheduler", None)}),
}


def write(root: Path, name: str) -> Path:
    """DIR/<name>/ with its model_index.json and each component's config.json; the folder."""
    pipe, comps = FOLDERS[name]
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    index: dict = {"_class_name": pipe}
    for comp, (lib, cls, cfg) in comps.items():
        index[comp] = [lib, cls]
        if cfg is not None:
            (d / comp).mkdir(exist_ok=True)
            (d / comp / "config.json").write_text(json.dumps({"_class_name": cls, **cfg}, indent=1))
    (d / "model_index.json").write_text(json.dumps(index, indent=1))
    return d


def write_all(root: Path) -> dict[str, Path]:
    return {n: write(root, n) for n in FOLDERS}


if __name__ == "__main__":
    for n, p in write_all(Path(sys.argv[1])).items():
        print(p)
