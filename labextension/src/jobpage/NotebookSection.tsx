/**
 * The notebook section of a notebook job's page (issue 37): the notebook and its parameters, the
 * cell being executed or the one that failed, "Open executed notebook", and "Resubmit with other
 * parameters" (fills the panel's form: the Notebook tab with these parameter rows).
 */
import * as React from 'react';

import { IWorkload, workloadKey } from '../api';
import { canOpenFiles, notebookOf, notebookProgressText, openFile, parameterText } from '../notebookJob';
import { formPrefillRequested } from './opener';
import { requestOf } from './types';

export function NotebookSection(props: { w: IWorkload }): JSX.Element | null {
  const { w } = props;
  const nb = notebookOf(w);
  const [note, setNote] = React.useState<string | null>(null);
  if (!nb) {
    return null;
  }
  const progress = notebookProgressText(w);
  const entries = Object.entries(nb.parameters ?? {});
  return (
    <section className="jp-gpuqueue-jobpage-section" data-section="notebook">
      <h2>Notebook</h2>
      <div>
        <code>{nb.input}</code> → <code data-notebook-output={nb.output}>{nb.output}</code>
        {nb.kernel ? ` (kernel ${nb.kernel})` : ''}
      </div>
      {progress && (
        <div
          className={nb.failedCell ? 'jp-gpuqueue-form-error' : 'jp-gpuqueue-notebook-progress'}
          data-notebook-progress={progress}
        >
          {progress}
        </div>
      )}
      {nb.note && <div className="jp-gpuqueue-jobpage-note">{nb.note}</div>}
      <div className="jp-gpuqueue-notebook-parameters">
        {entries.length === 0
          ? 'No parameters: the notebook ran with its own defaults.'
          : entries.map(([k, v]) => (
              <span key={k} data-parameter={k}>
                <code>
                  {k} = {parameterText(v)}
                </code>{' '}
              </span>
            ))}
      </div>
      <div className="jp-gpuqueue-jobpage-actions">
        {w.startedAt != null && canOpenFiles() && (
          <button
            type="button"
            className="jp-mod-styled jp-mod-accept jp-gpuqueue-open-executed"
            title={`Open ${nb.output} in JupyterLab`}
            onClick={() => openFile(nb.output)}
          >
            Open executed notebook
          </button>
        )}
        <button
          type="button"
          className="jp-mod-styled jp-mod-reject jp-gpuqueue-resubmit-parameters"
          title="Fill the panel's submit form with this notebook and its parameters, to change them"
          onClick={() => {
            formPrefillRequested.emit(requestOf(w), workloadKey(w));
            setNote("The GPU Queue panel's form now holds this notebook and its parameters.");
          }}
        >
          Resubmit with other parameters
        </button>
        {note && (
          <span className="jp-gpuqueue-jobpage-note" role="status">
            {note}
          </span>
        )}
      </div>
    </section>
  );
}
