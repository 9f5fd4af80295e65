/**
 * Estimated start times in words: "starts in ~12 min (5–30 min)", "waiting for 2 × nvidia-a100
 * from team-b/train-x (ends ~10:42)", the reason when there is no estimate, the faster options,
 * and the tooltip saying what an estimate cannot foresee.
 *
 * Everything is computed from the workload's absolute times (seconds since the epoch) and the
 * browser's clock (`nowMs`), so that the words tick without a refetch; past the estimate they say
 * "any moment now" or "overdue", never a negative time. Clock times are in the browser's locale.
 */
import { IFasterOption, IWaitingFor, IWorkload } from './api';
import { formatTime, formatUsd } from './format';

/** What no estimate can foresee (the tooltip, the widget and docs/estimates.md say it). */
export const ESTIMATE_CAVEAT =
  'An estimate assumes nothing else happens: it cannot foresee higher-priority work that ' +
  'arrives later, the preemptions such work causes, run times far from the prediction, or ' +
  'quota and configuration edits.';

/**
 * How long past the estimate (without a range to go by) the start still counts as
 * "any moment now" rather than "overdue".
 */
export const DUE_GRACE_SECONDS = 120;

/** A no-break space: "12 min" never breaks between the number and its unit. */
const NBSP = '\u00a0';

/**
 * An approximate duration without the tilde: 45 → "< 1 min", 720 → "12 min", 7800 →
 * "2 h 10 min" (no-break spaces inside: a narrow sidebar wraps between words, never in a time).
 */
export function roughDuration(seconds: number): string {
  return roughDurationWords(seconds).replace(/ /g, NBSP);
}

function roughDurationWords(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 60) {
    return '< 1 min';
  }
  if (s < 3600 - 30) {
    return `${Math.max(1, Math.round(s / 60))} min`;
  }
  if (s < 86400 - 150) {
    // Hours and minutes to 5 minutes: "2 h 10 min".
    const fives = Math.round(s / 300);
    const h = Math.floor(fives / 12);
    const m = (fives % 12) * 5;
    return m ? `${h} h ${m} min` : `${h} h`;
  }
  const hours = Math.round(s / 3600);
  const d = Math.floor(hours / 24);
  const h = hours % 24;
  return h ? `${d} d ${h} h` : `${d} d`;
}

/** "~12 min", "~2 h 10 min", "< 1 min" (no tilde on "< 1 min"). */
export function approxDuration(seconds: number): string {
  const text = roughDuration(seconds);
  return text.startsWith('<') ? text : `~${text}`;
}

/**
 * The clock time of an epoch in the browser's locale: "10:42" (or "10:42 AM"); another day adds
 * the weekday ("Tue 10:42"), a week or more away the date ("3 Dec, 10:42").
 */
export function clockTime(epochSeconds: number, nowMs: number = Date.now()): string {
  const at = new Date(epochSeconds * 1000);
  const now = new Date(nowMs);
  const time = formatTime(epochSeconds);
  if (at.toDateString() === now.toDateString()) {
    return time;
  }
  const days = Math.abs(at.getTime() - now.getTime()) / 86400000;
  const day =
    days < 6
      ? at.toLocaleDateString([], { weekday: 'short' })
      : at.toLocaleDateString([], { day: 'numeric', month: 'short' });
  return `${day} ${time}`;
}

/**
 * A range from now, as compact words: "5–30 min", "45 min – 2 h 10 min", "up to 30 min"; null
 * when the two bounds read the same (no range worth showing).
 */
export function rangeText(early: number, late: number | null, nowMs: number): string | null {
  const now = nowMs / 1000;
  const a = Math.max(0, early - now);
  if (late === null) {
    // No upper bound (the slowest predicted run times never admit it within the horizon).
    return a < 60 ? null : `${roughDuration(a)} or${NBSP}later`;
  }
  const b = Math.max(0, late - now);
  if (b < 60) {
    return null;
  }
  const lo = roughDuration(a);
  const hi = roughDuration(b);
  if (lo === hi) {
    return null;
  }
  if (a < 60) {
    return `up to${NBSP}${hi}`;
  }
  const min = `${NBSP}min`;
  if (lo.endsWith(min) && hi.endsWith(min) && !lo.includes('h') && !hi.includes('h')) {
    return `${lo.slice(0, -min.length)}–${hi}`;
  }
  return `${lo} – ${hi}`;
}

export type StartPhase = 'future' | 'due' | 'overdue';

export interface IStartWords {
  /** "starts in ~12 min", "starts any moment now", "start overdue (expected ~10:42)". */
  text: string;
  /** "5–30 min", or null (no range, or past the estimate). */
  range: string | null;
  phase: StartPhase;
}

/** The estimated start in words at `nowMs`, or null when the workload has no estimate. */
export function startWords(w: IWorkload, nowMs: number): IStartWords | null {
  const at = w.estimatedStartAt;
  if (at === null || at === undefined || w.state !== 'Pending') {
    return null;
  }
  const now = nowMs / 1000;
  const r = w.estimatedStartRange;
  if (at > now) {
    return {
      text: `starts${NBSP}in${NBSP}${approxDuration(at - now)}`,
      range: r
        ? rangeText(Math.min(r.early, at), r.late === null ? null : Math.max(r.late, at), nowMs)
        : null,
      phase: 'future'
    };
  }
  // Past the point estimate: within the range (or a short grace without one) it is due.
  const dueUntil = Math.max(r?.late ?? at, at + DUE_GRACE_SECONDS);
  if (now <= dueUntil) {
    return { text: 'starts any moment now', range: null, phase: 'due' };
  }
  return {
    text: `start overdue (expected ~${clockTime(at, nowMs)})`,
    range: null,
    phase: 'overdue'
  };
}

/** Who holds what a pending workload waits for: "team-b/train-x", "a team-b workload", "your team-a/x". */
export function waitingForWho(wf: IWaitingFor, user: string | null): string {
  if (!wf.name) {
    return `a ${wf.namespace} workload`;
  }
  const key = `${wf.namespace}/${wf.name}`;
  return user && wf.owner === user ? `your ${key}` : key;
}

/** The parts of "2 × nvidia-a100 from team-b/train-x (ends ~10:42)": what, who, when. */
export function waitingForParts(
  wf: IWaitingFor,
  user: string | null,
  nowMs: number
): { what: string; who: string; when: string } {
  const now = nowMs / 1000;
  const end =
    wf.expectedEndAt > now
      ? `ends ~${clockTime(wf.expectedEndAt, nowMs)}`
      : 'ends any moment';
  return {
    what: wf.summary ?? '',
    who: waitingForWho(wf, user),
    when: `(${wf.kind === 'pending' ? 'queued, ' : ''}${end})`
  };
}

/** "2 × nvidia-a100 from team-b/train-x (ends ~10:42)". */
export function waitingForText(wf: IWaitingFor, user: string | null, nowMs: number): string {
  const { what, who, when } = waitingForParts(wf, user, nowMs);
  return `${what ? `${what} from ` : ''}${who} ${when}`;
}

const REASON_WORDS: Record<string, string> = {
  NotYetEstimated: 'start time not estimated yet',
  BudgetExceeded: "held: the team's budget is spent, no start before it resets",
  ExceedsMaxQuota: 'cannot start: it asks for more than its queue can ever give',
  Inactive: 'cannot start: its ClusterQueue is inactive',
  Misconfigured: 'cannot start: its queue is misconfigured',
  NotWithinHorizon: 'no start in sight within the time the estimator looks ahead',
  PreemptionLivelock: 'no estimate: the queue would preempt back and forth'
};

/** Why a pending workload has no estimate, in words (null when it has one, or is not pending). */
export function noEstimateWords(w: IWorkload): string | null {
  if (w.state !== 'Pending' || w.estimatedStartAt != null || !w.estimateReason) {
    return null;
  }
  return REASON_WORDS[w.estimateReason] ?? w.estimateMessage ?? w.estimateReason;
}

/** A faster option as a line: the server's summary, or one built from its fields. */
export function fasterOptionText(o: IFasterOption, nowMs: number): string {
  if (o.summary) {
    return o.summary;
  }
  const what = o.migProfile
    ? `${o.changesSize ? 'runs on ' : ''}MIG ${o.migProfile}${o.flavor ? ` on ${o.flavor}` : ''}`
    : o.changesSize
      ? `runs on ${o.gpus} GPU${o.gpus === 1 ? '' : 's'}${o.flavor ? ` of ${o.flavor}` : ''} (another size)`
      : `${o.gpus} × ${o.flavor ?? 'GPU'}`;
  const when = o.startsNow
    ? 'is free now: start at once'
    : `would start in ${approxDuration(o.estimatedStartAt - nowMs / 1000)}`;
  return `${what} ${when}, ${formatUsd(o.pricePerHourUsd)}/h`;
}

/** The tooltip of an estimate: how it was made, its range as clock times, what it cannot foresee. */
export function estimateTooltip(w: IWorkload, nowMs: number): string {
  const lines: string[] = [];
  if (w.estimatedStartAt != null) {
    const r = w.estimatedStartRange;
    lines.push(
      `Estimated start: ~${clockTime(w.estimatedStartAt, nowMs)}` +
        (r
          ? r.late !== null
            ? ` (between ${clockTime(r.early, nowMs)} and ${clockTime(r.late, nowMs)})`
            : ` (not before ${clockTime(r.early, nowMs)})`
          : '')
    );
    lines.push(
      'Made by running the queue forward with the predicted run times of the jobs ahead' +
        (w.estimateApproximate
          ? ' — approximate: from the mirrored Kueue queue, not this server’s own scheduler.'
          : '.')
    );
  }
  const message = w.estimateMessage ?? '';
  const isCaveat = message.includes('cannot foresee');
  if (w.estimatedStartAt == null && message) {
    lines.push(message); // why there is no estimate
  }
  if (w.estimateComputedAt) {
    lines.push(`Computed at ${clockTime(w.estimateComputedAt, nowMs)}.`);
  }
  if (w.estimatedStartAt != null && message && !isCaveat) {
    lines.push(message); // a note, e.g. "extrapolated from the simulated admissions ahead of it"
  }
  // What it cannot foresee: the server's own sentence where it sends one.
  lines.push(w.estimatedStartAt != null && isCaveat ? message : ESTIMATE_CAVEAT);
  return lines.join('\n');
}

/**
 * The user's next pending job: the earliest estimated start, else the best queue position;
 * null when nothing is pending.
 */
export function nextPending(workloads: IWorkload[]): IWorkload | null {
  let best: IWorkload | null = null;
  const rank = (w: IWorkload): [number, number] => [
    w.estimatedStartAt ?? Infinity,
    w.positionInClusterQueue ?? Infinity
  ];
  for (const w of workloads) {
    if (w.state !== 'Pending') {
      continue;
    }
    if (!best) {
      best = w;
      continue;
    }
    const [a1, a2] = rank(w);
    const [b1, b2] = rank(best);
    if (a1 < b1 || (a1 === b1 && a2 < b2)) {
      best = w;
    }
  }
  return best;
}

/** One line about a pending job's start, for the status bar's tooltip. */
export function startSummary(w: IWorkload, nowMs: number): string {
  const words = startWords(w, nowMs);
  if (words) {
    return words.range ? `${words.text} (${words.range})` : words.text;
  }
  return noEstimateWords(w) ?? 'no start estimate';
}
