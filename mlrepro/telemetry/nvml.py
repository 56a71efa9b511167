"""The real GPU backend: a thin wrapper over pynvml (nvidia-ml-py) behind :class:`GpuBackend`.

Every NVML call is checked on its own: NOT_SUPPORTED and friends become ``None`` (missing), only a
lost GPU ends sampling of that GPU. Field values carry their own ``nvmlReturn``, checked per field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlrepro.telemetry.backend import (
    BackendUnavailable,
    DeviceInfo,
    DeviceLost,
    SystemInfo,
    Value,
    XidEvent,
    XidRegistration,
)

# (NVML field id, our column). Ids are literal so this table reads the same as nvml.h.
FAST_FIELD_IDS: tuple[tuple[int, str], ...] = (
    (186, "power_instant_mw"),  # NVML_FI_DEV_POWER_INSTANT
    (185, "power_average_mw"),  # NVML_FI_DEV_POWER_AVERAGE: a 1 s average, never integrated
    (83, "energy_mj"),  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    (74, "throttle_power_ns"),  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    (76, "throttle_sync_boost_ns"),  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST
    (269, "throttle_sw_thermal_ns"),
    (270, "throttle_hw_thermal_ns"),
    (271, "throttle_hw_power_brake_ns"),
)
SLOW_FIELD_IDS: tuple[tuple[int, str], ...] = (
    (3, "ecc_sbe_volatile"),  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    (4, "ecc_dbe_volatile"),  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
)
_LOST = (15, 28)  # NVML_ERROR_GPU_IS_LOST, NVML_ERROR_GPU_NOT_FOUND
_TIMEOUT = 10


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def field_value(fv: Any) -> Value:
    """One ``c_nvmlFieldValue_t`` as a number, or None when this field failed (unsupported, ...)."""
    if fv.nvmlReturn in _LOST:
        raise DeviceLost(f"NVML field {fv.fieldId}: return code {fv.nvmlReturn} (GPU lost)")
    if fv.nvmlReturn != 0:
        return None
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        int(fv.valueType)
    )
    return None if member is None else getattr(fv.value, member)


class NvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: dict[str, Any] = {}
        self._events: Any = None
        self.skipped: list[str] = []  # GPUs counted but not openable (NO_PERMISSION, ...)

    # ------------------------------------------------------------------------------ helpers
    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; None when unsupported or failing, DeviceLost when the GPU is gone."""
        try:
            return fn(*args)
        except self._nv.NVMLError as e:
            if getattr(e, "value", None) in _LOST:
                raise DeviceLost(str(e)) from e
            return None

    # ------------------------------------------------------------------------------ interface
    def open(self) -> SystemInfo:
        try:
            import pynvml
        except ImportError as e:
            raise BackendUnavailable(f"nvidia-ml-py is not installed ({e})") from e
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise BackendUnavailable(f"nvmlInit failed: {type(e).__name__}: {e}") from e
        except OSError as e:  # a broken libnvidia-ml.so
            raise BackendUnavailable(f"nvmlInit failed: {e}") from e
        cuda = self._call(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        return SystemInfo(
            backend=self.name,
            driver_version=_text(v) if (v := self._call(pynvml.nvmlSystemGetDriverVersion)) else None,
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            library_version=_text(v) if (v := self._call(pynvml.nvmlSystemGetNVMLVersion)) else None,
        )

    def devices(self) -> list[DeviceInfo]:
        nv = self._nv
        out: list[DeviceInfo] = []
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nv.nvmlDeviceGetUUID(h))
            except nv.NVMLError as e:  # counted but not ours to read (NO_PERMISSION in containers)
                self.skipped.append(f"NVML GPU {i}: {e}")
                continue
            self._handles[uuid] = h
            pci = self._call(nv.nvmlDeviceGetPciInfo, h)
            out.append(
                DeviceInfo(
                    index=i,
                    uuid=uuid,
                    name=_text(self._call(nv.nvmlDeviceGetName, h) or "unknown"),
                    pci_bus_id=_text(pci.busId) if pci is not None else None,
                    serial=_text(s) if (s := self._call(nv.nvmlDeviceGetSerial, h)) else None,
                    power_limit_mw=self._call(nv.nvmlDeviceGetEnforcedPowerLimit, h),
                    mig_uuids=tuple(self._mig_uuids(h)),
                )
            )
        return out

    def _mig_uuids(self, h: Any) -> list[str]:
        nv = self._nv
        mode = self._call(nv.nvmlDeviceGetMigMode, h)
        if not mode or mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        uuids = []
        for j in range(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
            if mig is not None and (u := self._call(nv.nvmlDeviceGetUUID, mig)):
                uuids.append(_text(u))
        return uuids

    def _fields(self, h: Any, table: tuple[tuple[int, str], ...]) -> dict[str, Value]:
        values = self._call(self._nv.nvmlDeviceGetFieldValues, h, [fid for fid, _ in table])
        if values is None:
            return {name: None for _, name in table}
        return {name: field_value(values[k]) for k, (_, name) in enumerate(table)}

    def read_fast(self, uuid: str) -> dict[str, Value]:
        nv, h = self._nv, self._handles[uuid]
        out = self._fields(h, FAST_FIELD_IDS)
        util = self._call(nv.nvmlDeviceGetUtilizationRates, h)  # NOT_SUPPORTED under MIG
        out["util_gpu_pct"] = util.gpu if util is not None else None
        out["util_mem_pct"] = util.memory if util is not None else None
        out["sm_clock_mhz"] = self._call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        return out

    def read_slow(self, uuid: str) -> dict[str, Value]:
        nv, h = self._nv, self._handles[uuid]
        out = self._fields(h, SLOW_FIELD_IDS)
        # v2: `used` excludes the driver's reserved memory, which v1 counts as used
        mem = self._call(nv.nvmlDeviceGetMemoryInfo, h, nv.nvmlMemory_v2)
        out["mem_used_bytes"] = mem.used if mem is not None else None
        out["mem_total_bytes"] = mem.total if mem is not None else None
        out["mem_clock_mhz"] = self._call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        out["temperature_c"] = self._call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        out["clock_event_reasons"] = self._call(reasons, h)
        return out

    def register_xid(self, uuids: list[str]) -> XidRegistration:
        nv = self._nv
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            return XidRegistration(False, f"nvmlEventSetCreate: {e}")
        done, failed = [], []
        for u in uuids:
            try:
                nv.nvmlDeviceRegisterEvents(self._handles[u], nv.nvmlEventTypeXidCriticalError, self._events)
                done.append(u)
            except nv.NVMLError as e:
                failed.append(f"{u}: {e}")
        return XidRegistration(bool(done), "; ".join(failed) or None, done)

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        nv = self._nv
        try:
            data = nv.nvmlEventSetWait_v2(self._events, timeout_ms)
        except nv.NVMLError as e:
            if getattr(e, "value", None) == _TIMEOUT:
                return []
            raise
        uuid = self._call(nv.nvmlDeviceGetUUID, data.device)
        return [
            XidEvent(
                uuid=_text(uuid) if uuid else None,
                xid=int(data.eventData),
                gpu_instance=int(data.gpuInstanceId),
                compute_instance=int(data.computeInstanceId),
            )
        ]

    def close(self) -> None:
        if self._nv is None:
            return
        try:
            if self._events is not None:
                self._nv.nvmlEventSetFree(self._events)
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass
