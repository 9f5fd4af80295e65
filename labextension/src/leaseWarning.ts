/**
 * Preemption warning for notebook GPU leases.
 *
 * A notebook server started through the hub's GPU queue holds its GPUs as a Workload of kind
 * `NotebookLease` (docs/rest-api.md). When higher-priority work preempts it, the lease is not cut
 * at once: it gets `evictionDeadline` (seconds since the epoch) and keeps its GPUs until then.
 * This shows a JupyterLab notification (warning) with the time left, updated while it counts
 * down. At the deadline, or as soon as the lease ends, the same notification says the lease was
 * released (it never stays at "less than a second": under JupyterHub the server that would tell
 * the panel so is the one being stopped). One notification per lease, for the current user's
 * own leases only.
 *
 * An idle release under a team policy `onIdle: "release"` keeps the notebook server running
 * without its GPUs (`idleAction: "release"`): the notice says so, and it is shown also when
 * JupyterLab is opened (or reloaded) after the release: the server's page config names its lease
 * (`gpuqueueLease`, jupyter_gpuqueue/server/lease_release.py).
 */
import { Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import { GpuQueueClient, IWorkload } from './api';
import { formatTime } from './format';
import { leaseEnd, leaseMaxEnd, QueueModel } from './model';

/** The lease fields of a Workload (docs/rest-api.md, Workload). */
interface ILeaseFields {
  kind?: string;
  evictionDeadline?: number | null;
  idleDeadline?: number | null;
  idleKeepsLeft?: number | null;
  /** What an idle release does (or did) to the notebook server. */
  idleAction?: 'stop' | 'release' | null;
  /** Where a hub admin allows extending a lease: by how many seconds, and how often still. */
  leaseExtensionSeconds?: number | null;
  leaseExtensionsLeft?: number | null;
  /** Since when the notebook counted as idle (seconds since the epoch). */
  idleSince?: number | null;
  /** The JupyterHub server the lease is for ("" the default server). */
  notebookServer?: { name: string; goesOnWithoutGpus?: boolean } | null;
}

/** "notebook server 'exp2'" for a lease of a named server, else "notebook server". */
export function notebookServerLabel(w: IWorkload): string {
  const name = (w as IWorkload & ILeaseFields).notebookServer?.name;
  return name ? `notebook server '${name}'` : 'notebook server';
}

const LEASE_KIND = 'NotebookLease';
const UPDATE_MS = 15_000;
/** How often to look for a lease while the panel's model is not live yet. */
const DISCOVER_MS = 60_000;

/** "4 min 10 s", "45 s", "less than a second". */
export function formatTimeLeft(seconds: number): string {
  if (seconds < 1) {
    return 'less than a second';
  }
  const s = Math.round(seconds);
  const m = Math.floor(s / 60);
  const rest = s % 60;
  if (m === 0) {
    return `${rest} s`;
  }
  return rest ? `${m} min ${rest} s` : `${m} min`;
}

/** The notice once the lease is released (at `endedAt`, seconds since the epoch). */
export function leaseReleasedText(w: IWorkload, endedAt: number): string {
  const at = formatTime(endedAt);
  return (
    `Your notebook's GPU lease ${w.namespace}/${w.name} was released at ${at}: ` +
    'higher-priority work needed the GPU. Its notebook server stops; start it again from the hub ' +
    'when GPUs are free.'
  );
}

/** How long before a lease's maximum time its warning comes: 5 min, or half of a shorter lease (seconds). */
export function maxTimeWarningSeconds(w: IWorkload): number {
  return Math.min(300, (w.maxRuntimeSeconds ?? 0) / 2);
}

/** Whether the end that comes first is the lease's maximum time (not a preemption's deadline). */
function endsAtMaxTime(w: IWorkload): boolean {
  const maxEnd = leaseMaxEnd(w);
  const deadline = (w as IWorkload & ILeaseFields).evictionDeadline;
  return maxEnd !== null && (!deadline || maxEnd <= deadline);
}

/** The warning before a lease's maximum time. */
export function maxTimeWarningText(w: IWorkload, nowMs: number): string {
  const left = formatTimeLeft((leaseMaxEnd(w) ?? 0) - nowMs / 1000);
  // JupyterLab shows a notification's first 140 characters: what happens and what to do first.
  return (
    `Your notebook's GPU lease reaches its maximum time in ${left}: save your work, the server ` +
    `stops then. Lease ${w.namespace}/${w.name}.`
  );
}

/** The notice once a lease reached its maximum time (at `endedAt`, seconds since the epoch). */
export function maxTimeReachedText(w: IWorkload, endedAt: number): string {
  const at = formatTime(endedAt);
  return (
    `Your notebook's GPU lease ${w.namespace}/${w.name} reached its maximum time at ${at}: its ` +
    'server stops. Start it again from the hub to use a GPU again.'
  );
}

/** The warning text for a lease with an eviction deadline. */
export function leaseWarningText(w: IWorkload, nowMs: number): string {
  const deadline = (w as IWorkload & ILeaseFields).evictionDeadline ?? 0;
  const left = formatTimeLeft(deadline - nowMs / 1000);
  const why = w.message ? ` ${w.message}.` : '';
  return (
    `Your notebook's GPU lease ${w.namespace}/${w.name} will be released in ${left}: ` +
    `higher-priority work needs the GPU.${why} Save your work; the server stops then.`
  );
}

/** The idle warning: the lease is released at `idleDeadline` unless kept or used. */
export function idleWarningText(w: IWorkload, nowMs: number): string {
  const lease = w as IWorkload & ILeaseFields;
  const left = formatTimeLeft((lease.idleDeadline ?? 0) - nowMs / 1000);
  const keeps = lease.idleKeepsLeft ?? 0;
  // JupyterLab shows a notification's first 140 characters: what to do comes first.
  const keep =
    keeps > 0
      ? `keep it (${keeps} more time${keeps === 1 ? '' : 's'}) or run a cell.`
      : 'run a cell to keep it (no keeps left).';
  // what happens then, also within the first 140 characters; the lease after it
  const then =
    lease.idleAction === 'release'
      ? ' The server then goes on without a GPU.'
      : lease.idleAction === 'stop'
        ? ' The server then stops.'
        : '';
  return `Idle notebook: its GPU is released in ${left}; ${keep}${then} Lease ${w.namespace}/${w.name}.`;
}

/** The notice once an idle lease was released (`w`: the ended lease, with its `idleAction`). */
export function idleReleasedText(w: IWorkload, endedAt: number): string {
  const lease = w as IWorkload & ILeaseFields;
  if (lease.idleAction === 'release') {
    const minutes = lease.idleSince ? Math.max(0, Math.round((endedAt - lease.idleSince) / 60)) : null;
    const after = minutes !== null ? ` after ${minutes} min idle` : ' as the notebook was idle';
    // the first 140 characters (what the toast shows) say what happened and what to do
    return (
      `Your GPU was released${after}; this server goes on without it. Restart the server to ask ` +
      `for a GPU again. Its kernels were shut down; new ones have no GPU. Lease ${w.namespace}/${w.name}.`
    );
  }
  const at = formatTime(endedAt);
  return (
    `Your notebook's GPU lease ${w.namespace}/${w.name} was released at ${at} because the notebook ` +
    'was idle. Its server stops; start it again from the hub when you need a GPU.'
  );
}

/**
 * Idle notebook reclaim (jupyterhub_config/local/README.md): a warning with a countdown and a "Keep my GPU" button for
 * each of the current user's leases with an `idleDeadline`; the button asks the queue to keep it
 * (its idle clock restarts). Returns a function that stops watching.
 */
export function watchIdleLeases(model: QueueModel, client: GpuQueueClient): () => void {
  const open = new Map<string, { id: string; workload: IWorkload }>();
  /** Leases whose release was told (not told again from the page config). */
  const told = new Set<string>();
  const notify = (key: string, w: IWorkload, existing?: string): string => {
    const lease = w as IWorkload & ILeaseFields;
    const actions =
      (lease.idleKeepsLeft ?? 0) > 0
        ? [
            {
              label: 'Keep my GPU',
              caption: 'Keep the GPU: the idle clock starts again',
              displayType: 'accent' as const,
              callback: () => {
                client
                  .keepGpu(w.namespace, w.name)
                  .then(kept => {
                    open.delete(key);
                    const left = (kept as IWorkload & ILeaseFields).idleKeepsLeft ?? 0;
                    Notification.success(
                      `Kept the GPU of ${key} (${left} more keep${left === 1 ? '' : 's'} left).`,
                      { autoClose: 5000 }
                    );
                  })
                  .catch(reason => {
                    Notification.error(`Could not keep the GPU of ${key}: ${reason?.message ?? reason}`, {
                      autoClose: false
                    });
                  });
              }
            }
          ]
        : [];
    const message = idleWarningText(w, Date.now());
    if (existing) {
      Notification.update({ id: existing, message, actions });
      return existing;
    }
    return Notification.warning(message, { autoClose: false, actions });
  };
  const check = (w: IWorkload) => {
    const key = `${w.namespace}/${w.name}`;
    const lease = w as IWorkload & ILeaseFields;
    const mine = !model.info || w.owner === model.info.user;
    const current = open.get(key);
    if (mine && lease.kind === LEASE_KIND && w.state === 'Running' && lease.idleDeadline) {
      const id = notify(key, w, current?.id);
      open.set(key, { id, workload: w });
    } else if (current && w.state !== 'Running') {
      open.delete(key);
      told.add(key);
      const ended = (w as IWorkload & ILeaseFields).idleAction ? w : current.workload;
      Notification.update({
        id: current.id,
        type: 'info',
        message: idleReleasedText(ended, w.finishedAt ?? Date.now() / 1000),
        actions: [],
        autoClose: false
      });
    } else if (current) {
      open.delete(key); // kept, or the notebook was used again
      Notification.dismiss(current.id);
    }
  };
  const onWorkload = (_: QueueModel, w: IWorkload) => check(w);
  const onChanged = () => {
    for (const entry of model.workloads) {
      check(entry.workload);
    }
  };
  model.workloadChanged.connect(onWorkload);
  model.changed.connect(onChanged);
  onChanged();
  // This server's own lease (page config): released while no page was open to see the warning,
  // the server went on without its GPUs: say so once.
  const own = PageConfig.getOption('gpuqueueLease');
  const [ownNs, ownName] = own.split('/');
  if (ownNs && ownName) {
    client
      .request<IWorkload>(`workloads/${encodeURIComponent(ownNs)}/${encodeURIComponent(ownName)}`)
      .then(w => {
        const lease = w as IWorkload & ILeaseFields;
        if (!told.has(own) && !open.has(own) && w.state !== 'Running' && lease.idleAction === 'release') {
          told.add(own);
          Notification.info(idleReleasedText(w, w.finishedAt ?? Date.now() / 1000), { autoClose: false });
        }
      })
      .catch(() => undefined); // the panel reports connection problems
  }
  const timer = window.setInterval(() => {
    for (const { id, workload } of open.values()) {
      Notification.update({ id, message: idleWarningText(workload, Date.now()) });
    }
  }, UPDATE_MS);
  return () => {
    window.clearInterval(timer);
    model.workloadChanged.disconnect(onWorkload);
    model.changed.disconnect(onChanged);
    for (const { id } of open.values()) {
      Notification.dismiss(id);
    }
    open.clear();
  };
}

/**
 * Watch the model for the current user's leases that get an `evictionDeadline` and warn.
 *
 * The panel's model goes live (event stream) only when the panel is first shown; a user who holds
 * a lease must be warned without opening it. So the user's workloads are checked once at start
 * and then every minute: as soon as one is a lease, the model is started. Returns a function that
 * stops watching and dismisses open warnings.
 */
export function watchLeaseEvictions(model: QueueModel, client: GpuQueueClient): () => void {
  const open = new Map<string, { id: string; workload: IWorkload; timer: number }>();
  /** Leases whose warning now says "released": not warned again. */
  const released = new Set<string>();
  let discoverTimer = 0;
  const discover = async () => {
    try {
      const items = await client.workloads();
      const live = ['Pending', 'Admitted', 'Running'];
      const held = items.some(
        w => (w as IWorkload & ILeaseFields).kind === LEASE_KIND && live.includes(w.state)
      );
      if (held) {
        model.start(); // no-op when the panel already started it
        window.clearInterval(discoverTimer);
      }
    } catch (reason) {
      // the panel reports connection problems; keep looking
    }
  };
  void discover();
  discoverTimer = window.setInterval(() => void discover(), DISCOVER_MS);

  /** Leases whose maximum-time warning is still to come: a timer for its start. */
  const later = new Map<string, number>();
  const isWarned = (w: IWorkload): boolean => {
    const lease = w as IWorkload & ILeaseFields;
    const mine = !model.info || w.owner === model.info.user;
    if (!mine || lease.kind !== LEASE_KIND || w.state !== 'Running') {
      return false;
    }
    if (lease.evictionDeadline) {
      return true;
    }
    const maxEnd = leaseMaxEnd(w);
    if (maxEnd === null) {
      return false;
    }
    // the maximum time's warning: from `maxTimeWarningSeconds` before it (a timer wakes us then)
    const key = `${w.namespace}/${w.name}`;
    const from = (maxEnd - maxTimeWarningSeconds(w)) * 1000;
    window.clearTimeout(later.get(key));
    later.delete(key);
    if (Date.now() >= from) {
      return true;
    }
    later.set(
      key,
      window.setTimeout(() => {
        later.delete(key);
        check(w);
      }, Math.min(from - Date.now() + 20, 2 ** 31 - 1))
    );
    return false;
  };
  const warningText = (w: IWorkload, nowMs: number): string =>
    endsAtMaxTime(w) ? maxTimeWarningText(w, nowMs) : leaseWarningText(w, nowMs);
  /** "Extend" in the maximum time's warning, where a hub admin allows it and extensions are left. */
  const warningActions = (w: IWorkload) => {
    const lease = w as IWorkload & ILeaseFields;
    if (!endsAtMaxTime(w) || !lease.leaseExtensionSeconds || !(lease.leaseExtensionsLeft ?? 0)) {
      return [];
    }
    const by = formatTimeLeft(lease.leaseExtensionSeconds);
    return [
      {
        label: `Extend by ${by}`,
        caption: `Extend the lease's maximum time by ${by}`,
        displayType: 'accent' as const,
        callback: () => {
          client
            .extendLease(w.namespace, w.name)
            .then(() => {
              // the event stream brings the longer lease: the warning goes, to come again before its new end
              Notification.success(`Extended the GPU lease ${w.namespace}/${w.name} by ${by}.`, {
                autoClose: 5000
              });
            })
            .catch(reason => {
              Notification.error(
                `Could not extend the GPU lease ${w.namespace}/${w.name}: ${reason?.message ?? reason}`,
                { autoClose: false }
              );
            });
        }
      }
    ];
  };

  /** The warned lease ended: the warning becomes the notice that it was released. */
  const release = (key: string, endedAt: number) => {
    const current = open.get(key);
    if (!current) {
      return;
    }
    window.clearTimeout(current.timer);
    open.delete(key);
    released.add(key);
    Notification.update({
      id: current.id,
      type: 'info',
      message: endsAtMaxTime(current.workload)
        ? maxTimeReachedText(current.workload, endedAt)
        : leaseReleasedText(current.workload, endedAt),
      autoClose: false
    });
  };

  /** Count down to the deadline itself, then say "released" even if no event comes. */
  const atDeadline = (key: string, w: IWorkload) => {
    const deadline = leaseEnd(w) ?? 0;
    return window.setTimeout(
      () => release(key, deadline),
      Math.max(0, Math.min(deadline * 1000 - Date.now(), 2 ** 31 - 1))
    );
  };

  const check = (w: IWorkload) => {
    const key = `${w.namespace}/${w.name}`;
    const current = open.get(key);
    if (isWarned(w) && !released.has(key)) {
      if (current) {
        current.workload = w;
        window.clearTimeout(current.timer);
        current.timer = atDeadline(key, w);
        Notification.update({ id: current.id, message: warningText(w, Date.now()), actions: warningActions(w) });
      } else {
        const id = Notification.warning(warningText(w, Date.now()), {
          autoClose: false,
          actions: warningActions(w)
        });
        open.set(key, { id, workload: w, timer: atDeadline(key, w) });
      }
    } else if (current && w.state !== 'Running') {
      // ended (at its deadline, or the user released it first)
      release(key, w.finishedAt ?? Date.now() / 1000);
    } else if (current) {
      // still running, no deadline any more: the preemption was called off
      window.clearTimeout(current.timer);
      Notification.dismiss(current.id);
      open.delete(key);
    }
  };

  const onWorkload = (_: QueueModel, w: IWorkload) => check(w);
  const onChanged = () => {
    for (const entry of model.workloads) {
      check(entry.workload);
    }
  };
  model.workloadChanged.connect(onWorkload);
  model.changed.connect(onChanged);
  onChanged();
  const stopIdle = watchIdleLeases(model, client);

  // Count down between events.
  const timer = window.setInterval(() => {
    for (const { id, workload } of open.values()) {
      Notification.update({ id, message: warningText(workload, Date.now()) });
    }
  }, UPDATE_MS);

  return () => {
    stopIdle();
    for (const timer of later.values()) {
      window.clearTimeout(timer);
    }
    later.clear();
    window.clearInterval(timer);
    window.clearInterval(discoverTimer);
    model.workloadChanged.disconnect(onWorkload);
    model.changed.disconnect(onChanged);
    for (const { id, timer } of open.values()) {
      window.clearTimeout(timer);
      Notification.dismiss(id);
    }
    open.clear();
  };
}
