/**
 * USD per UTC day of a month as an SVG bar chart (days not yet reached are left empty). Each bar
 * stacks the teams' spend in a stable colour per team; hovering a bar shows the day's figures.
 */
import * as React from 'react';

import { IDailySpend, usd } from './costsApi';

const WIDTH = 300;
const HEIGHT = 110;
const LEFT = 34;
const BOTTOM = 16;
const TOP = 6;
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

export function DailyChart(props: { days: IDailySpend[]; month: string }): JSX.Element {
  const n = daysIn(props.month);
  const byDate = new Map(props.days.map(d => [d.date, d]));
  const teams = [...new Set(props.days.flatMap(d => Object.keys(d.byNamespace)))].sort();
  const max = niceMax(Math.max(0, ...props.days.map(d => d.costUsd)));
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
    <div className="jp-gpuqueue-chart">
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={`Daily spend in ${props.month}`}>
        {ticks.map(t => (
          <g key={t}>
            <line x1={LEFT} x2={WIDTH - 2} y1={y(t)} y2={y(t)} className="jp-gpuqueue-chart-grid" />
            <text x={LEFT - 3} y={y(t) + 3} textAnchor="end" className="jp-gpuqueue-chart-label">
              {max >= 10 ? `$${Math.round(t)}` : `$${t.toFixed(t === 0 ? 0 : 2)}`}
            </text>
          </g>
        ))}
        {bars}
        {[1, 8, 15, 22, n].map(day => (
          <text key={day} x={LEFT + (day - 0.5) * slot} y={HEIGHT - 4} textAnchor="middle"
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
