/**
 * Hooks between the sidebar and the job page, without a dependency on the plugins' wiring:
 *
 * - `openJobPage(namespace, name)`: the job card calls it; the job page plugin registers the
 *   function that runs `gpuqueue:open-job`.
 * - `formPrefillRequested`: "Clone into the form" emits the SubmitRequest of a workload here; the
 *   panel's submit form listens (SubmitForm.tsx), and the `onFormPrefill` handler registered by
 *   the panel's plugin opens the sidebar.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { ISubmitRequest } from '../api';

export interface IJobRef {
  namespace: string;
  name: string;
}

let opener: ((ref: IJobRef) => void) | null = null;

export function setJobPageOpener(fn: ((ref: IJobRef) => void) | null): void {
  opener = fn;
}

export function canOpenJobPage(): boolean {
  return opener !== null;
}

export function openJobPage(namespace: string, name: string): void {
  opener?.({ namespace, name });
}

/** A request to fill the submit form with these fields (from "Clone into the form"). */
export interface ICloneRequest {
  request: ISubmitRequest;
  /** The workload it was cloned from ("team-a/train-x"). */
  from: string;
  /** Increases with every request, so that the same job can be cloned twice. */
  serial: number;
}

class CloneHub {
  get requested(): ISignal<this, ICloneRequest> {
    return this._requested;
  }
  /** The last request, for a form that mounts after it was made. */
  get last(): ICloneRequest | null {
    return this._last;
  }
  /**
   * Listen for requests (the submit form, while it is mounted); a form mounted later can read
   * `last`. Returns the function that stops listening (a React effect's cleanup).
   */
  listen(fn: (r: ICloneRequest) => void): () => void {
    const slot = (_: unknown, r: ICloneRequest) => fn(r);
    this._requested.connect(slot);
    this._listeners++;
    return () => {
      if (this._requested.disconnect(slot)) {
        this._listeners--;
      }
    };
  }
  /** Whether a form listens (the job page says so when none does). */
  get listening(): boolean {
    return this._listeners > 0;
  }
  emit(request: ISubmitRequest, from: string): ICloneRequest {
    this._last = { request, from, serial: ++this._serial };
    this._requested.emit(this._last);
    return this._last;
  }
  private _requested = new Signal<this, ICloneRequest>(this);
  private _last: ICloneRequest | null = null;
  private _listeners = 0;
  private _serial = 0;
}

/** Listen with `formPrefillRequested.requested.connect((_, r) => …)`. */
export const formPrefillRequested = new CloneHub();

/** The submit form's fields (SubmitForm.tsx state, all strings) for a cloned request. */
export interface ICloneFormFields {
  mode: 'command' | 'notebook';
  command: string;
  /** A notebook job: its notebook and parameters (the form's Notebook tab). */
  notebook?: string;
  parameters?: Record<string, unknown>;
  kind: 'gpu' | 'mig';
  gpus: string;
  migProfile: string;
  flavor: string;
  priorityClass: string;
  maxRuntime: string;
  localQueue: string;
}

/** Quote one argv word as a POSIX shell would read it back (format.ts's shellSplit). */
export function shellQuote(word: string): string {
  if (/[\x00-\x1f\x7f]/.test(word)) {
    // a line break (a `python -c` program) or another control character: bash's $'…', which
    // keeps it on the form's one-line command field and which shellSplit (format.ts) reads back
    const escaped = word.replace(/[\\'\x00-\x1f\x7f]/g, c =>
      c === '\n' ? '\\n' : c === '\t' ? '\\t' : c === '\\' || c === "'" ? `\\${c}`
        : `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`
    );
    return `$'${escaped}'`;
  }
  return word !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(word)
    ? word
    : `'${word.replace(/'/g, `'"'"'`)}'`;
}

/** "90m" / "2h" / "45s": the shortest exact duration for the form's max run time field. */
function durationText(seconds: number): string {
  const s = Math.max(1, Math.ceil(seconds));
  for (const [unit, n] of [['d', 86400], ['h', 3600], ['m', 60]] as Array<[string, number]>) {
    if (s % n === 0) {
      return `${s / n}${unit}`;
    }
  }
  return `${s}s`;
}

/**
 * The form's fields for a request cloned from a job: the hookup in SubmitForm.tsx is
 * `React.useEffect(() => formPrefillRequested.listen(r => { const f = cloneFormFields(r.request); setMode(f.mode); setCommand(f.command); … }), []);`
 */
export function cloneFormFields(r: ISubmitRequest): ICloneFormFields {
  return {
    mode: r.notebook ? 'notebook' : 'command',
    command: (r.command ?? []).map(shellQuote).join(' '),
    notebook: r.notebook,
    parameters: r.parameters,
    kind: r.migProfile ? 'mig' : 'gpu',
    gpus: String(r.gpus ?? 1),
    migProfile: r.migProfile ?? '',
    flavor: r.flavor ?? 'any',
    priorityClass: r.priorityClass ?? '',
    maxRuntime: r.maxRuntimeSeconds ? durationText(r.maxRuntimeSeconds) : '10m',
    localQueue: r.localQueue ?? ''
  };
}
