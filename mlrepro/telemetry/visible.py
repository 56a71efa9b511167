"""Which physical GPUs a run can see, from CUDA_VISIBLE_DEVICES, matched by UUID rather than by index.

CUDA accepts integer indices, GPU UUIDs (or unique prefixes of them), MIG instance UUIDs
(``MIG-<uuid>``) and the older ``MIG-GPU-<uuid>/<gi>/<ci>`` form, and ignores everything after the
first entry it cannot resolve; this follows the same rules. A MIG instance is sampled through its
parent GPU, since NVML reports power and energy only for the whole GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlrepro.telemetry.backend import DeviceInfo


@dataclass
class Selection:
    uuids: list[str]  # physical GPUs to sample, in CUDA order, each once
    mig: dict[str, list[str]] = field(default_factory=dict)  # parent GPU uuid -> selected MIG instances
    notes: list[str] = field(default_factory=list)


def _by_uuid_prefix(token: str, devices: list[DeviceInfo]) -> list[DeviceInfo]:
    want = token if token.startswith("GPU-") else f"GPU-{token}"
    return [d for d in devices if d.uuid.startswith(want)]


def select(value: str | None, devices: list[DeviceInfo], device_order: str | None = None) -> Selection:
    """The GPUs named by ``value`` (CUDA_VISIBLE_DEVICES; None = unset = all)."""
    if value is None:
        return Selection([d.uuid for d in devices])
    sel = Selection([])
    used_index = False

    def add(dev: DeviceInfo, mig: str | None = None) -> None:
        if dev.uuid not in sel.uuids:
            sel.uuids.append(dev.uuid)
        if mig is not None:
            sel.mig.setdefault(dev.uuid, []).append(mig)

    for raw in value.split(","):
        token = raw.strip()
        if token.lstrip("-").isdigit():
            idx = int(token)
            if not 0 <= idx < len(devices):
                sel.notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r}: no such GPU; later entries ignored")
                break
            used_index = True
            add(devices[idx])
        elif token.startswith("MIG-GPU-"):  # legacy MIG-GPU-<uuid>/<gi>/<ci>
            parent = token[len("MIG-") :].split("/")[0]
            hits = [d for d in devices if d.uuid == parent]
            if not hits:
                sel.notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r}: no such GPU; later entries ignored")
                break
            add(hits[0], token)
        elif token.startswith("MIG-"):
            hits = [d for d in devices if any(m.startswith(token) for m in d.mig_uuids)]
            if len(hits) != 1:
                sel.notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r}: no such MIG; later entries ignored")
                break
            add(hits[0], token)
        elif token:
            hits = _by_uuid_prefix(token, devices)
            if len(hits) != 1:
                what = "ambiguous" if hits else "no such GPU"
                sel.notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r}: {what}; later entries ignored")
                break
            add(hits[0])
        else:
            sel.notes.append("CUDA_VISIBLE_DEVICES has an empty entry; later entries ignored")
            break
    if used_index and len(devices) > 1 and device_order != "PCI_BUS_ID":
        sel.notes.append(
            "integer CUDA_VISIBLE_DEVICES mapped in PCI bus order (NVML's); CUDA uses that order only "
            "with CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    if sel.mig:
        sel.notes.append("MIG instances are sampled via their parent GPU: power and energy are whole-GPU")
    return sel
