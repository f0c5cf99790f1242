"""What every workload kind's Case shares: typed fields with their defaults, validation in ``__post_init__`` (one
sentence naming the flag, gpuscope.errors.UserError), and the dict a case is stored, keyed and sent to its
measurement process as.

``to_dict`` writes a field when the kind always writes it (``ALWAYS``), when the dict the case came from had it, or
when its value is not the default: a case's dict (and so its key) is the one earlier versions wrote for the same
measurement, so stored results are resumed by it. Keys a kind does not model are kept as given (``extra``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from typing import ClassVar

from gpuscope.errors import UserError
from gpuscope.specs.axes import WorkloadKind

_META = ("extra", "given")


def digest(d: dict, compact: bool = True) -> str:
    """The first 8 hex digits of the SHA-1 of ``d`` as sorted JSON (``compact``: no spaces after , and :)."""
    text = json.dumps(d, sort_keys=True, separators=(",", ":") if compact else None)
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _plain(v):
    return v.value if isinstance(v, Enum) else v


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return MISSING


@dataclass(frozen=True, kw_only=True)
class Case:
    """The fields of one measurement of a kind; a subclass sets ``KIND`` and declares its fields."""

    KIND: ClassVar[WorkloadKind]
    ALWAYS: ClassVar[tuple[str, ...]] = ()  # written even at their default value
    KIND_IN_DICT: ClassVar[bool] = True  # the stored dict carries "kind" (a collective point's does not)
    FLAGS: ClassVar[dict[str, str]] = {}  # field -> the CLI flag a bad value is named by, where not --field-name

    extra: dict = field(default_factory=dict, repr=False, compare=False)
    given: frozenset = field(default=frozenset(), repr=False, compare=False)

    # --- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in _META)

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        d = dict(d)
        kind = d.pop("kind", None)
        if kind is not None and kind != cls.KIND.value:
            raise UserError(f"kind '{kind}' is not {cls.KIND.value}.")
        names = set(cls.field_names())
        kw = {k: d.pop(k) for k in list(d) if k in names}
        missing = [f.name for f in fields(cls) if f.name in names - set(kw) and _default(f) is MISSING]
        if missing:
            raise UserError(f"the {cls.KIND.value} case needs {', '.join(missing)}.")
        return cls(**kw, extra=d, given=frozenset(kw) | ({"kind"} if kind is not None else frozenset()))

    def to_dict(self) -> dict:
        out: dict = {"kind": self.KIND.value} if self.KIND_IN_DICT or "kind" in self.given else {}
        for f in fields(self):
            if f.name in _META:
                continue
            v = getattr(self, f.name)
            if f.name in self.always() or f.name in self.given or v != _default(f):
                out[f.name] = _plain(v)
        out.update(self.extra)
        return out

    def always(self) -> tuple[str, ...]:
        return self.ALWAYS

    # --- what a kind defines ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def key(self) -> str:
        """The stored key: the readable name plus a hash of the whole case (a changed case is measured again)."""
        return f"{self.name}#{digest(self.to_dict())}"

    # --- validation helpers -------------------------------------------------------------------------------------
    def flag(self, name: str) -> str:
        return "--" + self.FLAGS.get(name, name.replace("_", "-"))

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def axis(self, name: str, axis_cls, among=None) -> None:
        """Field ``name`` as a member of ``axis_cls`` (specs/axes.py); a bad value names the flag."""
        self._set(name, axis_cls.parse(getattr(self, name), flag=self.flag(name)[2:], among=among))

    def positive(self, *names: str) -> None:
        for n in names:
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UserError(f"{self.flag(n)} must be a positive integer, not {v}.")

    def non_negative(self, *names: str) -> None:
        for n in names:
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise UserError(f"{self.flag(n)} must be 0 or more, not {v}.")


def model_name(case: dict | Case) -> str:
    """The model a case names: its preset, else its inline config's model_type."""
    get = case.get if isinstance(case, dict) else (lambda k, d=None: getattr(case, k, d))
    return get("model") or (get("config") or {}).get("model_type", "?")


def model_spec(case: Case):
    """The planner's ModelSpec of a case: its inline config when it has one, else its preset."""
    if isinstance(getattr(case, "config", None), dict):
        from gpuscope.specs.hf_config import spec_from_config

        return spec_from_config(case.config, name=case.model or "inline")
    from gpuscope.specs.models import load_model

    return load_model(case.model)
