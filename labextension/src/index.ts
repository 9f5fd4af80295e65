/**
 * jupyter-gpuqueue: the "GPU Queue" JupyterLab panel.
 *
 * - left sidebar panel `jp-gpuqueue-panel`;
 * - commands "GPU Queue: Open panel" and "GPU Queue: Submit file as GPU job" in the palette;
 * - "Submit as GPU job…" in the file browser's context menu on `.py` files (schema/plugin.json);
 * - "Submit notebook as GPU job…" on the notebook toolbar and on `.ipynb` files (notebookJob.ts).
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { GpuQueueClient } from './api';
import { watchLeaseEvictions } from './leaseWarning';
import { gpuQueueIcon } from './icon';
import { QueueModel } from './model';
import { addStatusBarItem } from './statusbar';
import { GpuQueuePanel, PANEL_ID } from './widget';
import { jobPagePlugin } from './jobpage/plugin';
import { notificationsPlugin } from './notifications';
import { IParameterRow, parametersCellRows, setFileOpener } from './notebookJob';

const PLUGIN_ID = 'jupyter-gpuqueue:plugin';

export namespace CommandIDs {
  export const open = 'gpuqueue:open';
  export const submitFile = 'gpuqueue:submit-file';
  export const submitNotebook = 'gpuqueue:submit-notebook';
}

/**
 * "Submit notebook as GPU job…" (the notebook toolbar, the file browser's context menu on
 * .ipynb files, the palette): saves the notebook if it is open with changes, reads the names and
 * defaults of its `parameters` cell, and opens the panel's form on it. Also registers how the
 * job card and page open the executed notebook.
 */
function addSubmitNotebookCommand(
  app: JupyterFrontEnd,
  browser: IDefaultFileBrowser | null,
  panel: GpuQueuePanel
): void {
  setFileOpener(path => void app.commands.execute('docmanager:open', { path }));
  const isNb = (p: string | undefined) => !!p && p.toLowerCase().endsWith('.ipynb');
  app.commands.addCommand(CommandIDs.submitNotebook, {
    label: args =>
      args.isPalette ? 'GPU Queue: Submit notebook as GPU job' : 'Submit notebook as GPU job…',
    caption: 'Run this notebook as a GPU queue job (papermill, with parameters)',
    icon: args => (args.isPalette || args.isMenu ? undefined : gpuQueueIcon),
    execute: async args => {
      const current = app.shell.currentWidget as any;
      let path: string | null = typeof args.path === 'string' ? (args.path as string) : null;
      if (!path && args.isMenu) {
        const selected = browser?.selectedItems().next();
        path = selected && !selected.done && isNb(selected.value?.path) ? selected.value.path : null;
      }
      if (!path && isNb(current?.context?.path)) {
        path = current.context.path as string;
      }
      if (!path) {
        app.shell.activateById(PANEL_ID);
        return;
      }
      if (current?.context?.path === path && current.context.model?.dirty) {
        await current.context.save(); // the job runs the file as saved
      }
      let rows: IParameterRow[] = [];
      try {
        const file = await app.serviceManager.contents.get(path, { content: true, type: 'notebook' });
        rows = parametersCellRows(file.content);
      } catch (reason) {
        console.warn('jupyter-gpuqueue: cannot read the notebook', reason);
      }
      panel.prefillNotebook(serverPath(path), rows);
      app.shell.activateById(PANEL_ID);
    }
  });
}

/** The path of a `.py` file the user means: the file browser selection, else the current editor. */
function pickPythonFile(
  app: JupyterFrontEnd,
  browser: IDefaultFileBrowser | null,
  fromContextMenu: boolean
): string | null {
  const isPy = (p: string | undefined) => !!p && p.toLowerCase().endsWith('.py');
  const selected = browser?.selectedItems().next();
  const fromBrowser =
    selected && !selected.done && selected.value && isPy(selected.value.path)
      ? selected.value.path
      : null;
  if (fromContextMenu) {
    return fromBrowser;
  }
  const current = app.shell.currentWidget as any;
  const editorPath: string | undefined = current?.context?.path;
  if (isPy(editorPath)) {
    return editorPath!;
  }
  return fromBrowser;
}

/** Paths in the file browser may carry a drive prefix ("Drive:dir/a.py"); the API wants root-relative. */
function serverPath(path: string): string {
  const i = path.indexOf(':');
  return i >= 0 && !path.slice(0, i).includes('/') ? path.slice(i + 1) : path;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'A fair, quota-aware GPU queue with Kueue semantics: submit, follow and pay for GPU jobs.',
  autoStart: true,
  optional: [ICommandPalette, ILayoutRestorer, IDefaultFileBrowser, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    browser: IDefaultFileBrowser | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    const client = new GpuQueueClient(app.serviceManager.serverSettings);
    const model = new QueueModel(client);
    const panel = new GpuQueuePanel(model);
    panel.title.icon = gpuQueueIcon;
    panel.title.caption = 'GPU Queue';
    app.shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, 'jupyter-gpuqueue');
    }
    // Warn before a preempted notebook GPU lease is released (leaseWarning.ts).
    watchLeaseEvictions(model, client);
    // "GPU · #3 · 2 running · $4.20" in the status bar (statusbar.tsx).
    addStatusBarItem(app, model, PANEL_ID);

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = () => {
            const seconds = settings.get('pollIntervalSeconds').composite as number;
            if (typeof seconds === 'number' && seconds > 0) {
              model.setPollInterval(seconds * 1000);
            }
          };
          apply();
          settings.changed.connect(apply);
        })
        .catch(reason => {
          console.warn('jupyter-gpuqueue: cannot load settings', reason);
        });
    }

    app.commands.addCommand(CommandIDs.open, {
      label: 'GPU Queue: Open panel',
      caption: 'Show the GPU Queue panel: submit jobs, follow them, see free GPUs',
      icon: args => (args.isPalette ? undefined : gpuQueueIcon),
      execute: () => {
        app.shell.activateById(PANEL_ID);
        // the keyboard user lands in the panel: its first control takes the focus
        window.requestAnimationFrame(() => {
          const node = document.getElementById(PANEL_ID);
          const first = node?.querySelector<HTMLElement>(
            'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), [tabindex="0"]'
          );
          (first ?? node)?.focus();
        });
      }
    });

    app.commands.addCommand(CommandIDs.submitFile, {
      label: args =>
        args.isPalette ? 'GPU Queue: Submit file as GPU job' : 'Submit as GPU job…',
      caption: 'Open the GPU Queue submit form on this Python file',
      icon: args => (args.isPalette ? undefined : gpuQueueIcon),
      execute: args => {
        const explicit = typeof args.path === 'string' ? (args.path as string) : null;
        const path = explicit ?? pickPythonFile(app, browser, !args.isPalette);
        if (path) {
          panel.prefillScript(serverPath(path));
        }
        app.shell.activateById(PANEL_ID);
      }
    });

    // Notebooks as GPU jobs (notebookJob.ts): the toolbar button, the file browser's menu.
    addSubmitNotebookCommand(app, browser, panel);

    if (palette) {
      for (const command of [CommandIDs.open, CommandIDs.submitFile, CommandIDs.submitNotebook]) {
        palette.addItem({ command, category: 'GPU Queue', args: { isPalette: true } });
      }
    }
  }
};

export default [plugin, jobPagePlugin, notificationsPlugin];
