/**
 * Typed calls of the cost endpoints (docs/rest-api.md, "Costs"): reports over the ledger's usage
 * intervals, team budgets, and the admin actions on them. They go through the panel's
 * GpuQueueClient (token / XSRF handled by ServerConnection).
 */
import { URLExt } from '@jupyterlab/coreutils';

import { API_NAMESPACE, GpuQueueClient, IWorkload } from '../../api';

export interface IBudget {
  namespace: string;
  monthlyUSD: number;
  warnAt: number;
  hard: boolean;
  source: 'config' | 'admin';
  updatedBy?: string | null;
  updatedAt?: number | null;
}

export type BudgetState = 'none' | 'ok' | 'warning' | 'exceeded';

export interface IBudgetStatus {
  namespace: string;
  month: string;
  /** USD this UTC month, running work counted up to `at`. */
  spentUsd: number;
  /** USD per hour of the team's running work: what spentUsd grows by until the next change. */
  burnRateUsdPerHour: number;
  /** Server time (s) of the figures. */
  at: number;
  budget: IBudget | null;
  share: number | null;
  state: BudgetState;
  holdsNewWorkloads: boolean;
}

export interface IBudgets {
  month: string;
  at: number;
  teams: IBudgetStatus[];
  myTeams: string[];
  defaultTeam: string | null;
}

export interface IJobCost {
  uid: string;
  namespace: string;
  name: string;
  owner: string;
  state: string;
  flavors: string[];
  gpuHours: number;
  costUsd: number;
  running: boolean;
  avgGpuUtilization: number | null;
}

export interface ITeamReport {
  namespace: string;
  gpuHours: number;
  costUsd: number;
  jobs: number;
  topJobs: { uid: string; name: string; owner: string; gpuHours: number; costUsd: number }[];
  avgGpuUtilization: number | null;
  budgetUsd: number | null;
}

export interface IDailySpend {
  date: string;
  gpuHours: number;
  costUsd: number;
  byNamespace: Record<string, number>;
}

export interface IIdleCapacity {
  flavor: string;
  capacityGpus: number;
  capacityGpuHours: number;
  usedGpuHours: number;
  idleGpuHours: number;
  idleCostUsd: number;
  pricePerGpuHourUsd: number;
}

export interface IReport<T> {
  kind: string;
  period: { label: string; since: number; until: number };
  generatedAt: number;
  items: T[];
}

export type ReportKind = 'jobs' | 'users' | 'teams' | 'flavors' | 'idle' | 'months' | 'daily' | 'waits';

/** A row of the users report: one user's usage in one team. */
export interface IUserUsage {
  owner: string;
  namespace: string;
  jobs: number;
  gpuHours: number;
  costUsd: number;
}

/** A row of the waits report: a team's waits (seconds) and its runs lost to preemption. */
export interface ITeamWaits {
  namespace: string;
  admissions: number;
  waitMedianSeconds: number | null;
  waitP90Seconds: number | null;
  waitMaxSeconds: number | null;
  preemptions: number;
  preemptedGpuHours: number;
  preemptedCostUsd: number;
}

export function report<T>(
  client: GpuQueueClient,
  kind: ReportKind,
  query: Record<string, string | undefined> = {}
): Promise<IReport<T>> {
  return client.request<IReport<T>>(`reports/${kind}`, {}, query);
}

/** The URL of a report as CSV (a plain link: the browser sends the login cookie). */
export function reportCsvUrl(client: GpuQueueClient, kind: ReportKind, month: string): string {
  const url = URLExt.join(client.serverSettings.baseUrl, API_NAMESPACE, 'reports', kind);
  return `${url}?format=csv&month=${encodeURIComponent(month)}`;
}

export function budgets(client: GpuQueueClient): Promise<IBudgets> {
  return client.request<IBudgets>('budgets');
}

export function setBudget(
  client: GpuQueueClient,
  namespace: string,
  body: { monthlyUSD: number; warnAt: number; hard: boolean }
): Promise<IBudgetStatus> {
  return client.request<IBudgetStatus>(`budgets/${encodeURIComponent(namespace)}`, {
    method: 'PUT',
    body: JSON.stringify(body)
  });
}

export function liftBudgetHold(client: GpuQueueClient, w: IWorkload): Promise<IWorkload> {
  return client.request<IWorkload>(
    `workloads/${encodeURIComponent(w.namespace)}/${encodeURIComponent(w.name)}/lift-budget-hold`,
    { method: 'POST' }
  );
}

/** Month-to-date spend now: the server's figure plus the team's burn rate since it was taken. */
export function spentNow(s: IBudgetStatus, serverOffsetMs: number): number {
  const elapsedH = Math.max(0, (Date.now() - serverOffsetMs) / 1000 - s.at) / 3600;
  return s.spentUsd + s.burnRateUsdPerHour * elapsedH;
}

export function usd(x: number | null | undefined): string {
  if (x === null || x === undefined || !isFinite(x)) {
    return '–';
  }
  return `$${x.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

export function currentMonth(): string {
  const d = new Date();
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
}

export function shiftMonth(month: string, delta: number): string {
  const [y, m] = month.split('-').map(Number);
  const t = new Date(Date.UTC(y, m - 1 + delta, 1));
  return `${t.getUTCFullYear()}-${String(t.getUTCMonth() + 1).padStart(2, '0')}`;
}
