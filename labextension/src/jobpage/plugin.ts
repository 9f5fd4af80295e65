/**
 * The job page plugin: command `gpuqueue:open-job` (args `{namespace, name}`) opens a job's page
 * in the main area (one per job; a second call activates it), restored with the layout; the job
 * cards' names open it; "Clone into the form" shows the panel.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { WidgetTracker } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { GpuQueueClient } from '../api';
import { QueueModel } from '../model';
import { PANEL_ID } from '../widget';
import { JobPageWidget } from './JobPage';
import { formPrefillRequested, setJobPageOpener } from './opener';

export const OPEN_JOB_COMMAND = 'gpuqueue:open-job';

/** The sidebar panel's model (one event stream for the whole page), when the panel exists. */
export function findQueueModel(app: JupyterFrontEnd): QueueModel | null {
  const shell = app.shell as JupyterFrontEnd.IShell & {
    widgets?: (area?: string) => IterableIterator<Widget>;
  };
  if (typeof shell.widgets !== 'function') {
    return null;
  }
  for (const w of shell.widgets('left')) {
    if (w.id === PANEL_ID && (w as any).model instanceof QueueModel) {
      return (w as any).model as QueueModel;
    }
  }
  return null;
}

export const jobPagePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuqueue:job-page',
  description: "A GPU job's page: timeline, log, cost by run, GPU utilisation, resubmit.",
  autoStart: true,
  optional: [ILayoutRestorer],
  activate: (app: JupyterFrontEnd, restorer: ILayoutRestorer | null) => {
    const tracker = new WidgetTracker<JobPageWidget>({ namespace: 'gpuqueue-job' });
    let client: GpuQueueClient | null = null;

    app.commands.addCommand(OPEN_JOB_COMMAND, {
      label: args =>
        args.name ? `GPU job ${args.namespace}/${args.name}` : "GPU Queue: Open a job's page",
      caption: "A GPU job's timeline, log, cost by run and GPU utilisation",
      execute: args => {
        const namespace = String(args.namespace ?? '');
        const name = String(args.name ?? '');
        if (!namespace || !name) {
          throw new Error(`${OPEN_JOB_COMMAND} needs {namespace, name}`);
        }
        const id = JobPageWidget.idFor(namespace, name);
        const open = tracker.find(w => w.id === id);
        if (open) {
          app.shell.activateById(id);
          return open;
        }
        const model = findQueueModel(app);
        model?.start();
        client = model?.client ?? client ?? new GpuQueueClient(app.serviceManager.serverSettings);
        const widget = new JobPageWidget({ client, model, namespace, name });
        void tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        return widget;
      }
    });

    if (restorer) {
      void restorer.restore(tracker, {
        command: OPEN_JOB_COMMAND,
        args: w => ({ namespace: w.namespace, name: w.jobName }),
        name: w => `${w.namespace}/${w.jobName}`
      });
    }

    setJobPageOpener(ref => {
      void app.commands.execute(OPEN_JOB_COMMAND, { ...ref });
    });
    // "Clone into the form": bring the panel, whose form takes the copy, into view.
    formPrefillRequested.requested.connect(() => {
      app.shell.activateById(PANEL_ID);
    });
  }
};
