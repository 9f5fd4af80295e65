/**
 * Import and export of the whole configuration as Kueue YAML. "Validate" is a dry run on the
 * server; "Import" replaces the configuration. Errors name the document, object, field and reason.
 */
import * as React from 'react';
import { Dialog, showDialog } from '@jupyterlab/apputils';

import { IImportResult } from '../../api';
import { QueueModel } from '../../model';

export function YamlPanel(props: {
  model: QueueModel;
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  const { model } = props;
  const [text, setText] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  const [result, setResult] = React.useState<IImportResult | null>(null);
  const [busy, setBusy] = React.useState(false);

  const load = async () => {
    setError(null);
    setResult(null);
    try {
      setText(await model.client.exportKueue());
    } catch (err) {
      setError((err as Error).message);
    }
  };

  const download = () => {
    const blob = new Blob([text], { type: 'application/yaml' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = 'gpuqueue-kueue.yaml';
    a.click();
    URL.revokeObjectURL(a.href);
  };

  const send = async (dryRun: boolean) => {
    if (!dryRun) {
      const answer = await showDialog({
        title: 'Replace the whole queue configuration?',
        body:
          'Every ResourceFlavor, ClusterQueue, Cohort, LocalQueue and priority class is replaced by ' +
          'this YAML. Running jobs keep their admission; the change is in the audit log.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Import' })]
      });
      if (!answer.button.accept) {
        return;
      }
    }
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      const r = await model.client.importKueue(text, dryRun);
      setResult(r);
      if (!dryRun) {
        await props.onApplied('Import');
      }
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };

  const summary = result
    ? Object.entries(result.summary)
        .filter(([, n]) => n > 0)
        .map(([k, n]) => `${n} ${k}`)
        .join(', ')
    : '';
  return (
    <div className="jp-gpuqueue-admin-section jp-gpuqueue-form">
      <div className="jp-gpuqueue-actions">
        <button type="button" className="jp-mod-styled" data-action="export" onClick={() => void load()}>
          Load current
        </button>
        <button type="button" className="jp-mod-styled" disabled={!text} onClick={download}>
          Download
        </button>
      </div>
      <textarea
        className={`jp-mod-styled jp-gpuqueue-admin-yaml ${error ? 'jp-mod-invalid' : ''}`}
        aria-label="Kueue YAML"
        spellCheck={false}
        value={text}
        placeholder="Paste Kueue YAML (ResourceFlavors, ClusterQueues, LocalQueues, priority classes…) or load the current configuration"
        onChange={e => {
          setText(e.target.value);
          setError(null);
          setResult(null);
        }}
      />
      {error && (
        <div className="jp-gpuqueue-field-error" data-field="yaml" role="alert">
          {error}
        </div>
      )}
      {result && (
        <div className="jp-gpuqueue-muted" role="status">
          {result.dryRun ? 'Valid: ' : 'Imported: '}
          {summary}
          {result.ignored.length ? `; ignored ${result.ignored.join(', ')}` : ''}
        </div>
      )}
      <div className="jp-gpuqueue-actions">
        <button
          type="button"
          className="jp-mod-styled"
          disabled={!text.trim() || busy}
          onClick={() => void send(true)}
        >
          Validate
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-warn"
          disabled={!text.trim() || busy}
          onClick={() => void send(false)}
          title="Replaces the whole configuration"
        >
          Import (replace all)
        </button>
      </div>
    </div>
  );
}
