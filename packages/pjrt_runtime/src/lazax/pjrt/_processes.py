"""Several processes as one job, over jax's distributed runtime.

Contract:
- ``initialize(coordinator_address, num_processes, process_id, local_device_ids,
  timeout_s, heartbeat_timeout_s, platform)`` joins this process to the job
  (``jax.distributed.initialize``), once (``RuntimeError`` the second time). It must
  come before jax touches a device (``lazax.pjrt.initialize_distributed`` checks that no
  runtime exists yet); on the CPU the job's collectives run over gloo.
  ``is_initialized()`` says whether it ran.
- ``spans_processes(sharding)``: whether a sharding places pieces on another process's
  devices (a program or buffer that does needs every process to take part).
- ``place_across(buffer, sharding)``: a buffer this process holds, laid out over a
  sharding that spans processes: each process builds its own pieces from its own copy,
  so every process must hold the same value (jax's rule for ``device_put`` of host
  data). ``from_process_local(local, sharding, global_shape)``: one global buffer from
  each process's own part (jax's ``make_array_from_process_local_data``).
- ``local_part(buffer)``: ``(array, offsets)``, the block of the global value that this
  process's devices hold, and where it starts; ``ValueError`` when this process's
  pieces are not one block.
- ``exchange(tag, value, timeout_s, what, processes=None)``: every process's ``value``
  (bytes), by process index, through the coordination service's key-value store
  (``what``: what the processes meet for, in errors); ``TimeoutError`` naming the
  processes that did not arrive. ``processes``: only those exchange (a group of the
  job); the others' entries are empty. Tags must be used once each, in the same order
  in every process (of the group).
- ``wait_watched(buffers, poll_s)``: waits for ``buffers`` while watching the job's
  processes: raises ``ProcessLostError`` once one is gone (``lost_processes``: no
  heartbeat for ``heartbeat_timeout_s``, or it left on an uncaught error), instead of
  waiting forever on a collective it will never join; ``exchange`` and ``barrier``
  watch the same way. Inside ``peers_watched()``, an error of a collective
  whose transport lost a peer is a ``ProcessLostError`` too.
- ``barrier(tag, timeout_s, processes=None)``: returns once every process (of
  ``processes``) reached ``tag`` (``TimeoutError`` otherwise).
- ``SplitAcrossProcessesError``: reading a buffer to the host whose value lies on
  several processes' devices (a replicated one reads back whole).

jax's coordination-service client is not public API: it is reached in ``_client`` only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ._watchdog import WATCHDOG

__all__ = [
    "JobMethods",
    "ProcessLostError",
    "SplitAcrossProcessesError",
    "barrier",
    "exchange",
    "from_process_local",
    "initialize",
    "is_initialized",
    "local_part",
    "lost_processes",
    "peers_watched",
    "place_across",
    "spans_processes",
    "wait_watched",
]


class SplitAcrossProcessesError(RuntimeError):
    """A value split over several processes' devices cannot be read whole here."""


class ProcessLostError(RuntimeError):
    """Another process of the job stopped while this one waited on work they share."""


_JOINED: dict[str, Any] = {}


def initialize(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    local_device_ids: Sequence[int] | None = None,
    timeout_s: int = 300,
    heartbeat_timeout_s: int = 100,
    platform: str = "cpu",
) -> None:
    if _JOINED:
        raise RuntimeError(
            f"lazax: this process already joined a job (process {_JOINED['process_id']} of "
            f"{_JOINED['num_processes']}); initialize once per process"
        )
    if platform == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # Without it, jax's coordination service ends every process (a fatal log, no
    # exception) when one stops sending heartbeats; with it, ``wait_watched`` finds the
    # dead process and raises in the survivors.
    jax.config.update("jax_enable_recoverability", True)
    jax.distributed.initialize(
        coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=int(timeout_s),
        heartbeat_timeout_seconds=int(heartbeat_timeout_s),
    )
    _start_heartbeat()
    # Recoverable tasks skip jax's own meeting at exit: without one, process 0 (which
    # runs the coordinator) could leave while the others still need it.
    atexit.register(_meet_at_exit, int(timeout_s))
    _JOINED.update(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )


def is_initialized() -> bool:
    # Never asks jax for its process count: that would start its backends, after
    # which the job can no longer be joined.
    return bool(_JOINED) or _client(required=False) is not None


def spans_processes(sharding: Any) -> bool:
    return sharding is not None and not sharding.is_fully_addressable


def place_across(buffer: jax.Array, sharding: Any) -> jax.Array:
    shape = buffer.shape
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        whole = all(
            s == slice(None) or (s.start in (None, 0) and s.stop in (None, n))
            for s, n in zip(index, shape)
        )
        pieces.append(jax.device_put(buffer if whole else buffer[index], device))
    return jax.make_array_from_single_device_arrays(shape, sharding, pieces)


def from_process_local(local: np.ndarray, sharding: Any, global_shape=None) -> jax.Array:
    return jax.make_array_from_process_local_data(sharding, local, global_shape)


def local_part(buffer: jax.Array) -> tuple[np.ndarray, tuple[int, ...]]:
    shape = buffer.shape
    blocks: dict[tuple, Any] = {}
    for shard in buffer.addressable_shards:
        bounds = tuple(s.indices(n)[:2] for s, n in zip(shard.index, shape))
        blocks.setdefault(bounds, shard.data)
    low = tuple(min(b[d][0] for b in blocks) for d in range(len(shape)))
    high = tuple(max(b[d][1] for b in blocks) for d in range(len(shape)))
    out = np.empty(tuple(h - lo for lo, h in zip(low, high)), dtype=buffer.dtype)
    covered = 0
    for bounds, data in blocks.items():
        where = tuple(slice(b0 - lo, b1 - lo) for (b0, b1), lo in zip(bounds, low))
        out[where] = np.asarray(data)
        covered += int(np.prod([b1 - b0 for b0, b1 in bounds]))
    if covered != out.size:
        raise ValueError(
            f"this process's pieces of the {tuple(shape)} value are not one block "
            f"(they cover {covered} of the {out.size} elements between {low} and "
            f"{high}); lay it out so each process holds a contiguous part"
        )
    return out, low


def _client(required: bool = True):
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None and required:
        raise RuntimeError("lazax: jax's distributed runtime is not initialized")
    return client


_EXCHANGED: dict[tuple, list[str]] = {}  # processes exchanged among -> their last tags


def _receive(client, tag: str, k: int, out: list, deadline: float, missing: list, what: str):
    """Process ``k``'s value of ``tag`` into ``out[k]``; ``k`` into ``missing`` if it did
    not come before ``deadline``; a lost process raises at once."""
    while True:
        try:
            out[k] = client.blocking_key_value_get_bytes(f"lazax/{tag}/{k}", 1000)
            return
        except Exception as err:  # jax raises its runtime error on a deadline
            if "DEADLINE_EXCEEDED" not in str(err) and "imed out" not in str(err):
                raise
        lost = lost_processes()
        if lost:
            _raise_lost(lost, f"waited for the others {what or f'at {tag!r}'}")
        if time.monotonic() > deadline:
            missing.append(k)
            return


def _arrivals(tag: str, what: str, waited: int, count: int, me: int) -> str:
    # Processes are read in order: the one waited for and those after it may be missing.
    later = [k for k in range(waited, count) if k != me]
    return (
        f"the other processes {what or f'at {tag!r}'} (process {waited} has not arrived; "
        f"not yet read: {later})"
    )


def exchange(
    tag: str, value: bytes, timeout_s: float, what: str = "", processes=None
) -> list[bytes]:
    """Every process's ``value`` for ``tag``, in process order; ``processes``: only
    those (a group of the job, this one among them) exchange, and the others' entries
    stay empty."""
    client = _client()
    me, count = jax.process_index(), jax.process_count()
    among = tuple(range(count)) if processes is None else tuple(sorted(processes))
    client.key_value_set_bytes(f"lazax/{tag}/{me}", value)
    out: list[bytes] = [b""] * count
    out[me] = value
    deadline = time.monotonic() + timeout_s
    missing = []
    waited = [0]  # the process being waited for, for the watchdog
    with WATCHDOG.waiting(lambda: _arrivals(tag, what, waited[0], count, me)):
        for k in among:
            waited[0] = k
            if k != me:
                _receive(client, tag, k, out, deadline, missing, what)
    if missing:
        raise TimeoutError(f"process(es) {missing} did not reach {tag!r} within {timeout_s:g} s")
    # Every process of ``among`` has read the tag before the one they exchange next: the
    # tag two back is read by all of them, and this process's entry of it can go.
    done = _EXCHANGED.setdefault(among, [])
    done.append(tag)
    if len(done) > 2:
        client.key_value_delete(f"lazax/{done.pop(0)}/{me}")
    return out


# -- liveness ------------------------------------------------------------------------
# jax's own liveness query (``get_live_nodes``) blocks until every live process asks
# too, so lazax keeps a heartbeat of its own in the coordination service's store: each
# process bumps a counter every second, and another counts as gone when its counter
# stood still for the heartbeat timeout, or when it left on an uncaught error.
_SEEN: dict[int, tuple] = {}  # process -> (its last counter, when it last moved)


_HEARTBEAT: dict[str, Any] = {}  # "stop": Event, "thread": the beating thread


def _start_heartbeat(interval_s: float = 1.0) -> None:
    client, me = _client(), jax.process_index()
    stop = threading.Event()

    def beat() -> None:
        count = 0
        while not stop.is_set():
            count += 1
            try:
                client.key_value_set(f"lazax/beat/{me}", str(count), allow_overwrite=True)
            except Exception:  # the client shut down: the process is leaving
                return
            stop.wait(interval_s)

    thread = threading.Thread(target=beat, name="lazax-heartbeat", daemon=True)
    _HEARTBEAT.update(stop=stop, thread=thread)
    thread.start()


def _stop_heartbeat(timeout_s: float = 10.0) -> None:
    # A daemon thread still inside jax's client when the interpreter finalizes is
    # ended by the interpreter as it takes the GIL back, and that ending unwinds through
    # the client's C++ frames, which abort the process ("FATAL: exception not
    # rethrown", exit status -6). The heartbeat ends before the process leaves.
    if not _HEARTBEAT:
        return
    _HEARTBEAT["stop"].set()
    _HEARTBEAT["thread"].join(timeout_s)


def _try_get(client, key: str):
    try:
        return client.key_value_try_get(key)
    except Exception:  # not there (yet)
        return None


def lost_processes() -> dict[int, str]:
    """The job's other processes that count as gone, and why (never blocks long)."""
    client = _client(required=False)
    if client is None:
        return {}
    me, now = jax.process_index(), time.monotonic()
    timeout = _JOINED.get("heartbeat_timeout_s", 100)
    lost = {}
    for k in range(jax.process_count()):
        if k == me:
            continue
        if _try_get(client, f"lazax/left/{k}") is not None:
            lost[k] = "stopped: it left the job on an error"
            continue
        beat = _try_get(client, f"lazax/beat/{k}")
        seen = _SEEN.get(k)
        if seen is None or seen[0] != beat:
            _SEEN[k] = (beat, now)
        elif now - seen[1] > timeout:
            lost[k] = f"stopped: no heartbeat for {timeout} s (it died, or hangs)"
    return lost


def _raise_lost(lost: dict[int, str], doing: str):
    # A thread may stay blocked in a collective that never completes; at exit, the
    # interpreter would abort on it. The job is lost anyway: end with status 1 once the
    # traceback is out, skipping jax's shutdown meeting.
    atexit.register(_exit_lost)
    gone = "; ".join(f"process {k} {why}" for k, why in sorted(lost.items()))
    raise ProcessLostError(
        f"lazax: process {jax.process_index()} {doing}, but {gone}. The job cannot go "
        f"on without it: restart it (torchrun --max-restarts) from the last checkpoint."
    )


def wait_watched(buffers: Sequence[jax.Array], poll_s: float = 1.0) -> None:
    pending = [b for b in buffers if not b.is_ready()]
    if not pending:
        return
    done = threading.Event()
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            jax.block_until_ready(pending)
        except BaseException as err:  # re-raised in the caller's thread
            failed.append(err)
        finally:
            done.set()

    threading.Thread(target=wait, name="lazax-wait", daemon=True).start()
    while not done.wait(poll_s):
        lost = lost_processes()
        if lost:
            _raise_lost(lost, "waited for a program the others take part in")
    if failed:
        raise failed[0]


@contextlib.contextmanager
def peers_watched():
    """A read or wait inside: a failed collective whose transport lost a peer raises
    ``ProcessLostError`` (an execution's error surfaces wherever its result is read)."""
    try:
        yield
    except ProcessLostError:
        raise
    except Exception as err:
        if not any(sign in str(err) for sign in _LOST_PEER_SIGNS):
            raise
        atexit.register(_exit_lost)
        raise ProcessLostError(
            f"lazax: process {jax.process_index()} waited for a program the others take "
            f"part in, but its collective failed: a process of the job stopped, or lost "
            f"its connection. The job cannot go on without it: restart it (torchrun "
            f"--max-restarts) from the last checkpoint. ({err})"
        ) from err


# How a collective's transport reports a peer that went away.
_LOST_PEER_SIGNS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


def _exit_lost() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream: nothing more to say
            pass
    os._exit(1)


def _meet_at_exit(timeout_s: int) -> None:
    client = _client(required=False)
    if client is None:
        return
    if getattr(sys, "last_value", None) is not None:
        _stop_heartbeat()
        # Leaving on an uncaught error: the others may wait in a collective for this
        # process. Say so, and do not wait for them.
        try:
            client.key_value_set(f"lazax/left/{jax.process_index()}", "error")
        except Exception:  # the coordinator is gone already
            pass
        return
    me, count = jax.process_index(), jax.process_count()
    try:
        client.wait_at_barrier("lazax_exit", timeout_s * 1000)
        # Beating until every process is here: one still working would take a silent
        # process for a dead one.
        _stop_heartbeat()
        if me != 0:
            # Disconnect while process 0, which runs the coordinator, is still there.
            jax.distributed.shutdown()
            return
        # Process 0 leaves once the others disconnected. jax's query of who is still
        # connected waits for every connected process: it runs in a thread, bounded.
        others = list(range(1, count))

        def gone() -> None:
            while any(k in client.get_live_nodes(list(range(count))) for k in others):
                time.sleep(0.02)

        waiter = threading.Thread(target=gone, name="lazax-exit", daemon=True)
        waiter.start()
        waiter.join(timeout_s)
    except Exception as err:  # a lost or late process: leave anyway, and say so
        print(f"lazax: leaving without the job's other processes: {err}", file=sys.stderr)
    finally:
        _stop_heartbeat()


def barrier(tag: str, timeout_s: float, processes=None) -> None:
    """Return once every process of the job (or of ``processes``) reached ``tag`` (each
    tag once)."""
    try:
        exchange(f"barrier/{tag}", b"", timeout_s, processes=processes)
    except TimeoutError as err:
        raise TimeoutError(f"lazax: not every process reached barrier {tag!r}: {err}") from None


class JobMethods:
    """``PjrtRuntime``'s methods for a job of several processes (its ``memory``,
    ``_check_fault`` and ``process_count`` are the runtime's)."""

    def global_array(self, local: np.ndarray, sharding: Any, global_shape=None) -> jax.Array:
        """One buffer over ``sharding`` from each process's own ``local`` part (jax's
        ``make_array_from_process_local_data``; ``global_shape`` inferred when None)."""
        self._check_fault("to_device")
        buffer = from_process_local(local, sharding, global_shape)
        self.memory.track((buffer,))
        return buffer

    def from_callback(self, shape, sharding: Any, read: Callable) -> jax.Array:
        """A buffer over ``sharding`` whose pieces this process reads itself: ``read``
        (a tuple of slices) -> numpy array, once per piece its devices hold."""
        self._check_fault("to_device")
        buffer = jax.make_array_from_callback(tuple(shape), sharding, read)
        self.memory.track((buffer,))
        return buffer

    def local_part(self, buffer: jax.Array) -> np.ndarray:
        """The block of ``buffer``'s value that this process's devices hold."""
        self._check_fault("to_host")
        with peers_watched(), WATCHDOG.waiting(f"this process's part of a {buffer.shape} value"):
            wait_watched((buffer,))
            return local_part(buffer)[0]
