"""What a collectives run was on, and what gpuscope's communication model predicts for it: the ``environment``
record (backend, ranks and device names, NCCL version and variables, GPU topology, provenance) and the per-point
``estimate`` (``collective_time`` on ``topology_for`` of the catalog entry of the GPU). Methods of ``Bench``
(collectives_bench.py), kept here as a mixin; they use ``Comm``'s attributes (collectives_comm.py)."""

from __future__ import annotations

import os

from gpuscope.measure.collectives.sizes import gpu_topology


class EnvironmentMixin:
    """``Bench``'s environment record and comm-model estimate (needs a ``Comm``: torch, dist, rank, world, ...)."""

    def estimate(self, op: str, s_bytes: int, t: float) -> dict:
        hw = getattr(self, "_hw", None)
        if hw is None:
            return {"predicted_time_s": None, "predicted_busbw_gbs": None, "error": None,
                    "estimate": self._no_estimate}
        from gpuscope.estimate.comm import bus_bandwidth_gbs, collective_time

        pred = collective_time(op, s_bytes, self.world, self._topo,
                               gpus_per_node_in_group=min(self.local_world, self._topo.gpus_per_node))
        return {"predicted_time_s": pred,
                "predicted_busbw_gbs": bus_bandwidth_gbs(op, s_bytes, self.world, pred) if pred > 0 else None,
                "error": (pred - t) / t, "error_convention": "(predicted - measured) / measured time",
                "estimate": {"hardware": hw.key, "calibrated": bool(getattr(hw, "is_calibrated", False)),
                             "topology": self._topo.name}}

    # --- environment -------------------------------------------------------------------------------------------
    def environment(self) -> dict:
        torch = self.torch
        from gpuscope.measure.device.device import Device

        dev = Device(str(self.device))
        me = {"rank": self.rank, "hostname": os.uname().nodename, "device": str(self.device),
              "device_name": dev.device_name()}
        everyone: list = [None] * self.world
        self.guarded("all_gather_object of device names", lambda: self.dist.all_gather_object(everyone, me))
        nccl = None
        if self.backend == "nccl":
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:
                nccl = None
        self._hw, self._topo, self._no_estimate = None, None, "no estimate: measured on CPU"
        if self.device.type == "cuda":
            self._load_estimate(me["device_name"])
        env = {
            "backend": self.backend, "world_size": self.world, "nproc_per_node": self.local_world,
            "nnodes": self.world // max(1, self.local_world), "nccl_version": nccl, "torch": torch.__version__,
            "ranks": everyone, "device_names": sorted({e["device_name"] for e in everyone}),
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))},
            "gpu_topology": gpu_topology() if self.device.type == "cuda" else "unavailable",
        }
        if self.rank == 0:
            from gpuscope.measure.device.provenance import provenance

            env["provenance"] = provenance(dev)
        return env

    def _load_estimate(self, device_name: str) -> None:
        from gpuscope.errors import UserError
        from gpuscope.estimate.topology import topology_for
        from gpuscope.specs.hardware import load_hardware

        self._hw, self._topo = None, None
        try:
            if self.a.gpu:
                hw = load_hardware(self.a.gpu)
            else:
                from gpuscope.specs.hardware import catalog_key_for_device as catalog_key_for

                key = catalog_key_for(device_name)
                if key is None:
                    self._no_estimate = (f"no estimate: device '{device_name}' is not in the hardware catalog; "
                                         "pass --gpu NAME")
                    return
                hw = load_hardware(key)
            self._topo = topology_for(hw, self.world, gpus_per_node=min(self.local_world, self.world))
            self._hw = hw
        except UserError as e:
            self._no_estimate = f"no estimate: {e}"
