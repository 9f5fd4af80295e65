/**
 * The admin view's "Usage" tab (issue 34 item 11): for a UTC month, each user's GPU-hours and
 * cost per team (the `users` report), and per team how long its admitted work waited (median and
 * p90 of the admissions that started in the month) and what preemption cost it (runs lost: count,
 * GPU-hours, USD; the `waits` report). Both come from the ledger (gpuqueue/api/reports/...),
 * refetched when a workload changes and every minute; CSV links export them.
 */
import * as React from 'react';

import { formatDuration } from '../../format';
import { QueueModel } from '../../model';
import {
  currentMonth,
  ITeamWaits,
  IUserUsage,
  report,
  usd
} from '../costs/costsApi';
import { MonthNav } from '../costs/MonthNav';
import { useReload } from '../costs/useReload';

interface IUsageData {
  month: string;
  users: IUserUsage[];
  waits: ITeamWaits[];
}

const wait = (s: number | null): string => (s === null ? '–' : formatDuration(s));

export function UsageView(props: { model: QueueModel }): JSX.Element {
  const { model } = props;
  const client = model.client;
  const [month, setMonth] = React.useState(currentMonth());
  const [data, setData] = React.useState<IUsageData | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const live = month === currentMonth();

  const load = React.useCallback(async () => {
    try {
      const [users, waits] = await Promise.all([
        report<IUserUsage>(client, 'users', { month }),
        report<ITeamWaits>(client, 'waits', { month })
      ]);
      setData({ month, users: users.items, waits: waits.items });
      setError(null);
    } catch (e) {
      setError(`Cannot load the usage: ${(e as Error).message}`);
    }
  }, [client, month]);

  useReload(load, [model.workloadChanged], 1000);

  const totalUsd = (data?.users ?? []).reduce((s, u) => s + u.costUsd, 0);
  return (
    <div className="jp-gpuqueue-usage" data-month={month}>
      <MonthNav client={client} month={month} live={live} setMonth={setMonth} csv={['users', 'waits']} />
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {!data && !error && <div className="jp-gpuqueue-muted">Loading…</div>}
      {data && (
        <>
          <h3 className="jp-gpuqueue-costs-h">
            Per user <span className="jp-gpuqueue-muted">· {usd(totalUsd)} in {month}</span>
          </h3>
          {data.users.length === 0 ? (
            <div className="jp-gpuqueue-muted">No GPU time used in {month}.</div>
          ) : (
            <table className="jp-gpuqueue-costs-table jp-gpuqueue-usage-users">
              <thead>
                <tr>
                  <th>User</th>
                  <th className="jp-gpuqueue-num">Jobs</th>
                  <th className="jp-gpuqueue-num">GPU-h</th>
                  <th className="jp-gpuqueue-num">Cost</th>
                </tr>
              </thead>
              <tbody>
                {data.users.map(u => (
                  <tr key={`${u.owner}|${u.namespace}`} data-user={u.owner} data-team={u.namespace}
                    title={`${u.owner} in ${u.namespace}: ${u.jobs} job(s), ${u.gpuHours.toFixed(2)} GPU-hours, ${usd(u.costUsd)}`}>
                    <td className="jp-gpuqueue-usage-who">
                      <span className="jp-gpuqueue-usage-user">{u.owner}</span>
                      <span className="jp-gpuqueue-muted jp-gpuqueue-usage-team">{u.namespace}</span>
                    </td>
                    <td className="jp-gpuqueue-num">{u.jobs}</td>
                    <td className="jp-gpuqueue-num">{u.gpuHours.toFixed(2)}</td>
                    <td className="jp-gpuqueue-num">{usd(u.costUsd)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <h3 className="jp-gpuqueue-costs-h">Per team: waits and preemption</h3>
          <div className="jp-gpuqueue-usage-teams">
            {data.waits.map(t => (
              <div key={t.namespace} className="jp-gpuqueue-usage-teamcard" data-team={t.namespace}>
                <div className="jp-gpuqueue-usage-teamname">{t.namespace}</div>
                <div className="jp-gpuqueue-usage-waits"
                  title="From submission (or from the preemption that requeued it) to admission, for each admission that started this month">
                  {t.admissions === 0 ? (
                    <span className="jp-gpuqueue-muted">nothing admitted</span>
                  ) : (
                    <>
                      Wait: median <b data-stat="median">{wait(t.waitMedianSeconds)}</b> · p90{' '}
                      <b data-stat="p90">{wait(t.waitP90Seconds)}</b>
                      <span className="jp-gpuqueue-muted"> · {t.admissions} admitted</span>
                    </>
                  )}
                </div>
                <div className="jp-gpuqueue-usage-lost" data-preemptions={t.preemptions}
                  title="Runs ended by preemption: their whole GPU time is lost (the job starts over)">
                  {t.preemptions === 0 ? (
                    <span className="jp-gpuqueue-muted">no work lost to preemption</span>
                  ) : (
                    <>
                      Preempted {t.preemptions}×: <b data-stat="lost-gpu-hours">{t.preemptedGpuHours.toFixed(2)} GPU-h</b>,{' '}
                      <b data-stat="lost-usd">{usd(t.preemptedCostUsd)}</b> lost
                    </>
                  )}
                </div>
              </div>
            ))}
          </div>
        </>
      )}
    </div>
  );
}
