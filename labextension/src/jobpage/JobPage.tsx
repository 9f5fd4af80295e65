/**
 * A job's page in JupyterLab's main area (command `gpuqueue:open-job`, or the job's name on its
 * card): the timeline (submitted, admitted where, preempted by whom, started again, ended), the
 * log (followed while the job runs, downloadable), its cost by run, GPU utilisation and GPU memory
 * over time where NVML sampled them, and "Resubmit" / "Clone into the form".
 */
import * as React from 'react';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';

import { ApiError, GpuQueueClient, IWorkload, workloadKey } from '../api';
import { describeRequest, formatClock, formatDateTime, formatTime, formatUsd, isFinished } from '../format';
import { gpuQueueIcon } from '../icon';
import { QueueModel } from '../model';
import { PreemptionLine, StateBadge } from '../components/JobList';
import {
  fetchLog,
  fetchTimeline,
  IMemorySample,
  IRun,
  ITimeline,
  IUtilizationSample,
  requestOf
} from './types';
import { formPrefillRequested, openJobPage } from './opener';
import { NotebookSection } from './NotebookSection';

const REFRESH_MS = 3000;
const LOG_POLL_MS = 1000;
const MAX_LOG_CHARS = 2_000_000;

function time(epoch: number): string {
  return formatTime(epoch, true);
}

function dateTime(epoch: number): string {
  return formatDateTime(epoch, true);
}

function errorText(err: unknown): string {
  return err instanceof ApiError || err instanceof Error ? err.message : String(err);
}

/** A short random suffix for a resubmitted job's name (DNS-1123, ≤ 63 characters). */
function resubmitName(name: string): string {
  const base = name.replace(/-r[0-9a-f]{4}$/, '').slice(0, 57).replace(/-+$/, '');
  const hex = Math.floor(Math.random() * 0x10000)
    .toString(16)
    .padStart(4, '0');
  return `${base}-r${hex}`;
}

export interface IJobPageProps {
  client: GpuQueueClient;
  model: QueueModel | null;
  namespace: string;
  name: string;
}

export function JobPage(props: IJobPageProps): JSX.Element {
  const { client, model, namespace, name } = props;
  const key = `${namespace}/${name}`;
  const [timeline, setTimeline] = React.useState<ITimeline | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [action, setAction] = React.useState<{ text: string; key?: string; error?: boolean } | null>(
    null
  );
  const [busy, setBusy] = React.useState(false);

  // The timeline: fetched at once, again on every event about this workload (the model's
  // signal), and every few seconds while it has not ended.
  React.useEffect(() => {
    let stopped = false;
    let timer = 0;
    let finished = false;
    const load = async () => {
      window.clearTimeout(timer);
      try {
        const t = await fetchTimeline(client, namespace, name);
        if (stopped) {
          return;
        }
        setTimeline(t);
        setError(null);
        finished = isFinished(t.workload);
      } catch (err) {
        if (!stopped) {
          setError(errorText(err));
        }
        if (err instanceof ApiError && (err.status === 404 || err.status === 403)) {
          finished = true; // gone, or not the user's to see: asking again changes nothing
        }
      }
      if (!stopped && !finished) {
        timer = window.setTimeout(load, REFRESH_MS);
      }
    };
    const onWorkload = (_: unknown, w: IWorkload) => {
      if (workloadKey(w) === key) {
        void load();
      }
    };
    void load();
    model?.workloadChanged.connect(onWorkload);
    return () => {
      stopped = true;
      window.clearTimeout(timer);
      model?.workloadChanged.disconnect(onWorkload);
    };
  }, [client, model, key]);

  if (!timeline) {
    return (
      <div className="jp-gpuqueue-jobpage" data-gpuqueue-jobpage={key}>
        <h1 className="jp-gpuqueue-jobpage-title">{key}</h1>
        <div className={error ? 'jp-gpuqueue-form-error' : 'jp-gpuqueue-muted'}>
          {error ?? 'Loading…'}
        </div>
      </div>
    );
  }

  const w = timeline.workload;
  const lease = w.kind === 'NotebookLease';

  const resubmit = async () => {
    setBusy(true);
    setAction(null);
    try {
      const body = { ...requestOf(w, timeline.runs), name: resubmitName(w.name) };
      const requestedAt = Date.now();
      const created = await client.submit(body);
      model?.upsert(created, requestedAt);
      setAction({ text: `Submitted ${workloadKey(created)}`, key: workloadKey(created) });
    } catch (err) {
      setAction({ text: `Resubmit failed: ${errorText(err)}`, error: true });
    } finally {
      setBusy(false);
    }
  };

  const clone = () => {
    formPrefillRequested.emit(requestOf(w, timeline.runs), key);
    // The form takes it now, or when it is first shown (opener.ts keeps the last request).
    setAction({ text: "The GPU Queue panel's submit form now holds a copy of this job." });
  };

  return (
    <div className="jp-gpuqueue-jobpage" data-gpuqueue-jobpage={key} data-state={w.state}>
      <header className="jp-gpuqueue-jobpage-head">
        <h1 className="jp-gpuqueue-jobpage-title">{key}</h1>
        <StateBadge state={w.state} />
      </header>
      <div className="jp-gpuqueue-jobpage-meta">
        {[describeRequest(w), `${w.namespace}/${w.localQueue}`, w.priorityClass, w.owner]
          .filter(Boolean)
          .join(' · ')}
      </div>
      {w.command && w.command.length > 0 && (
        <code className="jp-gpuqueue-jobpage-command">{w.command.join(' ')}</code>
      )}
      <PreemptionLine w={w} />
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {!lease && (
        <div className="jp-gpuqueue-jobpage-actions">
          <button
            type="button"
            className="jp-mod-styled jp-mod-accept jp-gpuqueue-resubmit"
            disabled={busy}
            title="Submit the same request again, as a new job"
            onClick={() => void resubmit()}
          >
            {busy ? 'Submitting…' : 'Resubmit'}
          </button>
          <button
            type="button"
            className="jp-mod-styled jp-mod-reject jp-gpuqueue-clone"
            title="Fill the panel's submit form with this job's request, to change it before submitting"
            onClick={clone}
          >
            Clone into the form
          </button>
          {action && (
            <span
              className={action.error ? 'jp-gpuqueue-form-error' : 'jp-gpuqueue-jobpage-note'}
              data-gpuqueue-action={action.key ?? ''}
              role="status"
            >
              {action.key ? (
                <>
                  Submitted{' '}
                  <button
                    type="button"
                    className="jp-gpuqueue-link"
                    onClick={() => {
                      const [ns, n] = action.key!.split('/');
                      openJobPage(ns, n);
                    }}
                  >
                    {action.key}
                  </button>
                </>
              ) : (
                action.text
              )}
            </span>
          )}
        </div>
      )}

      <NotebookSection w={w} />

      <section className="jp-gpuqueue-jobpage-section" data-section="timeline">
        <h2>Timeline</h2>
        <ol className="jp-gpuqueue-timeline">
          {timeline.events.map((e, i) => (
            <li key={i} data-type={e.type}>
              <span className="jp-gpuqueue-timeline-at">{dateTime(e.at)}</span>
              <span className="jp-gpuqueue-timeline-type">{e.type}</span>
              <span className="jp-gpuqueue-timeline-text">{e.text}</span>
            </li>
          ))}
        </ol>
      </section>

      <section className="jp-gpuqueue-jobpage-section" data-section="runs">
        <h2>Cost by run</h2>
        <RunsTable runs={timeline.runs} total={w.costUsd ?? 0} />
      </section>

      <div className="jp-gpuqueue-jobpage-charts">
        <section className="jp-gpuqueue-jobpage-section" data-section="utilization">
          <h2>GPU utilisation</h2>
          <UtilizationChart samples={timeline.utilization} runs={timeline.runs} />
        </section>
        <section className="jp-gpuqueue-jobpage-section" data-section="memory">
          <h2>GPU memory</h2>
          <MemoryChart samples={timeline.memory ?? []} runs={timeline.runs} />
        </section>
      </div>

      {!lease && (
        <section className="jp-gpuqueue-jobpage-section" data-section="log">
          <h2>Log</h2>
          <JobLog client={client} workload={w} />
        </section>
      )}
    </div>
  );
}

function RunsTable(props: { runs: IRun[]; total: number }): JSX.Element {
  const { runs } = props;
  if (runs.length === 0) {
    return <div className="jp-gpuqueue-muted">No run yet: it has not been admitted.</div>;
  }
  const now = Date.now() / 1000;
  return (
    <div className="jp-gpuqueue-jobpage-scroll">
      <table className="jp-gpuqueue-runs">
        <thead>
          <tr>
            <th>#</th>
            <th>started</th>
            <th>ran</th>
            <th>on</th>
            <th>outcome</th>
            <th className="jp-gpuqueue-num">cost</th>
          </tr>
        </thead>
        <tbody>
          {runs.map((r, i) => (
            <tr key={i} data-outcome={r.outcome ?? 'running'}>
              <td>{i + 1}</td>
              <td>{dateTime(r.start)}</td>
              <td>{formatClock((r.end ?? now) - r.start)}</td>
              <td>{r.flavors.join(', ') || '–'}</td>
              <td>{r.outcome ?? 'running'}</td>
              <td className="jp-gpuqueue-num">{formatUsd(r.costUsd)}</td>
            </tr>
          ))}
        </tbody>
        <tfoot>
          <tr>
            <td colSpan={5}>total</td>
            <td className="jp-gpuqueue-num">
              {formatUsd(runs.reduce((s, r) => s + r.costUsd, 0))}
            </td>
          </tr>
        </tfoot>
      </table>
    </div>
  );
}

const CHART_W = 480;
const CHART_H = 120;
const PAD_L = 44;
const PAD_B = 18;
const PAD_T = 6;
const PAD_R = 8;
const SERIES_VARS = [
  '--jp-brand-color1',
  '--jp-warn-color1',
  '--jp-success-color1',
  '--jp-error-color1'
];

/**
 * An SVG path through `points` ([at, x, y], oldest first), broken between runs (`runStarts`: the
 * runs' start times, oldest first): a job preempted and admitted again was not sampled in between,
 * so no line is drawn there. A run's lone sample is a dot.
 */
function seriesPath(points: [number, number, number][], runStarts: number[]): string {
  const runOf = (at: number) => runStarts.filter(start => start <= at).length;
  let d = '';
  let run = -1;
  let open = false;
  for (const [at, px, py] of points) {
    const r = runOf(at);
    const xy = `${px.toFixed(1)},${py.toFixed(1)}`;
    if (r !== run || !open) {
      d += `${d ? ' ' : ''}M${xy} h0.01`; // the h0.01 shows a lone point (round caps)
      run = r;
      open = true;
    } else {
      d += ` L${xy}`;
    }
  }
  return d;
}

/**
 * The frame both charts share: an SVG of CHART_W × CHART_H with horizontal gridlines labelled on
 * the left (`ticks`: their y in the SVG and label), the first and last sample's times along the
 * bottom, then `children` (the series), and `legend` under it.
 */
function ChartFrame(props: {
  className: string;
  label: string;
  padLeft: number;
  ticks: { y: number; label: string }[];
  t0: number;
  t1: number;
  legend: React.ReactNode;
  children: React.ReactNode;
}): JSX.Element {
  const { padLeft } = props;
  return (
    <figure className={props.className}>
      <svg viewBox={`0 0 ${CHART_W} ${CHART_H}`} role="img" aria-label={props.label}>
        {props.ticks.map(t => (
          <g key={t.label}>
            <line className="jp-gpuqueue-util-grid" x1={padLeft} x2={CHART_W - PAD_R} y1={t.y} y2={t.y} />
            <text className="jp-gpuqueue-util-label" x={padLeft - 4} y={t.y + 4} textAnchor="end">
              {t.label}
            </text>
          </g>
        ))}
        <text className="jp-gpuqueue-util-label" x={padLeft} y={CHART_H - 3}>
          {time(props.t0)}
        </text>
        <text className="jp-gpuqueue-util-label" x={CHART_W - PAD_R} y={CHART_H - 3} textAnchor="end">
          {time(props.t1)}
        </text>
        {props.children}
      </svg>
      <figcaption className="jp-gpuqueue-util-legend">{props.legend}</figcaption>
    </figure>
  );
}

/** One device's series: its samples as [at, x, y] (oldest first), broken between runs. */
function SeriesLine(props: {
  device: string;
  points: [number, number, number][];
  runStarts: number[];
  color: string;
}): JSX.Element {
  return (
    <path
      className="jp-gpuqueue-util-line"
      d={seriesPath(props.points, props.runStarts)}
      strokeLinecap="round"
      strokeLinejoin="round"
      data-device={props.device}
      data-samples={props.points.length}
      style={{ stroke: props.color }}
    >
      <title>{props.device}</title>
    </path>
  );
}

/** The colour of the `i`-th device's series. */
function seriesColor(i: number): string {
  return `var(${SERIES_VARS[i % SERIES_VARS.length]})`;
}

/** Utilisation over time, one line a device (broken between runs), 0–100 %; or why there is none. */
export function UtilizationChart(props: { samples: IUtilizationSample[]; runs?: IRun[] }): JSX.Element {
  const { samples } = props;
  const runStarts = (props.runs ?? []).map(r => r.start).sort((a, b) => a - b);
  if (samples.length === 0) {
    return (
      <div className="jp-gpuqueue-muted jp-gpuqueue-util-none">
        no GPU samples (NVML not available)
      </div>
    );
  }
  const t0 = Math.min(...samples.map(s => s.at));
  const t1 = Math.max(...samples.map(s => s.at), t0 + 1);
  const devices = [...new Set(samples.map(s => s.device))];
  const x = (at: number) => PAD_L + ((at - t0) / (t1 - t0)) * (CHART_W - PAD_L - PAD_R);
  const y = (p: number) => PAD_T + (1 - Math.min(100, Math.max(0, p)) / 100) * (CHART_H - PAD_T - PAD_B);
  return (
    <ChartFrame
      className="jp-gpuqueue-util"
      label={`GPU utilisation of ${devices.length} device(s) from ${time(t0)} to ${time(t1)}`}
      padLeft={PAD_L}
      ticks={[0, 50, 100].map(p => ({ y: y(p), label: `${p}%` }))}
      t0={t0}
      t1={t1}
      legend={devices.map((d, i) => (
        <span key={d}>
          <span className="jp-gpuqueue-util-swatch" style={{ background: seriesColor(i) }} />
          {d}
        </span>
      ))}
    >
      {devices.map((d, i) => (
        <SeriesLine
          key={d}
          device={d}
          points={samples
            .filter(s => s.device === d)
            .sort((a, b) => a.at - b.at)
            .map(s => [s.at, x(s.at), y(s.percent)] as [number, number, number])}
          runStarts={runStarts}
          color={seriesColor(i)}
        />
      ))}
    </ChartFrame>
  );
}

const MEM_PAD_L = 58;
const MEM_PAD_T = 18; // room for the label of a total at the top

/** "12,345" (whole MiB, grouped by thousands). */
function mib(v: number): string {
  return Math.round(v).toLocaleString('en-US');
}

/**
 * The memory axis' gridlines: 0 and round steps up to `top` (MiB): GiB from 2 GiB up, else MiB;
 * a step of 1, 2 or 5 × 10^k units, about a third of the axis ("0", "20 GiB", "40 GiB", "60 GiB"
 * for an 80 GB GPU, whose total is the dashed line above them).
 */
function memoryTicks(top: number): { v: number; label: string }[] {
  const gib = top >= 2048;
  const unit = gib ? 1024 : 1;
  const span = top / unit;
  const rough = span / 3;
  const mag = Math.pow(10, Math.floor(Math.log10(rough)));
  const step = [5, 2, 1].map(m => m * mag).find(c => c <= rough) ?? mag;
  const out: { v: number; label: string }[] = [];
  for (let k = 0; k * step <= span * (1 + 1e-9); k++) {
    const n = Number((k * step).toFixed(3));
    out.push({ v: n * unit, label: k === 0 ? '0' : `${n} ${gib ? 'GiB' : 'MiB'}` });
  }
  return out;
}

/**
 * Memory in use over time, one line a device (broken between runs), from 0 to the largest device's memory (each
 * distinct total a labelled dashed line); the legend gives each device's last sample and peak
 * in MiB, "of" its total where known. Or why there is none.
 */
export function MemoryChart(props: { samples: IMemorySample[]; runs?: IRun[] }): JSX.Element {
  const { samples } = props;
  const runStarts = (props.runs ?? []).map(r => r.start).sort((a, b) => a - b);
  if (samples.length === 0) {
    return (
      <div className="jp-gpuqueue-muted jp-gpuqueue-mem-none">
        no GPU memory samples (NVML not available)
      </div>
    );
  }
  const t0 = Math.min(...samples.map(s => s.at));
  const t1 = Math.max(...samples.map(s => s.at), t0 + 1);
  const devices = [...new Set(samples.map(s => s.device))];
  const byDevice = devices.map(d => {
    const ss = samples.filter(s => s.device === d).sort((a, b) => a.at - b.at);
    const totals = ss.map(s => s.memoryTotalMiB).filter((t): t is number => t !== null && t > 0);
    return {
      device: d,
      samples: ss,
      last: ss[ss.length - 1].memoryUsedMiB,
      peak: Math.max(...ss.map(s => s.memoryUsedMiB)),
      total: totals.length ? totals[totals.length - 1] : null
    };
  });
  const top = Math.max(
    1,
    ...byDevice.map(d => d.total ?? 0),
    ...samples.map(s => s.memoryUsedMiB)
  );
  const x = (at: number) => MEM_PAD_L + ((at - t0) / (t1 - t0)) * (CHART_W - MEM_PAD_L - PAD_R);
  const y = (v: number) =>
    MEM_PAD_T + (1 - Math.min(top, Math.max(0, v)) / top) * (CHART_H - MEM_PAD_T - PAD_B);
  const totals = [...new Set(byDevice.map(d => d.total).filter((t): t is number => t !== null))];
  const words = byDevice
    .map(d => `${d.device} ${mib(d.last)}${d.total !== null ? ` of ${mib(d.total)}` : ''} MiB`)
    .join(', ');
  return (
    <ChartFrame
      className="jp-gpuqueue-util jp-gpuqueue-mem"
      label={
        `GPU memory used of ${devices.length} device(s) from ${time(t0)} to ${time(t1)}; ` +
        `last: ${words}`
      }
      padLeft={MEM_PAD_L}
      ticks={memoryTicks(top).map(({ v, label }) => ({ y: y(v), label }))}
      t0={t0}
      t1={t1}
      legend={byDevice.map((d, i) => (
        <span key={d.device} data-device={d.device}>
          <span className="jp-gpuqueue-util-swatch" style={{ background: seriesColor(i) }} />
          {d.device}:{' '}
          <span className="jp-gpuqueue-mem-value">
            {mib(d.last)}
            {d.total !== null ? ` of ${mib(d.total)}` : ''} MiB (peak {mib(d.peak)})
          </span>
        </span>
      ))}
    >
      {totals.map(t => (
        <g key={`total-${t}`} className="jp-gpuqueue-mem-total">
          <line
            x1={MEM_PAD_L}
            x2={CHART_W - PAD_R}
            y1={y(t)}
            y2={y(t)}
            strokeWidth={1}
            strokeDasharray="5 4"
            style={{ stroke: 'var(--jp-ui-font-color2)' }}
          />
          <text className="jp-gpuqueue-util-label" x={CHART_W - PAD_R} y={y(t) - 4} textAnchor="end">
            {`total ${mib(t)} MiB`}
          </text>
        </g>
      ))}
      {byDevice.map((d, i) => (
        <SeriesLine
          key={d.device}
          device={d.device}
          points={d.samples.map(s => [s.at, x(s.at), y(s.memoryUsedMiB)] as [number, number, number])}
          runStarts={runStarts}
          color={seriesColor(i)}
        />
      ))}
    </ChartFrame>
  );
}

/**
 * The whole log, read by offset; while the job may still write, `nextOffset` is polled and the
 * view follows its end (unless "Follow" is off or the user scrolled up). Download saves what
 * was read as a file.
 */
function JobLog(props: { client: GpuQueueClient; workload: IWorkload }): JSX.Element {
  const { client, workload: w } = props;
  const [text, setText] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  const [eof, setEof] = React.useState(false);
  const [follow, setFollow] = React.useState(true);
  const pre = React.useRef<HTMLPreElement>(null);
  const finishedRef = React.useRef(isFinished(w));
  finishedRef.current = isFinished(w);
  const full = React.useRef('');

  React.useEffect(() => {
    let offset = 0;
    let stopped = false;
    let timer = 0;
    full.current = '';
    setText('');
    setEof(false);
    const step = async () => {
      try {
        for (;;) {
          const chunk = await fetchLog(client, w.namespace, w.name, offset);
          if (stopped) {
            return;
          }
          if (chunk.text) {
            full.current += chunk.text;
            const shown =
              full.current.length > MAX_LOG_CHARS
                ? full.current.slice(full.current.length - MAX_LOG_CHARS)
                : full.current;
            setText(shown);
          }
          const advanced = chunk.nextOffset > offset;
          offset = chunk.nextOffset;
          if (chunk.eof || !advanced) {
            break;
          }
        }
        setError(null);
        if (finishedRef.current) {
          setEof(true);
          return;
        }
      } catch (err) {
        if (stopped) {
          return;
        }
        if (err instanceof ApiError && err.status === 404 && !finishedRef.current) {
          // no log yet: not started
        } else {
          setError(errorText(err));
          if (finishedRef.current || (err instanceof ApiError && err.status === 403)) {
            return;
          }
        }
      }
      timer = window.setTimeout(step, LOG_POLL_MS);
    };
    void step();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [client, w.namespace, w.name, w.uid, w.startedAt, w.state === 'Running']);

  React.useLayoutEffect(() => {
    const el = pre.current;
    if (el && follow) {
      el.scrollTop = el.scrollHeight;
    }
  }, [text, follow]);

  const onScroll = () => {
    const el = pre.current;
    if (el && follow && el.scrollHeight - el.scrollTop - el.clientHeight > 24) {
      setFollow(false);
    }
  };

  const download = (e: React.MouseEvent<HTMLAnchorElement>) => {
    const blob = new Blob([full.current], { type: 'text/plain;charset=utf-8' });
    const url = URL.createObjectURL(blob);
    e.currentTarget.href = url;
    window.setTimeout(() => URL.revokeObjectURL(url), 60000);
  };

  const running = w.state === 'Running';
  return (
    <div className="jp-gpuqueue-jobpage-log">
      <div className="jp-gpuqueue-jobpage-logbar">
        <label>
          <input
            type="checkbox"
            className="jp-gpuqueue-follow"
            checked={follow}
            onChange={e => setFollow(e.currentTarget.checked)}
          />{' '}
          Follow
        </label>
        <a
          className="jp-gpuqueue-link jp-gpuqueue-download"
          href="#"
          download={`${w.namespace}-${w.name}.log`}
          onClick={download}
        >
          Download
        </a>
        <span className="jp-gpuqueue-muted" data-log-status={running && !eof ? 'following' : 'idle'}>
          {running && !eof
            ? 'following the log while the job runs…'
            : `${full.current.length.toLocaleString()} characters`}
        </span>
      </div>
      <pre
        ref={pre}
        className="jp-gpuqueue-jobpage-logtext"
        data-gpuqueue-log={workloadKey(w)}
        onScroll={onScroll}
        tabIndex={0}
      >
        {text ||
          (w.state === 'Pending' || w.state === 'Admitted'
            ? 'The log starts when the job runs.'
            : eof
              ? '(empty log)'
              : '')}
      </pre>
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
    </div>
  );
}

/** The MainAreaWidget of a job's page; its id is stable, so a second open activates it. */
export class JobPageWidget extends MainAreaWidget<ReactWidget> {
  static idFor(namespace: string, name: string): string {
    return `gpuqueue-job-${namespace}-${name}`;
  }

  constructor(options: IJobPageProps) {
    const content = ReactWidget.create(<JobPage {...options} />);
    content.addClass('jp-gpuqueue-jobpage-content');
    super({ content });
    this.id = JobPageWidget.idFor(options.namespace, options.name);
    this.title.label = options.name;
    this.title.icon = gpuQueueIcon;
    this.title.caption = `GPU job ${options.namespace}/${options.name}`;
    this.title.closable = true;
    this.addClass('jp-gpuqueue-jobpage-widget');
    this.namespace = options.namespace;
    this.jobName = options.name;
  }

  readonly namespace: string;
  readonly jobName: string;
}
