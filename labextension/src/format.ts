/**
 * Pure helpers: shell-like argv splitting, durations, money, and the client-side cost ticker.
 */
import { FINISHED_STATES, IEstimate, IPrices, IWorkload } from './api';

/**
 * Split a command line into an argv list the way a POSIX shell would for words and quotes
 * (no expansion, no operators): `python train.py --name "a b"` → [python, train.py, --name, a b].
 * Throws an Error for an unterminated quote.
 */
export function shellSplit(line: string): string[] {
  const out: string[] = [];
  let current = '';
  let inWord = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") {
        quote = null;
      } else {
        current += c;
      }
    } else if (quote === '"') {
      if (c === '"') {
        quote = null;
      } else if (c === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) {
        current += line[++i];
      } else {
        current += c;
      }
    } else if (c === '$' && line[i + 1] === "'") {
      // bash's ANSI-C quoting, $'…\n…': how a word with a line break is written on one line
      // (cloneFormFields); the form's command field is an <input>, which drops line breaks
      const [word, end] = ansiCWord(line, i + 2);
      current += word;
      i = end;
      inWord = true;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === '\\' && i + 1 < line.length) {
      current += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) {
        out.push(current);
        current = '';
        inWord = false;
      }
    } else {
      current += c;
      inWord = true;
    }
  }
  if (quote) {
    throw new Error(`unterminated ${quote} quote`);
  }
  if (inWord) {
    out.push(current);
  }
  return out;
}

const ANSI_C_ESCAPES: Record<string, string> = {
  n: '\n', t: '\t', r: '\r', a: '\x07', b: '\b', e: '\x1b', E: '\x1b', f: '\f', v: '\v',
  '\\': '\\', "'": "'", '"': '"', '?': '?'
};

/**
 * The word of a `$'…'` quote whose text starts at `start`: its escapes (`\n`, `\t`, `\\`, `\'`,
 * `\xHH`, …) as bash reads them; returns the word and the index of the closing quote. Throws
 * an Error when it is not closed.
 */
function ansiCWord(line: string, start: number): [string, number] {
  let word = '';
  for (let i = start; i < line.length; i++) {
    const c = line[i];
    if (c === "'") {
      return [word, i];
    }
    if (c !== '\\' || i + 1 >= line.length) {
      word += c;
      continue;
    }
    const e = line[++i];
    const hex = e === 'x' ? /^[0-9A-Fa-f]{1,2}/.exec(line.slice(i + 1)) : null;
    if (hex) {
      word += String.fromCharCode(parseInt(hex[0], 16));
      i += hex[0].length;
    } else {
      word += ANSI_C_ESCAPES[e] ?? `\\${e}`;
    }
  }
  throw new Error("unterminated $' quote");
}

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "10m" → 600, "1h30m" → 5400, "90" → 90 (seconds); null when malformed or ≤ 0. */
export function parseDuration(text: string): number | null {
  const t = text.trim().toLowerCase();
  if (/^\d+(\.\d+)?$/.test(t)) {
    const v = parseFloat(t);
    return v > 0 ? v : null;
  }
  const re = /(\d+(?:\.\d+)?)\s*([smhd])/g;
  let total = 0;
  let consumed = '';
  let m: RegExpExecArray | null;
  while ((m = re.exec(t)) !== null) {
    total += parseFloat(m[1]) * UNIT_SECONDS[m[2]];
    consumed += m[0];
  }
  if (consumed.replace(/\s/g, '') !== t.replace(/\s/g, '') || total <= 0) {
    return null;
  }
  return total;
}

/** 600 → "10 min", 5400 → "1 h 30 min", 45 → "45 s", 90061 → "1 d 1 h". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (d > 0) {
    return h ? `${d} d ${h} h` : `${d} d`;
  }
  if (h > 0) {
    return m ? `${h} h ${m} min` : `${h} h`;
  }
  return sec && m < 10 ? `${m} min ${sec} s` : `${m} min`;
}

/**
 * A time of day in the browser's locale, the one format of the whole panel (issue 34 item 10:
 * "02:00" stood next to "2:00 AM"): "2:05 PM" in en-US, "14:05" in de; `withSeconds` adds them
 * ("2:05:09 PM") where events seconds apart must be told apart (a job's timeline).
 */
export function formatTime(epochSeconds: number, withSeconds = false): string {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], {
    hour: 'numeric',
    minute: '2-digit',
    ...(withSeconds ? { second: '2-digit' } : {})
  });
}

/** {@link formatTime}, after the locale's date where it is not today: "Nov 27, 2:05 PM". */
export function formatDateTime(epochSeconds: number, withSeconds = false, nowMs: number = Date.now()): string {
  const at = new Date(epochSeconds * 1000);
  const time = formatTime(epochSeconds, withSeconds);
  if (at.toDateString() === new Date(nowMs).toDateString()) {
    return time;
  }
  const sameYear = at.getFullYear() === new Date(nowMs).getFullYear();
  const day = at.toLocaleDateString([], { day: 'numeric', month: 'short', ...(sameYear ? {} : { year: 'numeric' }) });
  return `${day}, ${time}`;
}

/** A running clock: 75 → "1:15", 3725 → "1:02:05". */
export function formatClock(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const pad = (n: number) => String(n).padStart(2, '0');
  return h > 0 ? `${h}:${pad(m)}:${pad(sec)}` : `${m}:${pad(sec)}`;
}

/**
 * USD to the cent: "$0.00" for nothing, "< $0.01" for a cost above zero that rounds to no cent
 * (a job in its first second, one that failed at once), "$1,234.50" with thousands separators.
 */
export function formatUsd(value: number | null | undefined): string {
  const v = value ?? 0;
  if (!isFinite(v)) {
    return '–';
  }
  if (v > 0 && v < 0.005) {
    return '< $0.01';
  }
  const text = Math.abs(v).toLocaleString('en-US', {
    minimumFractionDigits: 2,
    maximumFractionDigits: 2
  });
  return v < 0 && text !== '0.00' ? `-$${text}` : `$${text}`;
}

/** "nvidia.com/mig-1g.10gb" → "1g.10gb"; null for whole GPUs. */
export function migProfileOf(resource: string): string | null {
  const prefix = 'nvidia.com/mig-';
  return resource.startsWith(prefix) ? resource.slice(prefix.length) : null;
}

/** USD per GPU-hour of a flavor from the price list (the default for unknown flavors). */
export function pricePerGpuHour(prices: IPrices | null, flavor: string): number | null {
  if (!prices) {
    return null;
  }
  const p = prices.flavors[flavor];
  return typeof p === 'number' ? p : prices.default;
}

/**
 * The one-line cost estimate of the submit form:
 * "≈ $0.37 (1 × nvidia-a100 for 10 min at $2.21/GPU-h)".
 */
export function describeEstimate(e: IEstimate, prices: IPrices | null): string {
  const mig = migProfileOf(e.resource);
  const what = mig
    ? `${e.quantity} × ${mig} slice of ${e.flavor}`
    : `${e.quantity} × ${e.flavor}`;
  // The rate the amount is computed with (a MIG slice is billed as its share of a GPU, whose
  // price may not be its flavor's list price): amount ÷ GPU-hours, so label and amount agree.
  const hours = e.maxRuntimeSeconds / 3600;
  const rate =
    e.gpuHours > 0
      ? (e.pricePerHourUsd * hours) / e.gpuHours
      : (pricePerGpuHour(prices, e.flavor) ?? e.pricePerHourUsd);
  // flavor "any": the flavor the queue would pick now, and the range over those it could get
  const range = e.costRangeUsd;
  const span =
    range && (e.eligibleFlavors?.length ?? 0) > 1 && range[1] - range[0] >= 0.005
      ? `; ${formatUsd(range[0])}–${formatUsd(range[1])} by flavor`
      : '';
  return `≈ ${formatUsd(e.costUsd)} (${what} for ${formatDuration(e.maxRuntimeSeconds)} at ${formatUsd(rate)}/GPU-h${span})`;
}

export function isFinished(w: IWorkload): boolean {
  return FINISHED_STATES.includes(w.state);
}

/**
 * Cost so far, ticking between events. `receivedAt` is the client time (ms) at which this copy of
 * the workload arrived; its `costUsd` was the cost then. While running, add the price per hour
 * for the time since, and never show less than `pricePerHourUsd × (now − startedAt)` (the current
 * run alone), which covers a server that reports costs only once a job ends.
 */
export function costSoFar(w: IWorkload, receivedAt: number, nowMs: number): number {
  const base = w.costUsd ?? 0;
  if (w.state !== 'Running' || !w.pricePerHourUsd) {
    return base;
  }
  const perSecond = w.pricePerHourUsd / 3600;
  const sinceEvent = base + perSecond * Math.max(0, (nowMs - receivedAt) / 1000);
  const thisRun = w.startedAt ? perSecond * Math.max(0, nowMs / 1000 - w.startedAt) : 0;
  return Math.max(sinceEvent, thisRun);
}

/** The flavors assigned at admission ("nvidia-h100"), or null before admission. */
export function assignedFlavors(w: IWorkload): string[] {
  const out = new Set<string>();
  for (const psa of w.admission?.podSetAssignments ?? []) {
    for (const f of Object.values(psa.flavors ?? {})) {
      out.add(f);
    }
  }
  return [...out];
}

/** "GPU 0, 1" / "MIG-3f2a…" / null: the devices given to the job. */
export function assignedDevices(w: IWorkload): string | null {
  const placements = w.placement ?? [];
  const devices: string[] = [];
  let mig = false;
  for (const p of placements) {
    if (p.resource && p.resource.startsWith('nvidia.com/mig-')) {
      mig = true;
    }
    devices.push(...p.devices);
  }
  if (devices.length === 0) {
    return w.visibleDevices ? `CUDA_VISIBLE_DEVICES=${w.visibleDevices}` : null;
  }
  const node = placements.length === 1 && placements[0].node ? ` on ${placements[0].node}` : '';
  if (mig || devices.some(d => d.startsWith('MIG-'))) {
    // "MIG 1g.10gb on node-a (MIG-3f2a9c1e…)": the profile first; a slice's UUID is only told apart by its start.
    const profiles = [
      ...new Set(placements.map(p => migProfileOf(p.resource ?? '')).filter((x): x is string => !!x))
    ];
    const what = profiles.length > 0 ? `MIG ${profiles.join(', ')}` : 'MIG';
    const ids = devices.map(d => (d.length > 13 ? `${d.slice(0, 12)}…` : d)).join(', ');
    return `${devices.length > 1 ? `${devices.length} × ` : ''}${what}${node} (${ids})`;
  }
  return `GPU ${devices.join(', ')}${node}`;
}

/** What the workload asks for: "4 × GPU", "1 × MIG 1g.10gb". */
export function describeRequest(w: IWorkload): string {
  const parts: string[] = [];
  for (const ps of w.podSets ?? []) {
    for (const [res, q] of Object.entries(ps.requests ?? {})) {
      const mig = migProfileOf(res);
      const count = ps.count > 1 ? `${ps.count} pods × ` : '';
      if (mig) {
        parts.push(`${count}${q} × MIG ${mig}`);
      } else if (res === 'nvidia.com/gpu') {
        parts.push(`${count}${q} GPU${q === '1' ? '' : 's'}`);
      }
    }
  }
  return parts.join(', ');
}

/** A short relative time: "12 s ago", "3 min ago". */
export function ago(epochSeconds: number, nowMs: number): string {
  const s = nowMs / 1000 - epochSeconds;
  if (s < 5) {
    return 'just now';
  }
  return `${formatDuration(s)} ago`;
}
