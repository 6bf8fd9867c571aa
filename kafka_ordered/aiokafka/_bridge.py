"""The protocol cores are synchronous and may block (layout-log catch-ups,
offset reads, a switch's flush); aiokafka lives on an event loop. A
:class:`LoopBridge` runs core calls that may block on one worker thread of
its own, one call at a time and in order, while the loop goes on
(heartbeats, fetches, the producer's sender); the ports hand each aiokafka
call back to the loop and wait for it there. A call that cannot block runs
on the loop itself, and only while the worker is idle (:meth:`LoopBridge.idle`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from typing import Any, Awaitable, Callable, Mapping, Optional, TypeVar

from .. import _log
from ..errors import KafkaOrderedError

__all__ = ["LoopBridge"]

T = TypeVar("T")


class LoopBridge:
    """One worker thread beside one running event loop.

    :meth:`run` (on the loop) runs a blocking function on the worker;
    :meth:`call` and :meth:`wait` (from the worker, or :meth:`call` on the
    loop itself) run a client call on the loop. Bound to the loop that was
    running when :meth:`bind` was called.
    """

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread = -1
        #: The call handed to the worker last: the worker runs nothing once it is done.
        self._last: Optional[concurrent.futures.Future[Any]] = None

    def bind(self) -> asyncio.AbstractEventLoop:
        """Bind to the running loop (call from a coroutine); returns it."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        return loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise KafkaOrderedError("the client is not started: await start() first")
        return self._loop

    def on_loop(self) -> bool:
        return threading.get_ident() == self._loop_thread

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the worker thread; its result or error."""
        loop = self.loop
        job = self._last = self._executor.submit(functools.partial(fn, *args, **kwargs))
        return await asyncio.wrap_future(job, loop=loop)

    def idle(self) -> bool:
        """Whether the worker runs nothing (every call handed to it finished,
        or was cancelled before it started): a core step may then run on the
        loop itself without overlapping one on the worker."""
        last = self._last
        return last is None or last.done()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (not a coroutine) on the loop thread; its result or error."""
        if self.on_loop():
            return fn(*args)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                done.set_result(fn(*args))
            except BaseException as e:  # handed to the waiting thread
                done.set_exception(e)

        self.loop.call_soon_threadsafe(invoke)
        return done.result()

    def wait(self, coro: Callable[..., Awaitable[T]], *args: Any, timeout: Optional[float] = None) -> T:
        """Await ``coro(*args)`` on the loop and return its result (from the
        worker only: the loop cannot wait for itself). Raises its error, or
        ``TimeoutError`` after ``timeout`` seconds (the call is cancelled)."""
        if self.on_loop():
            raise RuntimeError("LoopBridge.wait called on the event loop's own thread")
        fut = asyncio.run_coroutine_threadsafe(_awaited(coro, args), self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"{getattr(coro, '__name__', coro)} did not finish within {timeout} s") from None

    def spawn(self, coro: Callable[..., Awaitable[T]], *args: Any) -> "concurrent.futures.Future[T]":
        """Start ``coro(*args)`` on the loop without waiting (from any thread)."""
        if self.on_loop():
            task = asyncio.ensure_future(_awaited(coro, args))
            out: concurrent.futures.Future[T] = concurrent.futures.Future()
            task.add_done_callback(lambda t: _settle(out, t))
            return out
        return asyncio.run_coroutine_threadsafe(_awaited(coro, args), self.loop)

    def close(self) -> None:
        """Stop the worker once its current call returns."""
        self._executor.shutdown(wait=False)

    async def acquire(self, conn: Mapping[str, Any], opts: Mapping[str, Any]) -> _log.Shared:
        """The process's layout-log resources for ``conn`` and the ``ordered.*``
        options ``opts``, caught up with the log (on the worker); raises what
        :func:`kafka_ordered._log.acquire` raises."""
        return await self.run(_log.acquire, conn, opts["ordered.layout.topic"],
                              corrupt_policy=opts["ordered.layout.corrupt.policy"],
                              timeout=opts["ordered.metadata.timeout.ms"] / 1000.0)

    async def release(self, core: Any, shared: Optional[_log.Shared]) -> None:
        """Close ``core`` (a protocol core, or ``None``), release ``shared``,
        then stop the worker."""
        if core is not None:
            core.close()
        if shared is not None:
            await self.run(shared.release)
        self.close()


async def _awaited(coro: Callable[..., Awaitable[T]], args: Any) -> T:
    return await coro(*args)


def _settle(out: "concurrent.futures.Future[Any]", task: "asyncio.Future[Any]") -> None:
    if task.cancelled():
        out.cancel()
    elif task.exception() is not None:
        out.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        out.set_result(task.result())
