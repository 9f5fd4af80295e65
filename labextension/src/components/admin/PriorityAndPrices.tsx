/**
 * Priority classes (value, description) and prices (USD per GPU-hour per ResourceFlavor) in the
 * admin view. Errors from the API are shown next to the field they name.
 */
import * as React from 'react';

import { ApiError, IAdminPriorityClass, IAdminPrices } from '../../api';
import { QueueModel } from '../../model';
import { useResetOnChange } from './useResetOnChange';

function PriorityRow(props: {
  model: QueueModel;
  pc: IAdminPriorityClass;
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  const { pc } = props;
  const [value, setValue] = React.useState(String(pc.value));
  const [description, setDescription] = React.useState(pc.description);
  const [error, setError] = React.useState<{ field: string; message: string } | null>(null);
  const [busy, setBusy] = React.useState(false);
  useResetOnChange(JSON.stringify(pc), () => {
    setValue(String(pc.value));
    setDescription(pc.description);
  });
  const dirty = value.trim() !== String(pc.value) || description !== pc.description;

  const apply = async () => {
    const patch: { value?: number; description?: string; kind: string } = { kind: pc.kind };
    if (value.trim() !== String(pc.value)) {
      const n = Number(value.trim());
      if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) {
        setError({ field: 'value', message: 'must be a whole number (larger is more important)' });
        return;
      }
      patch.value = n;
    }
    if (description !== pc.description) {
      patch.description = description;
    }
    setBusy(true);
    setError(null);
    try {
      await props.model.client.patchPriorityClass(pc.name, patch);
      await props.onApplied(`${pc.kind} ${pc.name}`);
    } catch (err) {
      const field = err instanceof ApiError && err.field === 'description' ? 'description' : 'value';
      setError({ field, message: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="jp-gpuqueue-admin-card" data-admin-priority-class={pc.name}>
      <div className="jp-gpuqueue-admin-card-head">
        <span className="jp-gpuqueue-cq-name">{pc.name}</span>
        <span className="jp-gpuqueue-muted">
          {pc.kind}
          {pc.globalDefault ? ' · default' : ''}
        </span>
      </div>
      <div className="jp-gpuqueue-row">
        <label className="jp-gpuqueue-field jp-gpuqueue-admin-value">
          <span>Value</span>
          <input
            className={`jp-mod-styled ${error?.field === 'value' ? 'jp-mod-invalid' : ''}`}
            data-admin-field="value"
            value={value}
            inputMode="numeric"
            onChange={e => {
              setValue(e.target.value);
              setError(null);
            }}
          />
        </label>
        <label className="jp-gpuqueue-field jp-gpuqueue-admin-description-field">
          <span>Description</span>
          <textarea
            className={`jp-mod-styled jp-gpuqueue-admin-description ${error?.field === 'description' ? 'jp-mod-invalid' : ''}`}
            data-admin-field="description"
            rows={2}
            value={description}
            onChange={e => {
              setDescription(e.target.value);
              setError(null);
            }}
          />
        </label>
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept jp-gpuqueue-admin-inline-button"
          disabled={!dirty || busy}
          onClick={() => void apply()}
        >
          Apply
        </button>
      </div>
      {error && (
        <div className="jp-gpuqueue-field-error" data-field={error.field} role="alert">
          {error.message}
        </div>
      )}
    </div>
  );
}

export function PriorityEditor(props: {
  model: QueueModel;
  classes: IAdminPriorityClass[];
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  return (
    <div className="jp-gpuqueue-admin-section">
      <div className="jp-gpuqueue-muted jp-gpuqueue-admin-help">
        A new value applies to workloads submitted from now on; queued and running ones keep theirs.
      </div>
      {props.classes.map(pc => (
        <PriorityRow key={`${pc.kind}/${pc.name}`} model={props.model} pc={pc} onApplied={props.onApplied} />
      ))}
    </div>
  );
}

export function PricesEditor(props: {
  model: QueueModel;
  prices: IAdminPrices;
  onApplied: (what: string) => Promise<void>;
}): JSX.Element {
  const { prices } = props;
  const initial = React.useMemo(() => {
    const d: Record<string, string> = {};
    for (const e of prices.effective) {
      d[e.flavor] = e.flavor in prices.flavors ? String(prices.flavors[e.flavor]) : '';
    }
    return d;
  }, [prices]);
  const [draft, setDraft] = React.useState(initial);
  const [fallback, setFallback] = React.useState(String(prices.default));
  const [errors, setErrors] = React.useState<Record<string, string>>({});
  const [busy, setBusy] = React.useState(false);
  useResetOnChange(JSON.stringify(prices), () => {
    setDraft(initial);
    setFallback(String(prices.default));
  });

  const save = async () => {
    const flavors: Record<string, number> = {};
    const errs: Record<string, string> = {};
    for (const [flavor, text] of Object.entries(draft)) {
      if (text.trim() === '') {
        continue;
      }
      const n = Number(text);
      if (!Number.isFinite(n)) {
        errs[`flavors.${flavor}`] = 'must be a number of USD per GPU-hour';
      }
      flavors[flavor] = n;
    }
    const def = Number(fallback);
    if (fallback.trim() === '' || !Number.isFinite(def)) {
      errs.default = 'must be a number of USD per GPU-hour';
    }
    setErrors(errs);
    if (Object.keys(errs).length) {
      return;
    }
    setBusy(true);
    try {
      await props.model.client.setPrices({ flavors, default: def });
      await props.onApplied('Prices');
    } catch (err) {
      const field = err instanceof ApiError && err.field ? err.field : 'default';
      setErrors({ [field]: (err as Error).message });
    } finally {
      setBusy(false);
    }
  };

  const fieldError = (field: string) =>
    errors[field] ? (
      <div className="jp-gpuqueue-field-error" data-field={field} role="alert">
        {errors[field]}
      </div>
    ) : null;
  return (
    <div className="jp-gpuqueue-admin-section" data-admin-prices="">
      <table className="jp-gpuqueue-admin-table">
        <thead>
          <tr>
            <th>ResourceFlavor · now</th>
            <th>USD / GPU-hour</th>
          </tr>
        </thead>
        <tbody>
          {prices.effective.map(e => (
            <React.Fragment key={e.flavor}>
              <tr data-price-flavor={e.flavor}>
                <td className="jp-gpuqueue-admin-what">
                  <span>{e.flavor}</span>
                  <span
                    className={`jp-gpuqueue-muted ${e.source === 'default' ? 'jp-gpuqueue-unpriced' : ''}`}
                  >
                    {e.source === 'default'
                      ? `no price: billed at the default ${e.usdPerGpuHour.toFixed(2)}`
                      : e.source === 'family'
                        ? `$${e.usdPerGpuHour.toFixed(2)} (priced as ${e.model ?? 'its GPU'})`
                        : `$${e.usdPerGpuHour.toFixed(2)} (${e.source})`}
                  </span>
                </td>
                <td>
                  <input
                    className={`jp-mod-styled jp-gpuqueue-admin-input ${errors[`flavors.${e.flavor}`] ? 'jp-mod-invalid' : ''}`}
                    aria-label={`price of ${e.flavor}`}
                    value={draft[e.flavor] ?? ''}
                    placeholder={
                      e.source === 'base flavor' ? 'base' : e.source === 'family' ? (e.model ?? 'family') : 'default'
                    }
                    onChange={ev => setDraft({ ...draft, [e.flavor]: ev.target.value })}
                  />
                </td>
              </tr>
              {errors[`flavors.${e.flavor}`] && (
                <tr className="jp-gpuqueue-admin-error-row">
                  <td colSpan={2}>{fieldError(`flavors.${e.flavor}`)}</td>
                </tr>
              )}
            </React.Fragment>
          ))}
          <tr>
            <td className="jp-gpuqueue-admin-what">
              <span>other flavors</span>
              <span className="jp-gpuqueue-muted">default</span>
            </td>
            <td>
              <input
                className={`jp-mod-styled jp-gpuqueue-admin-input ${errors.default ? 'jp-mod-invalid' : ''}`}
                aria-label="default price"
                value={fallback}
                onChange={ev => setFallback(ev.target.value)}
              />
            </td>
          </tr>
        </tbody>
      </table>
      {fieldError('default')}
      <div className="jp-gpuqueue-muted jp-gpuqueue-admin-help">
        A MIG slice costs its share of the GPU ({prices.migSlicesPerGpu} slices); running jobs keep
        the price they started with.
      </div>
      <div className="jp-gpuqueue-actions">
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept"
          disabled={busy}
          onClick={() => void save()}
        >
          {busy ? 'Saving…' : 'Save prices'}
        </button>
      </div>
    </div>
  );
}
