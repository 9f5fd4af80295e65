/**
 * The job history of the panel's job list, client-side over the workloads the model holds:
 * filter by state, team and date, search by name, "clear finished" (hide the jobs that ended
 * before now; kept in localStorage per user, undone with "show"), and paging.
 */
import { IWorkload } from './api';
import { isFinished } from './format';
import { IWorkloadEntry } from './model';

export const PAGE_SIZE = 20;
/** The filter toolbar shows from this many jobs on (or while something is filtered or hidden). */
export const HISTORY_TOOLS_FROM = 4;

export type StateFilter =
  | 'all'
  | 'active'
  | 'finished'
  | 'Pending'
  | 'Running'
  | 'Succeeded'
  | 'Failed'
  | 'Cancelled';

export type SinceFilter = 'any' | 'today' | '7d' | '30d';

export interface IHistoryFilter {
  state: StateFilter;
  team: string; // '' = all
  since: SinceFilter;
  search: string;
}

export const NO_FILTER: IHistoryFilter = { state: 'all', team: '', since: 'any', search: '' };

export const STATE_OPTIONS: Array<[StateFilter, string]> = [
  ['all', 'All states'],
  ['active', 'Pending or running'],
  ['finished', 'Ended'],
  ['Pending', 'Pending'],
  ['Running', 'Running'],
  ['Succeeded', 'Succeeded'],
  ['Failed', 'Failed'],
  ['Cancelled', 'Cancelled']
];

export const SINCE_OPTIONS: Array<[SinceFilter, string]> = [
  ['any', 'Any time'],
  ['today', 'Today'],
  ['7d', 'Last 7 days'],
  ['30d', 'Last 30 days']
];

export function isFiltered(f: IHistoryFilter): boolean {
  return f.state !== 'all' || f.team !== '' || f.since !== 'any' || f.search.trim() !== '';
}

/** The earliest submission time (ms) the `since` filter keeps. */
export function sinceMs(since: SinceFilter, nowMs: number): number {
  switch (since) {
    case 'today': {
      const d = new Date(nowMs);
      d.setHours(0, 0, 0, 0);
      return d.getTime();
    }
    case '7d':
      return nowMs - 7 * 86400000;
    case '30d':
      return nowMs - 30 * 86400000;
    default:
      return -Infinity;
  }
}

function stateMatches(w: IWorkload, state: StateFilter): boolean {
  switch (state) {
    case 'all':
      return true;
    case 'active':
      return !isFinished(w);
    case 'finished':
      return isFinished(w);
    case 'Running':
      return w.state === 'Running' || w.state === 'Admitted';
    default:
      return w.state === state;
  }
}

/** Whether "clear finished" hides `w`: it ended before `hiddenBefore` (seconds). */
export function isCleared(w: IWorkload, hiddenBefore: number | null): boolean {
  return (
    hiddenBefore !== null &&
    isFinished(w) &&
    (w.finishedAt ?? w.createdAt) <= hiddenBefore
  );
}

export function filterEntries(
  entries: IWorkloadEntry[],
  f: IHistoryFilter,
  hiddenBefore: number | null,
  nowMs: number
): { shown: IWorkloadEntry[]; cleared: number } {
  const from = sinceMs(f.since, nowMs);
  const words = f.search.trim().toLowerCase().split(/\s+/).filter(Boolean);
  let cleared = 0;
  const shown = entries.filter(e => {
    const w = e.workload;
    if (isCleared(w, hiddenBefore)) {
      cleared++;
      return false;
    }
    const name = `${w.namespace}/${w.name}`.toLowerCase();
    return (
      stateMatches(w, f.state) &&
      (!f.team || w.namespace === f.team) &&
      w.createdAt * 1000 >= from &&
      words.every(word => name.includes(word))
    );
  });
  return { shown, cleared };
}

function storageKey(user: string | null): string {
  return `jupyter-gpuqueue:hide-finished-before:${user ?? ''}`;
}

/** When "clear finished" was last used (seconds since the epoch), or null. */
export function loadHiddenBefore(user: string | null): number | null {
  try {
    const v = window.localStorage.getItem(storageKey(user));
    const n = v === null ? NaN : Number(v);
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}

export function saveHiddenBefore(user: string | null, value: number | null): void {
  try {
    if (value === null) {
      window.localStorage.removeItem(storageKey(user));
    } else {
      window.localStorage.setItem(storageKey(user), String(value));
    }
  } catch {
    // private mode or storage full: the choice lasts this session only
  }
}
