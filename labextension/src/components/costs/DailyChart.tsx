/**
 * USD per UTC day of a month as an SVG bar chart (days not yet reached are left empty). Each bar
 * stacks the teams' spend in a stable colour per team; hovering a bar shows the day's figures.
 */
import * as React from 'react';

import { IDailySpend, usd } from './costsApi';

/** Drawn at the width it is shown (one SVG unit a CSS pixel), so its labels keep their size. */
const DEFAULT_WIDTH = 300;
const HEIGHT = 130;
const BOTTOM = 18;
const TOP = 8;
/** The labels' size in pixels: the UI's small font (--jp-ui-font-size0 is 13 px / 1.2). */
const LABEL_PX = 11;
const COLOURS = ['var(--jp-brand-color1)', 'var(--jp-warn-color1)', 'var(--jp-success-color1)',
  'var(--jp-error-color1)', 'var(--jp-brand-color3)', 'var(--jp-warn-color3)'];

function daysIn(month: string): number {
  const [y, m] = month.split('-').map(Number);
  return new Date(Date.UTC(y, m, 0)).getUTCDate();
}

function niceMax(x: number): number {
  if (x <= 0) {
    return 1;
  }
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const f of [1, 2, 2.5, 5, 10]) {
    if (f * p >= x) {
      return f * p;
    }
  }
  return 10 * p;
}

/** The width of the element, followed as the sidebar is resized. */
function useWidth(ref: React.RefObject<HTMLElement>): number {
  const [width, setWidth] = React.useState(0);
  React.useLayoutEffect(() => {
    const el = ref.current;
    if (!el) {
      return;
    }
    const measure = () => setWidth(Math.floor(el.getBoundingClientRect().width));
    measure();
    const observer = new ResizeObserver(measure);
    observer.observe(el);
    return () => observer.disconnect();
  }, [ref]);
  return width;
}

export function DailyChart(props: { days: IDailySpend[]; month: string }): JSX.Element {
  const ref = React.useRef<HTMLDivElement>(null);
  const WIDTH = Math.max(160, useWidth(ref) || DEFAULT_WIDTH);
  const n = daysIn(props.month);
  const byDate = new Map(props.days.map(d => [d.date, d]));
  const teams = [...new Set(props.days.flatMap(d => Object.keys(d.byNamespace)))].sort();
  const max = niceMax(Math.max(0, ...props.days.map(d => d.costUsd)));
  const tickLabel = (t: number) =>
    max >= 10 ? `$${Math.round(t).toLocaleString('en-US')}` : `$${t.toFixed(t === 0 ? 0 : 2)}`;
  // room for the longest y label ("$1,000") at about 0.6 em a character
  const LEFT = 6 + Math.ceil(LABEL_PX * 0.62 * Math.max(...[0, max / 2, max].map(t => tickLabel(t).length)));
  const plotW = WIDTH - LEFT - 2;
  const plotH = HEIGHT - TOP - BOTTOM;
  const slot = plotW / n;
  const barW = Math.max(1, slot * 0.72);
  const y = (v: number) => TOP + plotH - (plotH * v) / max;
  const bars: JSX.Element[] = [];
  for (let i = 0; i < n; i++) {
    const date = `${props.month}-${String(i + 1).padStart(2, '0')}`;
    const d = byDate.get(date);
    if (!d || d.costUsd <= 0) {
      continue;
    }
    let base = 0;
    const title = `${date}: ${usd(d.costUsd)} · ${d.gpuHours.toFixed(2)} GPU-h` +
      teams.filter(t => d.byNamespace[t]).map(t => `\n${t}: ${usd(d.byNamespace[t])}`).join('');
    bars.push(
      <g key={date} data-date={date} data-usd={d.costUsd.toFixed(2)}>
        <title>{title}</title>
        {teams.map((t, k) => {
          const v = d.byNamespace[t] ?? 0;
          if (v <= 0) {
            return null;
          }
          const rect = (
            <rect key={t} x={LEFT + i * slot + (slot - barW) / 2} y={y(base + v)} width={barW}
              height={Math.max(0.5, y(base) - y(base + v))} fill={COLOURS[k % COLOURS.length]} />
          );
          base += v;
          return rect;
        })}
      </g>
    );
  }
  const ticks = [0, max / 2, max];
  return (
    <div className="jp-gpuqueue-chart" ref={ref}>
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} width={WIDTH} height={HEIGHT} role="img"
        aria-label={`Daily spend in ${props.month}`}>
        {ticks.map(t => (
          <g key={t}>
            <line x1={LEFT} x2={WIDTH - 2} y1={y(t)} y2={y(t)} className="jp-gpuqueue-chart-grid" />
            <text x={LEFT - 4} y={y(t) + 4} textAnchor="end" className="jp-gpuqueue-chart-label">
              {tickLabel(t)}
            </text>
          </g>
        ))}
        {bars}
        {[1, 8, 15, 22, n].map(day => (
          <text key={day} x={day === n ? WIDTH - 1 : LEFT + (day - 0.5) * slot} y={HEIGHT - 5}
            textAnchor={day === n ? 'end' : 'middle'}
            className="jp-gpuqueue-chart-label">{day}</text>
        ))}
      </svg>
      {teams.length > 1 && (
        <div className="jp-gpuqueue-chart-legend">
          {teams.map((t, k) => (
            <span key={t}>
              <span className="jp-gpuqueue-chart-swatch" style={{ background: COLOURS[k % COLOURS.length] }} />
              {t}
            </span>
          ))}
        </div>
      )}
    </div>
  );
}
