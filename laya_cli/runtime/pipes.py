"""Unix manners for a closed reader: ``laya audit m.pt | head -2`` ends quietly with laya's own exit status.

When the reader of stdout (or stderr) goes away, what laya would still have written there is dropped and the
command carries on to its end: its exit status stays its own (0 done, 1 a gate failed, …; docs/usage.md#exit-codes),
so a pipeline under ``set -o pipefail`` fails only when laya's result does. Neither a traceback nor "internal
error" (Python's BrokenPipeError), nor rich's own reaction to a broken pipe (exit 1, which laya's contract
reserves for a failed gate), nor a killed process (status 141, what ``cat`` gets from SIGPIPE).
"""

from __future__ import annotations

import errno
import os
import sys


def _closed_reader(error: OSError) -> bool:
    return isinstance(error, BrokenPipeError) or error.errno == errno.EPIPE


class ClosedReaderSafe:
    """A text stream (sys.stdout, sys.stderr) whose writes never fail because its reader went away: on the first
    broken pipe its file descriptor is pointed at the null device, so the text buffered and all later writes go
    nowhere, and the write returns as if done. Everything else is the stream's own."""

    def __init__(self, stream):
        # Attributes set on this object stay on it (wandb patches sys.stdout.write: its patch must call this
        # write, not replace the stream's, or each would call the other).
        self._stream = stream
        self.reader_closed = False

    def _to_null(self) -> None:
        stream = object.__getattribute__(self, "_stream")
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
        self.reader_closed = True

    def _guarded(self, call):
        try:
            return call()
        except OSError as e:
            if not _closed_reader(e):
                raise
            self._to_null()
            try:  # what the failed write left in the buffer now goes to the null device
                object.__getattribute__(self, "_stream").flush()
            except OSError:
                pass
            return None

    def write(self, text):
        stream = object.__getattribute__(self, "_stream")
        done = self._guarded(lambda: stream.write(text))
        return len(text) if done is None else done

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        stream = object.__getattribute__(self, "_stream")
        self._guarded(stream.flush)

    def __getattr__(self, name):
        if name == "_stream":  # a copy made without __init__ (pickle, copy): no stream to ask
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_stream"), name)


def guard_standard_streams() -> None:
    """Make sys.stdout and sys.stderr ``ClosedReaderSafe`` (once; a stream without a file descriptor, as in a
    test's captured output, is left alone)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, ClosedReaderSafe):
            continue
        try:
            stream.fileno()
        except (OSError, ValueError, AttributeError):
            continue
        setattr(sys, name, ClosedReaderSafe(stream))


def flush_standard_streams() -> None:
    """Flush both at the end, through the guard, so the interpreter's own last flush finds nothing to fail on."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
