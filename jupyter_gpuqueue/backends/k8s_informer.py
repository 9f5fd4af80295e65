"""A list-and-watch cache of one Kubernetes collection, kept in a daemon thread (the pattern of
client-go's informers; API conventions "Efficient detection of changes").

The thread lists the collection (label-selected), then watches from the list's resourceVersion,
resuming from the last seen version (``BOOKMARK`` events included) whenever the server ends the
stream. On ``410 Gone`` (the version was compacted away) it lists again and carries on; the cache
is replaced by the fresh list, so objects deleted in between disappear too. Other errors are
retried with exponential backoff (``0.5 s`` doubling, capped at ``max_backoff`` seconds) for as
long as the informer runs; the backoff starts again from ``0.5 s`` as soon as the collection
answers again (a successful list, or the first event or bookmark of a watch), so that the next
outage is retried promptly.

Readers call :meth:`Informer.snapshot` / :meth:`Informer.get` from any thread. ``on_change`` (if
given) is called from the informer's thread after every change, without arguments: the owner
recomputes what it needs (level-triggered, so a missed or repeated event cannot mislead it).

The last state of each deleted object is kept for a while (:meth:`Informer.last_state`, the newest
``tombstones`` of them): an object that finished and was deleted between two reads of the cache (a
Job removed by ``ttlSecondsAfterFinished``) still tells how it ended.

With ``index_label`` the cache is also indexed by that label's value (client-go's indexers):
:meth:`Informer.by_label` gives the objects carrying a value without a scan, and
:meth:`Informer.take_changed` the values whose objects were added, changed or deleted since it was
last called (None after a list: everything may have changed), so that an owner with thousands of
objects looks again only at those that moved.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Callable, Optional

from .k8s_client import KubeApiError, KubeClient

log = logging.getLogger(__name__)


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class Informer:
    """``path``: a collection path (e.g. ``/apis/batch/v1/jobs`` for all namespaces);
    ``label_selector``: the server-side filter. Objects are keyed ``namespace/name``."""

    BASE_BACKOFF = 0.5

    def __init__(self, client: KubeClient, path: str, label_selector: Optional[str] = None, *,
                 field_selector: Optional[str] = None,
                 on_change: Optional[Callable[[], None]] = None, watch_timeout: int = 300,
                 max_backoff: float = 30.0, name: str = "", tombstones: int = 2000,
                 index_label: Optional[str] = None):
        self.client = client
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.name = name or path
        self._lock = threading.Lock()
        self._objects: dict[str, dict] = {}
        self._gone: "collections.OrderedDict[str, dict]" = collections.OrderedDict()
        self.tombstones = tombstones
        self.index_label = index_label
        self._index: dict[str, dict[str, dict]] = {}  # label value -> key -> object
        self._changed: Optional[set[str]] = None  # label values changed since take_changed (None: all)
        self.resource_version = ""
        self.synced = threading.Event()
        self.relists = 0  # how many times the collection was listed (1 + one per 410 / error)
        self.last_error: Optional[KubeApiError] = None
        self.backoff = self.BASE_BACKOFF  # the wait before the next retry after an error
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- reading -------------------------------------------------------------------------------------
    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> Optional[dict]:
        with self._lock:
            return self._objects.get(f"{namespace}/{name}")

    def by_label(self, value: str) -> list[dict]:
        """The objects whose ``index_label`` is ``value`` (needs ``index_label``)."""
        with self._lock:
            return list((self._index.get(value) or {}).values())

    def take_changed(self) -> Optional[set[str]]:
        """The ``index_label`` values of the objects added, changed or deleted since the last call
        (a deleted object's value too), and start a new set; None when the collection was listed
        since (everything may have changed) or before the first call."""
        with self._lock:
            out, self._changed = self._changed, set()
            return out

    def _label(self, obj: dict) -> Optional[str]:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(self.index_label)

    def _unindex(self, key: str, obj: Optional[dict]) -> None:
        if obj is None:
            return
        value = self._label(obj)
        if value is None:
            return
        objs = self._index.get(value)
        if objs is not None:
            objs.pop(key, None)
            if not objs:
                del self._index[value]
        if self._changed is not None:
            self._changed.add(value)

    def _reindex(self, key: str, obj: dict) -> None:
        value = self._label(obj)
        if value is None:
            return
        self._index.setdefault(value, {})[key] = obj
        if self._changed is not None:
            self._changed.add(value)

    def last_state(self, namespace: str, name: str) -> Optional[dict]:
        """The object as last seen before it was deleted (None: not deleted lately, or unknown)."""
        with self._lock:
            return self._gone.get(f"{namespace}/{name}")

    def _bury(self, key: str, obj: dict) -> None:
        self._gone[key] = obj
        self._gone.move_to_end(key)
        while len(self._gone) > self.tombstones:
            self._gone.popitem(last=False)

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> "Informer":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"k8s-informer {self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    # -- the loop ------------------------------------------------------------------------------------
    def _notify(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # pragma: no cover - the owner's bug must not kill the informer
                log.exception("kubernetes informer %s: on_change failed", self.name)

    def _relist(self) -> None:
        items, rv = self.client.list(self.path, self.label_selector, self.field_selector)
        with self._lock:
            fresh = {_key(o): o for o in items}
            for k, o in self._objects.items():
                if k not in fresh:
                    self._bury(k, o)
            for k in fresh:
                self._gone.pop(k, None)
            self._objects = fresh
            if self.index_label is not None:
                self._index = {}
                for k, o in fresh.items():
                    self._reindex(k, o)
                self._changed = None
            self.resource_version = rv
        if self.relists:
            log.info("kubernetes informer %s: listed again (%d objects, resourceVersion %s)", self.name,
                     len(items), rv)
        self.relists += 1
        self.synced.set()
        self._notify()

    def _apply(self, ev: dict) -> None:
        typ, obj = ev.get("type"), ev.get("object") or {}
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            key = _key(obj)
            if typ in ("ADDED", "MODIFIED"):
                old = self._objects.get(key)
                self._objects[key] = obj
                self._gone.pop(key, None)
                if self.index_label is not None:
                    self._unindex(key, old)
                    self._reindex(key, obj)
            elif typ == "DELETED":
                old = self._objects.pop(key, None)
                self._bury(key, obj)
                if self.index_label is not None:
                    self._unindex(key, old if old is not None else obj)
                    self._unindex(key, obj)
            if rv:
                self.resource_version = rv
        if typ != "BOOKMARK":
            self._notify()

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                    self.backoff = self.BASE_BACKOFF  # the collection answers again
                for ev in self.client.watch(self.path, self.resource_version, self.label_selector,
                                            self.watch_timeout, field_selector=self.field_selector):
                    if self._stop.is_set():
                        return
                    self.backoff = self.BASE_BACKOFF  # an event or bookmark: the watch is healthy
                    self._apply(ev)
                self.backoff = self.BASE_BACKOFF  # the server ended the stream normally: resume
            except KubeApiError as err:
                self.last_error = err
                if err.status == 410:
                    log.info("kubernetes informer %s: %s; listing again", self.name, err.message)
                    need_list = True
                    continue
                self._wait_after_error(err)
                need_list = need_list or err.status not in (0,)
            except Exception as exc:  # decoding errors, dropped connections mid-stream
                self._wait_after_error(exc)

    def _wait_after_error(self, err) -> None:
        if self._stop.is_set():
            return  # stopped (close()): the stream it had open was cut; nothing to retry or report
        log.warning("kubernetes informer %s: %s; retrying in %.1f s", self.name, err, self.backoff)
        self._stop.wait(self.backoff)
        self.backoff = min(self.max_backoff, self.backoff * 2)
