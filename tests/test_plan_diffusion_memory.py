"""The diffusion walkers' activation peak (estimate/diffusion/trace.py: what a no_grad forward holds at once) against
the peak of live bytes that PyTorch's profiler records on the CPU for the real diffusers modules, tiny configs with
random weights, fp32. The bytes alive at once follow Python's references the same way on every device; a CUDA run
adds the cuBLAS workspace and the kernels' own scratch (cuDNN, SDPA), which this test cannot see."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from gpuscope.estimate.diffusion import dit, unet, vae  # noqa: E402
from gpuscope.estimate.diffusion.trace import Trace  # noqa: E402


def _peak_bytes(fn) -> float:
    """The largest sum of live allocations the profiler saw during fn() (tensors made before it are not counted)."""
    with torch.no_grad():
        fn()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return float(peak)


def _sdpa(module):
    from diffusers.models.attention_processor import AttnProcessor2_0

    module.set_attn_processor(AttnProcessor2_0())
    return module.eval()


UNET = dict(block_out_channels=[64, 128, 256], attention_head_dim=[1, 2, 4], cross_attention_dim=64,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
            up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], layers_per_block=2,
            transformer_layers_per_block=[1, 2, 3], use_linear_projection=True, addition_embed_type="text_time",
            addition_time_embed_dim=256, projection_class_embeddings_input_dim=6 * 256 + 64)


@pytest.mark.parametrize("n,side", [(2, 32), (4, 32)])
def test_unet2d_activation_peak(n, side):
    torch.manual_seed(0)
    m = _sdpa(diffusers.UNet2DConditionModel.from_config(UNET))
    x, ctx = torch.randn(n, 4, side, side), torch.randn(n, 77, 64)
    add = {"text_embeds": torch.randn(n, 64), "time_ids": torch.randn(n, 6)}
    measured = _peak_bytes(lambda: m(x, torch.tensor([10.0] * n), ctx, added_cond_kwargs=add)) + x.numel() * 4
    t = Trace(act_b=4, w_b=4)
    unet.unet2d(t, UNET, n, side, side, 77)
    assert t.peak == pytest.approx(measured, rel=0.05)


def test_svd_unet_activation_peak():
    cfg = {"block_out_channels": [32, 64], "layers_per_block": 1, "num_attention_heads": [2, 4],
           "cross_attention_dim": 24, "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 24,
           "down_block_types": ["CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"],
           "up_block_types": ["UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"], "num_frames": 4}
    torch.manual_seed(0)
    m = _sdpa(diffusers.UNetSpatioTemporalConditionModel.from_config(cfg))
    x = torch.randn(2, 4, 8, 16, 16)
    measured = _peak_bytes(lambda: m(x, torch.tensor([1.0]), torch.randn(2, 1, 24), torch.randn(2, 3))) \
        + x.numel() * 4
    t = Trace(act_b=4, w_b=4)
    unet.unet_svd(t, cfg, 2, 4, 16, 16)
    assert t.peak == pytest.approx(measured, rel=0.05)


def test_vae_decode_activation_peak():
    cfg = dict(block_out_channels=[32, 64, 64], layers_per_block=2, latent_channels=4, norm_num_groups=8,
               down_block_types=["DownEncoderBlock2D"] * 3, up_block_types=["UpDecoderBlock2D"] * 3)
    torch.manual_seed(0)
    m = _sdpa(diffusers.AutoencoderKL.from_config(cfg))
    z = torch.randn(2, 4, 32, 32)
    measured = _peak_bytes(lambda: m.decode(z)) + z.numel() * 4
    t = Trace(act_b=4, w_b=4)
    vae.autoencoder_kl(t, cfg, 2, 32, 32)
    assert t.peak == pytest.approx(measured, rel=0.05)


def test_sd3_activation_peak():
    cfg = {"sample_size": 16, "patch_size": 2, "in_channels": 4, "num_layers": 3, "attention_head_dim": 32,
           "num_attention_heads": 2, "joint_attention_dim": 24, "caption_projection_dim": 64,
           "pooled_projection_dim": 12, "out_channels": 4, "pos_embed_max_size": 32, "dual_attention_layers": [0],
           "qk_norm": "rms_norm"}
    torch.manual_seed(0)
    m = diffusers.SD3Transformer2DModel.from_config(cfg).eval()
    x = torch.randn(2, 4, 64, 64)
    measured = _peak_bytes(lambda: m(x, torch.randn(2, 20, 24), torch.randn(2, 12), torch.tensor([1.0, 1.0]))) \
        + x.numel() * 4
    t = Trace(act_b=4, w_b=4)
    dit.sd3(t, cfg, 2, 64, 64, 20)
    assert t.peak == pytest.approx(measured, rel=0.05)
