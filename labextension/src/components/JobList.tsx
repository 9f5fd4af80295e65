/**
 * The user's workloads, live: state badge, queue position and reason while pending, assigned
 * flavor and devices, cost so far (ticking while running), Cancel, and a Logs toggle.
 */
import * as React from 'react';
import { Dialog } from '@jupyterlab/apputils';

import { ApiError, IFasterOption, IWorkload, workloadKey } from '../api';
import {
  ago,
  assignedDevices,
  assignedFlavors,
  costSoFar,
  describeRequest,
  formatClock,
  formatDateTime,
  formatUsd,
  isFinished
} from '../format';
import {
  clockTime,
  estimateTooltip,
  fasterOptionText,
  noEstimateWords,
  startWords,
  waitingForParts
} from '../estimate';
import { IWorkloadEntry, LEASE_TIME_REACHED, QueueModel } from '../model';
import { canOpenJobPage, openJobPage } from '../jobpage/opener';
import { preemptionsOf } from '../jobpage/types';
import { plainReason } from '../reasons';
import { NotebookLine } from './NotebookLine';
import { notebookServerLabel } from '../leaseWarning';
import {
  filterEntries,
  HISTORY_TOOLS_FROM,
  IHistoryFilter,
  isCleared,
  isFiltered,
  loadHiddenBefore,
  NO_FILTER,
  PAGE_SIZE,
  saveHiddenBefore,
  SinceFilter,
  STATE_OPTIONS,
  SINCE_OPTIONS,
  StateFilter
} from '../history';

/** The clocks of running jobs tick every second; estimated starts every 15 s. */
const RUNNING_TICK_MS = 1000;
const PENDING_TICK_MS = 15000;

/**
 * Re-render every `ms` (none when null): drives the cost ticker, run clocks and the estimated
 * starts, which count down from the workload's absolute times without a refetch.
 */
function useTicker(ms: number | null): number {
  const [now, setNow] = React.useState(Date.now());
  React.useEffect(() => {
    if (ms === null) {
      return;
    }
    const t = window.setInterval(() => setNow(Date.now()), ms);
    return () => window.clearInterval(t);
  }, [ms]);
  return ms !== null ? Math.max(now, Date.now()) : Date.now();
}

export function StateBadge(props: { state: string }): JSX.Element {
  return (
    <span
      className={`jp-gpuqueue-badge jp-gpuqueue-badge-${props.state.toLowerCase()}`}
    >
      {props.state}
    </span>
  );
}

export function JobList(props: {
  model: QueueModel;
  highlight: string | null;
}): JSX.Element {
  const entries = props.model.workloads;
  const anyRunning = entries.some(e => e.workload.state === 'Running');
  const anyPending = entries.some(e => e.workload.state === 'Pending');
  const now = useTicker(
    anyRunning ? RUNNING_TICK_MS : anyPending ? PENDING_TICK_MS : null
  );
  const user = props.model.info?.user ?? null;
  const [filter, setFilter] = React.useState<IHistoryFilter>(NO_FILTER);
  const [page, setPage] = React.useState(0);
  const [hiddenBefore, setHiddenBefore] = React.useState<number | null>(() =>
    loadHiddenBefore(user)
  );
  React.useEffect(() => setHiddenBefore(loadHiddenBefore(user)), [user]);
  // A job just submitted is shown: back to the first page, without filters hiding it.
  React.useEffect(() => {
    if (props.highlight) {
      setPage(0);
      setFilter(NO_FILTER);
    }
  }, [props.highlight]);

  if (entries.length === 0) {
    return (
      <div className="jp-gpuqueue-muted jp-gpuqueue-empty">
        No jobs yet. Submit one above, run <code>%%gpujob</code> in a notebook,
        or right-click a <code>.py</code> file.
      </div>
    );
  }
  const { shown, cleared } = filterEntries(entries, filter, hiddenBefore, now);
  const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
  const current = Math.min(page, pages - 1);
  const visible = shown.slice(current * PAGE_SIZE, (current + 1) * PAGE_SIZE);
  const tools =
    entries.length >= HISTORY_TOOLS_FROM || cleared > 0 || isFiltered(filter);
  const update = (patch: Partial<IHistoryFilter>) => {
    setFilter({ ...filter, ...patch });
    setPage(0);
  };
  const teams = [...new Set(entries.map(e => e.workload.namespace))].sort();
  const anyFinished = entries.some(
    e => isFinished(e.workload) && !isCleared(e.workload, hiddenBefore)
  );
  const clearFinished = () => {
    const at = Date.now() / 1000;
    saveHiddenBefore(user, at);
    setHiddenBefore(at);
    setPage(0);
  };
  const showCleared = () => {
    saveHiddenBefore(user, null);
    setHiddenBefore(null);
  };
  return (
    <div className="jp-gpuqueue-history">
      {tools && (
        <div className="jp-gpuqueue-history-tools" role="search" aria-label="Filter my jobs">
          <input
            type="search"
            className="jp-mod-styled jp-gpuqueue-history-search"
            placeholder="Search by name"
            aria-label="Search jobs by name"
            value={filter.search}
            onChange={e => update({ search: e.currentTarget.value })}
          />
          <div className="jp-gpuqueue-history-selects">
            <select
              className="jp-mod-styled jp-gpuqueue-history-state"
              aria-label="Filter by state"
              value={filter.state}
              onChange={e => update({ state: e.currentTarget.value as StateFilter })}
            >
              {STATE_OPTIONS.map(([v, label]) => (
                <option key={v} value={v}>
                  {label}
                </option>
              ))}
            </select>
            {teams.length > 1 && (
              <select
                className="jp-mod-styled jp-gpuqueue-history-team"
                aria-label="Filter by team"
                value={filter.team}
                onChange={e => update({ team: e.currentTarget.value })}
              >
                <option value="">All teams</option>
                {teams.map(t => (
                  <option key={t} value={t}>
                    {t}
                  </option>
                ))}
              </select>
            )}
            <select
              className="jp-mod-styled jp-gpuqueue-history-since"
              aria-label="Filter by date submitted"
              value={filter.since}
              onChange={e => update({ since: e.currentTarget.value as SinceFilter })}
            >
              {SINCE_OPTIONS.map(([v, label]) => (
                <option key={v} value={v}>
                  {label}
                </option>
              ))}
            </select>
          </div>
          <div className="jp-gpuqueue-history-summary">
            <span className="jp-gpuqueue-history-count" data-shown={shown.length}>
              {shown.length === entries.length - cleared && !isFiltered(filter)
                ? `${shown.length} ${shown.length === 1 ? 'job' : 'jobs'}`
                : `${shown.length} of ${entries.length - cleared} jobs`}
            </span>
            {isFiltered(filter) && (
              <button type="button" className="jp-gpuqueue-link" onClick={() => update(NO_FILTER)}>
                Reset filters
              </button>
            )}
            {anyFinished && (
              <button
                type="button"
                className="jp-gpuqueue-link jp-gpuqueue-history-clear"
                title="Hide the jobs that have ended until now (they stay in the queue's history; Show brings them back)"
                onClick={clearFinished}
              >
                Clear finished
              </button>
            )}
          </div>
          {cleared > 0 && (
            <div className="jp-gpuqueue-history-cleared" data-cleared={cleared}>
              {cleared} finished {cleared === 1 ? 'job' : 'jobs'} cleared ·{' '}
              <button type="button" className="jp-gpuqueue-link" onClick={showCleared}>
                Show
              </button>
            </div>
          )}
        </div>
      )}
      {visible.length === 0 ? (
        <div className="jp-gpuqueue-muted jp-gpuqueue-empty">No job matches.</div>
      ) : (
        <ul className="jp-gpuqueue-jobs">
          {visible.map(e => (
            <JobRow
              key={workloadKey(e.workload)}
              entry={e}
              model={props.model}
              now={now}
              user={user}
              highlight={props.highlight === workloadKey(e.workload)}
            />
          ))}
        </ul>
      )}
      {pages > 1 && (
        <nav className="jp-gpuqueue-pager" aria-label="Pages of my jobs">
          <button
            type="button"
            className="jp-gpuqueue-link"
            disabled={current === 0}
            onClick={() => setPage(current - 1)}
          >
            ‹ Newer
          </button>
          <span className="jp-gpuqueue-pager-at">
            {current * PAGE_SIZE + 1}–{current * PAGE_SIZE + visible.length} of {shown.length}
          </span>
          <button
            type="button"
            className="jp-gpuqueue-link"
            disabled={current >= pages - 1}
            onClick={() => setPage(current + 1)}
          >
            Older ›
          </button>
        </nav>
      )}
    </div>
  );
}

function JobRow(props: {
  entry: IWorkloadEntry;
  model: QueueModel;
  now: number;
  user: string | null;
  highlight: boolean;
}): JSX.Element {
  const { workload: w, receivedAt } = props.entry;
  const { model, now } = props;
  const key = workloadKey(w);
  const finished = isFinished(w);
  const [showLogs, setShowLogs] = React.useState(false);
  const [cancelling, setCancelling] = React.useState(false);
  const [error, setError] = React.useState<string | null>(null);

  const lease = w.kind === 'NotebookLease';
  // The open "Cancel running job?" dialog: closed when the job ends meanwhile (not left stale).
  const dialogRef = React.useRef<Dialog<unknown> | null>(null);
  const [endedWhileAsking, setEndedWhileAsking] = React.useState<string | null>(null);
  React.useEffect(() => {
    if (finished && dialogRef.current) {
      const dialog = dialogRef.current;
      dialogRef.current = null;
      setEndedWhileAsking(
        `${key} has already ended (${w.state}): nothing left to ${lease ? 'release' : 'cancel'}.`
      );
      dialog.reject();
    }
  }, [finished]);
  React.useEffect(() => () => dialogRef.current?.reject(), []);
  // After a cancel the card's Cancel button goes (or is disabled): the focus stays on the card
  // (its name), not dropped to <body>.
  const cardRef = React.useRef<HTMLLIElement>(null);
  const refocus = React.useRef(false);
  React.useEffect(() => {
    if (!refocus.current) {
      return;
    }
    const active = document.activeElement;
    if (!active || active === document.body) {
      const card = cardRef.current;
      (card?.querySelector<HTMLElement>('.jp-gpuqueue-job-open') ?? card)?.focus();
    }
    if (finished || !cancelling) {
      refocus.current = false;
    }
  });
  const cancel = async () => {
    setEndedWhileAsking(null);
    if (w.state === 'Running') {
      const dialog = new Dialog(
        lease
          ? {
              title: 'Release the GPUs of this notebook server?',
              body: `${key} holds GPUs for a notebook server; releasing gives them back to the queue now and the hub stops the server. It is billed for the time it held them.`,
              buttons: [
                Dialog.cancelButton({ label: 'Keep them' }),
                Dialog.warnButton({ label: 'Release' })
              ],
              defaultButton: 0 // Enter keeps it: the destructive button is never the default
            }
          : {
              title: 'Cancel running job?',
              body: `${key} is running; cancelling stops it now. It is billed for the time it ran.`,
              buttons: [
                Dialog.cancelButton({ label: 'Keep running' }),
                Dialog.warnButton({ label: 'Cancel job' })
              ],
              defaultButton: 0 // Enter keeps it: the destructive button is never the default
            }
      );
      dialogRef.current = dialog;
      const result = await dialog.launch();
      if (dialogRef.current !== dialog) {
        return; // closed because the job ended meanwhile
      }
      dialogRef.current = null;
      if (!result.button.accept) {
        return;
      }
    }
    refocus.current = true;
    setCancelling(true);
    setError(null);
    try {
      const requestedAt = Date.now();
      model.upsert(await model.client.cancel(w.namespace, w.name), requestedAt);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setCancelling(false);
    }
  };

  // A faster option taken in one click: the pending job moves in place (POST .../move).
  const [moving, setMoving] = React.useState(false);
  const move = async (o: IFasterOption) => {
    if (!o.move) {
      return;
    }
    setMoving(true);
    setError(null);
    try {
      const requestedAt = Date.now();
      model.upsert(await model.client.move(w.namespace, w.name, o.move), requestedAt);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setMoving(false);
    }
  };

  const plain = plainReason(w.reason, w.message);
  const flavors = assignedFlavors(w);
  const devices = assignedDevices(w);
  const cost = costSoFar(w, receivedAt, now);
  const runSeconds =
    w.startedAt != null
      ? (w.finishedAt ?? now / 1000) - w.startedAt
      : null;

  return (
    <li
      ref={cardRef}
      tabIndex={-1}
      className={`jp-gpuqueue-job ${props.highlight ? 'jp-mod-highlight' : ''}`}
      data-gpuqueue-job={key}
      data-state={w.state}
      data-estimate={
        w.state === 'Pending' && w.estimatedStartAt != null ? 'yes' : undefined
      }
    >
      <div className="jp-gpuqueue-job-head">
        {canOpenJobPage() ? (
          <button
            type="button"
            className="jp-gpuqueue-job-name jp-gpuqueue-job-open"
            title={`${key}: open the job's page (timeline, log, cost by run)`}
            onClick={() => openJobPage(w.namespace, w.name)}
          >
            {w.name}
          </button>
        ) : (
          <span className="jp-gpuqueue-job-name" title={key}>
            {w.name}
          </span>
        )}
        <StateBadge state={w.state} />
      </div>
      <div className="jp-gpuqueue-job-meta">
        {[
          lease ? notebookServerLabel(w) : undefined,
          describeRequest(w),
          `${w.namespace}/${w.localQueue}`,
          w.priorityClass ?? undefined
        ]
          .filter(Boolean)
          .join(' · ')}
      </div>

      {w.state === 'Pending' && (
        <>
          {w.positionInLocalQueue != null && (
            <div className="jp-gpuqueue-position">
              position {w.positionInLocalQueue + 1} in {w.localQueue}
              {w.positionInClusterQueue != null &&
                ` · ${w.positionInClusterQueue + 1} in ${w.clusterQueue}`}
            </div>
          )}
          <StartEstimate
            w={w}
            now={now}
            user={props.user}
            onMove={
              props.user !== null && w.owner === props.user ? move : undefined
            }
            moving={moving}
          />
          {(w.reason || w.message) && (
            <div className="jp-gpuqueue-reason" title={w.message ?? ''}>
              {plain && (
                <div
                  className="jp-gpuqueue-reason-plain"
                  style={{ fontWeight: 600, color: 'var(--jp-ui-font-color1)' }}
                >
                  {plain}
                </div>
              )}
              waiting: {w.reason ?? 'Pending'}
              {w.message ? ` — ${w.message}` : ''}
            </div>
          )}
        </>
      )}

      {(flavors.length > 0 || devices) && (
        <div className="jp-gpuqueue-assigned">
          {flavors.length > 0 && (
            <span className="jp-gpuqueue-flavor">{flavors.join(', ')}</span>
          )}
          {devices && <span className="jp-gpuqueue-devices">{devices}</span>}
        </div>
      )}

      {finished && (w.state === 'Failed' || w.state === 'Cancelled' || w.reason === LEASE_TIME_REACHED) && (
        <FinishedReason w={w} />
      )}

      <PreemptionLine w={w} />
      <NotebookLine w={w} model={model} />

      <div className="jp-gpuqueue-job-foot">
        <span
          className="jp-gpuqueue-cost"
          data-cost={cost.toFixed(6)}
          title={
            w.pricePerHourUsd
              ? `${formatUsd(w.pricePerHourUsd)}/h for this job`
              : undefined
          }
        >
          {formatUsd(cost)}
          {w.state === 'Running' && <span className="jp-gpuqueue-unit"> so far</span>}
        </span>
        {!finished && w.estimatedCostUsd != null && (
          <span className="jp-gpuqueue-muted" title="Upper bound: the max run time at this price">
            of ≤ {formatUsd(w.estimatedCostUsd)}
          </span>
        )}
        <span className="jp-gpuqueue-muted jp-gpuqueue-clock">
          {runSeconds != null
            ? `${w.state === 'Running' ? 'running' : 'ran'} ${formatClock(runSeconds)}`
            : `submitted ${ago(w.createdAt, now)}`}
        </span>
        <span className="jp-gpuqueue-job-actions">
          {!lease && (
            <button
              type="button"
              className="jp-gpuqueue-link"
              aria-expanded={showLogs}
              onClick={() => setShowLogs(!showLogs)}
            >
              {showLogs ? 'Hide logs' : 'Logs'}
            </button>
          )}
          {!finished && (
            <button
              type="button"
              className="jp-gpuqueue-link jp-gpuqueue-cancel"
              disabled={cancelling}
              onClick={() => void cancel()}
            >
              {cancelling
                ? lease
                  ? 'Releasing…'
                  : 'Cancelling…'
                : lease && w.state !== 'Pending'
                  ? 'Release'
                  : 'Cancel'}
            </button>
          )}
        </span>
      </div>
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {endedWhileAsking && (
        <div className="jp-gpuqueue-reason jp-gpuqueue-ended-note" role="status">
          {endedWhileAsking}
        </div>
      )}
      {showLogs && !lease && <LogView model={model} workload={w} />}
    </li>
  );
}

/**
 * A pending job's estimated start: "starts in ~12 min (5–30 min)", what it waits for ("waiting
 * for 2 × nvidia-a100 from team-b/train-x (ends ~10:42)"), or why there is no estimate; then the
 * faster options ("nvidia-l4 is free now: start at once, $0.81/h"). The tooltip says how the
 * estimate was made and what it cannot foresee.
 */
export function StartEstimate(props: {
  w: IWorkload;
  now: number;
  user: string | null;
  /** The owner's: take a faster option in one click (the job moves in place). */
  onMove?: (o: IFasterOption) => void;
  moving?: boolean;
}): JSX.Element | null {
  const { w, now, user, onMove, moving } = props;
  const words = startWords(w, now);
  const none = words ? null : noEstimateWords(w);
  const waiting = w.waitingFor ?? [];
  const faster = w.fasterOptions ?? [];
  if (!words && !none && faster.length === 0) {
    return null;
  }
  const tooltip = estimateTooltip(w, now);
  return (
    <div className="jp-gpuqueue-eta" data-phase={words?.phase ?? 'none'}>
      {words && (
        <div className="jp-gpuqueue-eta-start" title={tooltip}>
          <span className="jp-gpuqueue-eta-when">{words.text}</span>
          {words.range && (
            <span className="jp-gpuqueue-eta-range"> ({words.range})</span>
          )}
          {w.estimateApproximate && (
            <span className="jp-gpuqueue-eta-approx"> · approximate</span>
          )}
        </div>
      )}
      {none && (
        <div
          className="jp-gpuqueue-eta-none"
          data-reason={w.estimateReason ?? undefined}
          title={tooltip}
        >
          {none}
        </div>
      )}
      {words && waiting.length > 0 && (
        <ul className="jp-gpuqueue-eta-waiting">
          {waiting.map((wf, i) => {
            const { what, who, when } = waitingForParts(wf, user, now);
            return (
              <li key={`${wf.namespace}/${wf.name ?? i}`} data-kind={wf.kind}>
                {i === 0 ? 'waiting for ' : 'and '}
                {what && `${what} from `}
                <span className="jp-gpuqueue-eta-who">{who}</span>{' '}
                <span className="jp-gpuqueue-eta-nowrap">{when}</span>
              </li>
            );
          })}
        </ul>
      )}
      {faster.length > 0 && (
        <ul className="jp-gpuqueue-eta-faster" aria-label="Faster ways to start">
          {faster.map((o, i) => (
            <li
              key={`${o.flavor}/${o.migProfile}/${o.gpus}/${i}`}
              data-flavor={o.flavor ?? undefined}
              data-changes-size={o.changesSize ? 'true' : 'false'}
              title={`${startsAt(o.startsNow, o.estimatedStartAt, now)} ${
                onMove && o.move
                  ? 'Move moves this job there: it keeps its name, its place in the queue and its history.'
                  : 'Its owner can move the job there.'
              }`}
            >
              <span className="jp-gpuqueue-eta-faster-text">
                <span className="jp-gpuqueue-eta-faster-label">faster: </span>
                {fasterOptionText(o, now)}
              </span>
              {onMove && o.move && (
                <button
                  type="button"
                  className="jp-gpuqueue-eta-move"
                  disabled={moving}
                  aria-label={`Move ${w.namespace}/${w.name}: ${fasterOptionText(o, now)}`}
                  onClick={() => onMove(o)}
                >
                  {moving ? 'Moving…' : 'Move'}
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

function startsAt(startsNow: boolean, at: number, now: number): string {
  return startsNow || at * 1000 <= now
    ? 'It would start at once.'
    : `It would start at ~${clockTime(at, now)}.`;
}

/**
 * "preempted 1× by team-a/high-wait (priority) · $0.32 of runs lost" (issue 15 item 7): shown
 * whenever the workload was ever preempted, also after it ran again and ended.
 */
export function PreemptionLine(props: { w: IWorkload }): JSX.Element | null {
  const p = preemptionsOf(props.w);
  if (!p) {
    return null;
  }
  const last = p.last;
  const when = last?.at ? formatDateTime(last.at) : null;
  return (
    <div
      className="jp-gpuqueue-preempted"
      data-preemptions={p.count}
      title={
        when
          ? `Last preempted ${when}${last.reason ? ` (Kueue: ${last.reason})` : ''}. The runs it lost are billed; it was put back in the queue.`
          : undefined
      }
    >
      {p.summary}
    </div>
  );
}

/** Why a job failed or was cancelled: exit code, reason, message, without repeats. */
function FinishedReason(props: { w: IWorkload }): JSX.Element | null {
  const { w } = props;
  const parts: string[] = [];
  for (const p of [
    w.exitCode != null && w.exitCode !== 0 ? `exit code ${w.exitCode}` : null,
    w.reason === LEASE_TIME_REACHED ? null : w.reason, // its message says it in words
    w.message
  ]) {
    if (p && !parts.some(q => q.toLowerCase() === p.toLowerCase())) {
      parts.push(p);
    }
  }
  return parts.length ? <div className="jp-gpuqueue-reason">{parts.join(' — ')}</div> : null;
}

const MAX_LOG_CHARS = 200000;

/** The job's log, fetched by offset and followed while the job may still write. */
function LogView(props: { model: QueueModel; workload: IWorkload }): JSX.Element {
  const { model, workload: w } = props;
  const [text, setText] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  const [done, setDone] = React.useState(false);
  const pre = React.useRef<HTMLPreElement>(null);
  const finishedRef = React.useRef(isFinished(w));
  finishedRef.current = isFinished(w);

  React.useEffect(() => {
    let offset = 0;
    let stopped = false;
    setText('');
    setDone(false);
    let timer = 0;
    const step = async () => {
      try {
        // Read until the end of what is there now.
        for (;;) {
          const chunk = await model.client.logs(w.namespace, w.name, offset);
          if (stopped) {
            return;
          }
          if (chunk.text) {
            setText(t => {
              const next = t + chunk.text;
              return next.length > MAX_LOG_CHARS
                ? next.slice(next.length - MAX_LOG_CHARS)
                : next;
            });
          }
          const advanced = chunk.nextOffset > offset;
          offset = chunk.nextOffset;
          if (chunk.eof || !advanced) {
            break;
          }
        }
        setError(null);
        if (finishedRef.current) {
          setDone(true);
          return;
        }
      } catch (err) {
        if (stopped) {
          return;
        }
        if (err instanceof ApiError && err.status === 404 && !finishedRef.current) {
          // No log yet: the job has not started.
        } else {
          setError(err instanceof Error ? err.message : String(err));
          if (finishedRef.current) {
            return;
          }
        }
      }
      timer = window.setTimeout(step, 1500);
    };
    void step();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [w.namespace, w.name, w.uid, w.startedAt]);

  // Follow the tail unless the user scrolled up to read.
  const stick = React.useRef(true);
  React.useLayoutEffect(() => {
    const el = pre.current;
    if (el && stick.current) {
      el.scrollTop = el.scrollHeight;
    }
  }, [text]);
  const onScroll = () => {
    const el = pre.current;
    if (el) {
      stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
    }
  };

  return (
    <div className="jp-gpuqueue-logs">
      <pre
        ref={pre}
        className="jp-gpuqueue-log"
        data-gpuqueue-log={workloadKey(w)}
        onScroll={onScroll}
      >
        {text ||
          (w.state === 'Pending' || w.state === 'Admitted'
            ? 'The log starts when the job runs.'
            : done
              ? '(empty log)'
              : '')}
      </pre>
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {!done && w.state === 'Running' && (
        <div className="jp-gpuqueue-muted">following…</div>
      )}
    </div>
  );
}
