"""`gpuscope doctor` inside a Hugging Face Trainer: a TrainerCallback that profiles a window of training steps
(torch.profiler + NVML, measure/profile/profiler.py) and, when the window closes, runs the doctor's rules on it.

    from gpuscope.explain.trainer_callback import DoctorCallback
    cb = DoctorCallback(start_step=10, steps=20, report="doctor.json")
    Trainer(..., callbacks=[cb]).train()
    cb.findings            # list of gpuscope.explain.findings.Finding
    gpuscope.report.doctor_view.doctor_markdown(cb.report_dict())   # the same report as `gpuscope doctor`

The first steps are skipped (warm-up: compilation, allocator growth) and the window is short, because a profile of
thousands of steps is large and slow. The callback works with any loop that calls on_step_begin/on_step_end.
"""

from __future__ import annotations

import json
from pathlib import Path

try:  # a real TrainerCallback when transformers is there (the `bench` extra), else a plain base
    from transformers import TrainerCallback as _Base
except Exception:  # pragma: no cover - transformers is installed wherever the Trainer is
    _Base = object


class DoctorCallback(_Base):
    def __init__(self, start_step: int = 10, steps: int = 20, device: str | None = None,
                 report: str | None = None):
        if start_step < 0 or steps <= 0:
            raise ValueError("start_step must be >= 0 and steps > 0")
        self.start_step, self.steps, self.device, self.report = start_step, steps, device, report
        self._ctx = None
        self._session = None
        self._seen = 0
        self.summary: dict | None = None
        self.findings: list = []

    # --- TrainerCallback hooks (args, state, control, **kwargs) ---------------------------------------------
    def on_step_begin(self, args=None, state=None, control=None, **kwargs):
        if self._ctx is None and self.summary is None and self._seen == self.start_step:
            from gpuscope.measure.profile.profiler import profile_run

            self._ctx = profile_run(self.device)
            self._session = self._ctx.__enter__()
        return control

    def on_step_end(self, args=None, state=None, control=None, **kwargs):
        self._seen += 1
        if self._session is not None:
            self._session.step()
            if self._seen >= self.start_step + self.steps:
                self._close()
        return control

    def on_train_end(self, args=None, state=None, control=None, **kwargs):
        if self._session is not None:
            self._close()
        return control

    def _close(self) -> None:
        from gpuscope.explain.findings import diagnose

        self._ctx.__exit__(None, None, None)
        self.summary = self._session.summary
        self._ctx = self._session = None
        self.findings = diagnose(self.summary)
        if self.report:
            Path(self.report).write_text(json.dumps(self.report_dict(), indent=2, default=_plain))

    def report_dict(self) -> dict:
        """The doctor's report (schema gpuscope.doctor/1) for this window: profile summary and findings."""
        return {"schema": "gpuscope.doctor/1", "target": {"kind": "trainer-callback", "start_step": self.start_step,
                                                           "steps": self.steps},
                "status": "ok" if self.summary is not None else "not profiled", "profile": self.summary or {},
                "estimate": {"unavailable": "a Trainer run: the planner does not know its configuration"},
                "findings": self.findings, "oom": None}


def _plain(obj):
    if hasattr(obj, "to_json"):
        return obj.to_json()
    return obj.__dict__ if hasattr(obj, "__dict__") else str(obj)
