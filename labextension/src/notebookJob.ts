/**
 * Notebook jobs (issue 37): a notebook submitted as a GPU job, run by papermill with parameters.
 *
 * - the parameter rows of the submit form and their values, read as papermill's `-p` reads them;
 * - the parameters cell of a notebook (the cell tagged `parameters`): its names and defaults fill
 *   the form's rows;
 * - the progress and failure text of a notebook job's view ("cell 3 of 7");
 * - `openFile(path)`: the job page and the card open the executed notebook in JupyterLab (the
 *   panel's plugin registers the opener, as jobpage/opener.ts does for job pages).
 */
import { IWorkload } from './api';

/** The `notebook` part of a workload's view (docs/rest-api.md). */
export interface INotebookView {
  input: string;
  output: string;
  outputDir?: string | null;
  parameters: Record<string, unknown>;
  kernel?: string | null;
  cell?: number | null;
  cells?: number | null;
  failedCell?: number | null;
  error?: string | null;
  note?: string | null;
}

/** One parameter row of the form: a name and the value as typed. */
export interface IParameterRow {
  name: string;
  value: string;
}

export function notebookOf(w: IWorkload): INotebookView | null {
  const nb = (w as any).notebook;
  return nb && typeof nb === 'object' && typeof nb.input === 'string' ? (nb as INotebookView) : null;
}

/** A typed value as papermill's `-p` reads it: int, float, True/False/None (any case), JSON lists
 * and objects, quoted strings, else the text itself. */
export function parameterValue(text: string): unknown {
  const t = text.trim();
  if (/^[-+]?\d+$/.test(t)) {
    return parseInt(t, 10);
  }
  if (t !== '' && !isNaN(Number(t)) && /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) {
    return Number(t);
  }
  const lower = t.toLowerCase();
  if (lower === 'true' || lower === 'false') {
    return lower === 'true';
  }
  if (lower === 'none' || lower === 'null') {
    return null;
  }
  if (/^[[{"]/.test(t)) {
    try {
      return JSON.parse(t);
    } catch {
      // not JSON: the text itself
    }
  }
  const quoted = /^'(.*)'$/.exec(t);
  return quoted ? quoted[1] : t;
}

/** A value shown in a row (the inverse of `parameterValue` for what it produces). */
export function parameterText(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  if (value === null) {
    return 'None';
  }
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  return JSON.stringify(value);
}

/** The request's `parameters` from the rows, or the errors (by row index) that prevent it. */
export function parametersFromRows(rows: IParameterRow[]): {
  parameters: Record<string, unknown>;
  error: string | null;
} {
  const parameters: Record<string, unknown> = {};
  for (const row of rows) {
    const name = row.name.trim();
    if (!name && !row.value.trim()) {
      continue;
    }
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      return { parameters, error: `"${name}" is not a Python name` };
    }
    parameters[name] = parameterValue(row.value);
  }
  return { parameters, error: null };
}

export function rowsFromParameters(parameters: Record<string, unknown> | undefined): IParameterRow[] {
  return Object.entries(parameters ?? {}).map(([name, value]) => ({
    name,
    value: parameterText(value)
  }));
}

/** The names and default values of the notebook's cell tagged `parameters` ("lr = 0.001"),
 * from the notebook's JSON (the contents API's `content`); [] when it has none. */
export function parametersCellRows(notebook: any): IParameterRow[] {
  const cells: any[] = Array.isArray(notebook?.cells) ? notebook.cells : [];
  const cell = cells.find(
    c => c?.cell_type === 'code' && Array.isArray(c?.metadata?.tags) && c.metadata.tags.includes('parameters')
  );
  if (!cell) {
    return [];
  }
  const source = Array.isArray(cell.source) ? cell.source.join('') : String(cell.source ?? '');
  const rows: IParameterRow[] = [];
  for (const line of source.split('\n')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=\s*(.*?)\s*(#.*)?$/.exec(line);
    if (m && m[2] !== '') {
      rows.push({ name: m[1], value: m[2] });
    }
  }
  return rows;
}

/** "cell 3 of 7", "failed at cell 3 of 7: ZeroDivisionError: …", or null. */
export function notebookProgressText(w: IWorkload): string | null {
  const nb = notebookOf(w);
  if (!nb) {
    return null;
  }
  if (nb.failedCell) {
    return `failed at cell ${nb.failedCell} of ${nb.cells ?? '?'}${nb.error ? `: ${nb.error}` : ''}`;
  }
  if (nb.cell && w.state === 'Running') {
    return `cell ${nb.cell} of ${nb.cells ?? '?'}`;
  }
  if (w.state === 'Succeeded' && nb.cells) {
    return `all ${nb.cells} cells ran`;
  }
  return null;
}

let fileOpener: ((path: string) => void) | null = null;

/** The panel's plugin registers how a file is opened (`docmanager:open`). */
export function setFileOpener(fn: ((path: string) => void) | null): void {
  fileOpener = fn;
}

export function canOpenFiles(): boolean {
  return fileOpener !== null;
}

export function openFile(path: string): void {
  fileOpener?.(path);
}
