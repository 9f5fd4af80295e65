/**
 * A notebook job's line on its card (issue 37): "Notebook train.ipynb · cell 3 of 7", the failing
 * cell and its error, what a preemption did, and a link that opens the executed notebook. While
 * the job runs, its view is fetched every few seconds (progress is no queue event).
 */
import * as React from 'react';

import { IWorkload } from '../api';
import { fetchWorkload } from '../jobpage/types';
import { QueueModel } from '../model';
import { canOpenFiles, notebookOf, notebookProgressText, openFile } from '../notebookJob';

const PROGRESS_MS = 2000;

export function NotebookLine(props: { w: IWorkload; model?: QueueModel | null }): JSX.Element | null {
  const { w, model } = props;
  const nb = notebookOf(w);
  const running = w.state === 'Running';
  React.useEffect(() => {
    if (!nb || !running || !model) {
      return;
    }
    let stopped = false;
    const timer = window.setInterval(async () => {
      const requestedAt = Date.now();
      try {
        const fresh = await fetchWorkload(model.client, w.namespace, w.name);
        if (!stopped) {
          model.upsert(fresh, requestedAt);
        }
      } catch {
        // the next tick, or the event stream, brings it
      }
    }, PROGRESS_MS);
    return () => {
      stopped = true;
      window.clearInterval(timer);
    };
  }, [w.namespace, w.name, running, !!nb, model]);
  if (!nb) {
    return null;
  }
  const progress = notebookProgressText(w);
  const started = w.startedAt != null;
  return (
    <div
      className={`jp-gpuqueue-notebook-line ${nb.failedCell ? 'jp-mod-error' : ''}`}
      data-notebook-cell={nb.cell ?? ''}
      data-notebook-cells={nb.cells ?? ''}
      data-notebook-failed-cell={nb.failedCell ?? ''}
    >
      <span title={nb.input}>Notebook {nb.input.split('/').pop()}</span>
      {progress && <span className="jp-gpuqueue-notebook-progress"> · {progress}</span>}
      {started && canOpenFiles() && (
        <>
          {' · '}
          <button
            type="button"
            className="jp-gpuqueue-link jp-gpuqueue-notebook-open"
            title={`Open ${nb.output}`}
            onClick={() => openFile(nb.output)}
          >
            executed notebook
          </button>
        </>
      )}
      {nb.note && <div className="jp-gpuqueue-muted">{nb.note}</div>}
    </div>
  );
}
