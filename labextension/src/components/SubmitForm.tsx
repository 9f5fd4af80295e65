/**
 * The submit form: what to run, on which GPUs / MIG slice and flavor, at which priority, for
 * how long, in which LocalQueue; the estimated cost before submitting; field errors of the API
 * next to the named field.
 */
import * as React from 'react';

import { ApiError, IEstimate, ISubmitRequest, IWorkload, workloadKey } from '../api';
import { describeEstimate, formatDuration, parseDuration, shellSplit } from '../format';
import { ICloneRequest, cloneFormFields, formPrefillRequested } from '../jobpage/opener';
import { QueueModel } from '../model';
import { IParameterRow, parametersFromRows, rowsFromParameters } from '../notebookJob';
import { NotebookFields } from './NotebookFields';

/** The serial of the last clone request a form took (one form fills once per request). */
let clonesTaken = 0;

export interface IFormPrefill {
  script: string;
  /** A notebook job instead (the notebook toolbar, the file browser on a .ipynb): its path and
   * parameter rows (the defaults of its `parameters` cell). */
  notebook?: string;
  parameters?: IParameterRow[];
  /** Increases with every request, so that the same path can be prefilled twice. */
  serial: number;
}

interface IProps {
  model: QueueModel;
  prefill: IFormPrefill | null;
  onSubmitted: (w: IWorkload) => void;
}

type Errors = Record<string, string>;
type Mode = 'script' | 'command' | 'notebook';

/** API field names (and JSON paths) → the form field that shows the error. */
function formField(field: string | undefined, mode: Mode): string {
  if (!field) {
    return '';
  }
  const head = field.split(/[.[]/)[0];
  switch (head) {
    case 'maxRuntimeSeconds':
      return 'maxRuntime';
    case 'podSets':
    case 'count':
      return 'gpus';
    case 'args':
      return mode === 'script' ? 'args' : 'command';
    case 'workingDir':
    case 'outputDir':
      return mode === 'command' ? 'command' : mode;
    default:
      return head;
  }
}

export function SubmitForm(props: IProps): JSX.Element {
  const { model } = props;
  const info = model.info;

  const [mode, setMode] = React.useState<Mode>('script');
  const [notebook, setNotebook] = React.useState('');
  const [parameterRows, setParameterRows] = React.useState<IParameterRow[]>([]);
  const [script, setScript] = React.useState('');
  const [args, setArgs] = React.useState('');
  const [command, setCommand] = React.useState('');
  const [kind, setKind] = React.useState<'gpu' | 'mig'>('gpu');
  const [gpus, setGpus] = React.useState('1');
  const [migProfile, setMigProfile] = React.useState('');
  const [flavor, setFlavor] = React.useState('any');
  const [priorityClass, setPriorityClass] = React.useState('');
  const [maxRuntime, setMaxRuntime] = React.useState('10m');
  const [localQueue, setLocalQueue] = React.useState('');
  const [name, setName] = React.useState('');

  const [errors, setErrors] = React.useState<Errors>({});
  const [formError, setFormError] = React.useState<string | null>(null);
  const [estimate, setEstimate] = React.useState<IEstimate | null>(null);
  const [estimateNote, setEstimateNote] = React.useState<string | null>(null);
  const [estimating, setEstimating] = React.useState(false);
  const [submitting, setSubmitting] = React.useState(false);
  const [submitted, setSubmitted] = React.useState<string | null>(null);

  // Defaults from info, once it arrives.
  React.useEffect(() => {
    if (!info) {
      return;
    }
    if (!priorityClass && info.defaultPriorityClass) {
      setPriorityClass(info.defaultPriorityClass);
    }
    if (!localQueue) {
      const first = info.localQueues[0];
      setLocalQueue(
        info.defaultLocalQueue ?? (first ? `${first.namespace}/${first.name}` : '')
      );
    }
    if (!migProfile && info.migProfiles.length > 0) {
      setMigProfile(info.migProfiles[0]);
    }
  }, [info]);

  // "Clone into the form" on a job's page (jobpage/opener.ts): the form takes the job's request,
  // also one made before the form was mounted (the last one not taken yet).
  React.useEffect(() => {
    const apply = (r: ICloneRequest) => {
      if (r.serial <= clonesTaken) {
        return;
      }
      clonesTaken = r.serial;
      const f = cloneFormFields(r.request);
      setMode(f.mode);
      setCommand(f.command);
      setNotebook(f.notebook ?? '');
      setParameterRows(rowsFromParameters(f.parameters));
      setKind(f.kind);
      setGpus(f.gpus);
      if (f.migProfile) {
        setMigProfile(f.migProfile);
      }
      setFlavor(f.flavor);
      if (f.priorityClass) {
        setPriorityClass(f.priorityClass);
      }
      setMaxRuntime(f.maxRuntime);
      if (f.localQueue) {
        setLocalQueue(f.localQueue);
      }
      setName('');
      setSubmitted(null);
      setErrors({});
      setFormError(null);
    };
    if (formPrefillRequested.last) {
      apply(formPrefillRequested.last);
    }
    return formPrefillRequested.listen(apply);
  }, []);

  // "Submit as GPU job…" on a .py file.
  React.useEffect(() => {
    if (props.prefill?.notebook) {
      setMode('notebook');
      setNotebook(props.prefill.notebook);
      setParameterRows(props.prefill.parameters ?? []);
    } else if (props.prefill) {
      setMode('script');
      setScript(props.prefill.script);
      setSubmitted(null);
      setErrors({});
    }
  }, [props.prefill?.serial]);

  /**
   * Build the request, or the client-side errors that make it impossible. An estimate does not
   * need the script / command yet (the server validates everything else).
   */
  /** The cap an admin set on the chosen team's maximum run time (null: none). */
  const runtimeCap = (): { team: string; seconds: number } | null => {
    const key = localQueue || info?.defaultLocalQueue || '';
    const q = info?.localQueues.find(l => `${l.namespace}/${l.name}` === key);
    return q && q.maxRuntimeSeconds ? { team: q.namespace, seconds: q.maxRuntimeSeconds } : null;
  };

  const build = (
    forEstimate = false
  ): { request: ISubmitRequest | null; errors: Errors } => {
    const errs: Errors = {};
    const request: ISubmitRequest = {};
    if (mode === 'notebook') {
      if (notebook.trim()) {
        request.notebook = notebook.trim();
      } else if (!forEstimate) {
        errs.notebook = 'Enter the path of a .ipynb file, relative to the server root.';
      }
      const p = parametersFromRows(parameterRows);
      if (p.error) {
        errs.parameters = p.error;
      } else if (Object.keys(p.parameters).length) {
        request.parameters = p.parameters;
      }
    } else if (mode === 'script') {
      if (script.trim()) {
        request.script = script.trim();
      } else if (!forEstimate) {
        errs.script = 'Enter the path of a .py file, relative to the server root.';
      }
      try {
        const extra = shellSplit(args);
        if (extra.length) {
          request.args = extra;
        }
      } catch (e) {
        errs.args = (e as Error).message;
      }
    } else {
      try {
        const argv = shellSplit(command);
        if (argv.length) {
          request.command = argv;
        } else if (!forEstimate) {
          errs.command = 'Enter a command, e.g. python train.py --epochs 5';
        }
      } catch (e) {
        errs.command = (e as Error).message;
      }
    }
    if (kind === 'mig') {
      if (migProfile) {
        request.migProfile = migProfile;
      } else {
        errs.migProfile = 'Choose a MIG profile.';
      }
    } else {
      const n = Number(gpus);
      if (Number.isInteger(n) && n >= 1) {
        request.gpus = n;
      } else {
        errs.gpus = 'A whole number of GPUs, at least 1.';
      }
    }
    request.flavor = flavor || 'any';
    if (priorityClass) {
      request.priorityClass = priorityClass;
    }
    const cap = runtimeCap();
    const asked = parseDuration(maxRuntime);
    if (asked === null) {
      errs.maxRuntime = 'A duration such as 90s, 10m, 2h or 1d.';
    } else if (cap && asked > cap.seconds) {
      errs.maxRuntime = `At most ${formatDuration(cap.seconds)} for team ${cap.team} (set by an admin).`;
    } else {
      request.maxRuntime = maxRuntime.trim();
    }
    if (localQueue) {
      request.localQueue = localQueue;
    }
    if (name.trim()) {
      request.name = name.trim();
    }
    return { request: Object.keys(errs).length ? null : request, errors: errs };
  };

  // The estimated cost, debounced, as the form changes.
  const estimateDeps = [mode, script, args, command, notebook, parameterRows, kind, gpus, migProfile, flavor, priorityClass, maxRuntime, localQueue, info];
  React.useEffect(() => {
    if (!info) {
      return;
    }
    const { request, errors: errs } = build(true);
    setErrors(errs);
    setFormError(null);
    if (!request) {
      setEstimate(null);
      setEstimating(false);
      setEstimateNote(null);
      return;
    }
    const controller = new AbortController();
    setEstimating(true);
    const timer = window.setTimeout(async () => {
      try {
        const e = await model.client.estimate(request, controller.signal);
        setEstimate(e);
        setEstimateNote(null);
        setErrors({});
      } catch (err) {
        if (controller.signal.aborted) {
          return;
        }
        setEstimate(null);
        if (err instanceof ApiError && err.field) {
          setErrors({ [formField(err.field, mode)]: err.message });
          setEstimateNote(null);
        } else {
          setEstimateNote(`No estimate: ${(err as Error).message}`);
        }
      } finally {
        if (!controller.signal.aborted) {
          setEstimating(false);
        }
      }
    }, 350);
    return () => {
      controller.abort();
      window.clearTimeout(timer);
    };
  }, estimateDeps);

  const onSubmit = async (event: React.FormEvent) => {
    event.preventDefault();
    const { request, errors: errs } = build();
    setErrors(errs);
    setSubmitted(null);
    if (!request) {
      return;
    }
    setSubmitting(true);
    setFormError(null);
    try {
      const requestedAt = Date.now();
      const w = await model.client.submit(request);
      model.upsert(w, requestedAt);
      setSubmitted(workloadKey(w));
      setName('');
      props.onSubmitted(w);
    } catch (err) {
      if (err instanceof ApiError && err.field) {
        setErrors({ [formField(err.field, mode)]: err.message });
      } else {
        setFormError((err as Error).message);
      }
    } finally {
      setSubmitting(false);
    }
  };

  if (!info) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }

  const fieldError = (field: string) =>
    errors[field] ? (
      <div className="jp-gpuqueue-field-error" data-field={field} role="alert">
        {errors[field]}
      </div>
    ) : null;
  const invalid = (field: string) => (errors[field] ? 'jp-mod-invalid' : '');
  const hasMig = info.migProfiles.length > 0;
  const queues = info.localQueues.map(q => `${q.namespace}/${q.name}`);
  const unplacedError = Object.keys(errors).find(
    f =>
      ![
        'script',
        'args',
        'command',
        'notebook',
        'parameters',
        'kernel',
        'gpus',
        'migProfile',
        'flavor',
        'priorityClass',
        'maxRuntime',
        'localQueue',
        'name'
      ].includes(f)
  );

  return (
    <form className="jp-gpuqueue-form" onSubmit={onSubmit} noValidate>
      <div className="jp-gpuqueue-segmented" role="tablist">
        <button
          type="button"
          role="tab"
          aria-selected={mode === 'script'}
          className={mode === 'script' ? 'jp-mod-active' : ''}
          onClick={() => setMode('script')}
        >
          Python file
        </button>
        <button
          type="button"
          role="tab"
          aria-selected={mode === 'command'}
          className={mode === 'command' ? 'jp-mod-active' : ''}
          onClick={() => setMode('command')}
        >
          Command
        </button>
        <button
          type="button"
          role="tab"
          aria-selected={mode === 'notebook'}
          className={mode === 'notebook' ? 'jp-mod-active' : ''}
          onClick={() => setMode('notebook')}
        >
          Notebook
        </button>
      </div>

      {mode === 'notebook' ? (
        <NotebookFields
          notebook={notebook}
          onNotebook={setNotebook}
          rows={parameterRows}
          onRows={setParameterRows}
          errors={errors}
        />
      ) : mode === 'script' ? (
        <>
          <label className="jp-gpuqueue-field">
            <span>Script</span>
            <input
              id="jp-gpuqueue-script"
              name="script"
              className={`jp-mod-styled ${invalid('script')}`}
              placeholder="examples/train_digits.py"
              value={script}
              spellCheck={false}
              onChange={e => setScript(e.target.value)}
            />
            {fieldError('script')}
          </label>
          <label className="jp-gpuqueue-field">
            <span>Arguments</span>
            <input
              id="jp-gpuqueue-args"
              name="args"
              className={`jp-mod-styled ${invalid('args')}`}
              placeholder="--epochs 5"
              value={args}
              spellCheck={false}
              onChange={e => setArgs(e.target.value)}
            />
            {fieldError('args')}
          </label>
        </>
      ) : (
        <label className="jp-gpuqueue-field">
          <span>Command</span>
          <input
            id="jp-gpuqueue-command"
            name="command"
            className={`jp-mod-styled ${invalid('command')}`}
            placeholder='python train.py --name "run 1"'
            value={command}
            spellCheck={false}
            onChange={e => setCommand(e.target.value)}
          />
          {fieldError('command')}
        </label>
      )}

      <div className="jp-gpuqueue-row">
        {hasMig && (
          <label className="jp-gpuqueue-field">
            <span>Resource</span>
            <select
              id="jp-gpuqueue-kind"
              name="resourceKind"
              className="jp-mod-styled"
              value={kind}
              onChange={e => setKind(e.target.value as 'gpu' | 'mig')}
            >
              <option value="gpu">Whole GPUs</option>
              <option value="mig">MIG slice</option>
            </select>
          </label>
        )}
        {kind === 'gpu' ? (
          <label className="jp-gpuqueue-field">
            <span>GPUs</span>
            <input
              id="jp-gpuqueue-gpus"
              name="gpus"
              type="number"
              min={1}
              step={1}
              className={`jp-mod-styled ${invalid('gpus')}`}
              value={gpus}
              onChange={e => setGpus(e.target.value)}
            />
            {fieldError('gpus')}
          </label>
        ) : (
          <label className="jp-gpuqueue-field">
            <span>MIG profile</span>
            <select
              id="jp-gpuqueue-mig"
              name="migProfile"
              className={`jp-mod-styled ${invalid('migProfile')}`}
              value={migProfile}
              onChange={e => setMigProfile(e.target.value)}
            >
              {info.migProfiles.map(p => (
                <option key={p} value={p}>
                  {p}
                </option>
              ))}
            </select>
            {fieldError('migProfile')}
          </label>
        )}
      </div>

      <div className="jp-gpuqueue-row">
        <label className="jp-gpuqueue-field">
          <span>Flavor</span>
          <select
            id="jp-gpuqueue-flavor"
            name="flavor"
            className={`jp-mod-styled ${invalid('flavor')}`}
            value={flavor}
            onChange={e => setFlavor(e.target.value)}
          >
            <option value="any">any</option>
            {info.flavors.map(f => (
              <option key={f} value={f}>
                {f}
              </option>
            ))}
          </select>
          {fieldError('flavor')}
        </label>
        <label className="jp-gpuqueue-field">
          <span>Max run time</span>
          <input
            id="jp-gpuqueue-maxruntime"
            name="maxRuntime"
            className={`jp-mod-styled ${invalid('maxRuntime')}`}
            placeholder="10m"
            value={maxRuntime}
            spellCheck={false}
            onChange={e => setMaxRuntime(e.target.value)}
            aria-describedby={runtimeCap() ? 'jp-gpuqueue-maxruntime-cap' : undefined}
          />
          {fieldError('maxRuntime')}
          {runtimeCap() && !errors.maxRuntime && (
            <div className="jp-gpuqueue-muted jp-gpuqueue-field-hint" id="jp-gpuqueue-maxruntime-cap">
              at most {formatDuration((runtimeCap() as { seconds: number }).seconds)}
            </div>
          )}
        </label>
      </div>

      <div className="jp-gpuqueue-row">
        <label className="jp-gpuqueue-field">
          <span>Priority</span>
          <select
            id="jp-gpuqueue-priority"
            name="priorityClass"
            className={`jp-mod-styled ${invalid('priorityClass')}`}
            value={priorityClass}
            onChange={e => setPriorityClass(e.target.value)}
          >
            {!info.defaultPriorityClass && <option value="">default</option>}
            {info.priorityClasses.map(p => (
              <option key={p.name} value={p.name} title={p.description}>
                {p.name} ({p.value})
              </option>
            ))}
          </select>
          {fieldError('priorityClass')}
        </label>
        {queues.length > 1 ? (
          <label className="jp-gpuqueue-field">
            <span>LocalQueue</span>
            <select
              id="jp-gpuqueue-localqueue"
              name="localQueue"
              className={`jp-mod-styled ${invalid('localQueue')}`}
              value={localQueue}
              onChange={e => setLocalQueue(e.target.value)}
            >
              {queues.map(q => (
                <option key={q} value={q}>
                  {q}
                </option>
              ))}
            </select>
            {fieldError('localQueue')}
          </label>
        ) : (
          <div className="jp-gpuqueue-field">
            <span>LocalQueue</span>
            <div className="jp-gpuqueue-static" title="Your team's LocalQueue">
              {localQueue || '—'}
            </div>
            {fieldError('localQueue')}
          </div>
        )}
      </div>

      <details className="jp-gpuqueue-advanced">
        <summary>Name</summary>
        <label className="jp-gpuqueue-field">
          <input
            id="jp-gpuqueue-name"
            name="name"
            className={`jp-mod-styled ${invalid('name')}`}
            placeholder="generated from the command"
            value={name}
            spellCheck={false}
            onChange={e => setName(e.target.value)}
          />
        </label>
      </details>
      {fieldError('name')}

      <div
        className={`jp-gpuqueue-estimate ${estimating ? 'jp-mod-pending' : ''}`}
        aria-live="polite"
      >
        {estimate
          ? describeEstimate(estimate, model.prices)
          : (estimateNote ??
            (estimating
              ? 'Estimating…'
              : Object.keys(errors).length
                ? 'Fix the fields marked above to see the estimated cost.'
                : '\u00a0'))}
      </div>

      {unplacedError && (
        <div className="jp-gpuqueue-form-error" role="alert">
          {unplacedError}: {errors[unplacedError]}
        </div>
      )}
      {formError && (
        <div className="jp-gpuqueue-form-error" role="alert">
          {formError}
        </div>
      )}

      <div className="jp-gpuqueue-actions">
        <button
          id="jp-gpuqueue-submit"
          type="submit"
          className="jp-mod-styled jp-mod-accept"
          disabled={submitting}
        >
          {submitting ? 'Submitting…' : 'Submit'}
        </button>
        {submitted && (
          <span className="jp-gpuqueue-submitted">Submitted {submitted}</span>
        )}
      </div>
    </form>
  );
}
