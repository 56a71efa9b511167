"""The boundary between the sampler loop and a GPU telemetry source (real NVML or a recorded replay).

The loop sees only this interface, so the scheduling, storage, loss handling and summary logic can be
tested against a replayed trace while the real implementation stays a thin wrapper over pynvml.
A field the GPU does not support is returned as ``None`` (stored as null), never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from mlrepro.core.errors import MlreproError

Value = float | int | None

# Read every tick: cheap, one batched field read plus two small calls.
FAST_FIELDS: tuple[str, ...] = (
    "power_instant_mw",
    "power_average_mw",
    "energy_mj",
    "util_gpu_pct",
    "util_mem_pct",
    "sm_clock_mhz",
    # cumulative time the clocks were held down, per reason (ns since driver load)
    "throttle_power_ns",
    "throttle_sync_boost_ns",
    "throttle_sw_thermal_ns",
    "throttle_hw_thermal_ns",
    "throttle_hw_power_brake_ns",
)
# Read once a second: they change slowly or cost more.
SLOW_FIELDS: tuple[str, ...] = (
    "mem_clock_mhz",
    "mem_used_bytes",
    "mem_total_bytes",
    "temperature_c",
    "clock_event_reasons",
    "ecc_sbe_volatile",
    "ecc_dbe_volatile",
)
GPU_FIELDS: tuple[str, ...] = FAST_FIELDS + SLOW_FIELDS


class BackendUnavailable(MlreproError):
    """No GPU telemetry here (library missing, no driver, no permission); the message is the reason."""


class DeviceLost(MlreproError):
    """A GPU stopped answering for good (fallen off the bus, reset): stop sampling it."""


@dataclass(frozen=True)
class SystemInfo:
    backend: str
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    library_version: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    index: int  # the backend's (NVML's) index, in PCI bus order: not the CUDA index
    uuid: str
    name: str
    pci_bus_id: str | None = None
    serial: str | None = None
    power_limit_mw: int | None = None
    mig_uuids: tuple[str, ...] = ()  # MIG instances on this GPU; power and energy are the whole GPU's


@dataclass(frozen=True)
class XidEvent:
    uuid: str | None
    xid: int
    time_ms: int | None = None  # None: stamp it when received
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass
class XidRegistration:
    ok: bool
    reason: str | None = None
    uuids: list[str] = field(default_factory=list)


class GpuBackend(Protocol):
    name: str

    def open(self) -> SystemInfo:
        """Initialise; raise :class:`BackendUnavailable` with the reason when there is nothing to sample."""
        ...

    def devices(self) -> list[DeviceInfo]:
        """Every physical GPU the backend sees, in its own order."""
        ...

    def read_fast(self, uuid: str) -> dict[str, Value]:
        """:data:`FAST_FIELDS` of one GPU; raise :class:`DeviceLost` when the GPU is gone."""
        ...

    def read_slow(self, uuid: str) -> dict[str, Value]:
        """:data:`SLOW_FIELDS` of one GPU; raise :class:`DeviceLost` when the GPU is gone."""
        ...

    def register_xid(self, uuids: list[str]) -> XidRegistration:
        """Ask for XID (critical error) events of these GPUs."""
        ...

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        """Block up to ``timeout_ms`` for XID events; [] on timeout."""
        ...

    def close(self) -> None: ...
