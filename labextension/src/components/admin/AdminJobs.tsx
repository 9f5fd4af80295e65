/**
 * The admin's Jobs tab: every team's pending and running workloads (a queue admin sees them all:
 * docs/rest-api.md, "Who sees what"), by team, with their owner, what they hold or ask for, their
 * cost so far, and Cancel. Under JupyterHub an admin cancels any job (audited `cancel-workload`;
 * the owner's job says who cancelled it); elsewhere the server answers 403 for another user's job,
 * shown next to it. Refetched every 5 s while the tab is open.
 */
import * as React from 'react';

import { Dialog, showDialog } from '@jupyterlab/apputils';

import { ApiError, IWorkload, WorkloadState, workloadKey } from '../../api';
import { assignedFlavors, describeRequest, formatUsd } from '../../format';
import { QueueModel } from '../../model';
import { StateBadge } from '../JobList';

const ACTIVE: WorkloadState[] = ['Pending', 'Admitted', 'Running'];
const POLL_MS = 5000;

export function AdminJobs(props: { model: QueueModel; onApplied: (what: string, message?: string) => Promise<void> }): JSX.Element {
  const { model, onApplied } = props;
  const [items, setItems] = React.useState<IWorkload[] | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [failed, setFailed] = React.useState<Record<string, string>>({});
  const [busy, setBusy] = React.useState<string | null>(null);

  const load = React.useCallback(async () => {
    try {
      setItems(await model.client.workloadsIn(ACTIVE));
      setError(null);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    }
  }, [model]);

  React.useEffect(() => {
    void load();
    const timer = window.setInterval(() => void load(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [load]);

  const cancel = async (w: IWorkload) => {
    const key = workloadKey(w);
    const own = w.owner === model.info?.user;
    const what = w.state === 'Pending' ? 'waiting' : 'running';
    const answer = await showDialog({
      title: own ? 'Cancel your job?' : `Cancel ${w.owner}'s job?`,
      body:
        `${key} (${w.owner}) is ${what}; cancelling it ${w.state === 'Pending' ? 'removes it from the queue' : 'stops it now'}.` +
        (own ? '' : ' Its owner sees that you cancelled it, and the audit log records it.'),
      buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label: 'Cancel job' })]
    });
    if (!answer.button.accept) {
      return;
    }
    setBusy(key);
    try {
      await model.client.cancel(w.namespace, w.name);
      setFailed(f => ({ ...f, [key]: '' }));
      await onApplied(key, `${key} (${w.owner}) cancelled${own ? '' : '; the audit log records it'}`);
    } catch (err) {
      setFailed(f => ({ ...f, [key]: err instanceof ApiError ? err.message : String(err) }));
    } finally {
      setBusy(null);
      await load();
    }
  };

  if (error && !items) {
    return <div className="jp-gpuqueue-form-error">{error}</div>;
  }
  if (!items) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }
  if (items.length === 0) {
    return <div className="jp-gpuqueue-muted jp-gpuqueue-empty">No job is waiting or running.</div>;
  }
  // Running first (longest-running first), then the waiting ones in queue order.
  const order = (w: IWorkload): [number, number] =>
    w.state === 'Pending' ? [1, w.positionInClusterQueue ?? Infinity] : [0, w.startedAt ?? w.admittedAt ?? w.createdAt];
  const sorted = [...items].sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    return x[0] - y[0] || x[1] - y[1];
  });
  const teams = new Map<string, IWorkload[]>();
  for (const w of sorted) {
    teams.set(w.namespace, [...(teams.get(w.namespace) ?? []), w]);
  }
  return (
    <div className="jp-gpuqueue-admin-jobs">
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {[...teams.entries()]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([team, ws]) => {
          const running = ws.filter(w => w.state !== 'Pending').length;
          return (
            <div key={team} className="jp-gpuqueue-admin-team" data-team={team}>
              <div className="jp-gpuqueue-admin-audit-head">
                <span className="jp-gpuqueue-cq-name">{team}</span>
                <span className="jp-gpuqueue-muted">
                  {running} running · {ws.length - running} pending
                </span>
              </div>
              <ul className="jp-gpuqueue-admin-audit">
                {ws.map(w => {
                  const key = workloadKey(w);
                  const flavors = assignedFlavors(w);
                  return (
                    <li key={key} data-admin-job={key}>
                      <div className="jp-gpuqueue-admin-audit-head">
                        <span className="jp-gpuqueue-cq-name">{w.name}</span>
                        <StateBadge state={w.state} />
                      </div>
                      <div className="jp-gpuqueue-muted">
                        {[
                          w.owner,
                          describeRequest(w) + (flavors.length ? ` on ${flavors.join(', ')}` : ''),
                          w.state === 'Pending' && w.positionInClusterQueue != null
                            ? `position ${w.positionInClusterQueue + 1} in ${w.clusterQueue}`
                            : null,
                          formatUsd(w.costUsd ?? 0)
                        ]
                          .filter(Boolean)
                          .join(' · ')}
                      </div>
                      <button
                        type="button"
                        className="jp-gpuqueue-link jp-gpuqueue-cancel"
                        disabled={busy === key}
                        onClick={() => void cancel(w)}
                      >
                        {busy === key ? 'Cancelling…' : 'Cancel'}
                      </button>
                      {failed[key] && <div className="jp-gpuqueue-form-error">{failed[key]}</div>}
                    </li>
                  );
                })}
              </ul>
            </div>
          );
        })}
    </div>
  );
}
