/**
 * The longest maximum run time each team may ask for (issue 34 item 10: 999 days was accepted),
 * under the admin view's Quotas tab: one row per team with its cap as a duration ("7d", "12h";
 * empty: no cap). "Apply" stores it (`PUT admin/runtime-caps/{namespace}`), "Use default" drops
 * the stored one (`DELETE`; `c.GpuQueueApp.max_runtime_caps` applies again). The team's new
 * submissions asking for more are refused naming the field and the cap; the submit form shows it.
 */
import * as React from 'react';

import { ApiError, IRuntimeCaps } from '../../api';
import { formatDuration, parseDuration } from '../../format';
import { QueueModel } from '../../model';
import { useResetOnChange } from './useResetOnChange';

type Team = IRuntimeCaps['teams'][number];

/** A cap in seconds as the field shows it: "7d", "1d12h", "90m"; "" for none. */
export function capText(seconds: number | null | undefined): string {
  if (!seconds) {
    return '';
  }
  const units: Array<[string, number]> = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
  let rest = seconds;
  let out = '';
  for (const [u, n] of units) {
    if (rest >= n) {
      out += `${Math.floor(rest / n)}${u}`;
      rest %= n;
    }
  }
  return out;
}

function TeamCap(props: {
  model: QueueModel;
  team: Team;
  onChanged: (caps: IRuntimeCaps, message: string) => void;
}): JSX.Element {
  const { team, model } = props;
  const [draft, setDraft] = React.useState(capText(team.maxRuntimeSeconds));
  const [error, setError] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);
  useResetOnChange(JSON.stringify(team), () => setDraft(capText(team.maxRuntimeSeconds)));

  const text = draft.trim();
  const seconds = text === '' ? null : parseDuration(text);
  const local = text !== '' && (seconds === null || !Number.isInteger(seconds)) ? 'a duration such as 12h, 7d or 1d12h' : null;
  const dirty = text !== capText(team.maxRuntimeSeconds);

  const send = async (message: string, call: () => Promise<IRuntimeCaps>) => {
    setBusy(true);
    setError(null);
    try {
      props.onChanged(await call(), message);
    } catch (err) {
      setError(err instanceof ApiError && err.field ? `${err.field}: ${err.message}` : (err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const id = `jp-gpuqueue-cap-${team.namespace}`;
  return (
    <div className="jp-gpuqueue-cap-row" data-cap-team={team.namespace}>
      <label htmlFor={id} className="jp-gpuqueue-cap-team">
        {team.namespace}
      </label>
      <input
        id={id}
        className={`jp-mod-styled jp-gpuqueue-admin-input jp-gpuqueue-cap-input ${local || error ? 'jp-mod-invalid' : ''}`}
        data-cap-field="maxRuntimeSeconds"
        placeholder="no cap"
        spellCheck={false}
        value={draft}
        disabled={busy}
        aria-invalid={!!(local || error)}
        aria-describedby={`${id}-state`}
        onChange={e => setDraft(e.target.value)}
        onKeyDown={e => {
          if (e.key === 'Enter' && dirty && !local) {
            void send(`${team.namespace}: maximum run time ${seconds === null ? 'no cap' : formatDuration(seconds)}`,
              () => model.client.setRuntimeCap(team.namespace, seconds));
          }
        }}
      />
      <button
        type="button"
        className="jp-mod-styled jp-mod-accept jp-gpuqueue-cap-apply"
        disabled={busy || !dirty || !!local}
        onClick={() =>
          void send(`${team.namespace}: maximum run time ${seconds === null ? 'no cap' : formatDuration(seconds)}`,
            () => model.client.setRuntimeCap(team.namespace, seconds))
        }
      >
        Apply
      </button>
      <span className="jp-gpuqueue-muted jp-gpuqueue-cap-state" id={`${id}-state`}>
        {team.maxRuntimeSeconds ? `at most ${formatDuration(team.maxRuntimeSeconds)}` : 'no cap'}
        {team.stored ? ` · set by ${team.updatedBy ?? '?'}` : team.configuredSeconds ? ' · configured' : ''}
        {team.stored && (
          <>
            {' · '}
            <button
              type="button"
              className="jp-gpuqueue-link-button"
              disabled={busy}
              onClick={() =>
                void send(`${team.namespace}: maximum run time back to the configured one`,
                  () => model.client.deleteRuntimeCap(team.namespace))
              }
            >
              Use default
            </button>
          </>
        )}
      </span>
      {(local || error) && <div className="jp-gpuqueue-form-error jp-gpuqueue-cap-error">{local ?? error}</div>}
    </div>
  );
}

export function RuntimeCapsEditor(props: {
  model: QueueModel;
  onApplied: (what: string, message?: string) => Promise<void> | void;
}): JSX.Element {
  const { model } = props;
  const [caps, setCaps] = React.useState<IRuntimeCaps | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  React.useEffect(() => {
    model.client.runtimeCaps().then(setCaps, e => setError((e as Error).message));
  }, [model]);
  return (
    <div className="jp-gpuqueue-admin-card jp-gpuqueue-caps">
      <div className="jp-gpuqueue-admin-card-head">
        <span className="jp-gpuqueue-caps-title">Maximum run time per team</span>
      </div>
      <div className="jp-gpuqueue-muted jp-gpuqueue-caps-hint">
        A team's jobs and notebook leases may not ask for more (empty: no cap). Running work keeps its time.
      </div>
      {error && <div className="jp-gpuqueue-form-error">{error}</div>}
      {caps?.teams.map(t => (
        <TeamCap
          key={t.namespace}
          model={model}
          team={t}
          onChanged={(next, message) => {
            setCaps(next);
            void props.onApplied('maximum run time', `${message}: applies to new submissions`);
          }}
        />
      ))}
    </div>
  );
}
