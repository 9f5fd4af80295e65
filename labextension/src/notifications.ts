/**
 * Notifications when one of the user's jobs starts, succeeds, fails, is cancelled or is
 * preempted: JupyterLab's notification center (`Notification` of @jupyterlab/apputils), with an
 * action that opens the job's page.
 *
 * Only state transitions seen in the model's `workloadChanged` signal (live events and the
 * panel's own submit/cancel answers) of the current user's workloads notify; the first load and
 * the refetches only record what each workload's state is (a list is no transition).
 *
 * With the `browserNotifications` setting (off by default; turning it on asks the browser for
 * permission) the same messages are also shown as the browser's own notifications.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { IWorkload, workloadKey } from './api';
import { formatUsd } from './format';
import { findQueueModel, OPEN_JOB_COMMAND } from './jobpage/plugin';
import { preemptionsOf } from './jobpage/types';
import { QueueModel } from './model';

interface ISeen {
  state: string;
  preemptions: number;
}

/** What to say about a transition from `before` to `w`, or null (nothing worth a notification). */
export function transitionMessage(
  before: ISeen | undefined,
  w: IWorkload
): { type: 'info' | 'success' | 'error' | 'warning'; text: string } | null {
  const key = workloadKey(w);
  const lease = w.kind === 'NotebookLease';
  const what = lease ? 'GPU lease' : 'GPU job';
  const p = preemptionsOf(w);
  const count = p?.count ?? 0;
  if (before && count > before.preemptions) {
    return { type: 'warning', text: `${what} ${key} was ${p!.summary}` };
  }
  if (!before || before.state === w.state) {
    return null;
  }
  switch (w.state) {
    case 'Running':
      if (lease) {
        return null; // the notebook server the user just started holds them: no news
      }
      return {
        type: 'info',
        text: `${what} ${key} started${count > 0 ? ' again' : ''}${flavorWords(w)}`
      };
    case 'Succeeded':
      return { type: 'success', text: `${what} ${key} finished · ${formatUsd(w.costUsd ?? 0)}` };
    case 'Failed': {
      const why =
        w.exitCode != null && w.exitCode !== 0 ? `exit code ${w.exitCode}` : (w.reason ?? '');
      return { type: 'error', text: `${what} ${key} failed${why ? ` (${why})` : ''}` };
    }
    case 'Cancelled':
      return { type: 'info', text: `${what} ${key} was cancelled · ${formatUsd(w.costUsd ?? 0)}` };
    default:
      return null;
  }
}

function flavorWords(w: IWorkload): string {
  const flavors = new Set<string>();
  for (const a of w.admission?.podSetAssignments ?? []) {
    Object.values(a.flavors).forEach(f => flavors.add(f));
  }
  return flavors.size ? ` on ${[...flavors].join(', ')}` : '';
}

/** Connect the notifications to `model`; returns the function that disconnects them. */
export function watchJobTransitions(app: JupyterFrontEnd | null, model: QueueModel): () => void {
  const seen = new Map<string, ISeen>();
  const watchingSince = Date.now();
  const record = (w: IWorkload) =>
    seen.set(workloadKey(w), { state: w.state, preemptions: preemptionsOf(w)?.count ?? 0 });
  for (const e of model.workloads) {
    record(e.workload);
  }
  const onWorkload = (_: unknown, w: IWorkload) => {
    const user = model.info?.user;
    const key = workloadKey(w);
    const before = seen.get(key);
    record(w);
    if (!user || w.owner !== user) {
      return;
    }
    if (!before) {
      // Not in a list yet: a workload submitted before the page loaded (its event overtook
      // the first list) is no news; one submitted since then (e.g. from the CLI) that already
      // started or ended is. A brand-new pending submission is not.
      if (w.state === 'Pending' || w.createdAt * 1000 < watchingSince) {
        return;
      }
      const msg = transitionMessage({ state: 'Pending', preemptions: 0 }, w);
      if (msg) {
        notify(app, msg, w);
      }
      return;
    }
    const msg = transitionMessage(before, w);
    if (msg) {
      notify(app, msg, w);
    }
  };
  // A list (first load, reconnect, safety-net poll) only records states.
  const onChanged = () => {
    for (const e of model.workloads) {
      record(e.workload);
    }
  };
  model.workloadChanged.connect(onWorkload);
  model.changed.connect(onChanged);
  return () => {
    model.workloadChanged.disconnect(onWorkload);
    model.changed.disconnect(onChanged);
  };
}

const SETTINGS_ID = 'jupyter-gpuqueue:plugin';

/** The browser's own notifications (the `browserNotifications` setting). */
export const browserNotifications = {
  enabled: false,
  /** Turn them on or off; turning them on asks for the browser's permission if not yet given. */
  async setEnabled(on: boolean): Promise<void> {
    this.enabled = on;
    const api = (globalThis as any).Notification as typeof window.Notification | undefined;
    if (on && api && api.permission === 'default') {
      try {
        await api.requestPermission();
      } catch (err) {
        console.warn('jupyter-gpuqueue: the browser refused notifications', err);
      }
    }
  },
  /** Show `text` as a browser notification (when on and permitted); true if shown. */
  show(text: string, tag: string): boolean {
    const api = (globalThis as any).Notification as typeof window.Notification | undefined;
    if (!this.enabled || !api || api.permission !== 'granted') {
      return false;
    }
    try {
      new api('GPU Queue', { body: text, tag });
      return true;
    } catch (err) {
      console.warn('jupyter-gpuqueue: cannot show a browser notification', err);
      return false;
    }
  }
};

function notify(
  app: JupyterFrontEnd | null,
  msg: { type: 'info' | 'success' | 'error' | 'warning'; text: string },
  w: IWorkload
): void {
  const actions =
    app && app.commands.hasCommand(OPEN_JOB_COMMAND)
      ? [
          {
            label: 'Open job',
            caption: "Open the job's page",
            callback: () => {
              void app.commands.execute(OPEN_JOB_COMMAND, {
                namespace: w.namespace,
                name: w.name
              });
            }
          }
        ]
      : [];
  Notification.emit(msg.text, msg.type === 'info' ? 'info' : msg.type, {
    autoClose: msg.type === 'error' || msg.type === 'warning' ? false : 8000,
    actions,
    data: { gpuqueueJob: workloadKey(w), state: w.state }
  });
  browserNotifications.show(msg.text, `${workloadKey(w)}:${w.state}`);
}

export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuqueue:notifications',
  description: 'Notify when one of your GPU jobs starts, finishes, fails or is preempted.',
  autoStart: true,
  optional: [ISettingRegistry],
  activate: (app: JupyterFrontEnd, settingRegistry: ISettingRegistry | null) => {
    if (settingRegistry) {
      settingRegistry
        .load(SETTINGS_ID)
        .then(settings => {
          const apply = () =>
            void browserNotifications.setEnabled(
              settings.get('browserNotifications').composite === true
            );
          apply();
          settings.changed.connect(apply);
        })
        .catch(err => console.warn('jupyter-gpuqueue: cannot load the settings', err));
    }
    void app.restored.then(() => {
      const model = findQueueModel(app);
      if (!model) {
        console.warn('jupyter-gpuqueue: no GPU Queue panel, so no job notifications');
        return;
      }
      watchJobTransitions(app, model);
      model.start(); // no-op when the panel or the status bar started it
    });
  }
};
