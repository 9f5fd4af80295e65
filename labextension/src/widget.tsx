/**
 * The "GPU Queue" sidebar panel: submit form, the user's jobs, availability, team queue.
 */
import * as React from 'react';
import { ReactWidget, refreshIcon } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';

import { IWorkload, workloadKey } from './api';
import { AdminView } from './components/admin/AdminView';
import { Availability, TeamQueue } from './components/Availability';
import { CostsView } from './components/costs/CostsView';
import { MigGrid } from './components/costs/MigGrid';
import { JobList } from './components/JobList';
import { IFormPrefill, SubmitForm } from './components/SubmitForm';
import { IParameterRow } from './notebookJob';
import { gpuQueueIcon } from './icon';
import { formPrefillRequested } from './jobpage/opener';
import { QueueModel } from './model';

export const PANEL_ID = 'jp-gpuqueue-panel';

function Section(props: {
  id: string;
  title: string;
  extra?: React.ReactNode;
  defaultOpen?: boolean;
  /** Keep the body mounted (hidden) while collapsed, so that what was typed in it survives. */
  keepMounted?: boolean;
  /** Opens the section whenever it changes (e.g. a job cloned into the form). */
  openRequest?: number;
  children: React.ReactNode;
}): JSX.Element {
  const [open, setOpen] = React.useState(props.defaultOpen ?? true);
  React.useEffect(() => {
    if (props.openRequest) {
      setOpen(true);
    }
  }, [props.openRequest]);
  const body = props.keepMounted ? (
    <div className="jp-gpuqueue-section-body" hidden={!open}>
      {props.children}
    </div>
  ) : (
    open && <div className="jp-gpuqueue-section-body">{props.children}</div>
  );
  return (
    <section className="jp-gpuqueue-section" data-section={props.id}>
      <header>
        <button
          type="button"
          className="jp-gpuqueue-section-toggle"
          aria-expanded={open}
          onClick={() => setOpen(!open)}
        >
          <span className={`jp-gpuqueue-caret ${open ? 'jp-mod-open' : ''}`} />
          {props.title}
        </button>
        {props.extra}
      </header>
      {body}
    </section>
  );
}

function PanelView(props: {
  model: QueueModel;
  prefillSignal: Signal<GpuQueuePanel, IFormPrefill>;
  initialPrefill: IFormPrefill | null;
}): JSX.Element {
  const { model } = props;
  const [, setVersion] = React.useState(0);
  const [prefill, setPrefill] = React.useState<IFormPrefill | null>(
    props.initialPrefill
  );
  const [highlight, setHighlight] = React.useState<string | null>(null);
  // "Clone into the form" (the job page): open the submit section; the form fills itself.
  const [cloneSerial, setCloneSerial] = React.useState(formPrefillRequested.last?.serial ?? 0);
  React.useEffect(() => formPrefillRequested.listen(r => setCloneSerial(r.serial)), []);

  React.useEffect(() => {
    const onChange = () => setVersion(v => v + 1);
    const onPrefill = (_: unknown, p: IFormPrefill) => setPrefill(p);
    model.changed.connect(onChange);
    props.prefillSignal.connect(onPrefill);
    return () => {
      model.changed.disconnect(onChange);
      props.prefillSignal.disconnect(onPrefill);
    };
  }, [model]);

  const info = model.info;
  const onSubmitted = (w: IWorkload) => setHighlight(workloadKey(w));
  const running = model.workloads.filter(e => e.workload.state === 'Running').length;
  const pending = model.workloads.filter(e => e.workload.state === 'Pending').length;
  const teams = info
    ? [...new Set(info.localQueues.map(q => q.namespace))].join(', ')
    : '';

  return (
    <div className="jp-gpuqueue">
      <div className="jp-gpuqueue-header">
        <gpuQueueIcon.react className="jp-gpuqueue-header-icon" tag="span" />
        <div className="jp-gpuqueue-title">
          <h2>GPU Queue</h2>
          {info && (
            <div className="jp-gpuqueue-muted">
              {info.user}
              {teams ? ` · ${teams}` : ''}
            </div>
          )}
        </div>
        <span
          className={`jp-gpuqueue-conn jp-gpuqueue-conn-${model.connection}`}
          title={
            model.connection === 'live'
              ? 'Live updates connected'
              : model.connection === 'connecting'
                ? 'Connecting to live updates…'
                : model.connection === 'gone'
                  ? 'This notebook server is gone (stopped, or its GPU lease ended): save your work elsewhere and start it again from the hub'
                  : 'Live updates disconnected; reconnecting'
          }
        >
          {model.connection === 'live'
            ? 'live'
            : model.connection === 'connecting'
              ? 'connecting'
              : model.connection === 'gone'
                ? 'server gone'
                : 'offline'}
        </span>
        <button
          type="button"
          className="jp-gpuqueue-icon-button"
          title="Refresh"
          aria-label="Refresh"
          onClick={() => void model.refresh()}
        >
          <refreshIcon.react tag="span" />
        </button>
      </div>
      {model.loadError && (
        <div className="jp-gpuqueue-form-error jp-gpuqueue-banner">{model.loadError}</div>
      )}
      <Section id="submit" title="Submit a GPU job" keepMounted openRequest={cloneSerial}>
        <SubmitForm model={model} prefill={prefill} onSubmitted={onSubmitted} />
      </Section>
      <Section
        id="jobs"
        title="My jobs"
        extra={
          <span className="jp-gpuqueue-muted jp-gpuqueue-count">
            {running} running · {pending} pending
          </span>
        }
      >
        <JobList model={model} highlight={highlight} />
      </Section>
      <Section id="availability" title="Availability">
        <Availability summary={model.inventory?.summary ?? null} />
        <MigGrid inventory={model.inventory} />
      </Section>
      <Section id="costs" title="Costs" defaultOpen={false}>
        <CostsView model={model} />
      </Section>
      <Section id="team" title="Team queue">
        <TeamQueue queues={model.queues} info={info} />
      </Section>
      {info?.permissions?.admin && (
        <Section id="admin" title="Admin" defaultOpen={false}>
          <AdminView model={model} />
        </Section>
      )}
    </div>
  );
}

export class GpuQueuePanel extends ReactWidget {
  constructor(readonly model: QueueModel) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-gpuqueue-panel');
    this.title.icon = gpuQueueIcon;
    this.title.caption = 'GPU Queue';
  }

  /** Open the form on a Python file (file browser "Submit as GPU job…"). */
  prefillScript(path: string): void {
    this._lastPrefill = { script: path, serial: ++this._serial };
    this._prefill.emit(this._lastPrefill);
  }

  /** Open the form's Notebook tab on a notebook with these parameter rows (notebookJob.ts). */
  prefillNotebook(path: string, parameters: IParameterRow[]): void {
    this._lastPrefill = { script: '', notebook: path, parameters, serial: ++this._serial };
    this._prefill.emit(this._lastPrefill);
  }

  /** Connect on first show: a panel that is never opened costs nothing. */
  protected onAfterShow(msg: any): void {
    super.onAfterShow(msg);
    this.model.start();
  }

  protected onAfterAttach(msg: any): void {
    super.onAfterAttach(msg);
    if (this.isVisible) {
      this.model.start();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <PanelView
        model={this.model}
        prefillSignal={this._prefill}
        initialPrefill={this._lastPrefill}
      />
    );
  }

  private _prefill = new Signal<GpuQueuePanel, IFormPrefill>(this);
  private _lastPrefill: IFormPrefill | null = null;
  private _serial = 0;
}
