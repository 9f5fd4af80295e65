/**
 * The panel's live state: info, the user's workloads, queues and inventory.
 *
 * Lists are fetched once, then kept current by the websocket `gpuqueue/api/events`
 * (`workload` events are applied in place; `queues` / `inventory` events trigger a refetch;
 * `batch` messages carry several of them, applied in order).
 * The socket reconnects with exponential backoff, and a slow poll refetches everything as a
 * safety net. Every reconnect refetches, because events may have been missed meanwhile.
 *
 * When the server answers as something other than the queue (ServerGoneError: under JupyterHub,
 * the user's server was stopped, e.g. at the end of its GPU lease, or the login expired) the
 * connection is `gone` and `loadError` says so in plain words; nothing of that answer is shown.
 * A notebook lease's card ends at its `evictionDeadline` or its maximum time, whichever comes
 * first, even when no event can say so any more (the server that would send it is the one that
 * stops): `Failed`, reason `Preempted`, or `Succeeded`, reason `MaxRuntimeReached`; its clock and
 * cost stopped then, as the queue records it.
 */
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import {
  GpuQueueClient,
  IInfo,
  ServerGoneError,
  SERVER_GONE_MESSAGE,
  IInventory,
  IPrices,
  IQueues,
  IWorkload,
  QueueEvent,
  workloadKey
} from './api';

/** `gone`: the server no longer answers as the GPU queue (ServerGoneError). */
export type ConnectionState = 'connecting' | 'live' | 'offline' | 'gone';

const LEASE_KIND = 'NotebookLease';

/** The `reason` of a notebook lease that ended at its maximum time (it is Succeeded). */
export const LEASE_TIME_REACHED = 'MaxRuntimeReached';

/** When a running lease reaches its maximum time (`startedAt` + `maxRuntimeSeconds`, seconds since the epoch). */
export function leaseMaxEnd(w: IWorkload): number | null {
  return w.startedAt && w.maxRuntimeSeconds ? w.startedAt + w.maxRuntimeSeconds : null;
}

/** When a running lease ends: its `evictionDeadline` or its maximum time, whichever comes first. */
export function leaseEnd(w: IWorkload): number | null {
  const ends = [w.evictionDeadline ?? null, leaseMaxEnd(w)].filter((t): t is number => !!t);
  return ends.length ? Math.min(...ends) : null;
}

/** "4 min", "1 min 30 s", "2 h" (as the queue's message says it). */
function durationWords(seconds: number): string {
  const s = Math.round(seconds);
  const parts = [Math.floor(s / 3600), Math.floor((s % 3600) / 60), s % 60];
  const out = [parts[0] ? `${parts[0]} h` : '', parts[1] ? `${parts[1]} min` : '', parts[2] ? `${parts[2]} s` : ''];
  return out.filter(p => p).join(' ') || '0 s';
}

/**
 * A running notebook lease past its end, as the queue records it at that moment: at its
 * maximum time Succeeded (reason MaxRuntimeReached, "reached its maximum time"), at an earlier
 * `evictionDeadline` Failed (reason Preempted); finished then, its cost up to then.
 */
export function releasedLease(entry: IWorkloadEntry): IWorkload {
  const w = entry.workload;
  const maxEnd = leaseMaxEnd(w);
  const end = leaseEnd(w) ?? Date.now() / 1000;
  if (maxEnd !== null && end >= maxEnd) {
    const perSecond = (w.pricePerHourUsd ?? 0) / 3600;
    return {
      ...w,
      state: 'Succeeded',
      reason: LEASE_TIME_REACHED,
      message: `reached its maximum time (${durationWords(w.maxRuntimeSeconds ?? 0)})`,
      finishedAt: end,
      costUsd: Math.max(
        (w.costUsd ?? 0) + perSecond * Math.max(0, end - entry.receivedAt / 1000),
        perSecond * Math.max(0, end - (w.startedAt ?? end))
      ),
      evictionDeadline: null
    };
  }
  const perSecond = (w.pricePerHourUsd ?? 0) / 3600;
  const cost = Math.max(
    (w.costUsd ?? 0) + perSecond * Math.max(0, end - entry.receivedAt / 1000),
    w.startedAt ? perSecond * Math.max(0, end - w.startedAt) : 0
  );
  return {
    ...w,
    state: 'Failed',
    reason: 'Preempted',
    message: w.message || 'Released at its deadline: higher-priority work needed the GPU',
    finishedAt: end,
    costUsd: cost,
    evictionDeadline: null
  };
}

export interface IWorkloadEntry {
  workload: IWorkload;
  /** Client time (ms) at which this copy arrived: the base of the cost ticker. */
  receivedAt: number;
}

export class QueueModel implements IDisposable {
  constructor(
    readonly client: GpuQueueClient,
    options: { pollIntervalMs?: number } = {}
  ) {
    this._pollIntervalMs = options.pollIntervalMs ?? 30000;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted with every workload event, after it was applied. */
  get workloadChanged(): ISignal<this, IWorkload> {
    return this._workloadChanged;
  }

  /** Emitted when an admin set or removed a team budget (a `budgets` event): refetch them. */
  get budgetsChanged(): ISignal<this, void> {
    return this._budgetsChanged;
  }

  get info(): IInfo | null {
    return this._info;
  }
  get prices(): IPrices | null {
    return this._prices;
  }
  get queues(): IQueues | null {
    return this._queues;
  }
  get inventory(): IInventory | null {
    return this._inventory;
  }
  get connection(): ConnectionState {
    return this._gone && this._connection !== 'live' ? 'gone' : this._connection;
  }
  /** The last error of a refresh (e.g. the server extension is not running), or null. */
  get loadError(): string | null {
    return this._loadError;
  }
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** The user's workloads, newest first. */
  get workloads(): IWorkloadEntry[] {
    return [...this._workloads.values()].sort(
      (a, b) => b.workload.createdAt - a.workload.createdAt
    );
  }

  workload(key: string): IWorkloadEntry | undefined {
    return this._workloads.get(key);
  }

  /** Start: fetch everything, open the event stream, start the safety-net poll. */
  start(): void {
    if (this._started || this._isDisposed) {
      return;
    }
    this._started = true;
    void this.refresh();
    this._connect();
    this._pollTimer = window.setInterval(() => {
      void this.refresh();
    }, this._pollIntervalMs);
  }

  /** Change the safety-net poll (the `pollIntervalSeconds` setting). */
  setPollInterval(ms: number): void {
    this._pollIntervalMs = Math.max(1000, ms);
    if (this._started && !this._isDisposed) {
      window.clearInterval(this._pollTimer);
      this._pollTimer = window.setInterval(() => {
        void this.refresh();
      }, this._pollIntervalMs);
    }
  }

  /** Refetch info, prices, workloads, queues and inventory. */
  async refresh(): Promise<void> {
    const c = this.client;
    const requestedAt = Date.now();
    const [info, prices, workloads, queues, inventory] = await Promise.allSettled([
      c.info(),
      c.prices(),
      c.workloads(),
      c.queues(),
      c.inventory()
    ]);
    if (this._isDisposed) {
      return;
    }
    if (info.status === 'fulfilled') {
      this._info = info.value;
    }
    if (prices.status === 'fulfilled') {
      this._prices = prices.value;
    }
    if (workloads.status === 'fulfilled') {
      const now = Date.now();
      const next = new Map<string, IWorkloadEntry>();
      for (const w of workloads.value) {
        const key = workloadKey(w);
        const current = this._workloads.get(key);
        // An event that arrived while the list was in flight is newer than the list.
        const newer = current && (this._eventAt.get(key) ?? -Infinity) >= requestedAt;
        next.set(key, newer ? current : { workload: w, receivedAt: now });
      }
      for (const [key, entry] of this._workloads) {
        if (!next.has(key) && (this._eventAt.get(key) ?? -Infinity) >= requestedAt) {
          next.set(key, entry); // submitted while the list was in flight
        }
      }
      this._workloads = next;
    }
    if (queues.status === 'fulfilled') {
      this._queues = queues.value;
    }
    if (inventory.status === 'fulfilled') {
      this._inventory = inventory.value;
    }
    const all = [info, prices, workloads, queues, inventory];
    const gone = all.some(r => r.status === 'rejected' && r.reason instanceof ServerGoneError);
    const failed = [info, workloads].find(r => r.status === 'rejected') as
      | PromiseRejectedResult
      | undefined;
    this._gone = gone;
    this._loadError = gone
      ? SERVER_GONE_MESSAGE
      : failed
        ? `Cannot reach the GPU queue: ${(failed.reason as Error)?.message ?? failed.reason}`
        : null;
    this._endLeases();
    this._changed.emit();
  }

  /**
   * Put a workload from a REST answer (submit, cancel) into the list. `requestedAt` (client ms)
   * is when that request was sent: an event about the workload received since then is newer
   * than the answer (the event stream can overtake the HTTP response) and is kept.
   */
  upsert(w: IWorkload, requestedAt: number): void {
    if ((this._eventAt.get(workloadKey(w)) ?? -Infinity) >= requestedAt) {
      return;
    }
    this._apply(w);
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    window.clearInterval(this._pollTimer);
    window.clearTimeout(this._reconnectTimer);
    window.clearTimeout(this._refetchTimer);
    window.clearTimeout(this._leaseTimer);
    window.clearTimeout(this._probeTimer);
    if (this._socket) {
      this._socket.onclose = null;
      this._socket.close();
      this._socket = null;
    }
    Signal.clearData(this);
  }

  /**
   * Positions of your pending workloads from a queues view: one snapshot for all of them.
   * A workload's own view carries its position as it was when that view was made; positions
   * shift without an event for each workload (one finishes, a victim is requeued in front), so
   * two cards could both say "position 1" until the next refetch.
   */
  private _takePositions(queues: IQueues): void {
    const positions = new Map<string, [number | null, number | null]>();
    for (const cq of queues.clusterQueues) {
      for (const p of cq.pending ?? []) {
        if (p.name === null) {
          continue; // another team's, anonymised
        }
        positions.set(workloadKey({ namespace: p.namespace, name: p.name }), [p.positionInClusterQueue, p.positionInLocalQueue]);
      }
    }
    for (const [key, entry] of this._workloads) {
      const w = entry.workload;
      const pos = positions.get(key);
      if (w.state !== 'Pending' || !pos) {
        continue;
      }
      if (w.positionInClusterQueue !== pos[0] || w.positionInLocalQueue !== pos[1]) {
        this._workloads.set(key, {
          ...entry,
          workload: { ...w, positionInClusterQueue: pos[0], positionInLocalQueue: pos[1] }
        });
      }
    }
  }

  private _apply(w: IWorkload): void {
    const key = workloadKey(w);
    const known = this._workloads.has(key);
    const mine = !this._info || w.owner === this._info.user;
    if (!known && !mine) {
      return;
    }
    this._workloads.set(key, { workload: w, receivedAt: Date.now() });
    this._workloadChanged.emit(w);
    this._endLeases();
    this._changed.emit();
  }

  /**
   * End the running notebook leases whose `evictionDeadline` has passed (see `releasedLease`),
   * and wake up at the next deadline. An event or refetch from a live server replaces them.
   */
  private _endLeases(): void {
    window.clearTimeout(this._leaseTimer);
    const now = Date.now();
    let next = Infinity;
    const ended: IWorkload[] = [];
    for (const [key, entry] of this._workloads) {
      const w = entry.workload;
      const end = w.kind === LEASE_KIND && w.state === 'Running' ? leaseEnd(w) : null;
      if (end === null) {
        continue;
      }
      const at = end * 1000;
      if (at <= now) {
        const done = releasedLease(entry);
        this._workloads.set(key, { workload: done, receivedAt: now });
        ended.push(done);
      } else {
        next = Math.min(next, at);
      }
    }
    if (next < Infinity && !this._isDisposed) {
      this._leaseTimer = window.setTimeout(() => {
        this._endLeases();
      }, Math.min(next - now + 20, 2 ** 31 - 1));
    }
    if (ended.length) {
      for (const w of ended) {
        this._workloadChanged.emit(w);
      }
      this._changed.emit();
    }
  }

  private _connect(): void {
    if (this._isDisposed) {
      return;
    }
    this._setConnection('connecting');
    let socket: WebSocket;
    try {
      const Ctor = this.client.serverSettings.WebSocket ?? WebSocket;
      // batch=1: the server may send several events as one `batch` message.
      const url = this.client.eventsUrl();
      socket = new Ctor(`${url}${url.includes('?') ? '&' : '?'}batch=1`);
    } catch (error) {
      this._scheduleReconnect();
      return;
    }
    this._socket = socket;
    socket.onopen = () => {
      this._backoffMs = 1000;
      this._setConnection('live');
      if (this._everConnected) {
        // Events may have been missed while disconnected.
        void this.refresh();
      }
      this._everConnected = true;
    };
    socket.onmessage = (msg: MessageEvent) => {
      let event: QueueEvent;
      try {
        event = JSON.parse(String(msg.data));
      } catch {
        return;
      }
      this._onEvent(event);
    };
    socket.onclose = () => {
      const wasLive = this._connection === 'live';
      this._socket = null;
      this._setConnection('offline');
      this._scheduleReconnect();
      if (wasLive) {
        // Lost: ask at once whether the server is still there (or gone, e.g. stopped by the hub).
        window.clearTimeout(this._probeTimer);
        this._probeTimer = window.setTimeout(() => void this.refresh(), 500);
      }
    };
    socket.onerror = () => {
      // onclose follows; nothing else to do.
    };
  }

  private _scheduleReconnect(): void {
    if (this._isDisposed) {
      return;
    }
    const delay = this._backoffMs;
    this._backoffMs = Math.min(this._backoffMs * 2, 30000);
    this._reconnectTimer = window.setTimeout(() => this._connect(), delay);
  }

  private _setConnection(state: ConnectionState): void {
    if (this._connection !== state) {
      this._connection = state;
      this._changed.emit();
    }
  }

  private _onEvent(event: QueueEvent): void {
    switch (event.type) {
      case 'workload':
        this._eventAt.set(workloadKey(event.workload), Date.now());
        this._apply(event.workload);
        // A state change moves positions and free devices too; the server also says so with
        // queues / inventory events, but refetching here costs little and keeps them in step.
        this._scheduleRefetch(true, true);
        break;
      case 'queues':
        this._scheduleRefetch(true, false);
        break;
      case 'inventory':
        this._scheduleRefetch(false, true);
        break;
      case 'budgets':
        this._budgetsChanged.emit();
        break;
      case 'batch':
        // Several events of one moment, in the order they happened.
        for (const e of event.events) {
          this._onEvent(e);
        }
        break;
      default:
        break;
    }
  }

  /** Coalesce bursts of events into one refetch of queues and/or inventory. */
  private _scheduleRefetch(queues: boolean, inventory: boolean): void {
    this._refetchQueues = this._refetchQueues || queues;
    this._refetchInventory = this._refetchInventory || inventory;
    if (this._refetchTimer) {
      return;
    }
    this._refetchTimer = window.setTimeout(async () => {
      this._refetchTimer = 0;
      const q = this._refetchQueues;
      const i = this._refetchInventory;
      this._refetchQueues = this._refetchInventory = false;
      const [queuesR, inventoryR] = await Promise.allSettled([
        q ? this.client.queues() : Promise.resolve(null),
        i ? this.client.inventory() : Promise.resolve(null)
      ]);
      if (this._isDisposed) {
        return;
      }
      if ([queuesR, inventoryR].some(r => r.status === 'rejected' && r.reason instanceof ServerGoneError)) {
        this._gone = true;
        this._loadError = SERVER_GONE_MESSAGE;
      }
      if (queuesR.status === 'fulfilled' && queuesR.value) {
        this._queues = queuesR.value;
        this._takePositions(queuesR.value);
      }
      if (inventoryR.status === 'fulfilled' && inventoryR.value) {
        this._inventory = inventoryR.value;
      }
      this._changed.emit();
    }, 200);
  }

  private _changed = new Signal<this, void>(this);
  private _workloadChanged = new Signal<this, IWorkload>(this);
  private _budgetsChanged = new Signal<this, void>(this);
  private _info: IInfo | null = null;
  private _prices: IPrices | null = null;
  private _queues: IQueues | null = null;
  private _inventory: IInventory | null = null;
  private _workloads = new Map<string, IWorkloadEntry>();
  /** Client time (ms) of the last event about each workload. */
  private _eventAt = new Map<string, number>();
  private _connection: ConnectionState = 'connecting';
  private _loadError: string | null = null;
  private _socket: WebSocket | null = null;
  private _backoffMs = 1000;
  private _everConnected = false;
  private _reconnectTimer = 0;
  private _pollTimer = 0;
  private _refetchTimer = 0;
  private _leaseTimer = 0;
  private _probeTimer = 0;
  private _gone = false;
  private _refetchQueues = false;
  private _refetchInventory = false;
  private _pollIntervalMs: number;
  private _started = false;
  private _isDisposed = false;
}
