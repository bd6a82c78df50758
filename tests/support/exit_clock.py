"""When did the proxy and its agent exit? Watched from /proc (Linux), so that a test can bound what the proxy
did after its agent's exit instead of timing a whole shutdown against the machine's speed.

:class:`ExitClock` watches the descendants of one process in a thread: it finds them by their parent (a scan of
``/proc`` every few polls, until the proxy and its agent are known), and notes for each the monotonic time it was
first seen to have exited (a zombie, or gone). CLOCK_MONOTONIC is the same for every process of the machine.
A late poll only makes an exit look later: ``proxy exit - agent exit`` is then off by the poll delay at most.
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[1])


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def is_proxy(cmdline: list[str]) -> bool:
    """``python -m acp_otel.cli proxy ...`` or the ``acp-otel proxy ...`` console script."""
    head = cmdline[:4]
    return "proxy" in head and any(part == "acp_otel.cli" or part.endswith("/acp-otel") for part in head)


class ExitClock:
    """Watches the descendants of ``root_pid`` (the editor: the test's own process or its editor process)."""

    def __init__(self, root_pid: int, interval_s: float = 0.005) -> None:
        self.root = root_pid
        self.interval_s = interval_s
        self.parent: dict[int, int] = {}  # descendant -> its parent
        self.cmdline: dict[int, list[str]] = {}
        self.exited: dict[int, float] = {}  # pid -> when first seen exited
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="exit-clock", daemon=True)

    def __enter__(self) -> ExitClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(10)
        self.poll()  # an exit the thread's last poll came too early for

    def _scan(self) -> None:
        for pid in self.parent:  # a child seen between its fork and its exec had its parent's command line
            if pid not in self.exited:
                self.cmdline[pid] = _cmdline(pid) or self.cmdline[pid]
        known = {self.root, *self.parent}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in known:
                continue
            stat = _stat(int(entry))
            if stat is not None and stat[1] in known and stat[0] != "Z":
                pid = int(entry)
                self.parent[pid] = stat[1]
                self.cmdline[pid] = _cmdline(pid)
                known.add(pid)

    def poll(self) -> None:
        """Note the exits since the last poll (the thread polls every ``interval_s``)."""
        now = time.monotonic()
        for pid in list(self.parent):
            if pid not in self.exited:
                stat = _stat(pid)
                # Gone, a zombie, or the pid reused by a process that is not our descendant's child.
                if stat is None or stat[0] == "Z" or stat[1] != self.parent[pid]:
                    self.exited[pid] = now

    def _run(self) -> None:
        polls = 0
        while not self._stop.is_set():
            if polls % 10 == 0 and self.agent() is None:  # a scan costs more than a poll: only until found
                self._scan()
            self.poll()
            polls += 1
            self._stop.wait(self.interval_s)

    def proxy(self) -> int | None:
        """The first proxy among the descendants."""
        return next((pid for pid, cmd in self.cmdline.items() if is_proxy(cmd)), None)

    def agent(self) -> int | None:
        """The proxy's child: the agent it spawned."""
        proxy = self.proxy()
        return next((pid for pid, parent in self.parent.items() if parent == proxy), None) if proxy else None

    def proxy_after_agent_s(self) -> float:
        """How long the proxy lived after its agent's exit (both must have been seen to exit)."""
        proxy, agent = self.proxy(), self.agent()
        assert proxy is not None and agent is not None, f"proxy and agent not found: {self.cmdline}"
        assert proxy in self.exited and agent in self.exited, "the proxy or its agent was not seen to exit"
        return self.exited[proxy] - self.exited[agent]
