"""GPU and host telemetry beside a run: a sampler process, and a summary over the run window.

    handle = start_sampler(out_dir, hz=10.0, watch_pid=pid)   # returns once sampling (or failed)
    ...                                                        # the run
    handle.stop()                                              # never raises
    summary = summarize(out_dir, run_start_ms, run_stop_ms)    # also writes out_dir/summary.json

Energy is accelerator energy as NVML reports it, never an MLPerf power result. Nothing here may
harm the run: every failure ends up as ``"partial": true`` with its reason.
"""

from mlrepro.telemetry.launch import SamplerHandle, start_sampler
from mlrepro.telemetry.summary import summarize

__all__ = ["SamplerHandle", "start_sampler", "summarize"]
