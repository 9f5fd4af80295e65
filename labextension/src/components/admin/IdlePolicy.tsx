/**
 * Idle notebook GPU reclaim, per team (the admin view's "Idle" tab): one card per team with its
 * idle timeout and warning (minutes), the "Keep my GPU" clicks allowed, and the GPU utilisation
 * below which a server counts as idle, and what the release does to the server ("When idle": stop
 * it, or keep it running without its GPUs). "Apply" stores the team's policy
 * (`PUT admin/idle-policy/{namespace}`), "Turn off" stores it with no timeout, "Use default" drops
 * the stored one (`DELETE`). An error the API answers is shown under the field it names, as in the
 * quota editor; a timeout below the service's minimum is refused as it is typed.
 */
import * as React from 'react';

import { ApiError, IIdlePolicies, IIdlePolicy } from '../../api';
import { QueueModel } from '../../model';
import { useResetOnChange } from './useResetOnChange';

type Field = keyof IIdlePolicy;
type Draft = Record<Field, string>;

const FIELDS: Array<{ field: Field; label: string; unit: string; hint: string }> = [
  {
    field: 'idleTimeoutSeconds',
    label: 'Idle timeout',
    unit: 'min',
    hint: 'no kernel execution and no user activity for this long: warn, then release the GPUs'
  },
  {
    field: 'warnSeconds',
    label: 'Warning',
    unit: 'min',
    hint: 'how long the warning (with its "Keep my GPU" button) shows before the release'
  },
  {
    field: 'maxKeeps',
    label: 'Keeps',
    unit: '×',
    hint: '"Keep my GPU" clicks allowed per lease (each restarts the idle clock)'
  },
  {
    field: 'utilizationBelowPercent',
    label: 'GPU busy at',
    unit: '%',
    hint: 'where NVML answers: idle only if its GPUs stayed below this utilisation (empty: no GPU check)'
  }
];

const minutes = (s: number | null): string =>
  s === null ? '' : String(Math.round((s / 60) * 100) / 100);

function draftOf(p: IIdlePolicy): Draft {
  return {
    idleTimeoutSeconds: minutes(p.idleTimeoutSeconds),
    warnSeconds: minutes(p.warnSeconds),
    maxKeeps: String(p.maxKeeps),
    utilizationBelowPercent:
      p.utilizationBelowPercent === null ? '' : String(p.utilizationBelowPercent),
    onIdle: p.onIdle ?? 'stop'
  };
}

const ON_IDLE: Array<{ value: 'stop' | 'release'; label: string }> = [
  { value: 'stop', label: 'stop the server' },
  { value: 'release', label: 'keep the server, without GPUs' }
];

/**
 * The API's reason for a field the form shows in minutes: its seconds followed by the minutes
 * ("must be between 1 and 86400, got 120000" → "… 86400 seconds (1440 min), got 120000 (2000 min)").
 */
export function idleFieldMessage(field: string, message: string): string {
  if (!field.endsWith('Seconds')) {
    return message;
  }
  const m = /between (\d+) and (\d+), got (\d+)/.exec(message);
  if (!m) {
    return message;
  }
  const min = (s: string) => Math.round((Number(s) / 60) * 100) / 100;
  return message.replace(
    m[0],
    `between ${m[1]} and ${m[2]} seconds (${min(m[1])}–${min(m[2])} min), got ${m[3]} (${min(m[3])} min)`
  );
}

/** The draft as the API's policy, or the field and reason it cannot be sent for. */
function policyOf(
  d: Draft,
  minimumSeconds: number
): { policy?: Partial<IIdlePolicy>; errors: Partial<Record<Field, string>> } {
  const errors: Partial<Record<Field, string>> = {};
  const num = (f: Field): number | null => {
    const v = d[f].trim();
    if (v === '') {
      return null;
    }
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) {
      errors[f] = `${v} is not a number`;
      return null;
    }
    return n;
  };
  const timeout = num('idleTimeoutSeconds');
  const warn = num('warnSeconds');
  const keeps = num('maxKeeps');
  const util = num('utilizationBelowPercent');
  const minMinutes = minimumSeconds / 60;
  if (!errors.idleTimeoutSeconds) {
    if (timeout === null) {
      errors.idleTimeoutSeconds = 'give a timeout in minutes (or Turn off)';
    } else if (timeout * 60 < minimumSeconds) {
      errors.idleTimeoutSeconds = `at least ${minMinutes} minutes`;
    }
  }
  if (!errors.warnSeconds && warn === null) {
    errors.warnSeconds = 'give the warning time in minutes';
  }
  if (!errors.maxKeeps && keeps !== null && !Number.isInteger(keeps)) {
    errors.maxKeeps = 'a whole number of clicks';
  }
  if (Object.keys(errors).length) {
    return { errors };
  }
  return {
    errors,
    policy: {
      idleTimeoutSeconds: Math.round((timeout as number) * 60),
      warnSeconds: Math.round((warn as number) * 60),
      ...(keeps === null ? {} : { maxKeeps: keeps }),
      utilizationBelowPercent: util,
      onIdle: d.onIdle === 'release' ? 'release' : 'stop'
    }
  };
}

function TeamIdlePolicy(props: {
  model: QueueModel;
  team: IIdlePolicies['teams'][number];
  minimumSeconds: number;
  onChanged: (policies: IIdlePolicies, what: string) => void;
}): JSX.Element {
  const { team, model } = props;
  const [draft, setDraft] = React.useState<Draft>(() => draftOf(team.policy));
  const [apiErrors, setApiErrors] = React.useState<Partial<Record<Field, string>>>({});
  const [formError, setFormError] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);
  useResetOnChange(JSON.stringify(team), () => setDraft(draftOf(team.policy)));

  const original = draftOf(team.policy);
  const dirty =
    FIELDS.some(({ field }) => draft[field].trim() !== original[field]) || draft.onIdle !== original.onIdle;
  const on = team.policy.idleTimeoutSeconds !== null;
  const { policy, errors: localErrors } = policyOf(draft, props.minimumSeconds);
  // a timeout typed below the minimum is shown at once; "give a timeout" only once edited
  const shownLocal = { ...localErrors };
  if (!dirty) {
    delete shownLocal.idleTimeoutSeconds;
  }
  const shown: Partial<Record<Field, string>> = { ...apiErrors, ...shownLocal };

  const send = async (what: string, call: () => Promise<IIdlePolicies>) => {
    setBusy(true);
    setApiErrors({});
    setFormError(null);
    try {
      props.onChanged(await call(), what);
    } catch (err) {
      const field = err instanceof ApiError ? err.field : undefined;
      if (field && (field === 'onIdle' || FIELDS.some(f => f.field === field))) {
        setApiErrors({ [field]: idleFieldMessage(field, (err as Error).message) });
      } else {
        setFormError((err as Error).message);
      }
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="jp-gpuqueue-admin-card jp-gpuqueue-idle-card" data-idle-team={team.namespace}>
      <div className="jp-gpuqueue-admin-card-head">
        <span className="jp-gpuqueue-cq-name">{team.namespace}</span>
        <span className="jp-gpuqueue-muted" data-idle-state="">
          {on ? `on: ${minutes(team.policy.idleTimeoutSeconds)} min` : 'off'}
          {team.stored
            ? ` · set by ${team.updatedBy ?? '?'}`
            : ' · default'}
        </span>
      </div>
      <div className="jp-gpuqueue-idle-fields">
        {FIELDS.map(({ field, label, unit, hint }) => (
          <label key={field} className="jp-gpuqueue-field jp-gpuqueue-idle-field" title={hint}>
            <span>
              {label} ({unit})
            </span>
            <input
              className={`jp-mod-styled jp-gpuqueue-admin-input ${shown[field] ? 'jp-mod-invalid' : ''} ${
                draft[field].trim() !== original[field] ? 'jp-mod-dirty' : ''
              }`}
              data-idle-field={field}
              inputMode="decimal"
              aria-label={`${label} (${unit}) for ${team.namespace}`}
              aria-invalid={shown[field] ? true : undefined}
              value={draft[field]}
              placeholder={
                field === 'idleTimeoutSeconds'
                  ? 'off'
                  : field === 'utilizationBelowPercent'
                    ? 'no check'
                    : ''
              }
              onChange={e => {
                const value = e.target.value;
                setDraft(d => ({ ...d, [field]: value }));
                setApiErrors(a => {
                  const next = { ...a };
                  delete next[field];
                  return next;
                });
              }}
              onKeyDown={e => {
                if (e.key === 'Enter' && dirty && policy && !busy) {
                  void send(`Idle policy of ${team.namespace}`, () =>
                    model.client.setIdlePolicy(team.namespace, policy)
                  );
                }
              }}
            />
            {shown[field] && (
              <div className="jp-gpuqueue-field-error" data-field={field} role="alert">
                {shown[field]}
              </div>
            )}
          </label>
        ))}
        <label
          className="jp-gpuqueue-field jp-gpuqueue-idle-field"
          style={{ gridColumn: '1 / -1' }}
          title="what the release does to the notebook server: stop it, or let it go on without its GPUs (its kernels are shut down; a KubeSpawner pod cannot give its GPUs back, so it stops)"
        >
          <span>When idle</span>
          <select
            className={`jp-mod-styled jp-gpuqueue-admin-input ${draft.onIdle !== original.onIdle ? 'jp-mod-dirty' : ''}`}
            data-idle-field="onIdle"
            aria-label={`When idle, for ${team.namespace}`}
            style={{ width: '100%' }}
            value={draft.onIdle}
            onChange={e => {
              const value = e.target.value;
              setDraft(d => ({ ...d, onIdle: value }));
            }}
          >
            {ON_IDLE.map(o => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
          {shown.onIdle && (
            <div className="jp-gpuqueue-field-error" data-field="onIdle" role="alert">
              {shown.onIdle}
            </div>
          )}
        </label>
      </div>
      {formError && <div className="jp-gpuqueue-form-error">{formError}</div>}
      <div className="jp-gpuqueue-actions">
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept"
          data-action="apply-idle-policy"
          disabled={!dirty || !policy || busy}
          onClick={() =>
            policy &&
            void send(`Idle policy of ${team.namespace}`, () =>
              model.client.setIdlePolicy(team.namespace, policy)
            )
          }
        >
          {busy ? 'Applying…' : 'Apply'}
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-reject"
          data-action="turn-off-idle-policy"
          disabled={!on || busy}
          onClick={() =>
            void send(`Idle reclaim of ${team.namespace} turned off`, () =>
              model.client.setIdlePolicy(team.namespace, { idleTimeoutSeconds: null })
            )
          }
        >
          Turn off
        </button>
        {team.stored && (
          <button
            type="button"
            className="jp-gpuqueue-link"
            data-action="default-idle-policy"
            disabled={busy}
            onClick={() =>
              void send(`Idle policy of ${team.namespace}: the default again`, () =>
                model.client.deleteIdlePolicy(team.namespace)
              )
            }
          >
            Use default
          </button>
        )}
      </div>
    </div>
  );
}

export function IdlePolicyEditor(props: {
  model: QueueModel;
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  const { model } = props;
  const [policies, setPolicies] = React.useState<IIdlePolicies | null>(null);
  const [error, setError] = React.useState<string | null>(null);

  React.useEffect(() => {
    let live = true;
    model.client
      .idlePolicies()
      .then(p => live && setPolicies(p))
      .catch(err => live && setError((err as Error).message));
    return () => {
      live = false;
    };
  }, [model]);

  if (error && !policies) {
    return <div className="jp-gpuqueue-form-error">{error}</div>;
  }
  if (!policies) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }
  return (
    <div className="jp-gpuqueue-idle-policies">
      <div className="jp-gpuqueue-muted jp-gpuqueue-idle-intro">
        A notebook server holding GPUs with no activity for its team's timeout gets a warning with a
        "Keep my GPU" button, then its GPUs are released: the server stops, or goes on without them
        ("When idle"). Off unless set (the timeout at least{' '}
        {policies.minimumTimeoutSeconds / 60} min).
      </div>
      {policies.teams.map(team => (
        <TeamIdlePolicy
          key={team.namespace}
          model={model}
          team={team}
          minimumSeconds={policies.minimumTimeoutSeconds}
          onChanged={(p, what) => {
            setPolicies(p);
            void props.onApplied(what);
          }}
        />
      ))}
    </div>
  );
}
