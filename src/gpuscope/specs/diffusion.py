"""Read a diffusers pipeline folder (or a preset) into a PipelineSpec, without network access or remote code.

A diffusers folder holds ``model_index.json`` (the pipeline class and, per component, ``[library, class]``) and one
sub-folder per component with its ``config.json`` (unet/ or transformer/, vae/, text_encoder*/, image_encoder/).
Only the components gpuscope models are read: the denoiser, the VAE, the text encoders and an image encoder;
schedulers, tokenizers, feature extractors and safety checkers are named in model_index.json and left alone.
A folder may hold only some components: what a plan needs is asked for with ``PipelineSpec.require`` and a
missing one is named in one sentence then.

Presets are such folders (configs only) in ``specs/data/diffusion/<name>/``; their model_index.json carries a
``"_gpuscope"`` object with ``aliases``, ``source`` (where each config comes from) and ``notes`` (values that are
not known). diffusers ignores keys of model_index.json that start with an underscore.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from gpuscope.errors import UserError, nearest
from gpuscope.specs.numbers import read_json_object

PRESET_DIR = Path(__file__).parent / "data" / "diffusion"

# The classes each role accepts (the module classes whose parameters, FLOPs and memory estimate/diffusion models).
DENOISERS = ("UNet2DConditionModel", "UNetSpatioTemporalConditionModel", "SD3Transformer2DModel",
             "FluxTransformer2DModel", "CogVideoXTransformer3DModel")
VAES = ("AutoencoderKL", "AutoencoderKLTemporalDecoder", "AutoencoderKLCogVideoX")
TEXT_ENCODERS = ("CLIPTextModel", "CLIPTextModelWithProjection", "T5EncoderModel")
IMAGE_ENCODERS = ("CLIPVisionModelWithProjection",)
ROLE_CLASSES = {"denoiser": DENOISERS, "vae": VAES, "text_encoder": TEXT_ENCODERS, "image_encoder": IMAGE_ENCODERS}

# model_index.json's component names, by role (diffusers' pipelines name them so: unet / transformer, vae,
# text_encoder, text_encoder_2, ..., image_encoder)
_ROLE_OF_NAME = (("denoiser", re.compile(r"^(unet|transformer)$")), ("vae", re.compile(r"^vae$")),
                 ("text_encoder", re.compile(r"^text_encoder(_\d+)?$")),
                 ("image_encoder", re.compile(r"^image_encoder$")))

# what --component needs, by role; "encoders": the text encoders and image encoder that model_index.json names
# (SVD conditions on an image, not on text), every one of them and at least one
COMPONENT_NEEDS = {"denoiser": ("denoiser",), "vae-decode": ("vae",), "text-encoders": ("encoders",),
                   "pipeline": ("denoiser", "vae", "encoders")}
ENCODER_ROLES = ("text_encoder", "image_encoder")


@dataclass(frozen=True)
class ComponentSpec:
    name: str  # the model_index.json key: "unet", "vae", "text_encoder_2", ...
    role: str  # "denoiser", "vae", "text_encoder", "image_encoder"
    library: str  # "diffusers" or "transformers"
    class_name: str
    config: dict = field(repr=False)

    def get(self, key: str, default=None):
        value = self.config.get(key)
        return default if value is None else value


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    source: str  # "preset:<name>" or the folder's path
    pipeline_class: str
    components: dict[str, ComponentSpec]  # the modelled components whose config.json is present
    missing: tuple[str, ...] = ()  # modelled components named in model_index.json without a config.json here
    meta: dict = field(default_factory=dict, repr=False)  # a preset's "_gpuscope" object

    def by_role(self, role: str) -> list[ComponentSpec]:
        return [c for c in self.components.values() if c.role == role]

    @property
    def denoiser(self) -> ComponentSpec | None:
        found = self.by_role("denoiser")
        return found[0] if found else None

    @property
    def vae(self) -> ComponentSpec | None:
        found = self.by_role("vae")
        return found[0] if found else None

    @property
    def encoders(self) -> list[ComponentSpec]:
        """The conditioning encoders (text encoders, SVD's image encoder), in model_index.json's order."""
        return [c for c in self.components.values() if c.role in ENCODER_ROLES]

    def require(self, component: str) -> None:
        """Raise one sentence when what ``--component`` needs is not in the folder."""
        for role in COMPONENT_NEEDS[component]:
            roles = ENCODER_ROLES if role == "encoders" else (role,)
            named = [m for m in self.missing if _role_of(m) in roles]
            if named:  # model_index.json names it, its config.json is not here
                raise UserError(f"--model: '{self.source}' has no {named[0]}/config.json, which --component "
                                f"{component} needs.")
            if not any(self.by_role(r) for r in roles):
                what = "text or image encoder" if role == "encoders" else role
                raise UserError(f"--model: '{self.source}' names no {what} in model_index.json, which --component "
                                f"{component} needs.")


def _role_of(name: str) -> str | None:
    for role, pattern in _ROLE_OF_NAME:
        if pattern.match(name):
            return role
    return None


def _entry(name: str, value, path: Path) -> tuple[str, str]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(v, str) for v in value)):
        raise UserError(f"--model: '{path}' entry '{name}' must be [library, class], not {value!r:.60}.")
    return value[0], value[1]


def read_folder(folder: Path, name: str | None = None, source: str | None = None, meta: dict | None = None
                ) -> PipelineSpec:
    """A diffusers folder -> PipelineSpec (only model_index.json and the modelled components' config.json)."""
    index_path = folder / "model_index.json"
    if not index_path.is_file():
        raise UserError(f"--model: '{folder}' has no model_index.json (a diffusers pipeline folder holds one).")
    index = read_json_object(index_path, "model_index.json")
    pipeline_class = index.get("_class_name")
    if not isinstance(pipeline_class, str):
        raise UserError(f"--model: '{index_path}' has no \"_class_name\" naming the pipeline.")
    components: dict[str, ComponentSpec] = {}
    missing = []
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, (list, tuple)):
            continue  # "_class_name", "_diffusers_version", pipeline flags such as force_zeros_for_empty_prompt
        role = _role_of(key)
        if role is None:
            continue  # scheduler, tokenizer*, feature_extractor, safety_checker: not modelled
        library, cls = _entry(key, value, index_path)
        if cls not in ROLE_CLASSES[role]:
            raise UserError(f"--model: component '{key}' is a {cls}, which gpuscope does not model "
                            f"(a {role.replace('_', ' ')} is one of {', '.join(ROLE_CLASSES[role])}).")
        cfg_path = folder / key / "config.json"
        if not cfg_path.is_file():
            missing.append(key)
            continue
        components[key] = ComponentSpec(key, role, library, cls, read_json_object(cfg_path, "config"))
    return PipelineSpec(name or folder.name, source or str(folder), pipeline_class, components, tuple(missing),
                        meta or {})


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, Path]:
    index: dict[str, Path] = {}
    for d in sorted(p for p in PRESET_DIR.iterdir() if (p / "model_index.json").is_file()):
        index[d.name.lower()] = d
        meta = read_json_object(d / "model_index.json", "model_index.json").get("_gpuscope", {})
        for alias in meta.get("aliases", []):
            index[alias.lower()] = d
    return index


def preset_names() -> list[str]:
    return sorted(p.name for p in set(_preset_index().values()))


def load_pipeline(arg: str) -> PipelineSpec:
    """--model for diffusion: a local diffusers folder or a preset name (specs/data/diffusion)."""
    if not arg or not str(arg).strip():
        raise UserError("--model: give a diffusion preset name or a path to a diffusers folder.")
    path = Path(arg).expanduser()
    if path.exists() or "/" in arg:
        if path.is_file():
            path = path.parent  # model_index.json itself
        if not path.is_dir():
            raise UserError(f"--model: no folder at '{arg}'.")
        return read_folder(path)
    folder = _preset_index().get(arg.lower())
    if folder is None:
        raise UserError(f"--model: unknown diffusion preset '{arg}'.{nearest(arg, preset_names())} "
                        f"(presets: {', '.join(preset_names())}).")
    meta = read_json_object(folder / "model_index.json", "model_index.json").get("_gpuscope", {})
    return read_folder(folder, name=folder.name, source=f"preset:{folder.name}", meta=meta)
