"""Memory as the benchmarks measure it: this process's resident set size, now and at its peak.

The functions live in ``runtime.memory`` (the jobs report the same peak in their JSON); this module keeps
the benchmarks' name for them. RSS counts everything a process touched (Python, torch's libraries,
allocator caches), so compare processes of the same kind only.
"""

from __future__ import annotations

from laya_cli.runtime.memory import peak_rss_mb, proc_status_mb, reset_peak, rss_mb

__all__ = ["peak_rss_mb", "proc_status_mb", "reset_peak", "rss_mb"]
