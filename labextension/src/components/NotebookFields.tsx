/**
 * The submit form's notebook fields (issue 37): the notebook's path and its parameter rows
 * (papermill parameters, injected after the cell tagged `parameters`).
 */
import * as React from 'react';

import { IParameterRow } from '../notebookJob';

interface IProps {
  notebook: string;
  onNotebook: (path: string) => void;
  rows: IParameterRow[];
  onRows: (rows: IParameterRow[]) => void;
  errors: Record<string, string>;
}

export function NotebookFields(props: IProps): JSX.Element {
  const { rows, onRows, errors } = props;
  const error = (field: string) =>
    errors[field] ? (
      <div className="jp-gpuqueue-field-error" data-field={field} role="alert">
        {errors[field]}
      </div>
    ) : null;
  const setRow = (i: number, row: IParameterRow) =>
    onRows(rows.map((r, j) => (j === i ? row : r)));
  return (
    <>
      <label className="jp-gpuqueue-field">
        <span>Notebook</span>
        <input
          id="jp-gpuqueue-notebook"
          name="notebook"
          className={`jp-mod-styled ${errors.notebook || errors.kernel ? 'jp-mod-invalid' : ''}`}
          placeholder="examples/train_digits.ipynb"
          value={props.notebook}
          spellCheck={false}
          onChange={e => props.onNotebook(e.target.value)}
        />
        {error('notebook')}
        {error('kernel')}
      </label>
      <fieldset className="jp-gpuqueue-field jp-gpuqueue-parameters" data-field="parameters">
        <legend>Parameters</legend>
        {rows.map((row, i) => (
          <div className="jp-gpuqueue-parameter" key={i} data-parameter={row.name}>
            <input
              className="jp-mod-styled jp-gpuqueue-parameter-name"
              aria-label="Parameter name"
              placeholder="name"
              value={row.name}
              spellCheck={false}
              onChange={e => setRow(i, { ...row, name: e.target.value })}
            />
            <span>=</span>
            <input
              className="jp-mod-styled jp-gpuqueue-parameter-value"
              aria-label={`Value of ${row.name || 'the parameter'}`}
              placeholder="value"
              value={row.value}
              spellCheck={false}
              onChange={e => setRow(i, { ...row, value: e.target.value })}
            />
            <button
              type="button"
              className="jp-mod-styled jp-gpuqueue-parameter-remove"
              title="Remove this parameter"
              aria-label={`Remove ${row.name || 'parameter'}`}
              onClick={() => onRows(rows.filter((_, j) => j !== i))}
            >
              ×
            </button>
          </div>
        ))}
        <button
          type="button"
          className="jp-mod-styled jp-gpuqueue-parameter-add"
          onClick={() => onRows([...rows, { name: '', value: '' }])}
        >
          Add parameter
        </button>
        <div className="jp-gpuqueue-muted">
          Injected by papermill after the cell tagged <code>parameters</code>; the executed notebook
          is saved next to it as <code>&lt;name&gt;-&lt;job&gt;.ipynb</code>.
        </div>
        {error('parameters')}
      </fieldset>
    </>
  );
}
