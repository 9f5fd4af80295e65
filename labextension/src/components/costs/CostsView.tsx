/**
 * The panel's cost view: month-to-date spend against each team's budget, the month's daily
 * spend, the costliest jobs, and the idle capacity per flavor; CSV export links. Everything comes
 * from the reports over the ledger's usage intervals (gpuqueue/api/reports/...), refetched when a
 * workload event arrives and every minute.
 */
import * as React from 'react';

import { ApiError, IWorkload } from '../../api';
import { QueueModel } from '../../model';
import {
  budgets,
  currentMonth,
  IBudgets,
  IBudgetStatus,
  IDailySpend,
  IIdleCapacity,
  IJobCost,
  liftBudgetHold,
  report,
  setBudget,
  spentNow,
  usd
} from './costsApi';
import { DailyChart } from './DailyChart';
import { MonthNav } from './MonthNav';
import { useReload } from './useReload';

interface ICostData {
  month: string;
  budgets: IBudgets | null;
  daily: IDailySpend[];
  jobs: IJobCost[];
  idle: IIdleCapacity[];
  /** Teams whose idle notebooks gave GPUs back this month (the teams report). */
  reclaimed: ITeamReclaim[];
  offsetMs: number;
}

function BudgetBar(props: { status: IBudgetStatus; offsetMs: number; live: boolean }): JSX.Element {
  const { status } = props;
  const spent = props.live ? spentNow(status, props.offsetMs) : status.spentUsd;
  const b = status.budget;
  const pct = b ? Math.min(100, (100 * spent) / b.monthlyUSD) : 0;
  const state = b ? (spent >= b.monthlyUSD ? 'exceeded' : spent >= b.warnAt * b.monthlyUSD ? 'warning' : 'ok') : 'none';
  return (
    <div className="jp-gpuqueue-budget" data-team={status.namespace} data-state={state}>
      <div className="jp-gpuqueue-budget-label">
        <span className="jp-gpuqueue-budget-team">{status.namespace}</span>
        <span className="jp-gpuqueue-budget-figures">
          <b>{usd(spent)}</b>
          {b ? ` of ${usd(b.monthlyUSD)}` : ' · no budget'}
          {b && <span className="jp-gpuqueue-muted"> ({Math.round((100 * spent) / b.monthlyUSD)}%)</span>}
        </span>
      </div>
      {b && (
        <div className={`jp-gpuqueue-budget-bar jp-gpuqueue-budget-${state}`} aria-hidden="true">
          <div className="jp-gpuqueue-budget-fill" style={{ width: `${pct}%` }} />
          <div className="jp-gpuqueue-budget-warn" style={{ left: `${100 * b.warnAt}%` }} />
        </div>
      )}
      {b && (
        <div className="jp-gpuqueue-muted jp-gpuqueue-budget-note">
          {state === 'exceeded'
            ? b.hard
              ? 'Budget spent: new jobs wait (BudgetExceeded)'
              : 'Budget spent (soft limit: jobs still run)'
            : state === 'warning'
              ? `Over ${Math.round(b.warnAt * 100)}% of the budget`
              : `${b.hard ? 'Hard' : 'Soft'} limit · warns at ${Math.round(b.warnAt * 100)}%`}
          {status.burnRateUsdPerHour > 0 && props.live ? ` · ${usd(status.burnRateUsdPerHour)}/h now` : ''}
        </div>
      )}
    </div>
  );
}

function BudgetEditor(props: {
  status: IBudgetStatus;
  onSave: (body: { monthlyUSD: number; warnAt: number; hard: boolean }) => Promise<void>;
}): JSX.Element {
  const b = props.status.budget;
  const [open, setOpen] = React.useState(false);
  const [amount, setAmount] = React.useState(String(b?.monthlyUSD ?? ''));
  const [warn, setWarn] = React.useState(String(Math.round((b?.warnAt ?? 0.8) * 100)));
  const [hard, setHard] = React.useState(b?.hard ?? false);
  const [error, setError] = React.useState<string | null>(null);
  if (!open) {
    return (
      <button type="button" className="jp-gpuqueue-link-button" onClick={() => setOpen(true)}>
        {b ? 'Edit budget' : 'Set budget'}
      </button>
    );
  }
  const save = async () => {
    setError(null);
    try {
      await props.onSave({ monthlyUSD: Number(amount), warnAt: Number(warn) / 100, hard });
      setOpen(false);
    } catch (e) {
      setError(e instanceof ApiError ? `${e.field ? e.field + ': ' : ''}${e.message}` : String(e));
    }
  };
  return (
    <div className="jp-gpuqueue-budget-editor">
      <label>
        USD / month{' '}
        <input type="number" min="0" step="10" value={amount} onChange={e => setAmount(e.target.value)} />
      </label>
      <label>
        warn at %{' '}
        <input type="number" min="1" max="100" value={warn} onChange={e => setWarn(e.target.value)} />
      </label>
      <label>
        <input type="checkbox" checked={hard} onChange={e => setHard(e.target.checked)} /> hard
      </label>
      <button type="button" className="jp-mod-styled jp-mod-accept" onClick={() => void save()}>
        Save
      </button>
      <button type="button" className="jp-mod-styled" onClick={() => setOpen(false)}>
        Cancel
      </button>
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
    </div>
  );
}

export function CostsView(props: { model: QueueModel }): JSX.Element {
  const { model } = props;
  const client = model.client;
  const [month, setMonth] = React.useState(currentMonth());
  const [data, setData] = React.useState<ICostData | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [, setTick] = React.useState(0);
  const live = month === currentMonth();

  const load = React.useCallback(async () => {
    try {
      const [b, daily, jobs, idle, teamRows] = await Promise.all([
        budgets(client),
        report<IDailySpend>(client, 'daily', { month }),
        report<IJobCost>(client, 'jobs', { month }),
        report<IIdleCapacity>(client, 'idle', { month }),
        report<ITeamReclaim>(client, 'teams', { month })
      ]);
      setData({
        month,
        budgets: b,
        daily: daily.items,
        jobs: jobs.items,
        idle: idle.items,
        reclaimed: teamRows.items.filter(t => (t.idleReclaims ?? 0) > 0),
        offsetMs: Date.now() - b.at * 1000
      });
      setError(null);
    } catch (e) {
      setError(`Cannot load the costs: ${(e as Error).message}`);
    }
  }, [client, month]);

  useReload(load, [model.workloadChanged, model.budgetsChanged], 500);
  React.useEffect(() => {
    const tick = window.setInterval(() => setTick(t => t + 1), 1000);
    return () => window.clearInterval(tick);
  }, []);

  const admin = !!model.info?.permissions?.admin;
  const held = model.workloads.map(e => e.workload).filter(w => w.state === 'Pending' && w.reason === 'BudgetExceeded');
  const mine = new Set(data?.budgets?.myTeams ?? []);
  const teams = (data?.budgets?.teams ?? [])
    .filter(t => mine.has(t.namespace) || t.budget || t.spentUsd > 0 || admin)
    .sort((a, b) => Number(mine.has(b.namespace)) - Number(mine.has(a.namespace)) || a.namespace.localeCompare(b.namespace));
  const total = (data?.daily ?? []).reduce((s, d) => s + d.costUsd, 0);
  const idleCost = (data?.idle ?? []).reduce((s, d) => s + d.idleCostUsd, 0);

  const lift = async (w: IWorkload) => {
    const requestedAt = Date.now();
    model.upsert(await liftBudgetHold(client, w), requestedAt);
  };

  return (
    <div className="jp-gpuqueue-costs" data-month={month}>
      <MonthNav client={client} month={month} live={live} setMonth={setMonth} csv={['teams', 'jobs']} />
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {!data && !error && <div className="jp-gpuqueue-muted">Loading…</div>}
      {data && (
        <>
          <h3 className="jp-gpuqueue-costs-h">Budgets</h3>
          {teams.length === 0 && <div className="jp-gpuqueue-muted">No team has spent anything yet.</div>}
          {teams.map(t => (
            <div key={t.namespace} className="jp-gpuqueue-budget-row">
              <BudgetBar status={t} offsetMs={data.offsetMs} live={live} />
              {admin && live && (
                <BudgetEditor
                  status={t}
                  onSave={async body => {
                    await setBudget(client, t.namespace, body);
                    await load();
                  }}
                />
              )}
            </div>
          ))}
          {held.length > 0 && (
            <div className="jp-gpuqueue-held">
              {held.map(w => (
                <div key={w.uid} className="jp-gpuqueue-held-row">
                  <span>
                    <b>{w.name}</b> waits: BudgetExceeded
                  </span>
                  {admin && (
                    <button type="button" className="jp-gpuqueue-link-button" onClick={() => void lift(w)}>
                      Lift hold
                    </button>
                  )}
                </div>
              ))}
            </div>
          )}
          <h3 className="jp-gpuqueue-costs-h">
            Daily spend <span className="jp-gpuqueue-muted">· {usd(total)} in {month}</span>
          </h3>
          <DailyChart days={data.daily} month={month} />
          <h3 className="jp-gpuqueue-costs-h">Top jobs</h3>
          {data.jobs.length === 0 ? (
            <div className="jp-gpuqueue-muted">No GPU time used in {month}.</div>
          ) : (
            <table className="jp-gpuqueue-costs-table jp-gpuqueue-topjobs">
              <thead>
                <tr>
                  <th>Job</th>
                  <th>Team</th>
                  <th className="jp-gpuqueue-num">GPU-h</th>
                  <th className="jp-gpuqueue-num">Cost</th>
                </tr>
              </thead>
              <tbody>
                {data.jobs.slice(0, 5).map(j => (
                  <tr key={j.uid} title={`${j.namespace}/${j.name} by ${j.owner} on ${j.flavors.join(', ')}${
                    j.avgGpuUtilization !== null ? ` · ${Math.round(j.avgGpuUtilization)}% GPU utilization` : ''}`}>
                    <td className="jp-gpuqueue-ellipsis">
                      {j.name}
                      {j.running && <span className="jp-gpuqueue-running-dot" title="running" />}
                    </td>
                    <td>{j.namespace}</td>
                    <td className="jp-gpuqueue-num">{j.gpuHours.toFixed(2)}</td>
                    <td className="jp-gpuqueue-num">{usd(j.costUsd)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <h3 className="jp-gpuqueue-costs-h">
            Idle capacity <span className="jp-gpuqueue-muted">· {usd(idleCost)} unused</span>
          </h3>
          <table className="jp-gpuqueue-costs-table jp-gpuqueue-idle">
            <thead>
              <tr>
                <th>Flavor</th>
                <th className="jp-gpuqueue-num">Idle GPU-h</th>
                <th className="jp-gpuqueue-num">Used</th>
                <th className="jp-gpuqueue-num">Cost</th>
              </tr>
            </thead>
            <tbody>
              {data.idle.map(f => (
                <tr key={f.flavor} data-flavor={f.flavor}
                  title={`${f.capacityGpus} GPUs × time = ${f.capacityGpuHours.toFixed(1)} GPU-h at ${usd(f.pricePerGpuHourUsd)}/GPU-h`}>
                  <td>{f.flavor}</td>
                  <td className="jp-gpuqueue-num">{f.idleGpuHours.toFixed(1)}</td>
                  <td className="jp-gpuqueue-num">
                    {f.capacityGpuHours > 0 ? `${Math.round((100 * f.usedGpuHours) / f.capacityGpuHours)}%` : '–'}
                  </td>
                  <td className="jp-gpuqueue-num">{usd(f.idleCostUsd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <h3 className="jp-gpuqueue-costs-h">GPU-hours reclaimed from idle notebooks</h3>
          {data.reclaimed.length === 0 ? (
            <div className="jp-gpuqueue-muted jp-gpuqueue-reclaimed-none">None this month.</div>
          ) : (
            <table className="jp-gpuqueue-costs-table jp-gpuqueue-reclaimed">
              <thead>
                <tr>
                  <th>Team</th>
                  <th className="jp-gpuqueue-num">Notebooks</th>
                  <th className="jp-gpuqueue-num">GPU-h</th>
                </tr>
              </thead>
              <tbody>
                {data.reclaimed.map(t => (
                  <tr key={t.namespace} data-team={t.namespace}
                    title="GPUs released from idle notebooks × the time left until the leases' scheduled end">
                    <td>{t.namespace}</td>
                    <td className="jp-gpuqueue-num">{t.idleReclaims}</td>
                    <td className="jp-gpuqueue-num">{(t.idleReclaimedGpuHours ?? 0).toFixed(1)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </div>
  );
}

/** A row of the teams report: what idle notebooks gave back (service/idle.py). */
interface ITeamReclaim {
  namespace: string;
  idleReclaims?: number;
  idleReclaimedGpuHours?: number;
}
