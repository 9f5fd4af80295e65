/**
 * One ClusterQueue in the admin view: its cohort and, per flavor and resource, the nominalQuota,
 * borrowingLimit and lendingLimit, editable inline. "Apply" sends only what changed
 * (`PATCH admin/cluster-queues/{name}`); an error the API answers is shown under the row and field
 * its `field` names (a Kueue path such as `spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit`).
 * A GPU or MIG quota typed with a fraction ("1.5") is refused at once, under its field, and Apply
 * stays disabled: devices are whole, and the API would refuse it as well (Kueue would round it up).
 */
import * as React from 'react';

import { ApiError, IAdminClusterQueue, IAdminQuota, IQuotaPatch } from '../../api';
import { QueueModel } from '../../model';
import { useResetOnChange } from './useResetOnChange';

type QuotaField = 'nominalQuota' | 'borrowingLimit' | 'lendingLimit';
const FIELDS: QuotaField[] = ['nominalQuota', 'borrowingLimit', 'lendingLimit'];
const PLACEHOLDER: Record<QuotaField, string> = {
  nominalQuota: '0',
  borrowingLimit: 'no limit',
  lendingLimit: 'all'
};

const LABEL: Record<QuotaField, string> = {
  nominalQuota: 'Nominal',
  borrowingLimit: 'Borrow',
  lendingLimit: 'Lend'
};

type Draft = Record<string, Record<QuotaField, string>>;

function draftOf(cq: IAdminClusterQueue): Draft {
  const d: Draft = {};
  for (const r of cq.resources) {
    d[r.path] = {
      nominalQuota: r.nominalQuota,
      borrowingLimit: r.borrowingLimit ?? '',
      lendingLimit: r.lendingLimit ?? ''
    };
  }
  return d;
}

/** "nvidia.com/gpu" → "GPU", "nvidia.com/mig-1g.10gb" → "MIG 1g.10gb". */
export function resourceLabel(resource: string): string {
  if (resource === 'nvidia.com/gpu') {
    return 'GPU';
  }
  if (resource.startsWith('nvidia.com/mig-')) {
    return `MIG ${resource.slice('nvidia.com/mig-'.length)}`;
  }
  return resource === 'cpu' ? 'CPU' : resource;
}

function isDevice(r: IAdminQuota): boolean {
  return r.resource === 'nvidia.com/gpu' || r.resource.startsWith('nvidia.com/mig-');
}

/**
 * Why a GPU or MIG quota typed as a plain decimal ("1.5") cannot be stored: devices are whole
 * (Kueue would round it up; the API refuses it too). Other spellings are left to the API, which
 * validates them as Kubernetes quantities.
 */
export function deviceQuotaError(resource: string, value: string): string | null {
  const v = value.trim();
  if (!(resource === 'nvidia.com/gpu' || resource.startsWith('nvidia.com/mig-'))) {
    return null;
  }
  if (!/^\+?(\d+\.?\d*|\.\d+)$/.test(v)) {
    return null;
  }
  const n = Number(v);
  if (Number.isInteger(n)) {
    return null;
  }
  const what = resource === 'nvidia.com/gpu' ? 'GPUs' : 'MIG devices';
  return `${v} is not a whole number: ${resource} is counted in whole ${what} (Kueue would round it up to ${Math.ceil(n)})`;
}

/** An API error's message without the "admin: document 6: ClusterQueue/x: <field>: " prefix. */
export function fieldMessage(message: string, field: string): string {
  const at = field ? message.indexOf(`${field}: `) : -1;
  return at >= 0 ? message.slice(at + field.length + 2) : message;
}

/** The look of a warning box; the theme's warn colours, so both themes keep their contrast. */
export const WARNING_STYLE: React.CSSProperties = {
  // an orange tint over the panel's own background: the theme's text colour stays readable on
  // it in light and dark themes (--jp-warn-color3 stays cream in the dark theme: 1.27:1)
  background: 'rgba(245, 124, 0, 0.14)',
  color: 'var(--jp-ui-font-color0)',
  borderLeft: '3px solid var(--jp-warn-color1)',
  borderRadius: 'var(--jp-border-radius)',
  padding: '4px 8px',
  margin: '6px 0',
  fontSize: 'var(--jp-ui-font-size1)',
  lineHeight: 1.35,
  overflowWrap: 'anywhere'
};

/**
 * The API's `warnings` for the configuration in force: where a cohort's (or a lone
 * ClusterQueue's) nominal quota of a flavor's devices exceeds the inventory, so that jobs within
 * quota may wait for devices or preempt lower-priority ones on the nodes.
 */
export function CapacityWarnings(props: { warnings: string[] }): JSX.Element | null {
  if (!props.warnings.length) {
    return null;
  }
  return (
    <div style={WARNING_STYLE} role="status" data-admin-warnings="">
      <strong>Quota above the hardware</strong>
      <ul style={{ margin: '2px 0 0', paddingLeft: '16px' }}>
        {props.warnings.map(w => (
          <li key={w} data-admin-warning="">
            {w}
          </li>
        ))}
      </ul>
    </div>
  );
}

export function ClusterQueueEditor(props: {
  model: QueueModel;
  cq: IAdminClusterQueue;
  cohorts: string[];
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  const { cq, model } = props;
  const [draft, setDraft] = React.useState<Draft>(() => draftOf(cq));
  const [cohort, setCohort] = React.useState(cq.cohort ?? '');
  const [errors, setErrors] = React.useState<Record<string, string>>({});
  const [formError, setFormError] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);
  const [showAll, setShowAll] = React.useState(false);

  // Reset the form when the ClusterQueue itself changed (another admin, or our own apply), not
  // when the admin view merely refetched the same configuration: unsaved edits survive a reload.
  const signature = React.useMemo(() => JSON.stringify(cq), [cq]);
  useResetOnChange(signature, () => {
    setDraft(draftOf(cq));
    setCohort(cq.cohort ?? '');
  });

  const original = React.useMemo(() => draftOf(cq), [cq]);
  const changedRows = cq.resources.filter(r =>
    FIELDS.some(f => draft[r.path]?.[f] !== original[r.path][f])
  );
  const cohortChanged = cohort.trim() !== (cq.cohort ?? '');
  const dirty = changedRows.length > 0 || cohortChanged;
  // Refused before sending: a fractional GPU / MIG count (shown under its field).
  const localErrors: Record<string, string> = {};
  for (const r of cq.resources) {
    for (const f of FIELDS) {
      const why = deviceQuotaError(r.resource, draft[r.path]?.[f] ?? '');
      if (why) {
        localErrors[`${r.path}.${f}`] = why;
      }
    }
  }
  const shownErrors: Record<string, string> = { ...errors, ...localErrors };
  const blocked = Object.keys(localErrors).length > 0;

  const setValue = (path: string, field: QuotaField, value: string) => {
    setDraft(d => ({ ...d, [path]: { ...d[path], [field]: value } }));
    setErrors(e => {
      const next = { ...e };
      delete next[`${path}.${field}`];
      return next;
    });
  };

  /** Which row and field an API error names. */
  const placeError = (err: ApiError, sent: IAdminQuota[]): boolean => {
    const field = err.field ?? '';
    if (field === 'cohort' || field.startsWith('spec.cohort')) {
      setErrors({ cohort: fieldMessage(err.message, field) });
      return true;
    }
    const m = /^resources\[(\d+)\](?:\.(\w+))?$/.exec(field);
    if (m && sent[Number(m[1])]) {
      const f = (FIELDS as string[]).includes(m[2]) ? m[2] : 'nominalQuota';
      setErrors({ [`${sent[Number(m[1])].path}.${f}`]: fieldMessage(err.message, field) });
      return true;
    }
    for (const r of cq.resources) {
      if (field.startsWith(`${r.path}.`)) {
        const rest = field.slice(r.path.length + 1);
        const f = (FIELDS as string[]).includes(rest) ? rest : 'nominalQuota';
        setErrors({ [`${r.path}.${f}`]: fieldMessage(err.message, field) });
        return true;
      }
    }
    return false;
  };

  const apply = async () => {
    if (blocked) {
      return;
    }
    const sent = changedRows;
    const patch: { cohort?: string | null; resources?: IQuotaPatch[] } = {};
    if (cohortChanged) {
      patch.cohort = cohort.trim() || null;
    }
    if (sent.length) {
      patch.resources = sent.map(r => {
        const p: IQuotaPatch = { flavor: r.flavor, resource: r.resource };
        for (const f of FIELDS) {
          const v = draft[r.path][f].trim();
          if (v !== original[r.path][f]) {
            if (f === 'nominalQuota') {
              p.nominalQuota = v;
            } else {
              p[f] = v || null;
            }
          }
        }
        return p;
      });
    }
    setBusy(true);
    setErrors({});
    setFormError(null);
    try {
      await model.client.patchClusterQueue(cq.name, patch);
      await props.onApplied(`ClusterQueue ${cq.name}`);
    } catch (err) {
      if (!(err instanceof ApiError) || !placeError(err, sent)) {
        setFormError((err as Error).message);
      }
    } finally {
      setBusy(false);
    }
  };

  const rows = cq.resources.filter(
    r => showAll || isDevice(r) || FIELDS.some(f => `${r.path}.${f}` in shownErrors)
  );
  const hidden = cq.resources.length - rows.length;
  const listId = `jp-gpuqueue-cohorts-${cq.name}`;
  return (
    <div className="jp-gpuqueue-admin-card" data-admin-cluster-queue={cq.name}>
      <div className="jp-gpuqueue-admin-card-head">
        <span className="jp-gpuqueue-cq-name">{cq.name}</span>
        <span className="jp-gpuqueue-muted">
          {cq.queueingStrategy} · {cq.localQueues.join(', ') || 'no LocalQueue'}
        </span>
      </div>
      <label className="jp-gpuqueue-field jp-gpuqueue-admin-cohort">
        <span>Cohort (empty: none, no borrowing or lending)</span>
        <input
          className={`jp-mod-styled ${errors.cohort ? 'jp-mod-invalid' : ''}`}
          data-admin-field="cohort"
          value={cohort}
          list={listId}
          placeholder="none"
          onChange={e => {
            setCohort(e.target.value);
            setErrors({});
          }}
        />
        <datalist id={listId}>
          {props.cohorts.map(c => (
            <option key={c} value={c} />
          ))}
        </datalist>
        {errors.cohort && (
          <div className="jp-gpuqueue-field-error" data-field="cohort" role="alert">
            {errors.cohort}
          </div>
        )}
      </label>
      <table className="jp-gpuqueue-admin-table">
        <thead>
          <tr>
            <th title="nominalQuota">Nominal</th>
            <th title="borrowingLimit: how much more it may borrow from the cohort">Borrow</th>
            <th title="lendingLimit: how much of its unused quota it lends to the cohort">Lend</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(r => {
            const rowErrors = FIELDS.filter(f => shownErrors[`${r.path}.${f}`]);
            return (
              <React.Fragment key={r.path}>
                <tr className="jp-gpuqueue-admin-what-row">
                  <td colSpan={3} className="jp-gpuqueue-admin-what">
                    <span>{r.flavor}</span>{' '}
                    <span className="jp-gpuqueue-muted">· {resourceLabel(r.resource)}</span>
                  </td>
                </tr>
                <tr data-quota={`${r.flavor}|${r.resource}`}>
                  {FIELDS.map(f => (
                    <td key={f}>
                      <input
                        className={`jp-mod-styled jp-gpuqueue-admin-input ${
                          shownErrors[`${r.path}.${f}`] ? 'jp-mod-invalid' : ''
                        } ${draft[r.path]?.[f] !== original[r.path][f] ? 'jp-mod-dirty' : ''}`}
                        data-admin-field={f}
                        aria-label={`${LABEL[f]} (${f}) of ${r.resource} in ${r.flavor}`}
                        aria-invalid={shownErrors[`${r.path}.${f}`] ? true : undefined}
                        value={draft[r.path]?.[f] ?? ''}
                        placeholder={PLACEHOLDER[f]}
                        onChange={e => setValue(r.path, f, e.target.value)}
                        onKeyDown={e => {
                          if (e.key === 'Enter' && dirty && !busy && !blocked) {
                            void apply();
                          }
                        }}
                      />
                    </td>
                  ))}
                </tr>
                {rowErrors.map(f => (
                  <tr key={f} className="jp-gpuqueue-admin-error-row">
                    <td colSpan={3}>
                      <div
                        className="jp-gpuqueue-field-error"
                        data-field={`${r.path}.${f}`}
                        role="alert"
                      >
                        {shownErrors[`${r.path}.${f}`]}
                      </div>
                    </td>
                  </tr>
                ))}
              </React.Fragment>
            );
          })}
        </tbody>
      </table>
      {formError && <div className="jp-gpuqueue-form-error">{formError}</div>}
      <div className="jp-gpuqueue-actions">
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept"
          data-action="apply-cluster-queue"
          disabled={!dirty || busy || blocked}
          title={blocked ? 'Fix the quota marked above first' : undefined}
          onClick={() => void apply()}
        >
          {busy ? 'Applying…' : 'Apply'}
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-reject"
          disabled={!dirty || busy}
          onClick={() => {
            setDraft(draftOf(cq));
            setCohort(cq.cohort ?? '');
            setErrors({});
            setFormError(null);
          }}
        >
          Reset
        </button>
        {(hidden > 0 || showAll) && (
          <button type="button" className="jp-gpuqueue-link" onClick={() => setShowAll(!showAll)}>
            {showAll ? 'GPUs only' : `+ cpu, memory (${hidden})`}
          </button>
        )}
      </div>
    </div>
  );
}
