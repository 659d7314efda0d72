"""Memory as the benchmarks measure it: this process's resident set size, now and at its peak.

Linux: ``VmRSS`` and ``VmHWM`` from /proc/self/status, the process's own memory. (``ru_maxrss``
is not used there: it survives fork + exec, so a child started by a big parent would report
the parent's size.) Elsewhere: ``getrusage(RUSAGE_SELF).ru_maxrss`` (macOS reports bytes).
RSS counts everything a process touched (Python, torch's libraries, allocator caches), so
compare processes of the same kind only.
"""

from __future__ import annotations

import gc
import sys


def proc_status_mb(field: str) -> float | None:
    """A ``kB`` field of /proc/self/status in MiB; None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_rss_mb() -> float:
    """This process's peak resident set size, MiB."""
    hwm = proc_status_mb("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def rss_mb() -> float:
    """Resident set size now (MiB); the peak so far where the current value is not available."""
    now = proc_status_mb("VmRSS")
    return now if now is not None else peak_rss_mb()


def reset_peak() -> float | None:
    """Reset this process's peak RSS to its current RSS (Linux ≥ 4.0: ``echo 5 > /proc/self/clear_refs``)
    and return that RSS (MiB), so a later peak measures one phase alone; None where unsupported."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return proc_status_mb("VmRSS")
