"""A trace of one module's forward as diffusers / transformers run it in eager mode: the ops (estimate/ops.Op, so
that estimate/roofline times them), the parameters they hold, and the peak of the activations alive at once.

The component walkers (unet.py, dit.py, vae.py, text.py) describe each module the way its ``forward`` runs and call
one method per weight-bearing layer or kernel. The parameter count is the sum of the layers' weights, and is exact
against ``sum(p.numel())`` of the real modules built on the meta device (tests/test_plan_diffusion_params.py); the
same walk at the user's batch and resolution gives FLOPs, bytes and kernel launches.

Conventions (FLOPs, bytes, memory):
- Linear over ``rows`` tokens: 2 x rows x in x out FLOPs; reads rows x in + in x out, writes rows x out elements.
- Convolution as implicit GEMM: M = images x output pixels, N = out channels, K = in channels x kernel volume;
  2MNK FLOPs. PyTorch adds a convolution's bias with a second kernel (aten::_convolution then add_): 2 kernels.
- Attention core: QK^T and PV, 4 x batch x heads x Lq x Lk x head_dim FLOPs (no causal halving: diffusion attention
  is bidirectional). ``sdpa``: one fused kernel (flash / memory-efficient: the score matrix never exists);
  ``math``: diffusers' AttnProcessor (get_attention_scores: baddbmm, softmax, bmm), whose scores and
  probabilities are each a batch x heads x Lq x Lk tensor in the compute dtype, alive together.
- Live memory: an op's inputs and outputs are alive while it runs, on top of what the forward holds (``hold``):
  skip connections of a UNet, a block's residual input, the timestep embedding. The trace's peak is the maximum of
  held + live over its ops: what the caching allocator holds at the activation peak (no_grad inference frees a
  tensor once its last reference goes).
- Layout copies on a GPU (``nchw_copies``): diffusers' tensors are NCHW, and cuDNN runs an fp16 / TF32
  convolution as an NHWC Tensor-Core kernel between two layout transforms (nchwToNhwc, nhwcToNchw), its input
  copied to NHWC and its NHWC output copied back, both in the workspace PyTorch takes from the caching allocator
  (aten/src/ATen/native/cudnn/Conv_v8.cpp allocates each plan's workspace there). So while a convolution runs,
  its input and output are alive twice, and each convolution adds two memory-bound kernels that read and write
  its input and its output once more (an op ``<conv>.layout``: 2 kernels, 2 x (input + output) bytes). No
  constant: the term is the tensors' own size. Found by the SDXL VAE decode at 1024x1024 fp16 on an H200
  (research/results/2026-12-02-h200/diffusion.md): 2.59 GB allocated above its weights, 1.61 GB planned without
  the copies, 2.55 GB with them (the peak moves to the 256-channel 1024x1024 upsampler convolution, its input
  still referenced by the up block: blocks.upsample). Checks: the fp32 decode inside the full pipeline goes from
  -16% to -1%, the SDXL UNet and SVD peaks stay within 2.1%, and
  the kernel count of SDXL's UNet at 512x512, denoiser batch 2, goes from 2,037 to 2,139 (51 convolutions)
  against the 2,270 the H200's profile counted. Other vendors' libraries (MIOpen, oneDNN) are assumed to reorder
  the same way; not measured. A CPU forward has no such copies (``nchw_copies`` False: the profiler tests).
  On that cuDNN path PyTorch adds a convolution's bias after the convolution (aten::_convolution: output.add_ of
  a (1, C, 1, 1) view), a kernel of its own that reads and writes the output (``<conv>.bias``).
- The kernel path of each memory-bound op (``KOp.path``, priced in time.py): "vec" (TensorIterator's vectorized
  kernel: every operand contiguous), "nonvec" (an operand broadcast or strided: a bias, a time embedding, a
  permuted view, a ``chunk`` half; ``elementwise_kernel<128, 4>``), "layer_norm" (the native LayerNorm kernel),
  "gn_moments" (GroupNorm's RowwiseMomentsCUDAKernel: one block per (image, group) row, ``rows``).
- GroupNorm (``group_norm``) is three kernels (aten/src/ATen/native/cuda/group_norm_kernel.cu): the row moments
  (reads the input once), the fused per-channel scale and shift (tiny), and the apply (reads and writes every
  element, its scale and shift broadcast: the non-vectorized path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.estimate.ops import Op


@dataclass(frozen=True)
class KOp(Op):
    """An op with the PyTorch kernel path that prices it on a GPU (module docstring; time.py)."""
    path: str = "vec"  # vec, nonvec, transpose, layer_norm, gn_moments, gn_apply, geglu_*, upsample(_nhwc)
    rows: int = 0  # gn_moments: the kernel's blocks, images x groups
    elems: float = 0.0  # gn_moments: the elements it reads


@dataclass
class Trace:
    act_b: float = 2.0  # bytes per activation element (the compute dtype)
    w_b: float = 2.0  # bytes per weight
    attn_impl: str = "sdpa"  # "sdpa" or "math"
    nchw_copies: bool = False  # cuDNN's NHWC copies around each convolution (module docstring)
    ops: list[Op] = field(default_factory=list)
    params: int = 0
    held: float = 0.0
    peak: float = 0.0
    peak_op: str = ""
    seq_peak: float = 0.0  # sequential offload: the peak of held + live + the running layer's own weights (bytes)
    _op_w: int = 0  # parameters of the layer being added (until its live tensors are counted)
    run_params: int = 0  # parameters of the layers this forward runs (what sequential offload copies in)
    run_tensors: int = 0  # their parameter tensors (a weight, a bias: sequential offload copies each on its own)
    tensors: int = 0  # every parameter tensor of the module (model offload moves each on its own)
    buffer_elems: float = 0.0  # floating-point buffers the module holds beside its parameters (in the compute dtype)
    heads_dims: list[int] = field(default_factory=list)

    # ---- bookkeeping ---------------------------------------------------------------------------------------
    def hold(self, elems: float) -> None:
        self.held += elems * self.act_b

    def release(self, elems: float) -> None:
        self.held = max(0.0, self.held - elems * self.act_b)

    def _live(self, name: str, live_bytes: float) -> None:
        if self.held + live_bytes > self.peak:
            self.peak = self.held + live_bytes
            self.peak_op = name
        # under sequential offload only the running layer's weights are on the device, beside its tensors
        self.seq_peak = max(self.seq_peak, self.held + live_bytes + self._op_w * self.w_b)
        self._op_w = 0

    def _weights(self, n: int, tensors: int = 1, runs: bool = True) -> None:
        self.params += n
        self.tensors += tensors
        if runs:
            self.run_params += n
            self.run_tensors += tensors
            self._op_w += n

    def weights_only(self, n: int, tensors: int = 1, runs: bool = True) -> None:
        """Parameters no kernel of this forward reads as a GEMM (embedding tables, scalars, learned mixes), in
        ``tensors`` tensors; ``runs`` False: a part of the module this forward does not call (a VAE's encoder)."""
        self._weights(int(n), tensors, runs)

    # ---- ops -----------------------------------------------------------------------------------------------
    def linear(self, name: str, rows: float, fin: int, fout: int, bias: bool = True) -> None:
        self._weights(fin * fout + (fout if bias else 0), 2 if bias else 1)
        act = rows * (fin + fout) * self.act_b
        self.ops.append(Op(name, "matmul", 2.0 * rows * fin * fout, act + fin * fout * self.w_b, 1, 1,
                           (max(1, int(rows)), fout, fin)))
        self._live(name, act)

    def conv(self, name: str, images: float, cin: int, cout: int, pix_in: float, pix_out: float, k: int = 3,
             kt: int = 1, bias: bool = True, nhwc_in: bool = False) -> None:
        """A 2-D (kt=1) or 3-D convolution: ``images`` frames/images of ``pix_in`` -> ``pix_out`` pixels each.
        ``nhwc_in``: the input is channels-last already, so cuDNN convolves it in place and returns channels-last
        (no layout copies)."""
        kvol = k * k * kt
        self._weights(cin * cout * kvol + (cout if bias else 0), 2 if bias else 1)
        act = images * (pix_in * cin + pix_out * cout) * self.act_b
        split = self.nchw_copies and bias  # the cuDNN path: the bias added by a kernel of its own
        copies = self.nchw_copies and not nhwc_in
        self.ops.append(Op(name, "conv", 2.0 * images * pix_out * cout * cin * kvol, act + cin * cout * kvol * self.w_b,
                           2 if bias and not split else 1, 1, (max(1, int(images * pix_out)), cout, cin * kvol)))
        self._live(name, 2.0 * act if copies else act)
        if copies:
            self.ops.append(Op(name + ".layout", "elementwise", 0.0, 2.0 * act, 2, 1))
        if split:
            self.ops.append(KOp(name + ".bias", "elementwise", 0.0, 2.0 * images * pix_out * cout * self.act_b, 1, 1,
                                path="nonvec"))

    def norm(self, name: str, elems: float, channels: int, affine: bool = True, params_per_channel: int = 2,
             kernels: int = 1) -> None:
        """LayerNorm (the native kernel: reads and writes each element once); RMSNorm: pass 1 parameter per
        channel and its eager kernel count (plain vectorized kernels)."""
        if affine:
            self._weights(params_per_channel * channels, params_per_channel)
        self.ew(name, elems, kernels=kernels, path="layer_norm" if params_per_channel == 2 and kernels == 1 else "vec")

    def group_norm(self, name: str, images: float, channels: int, pix: float, groups: int = 32,
                   affine: bool = True) -> None:
        """GroupNorm over ``images`` of ``channels`` x ``pix`` (a 5-D video tensor: images = clips, pix = frames x
        pixels): the row moments, the fused parameters, the apply (module docstring)."""
        if affine:
            self._weights(2 * channels, 2)
        elems = images * channels * pix
        self.ops.append(KOp(name + ".moments", "elementwise", 0.0, elems * self.act_b, 2, 1, path="gn_moments",
                            rows=max(1, int(images * groups)), elems=elems))
        self.ew(name, elems, path="gn_apply")  # priced as the non-vectorized path

    def ew(self, name: str, elems: float, rw: float = 2.0, kernels: int = 1, live: float | None = None,
           path: str = "vec") -> None:
        """An elementwise kernel (or ``kernels`` of them) reading and writing ``rw`` elements per output element;
        ``path``: the kernel path that prices it (module docstring)."""
        self.ops.append(KOp(name, "elementwise", 0.0, elems * rw * self.act_b * kernels, kernels, 1, path=path))
        self._live(name, elems * rw * self.act_b if live is None else live * self.act_b)

    def attention(self, name: str, batch: float, heads: int, lq: float, lk: float, head_dim: int) -> None:
        """The attention core (see the module docstring); q, k, v come in as (batch, heads, L, head_dim) views."""
        self.heads_dims.append(head_dim)
        bh = batch * heads
        qkvo = bh * (2 * lq + 2 * lk) * head_dim * self.act_b
        flops = 4.0 * bh * lq * lk * head_dim
        if self.attn_impl == "math":
            scores = bh * lq * lk
            half = flops / 2
            self.ops.append(Op(name + ".scores", "matmul", half, qkvo / 2 + scores * self.act_b, 1, 1,
                               (max(1, int(lq)), max(1, int(lk)), head_dim)))
            self.ops.append(Op(name + ".softmax", "elementwise", 0.0, 2 * scores * self.act_b, 1, 1))
            self.ops.append(Op(name + ".pv", "matmul", half, qkvo / 2 + scores * self.act_b, 1, 1,
                               (max(1, int(lq)), head_dim, max(1, int(lk)))))
            self._live(name, qkvo + 2 * scores * self.act_b)
        else:
            self.ops.append(Op(name, "attention", flops, qkvo, 1, 1))
            self._live(name, qkvo)
