/**
 * Free / total devices per ResourceFlavor and MIG profile, and the pending lists of the user's
 * ClusterQueues with quota usage.
 */
import * as React from 'react';

import { IClusterQueue, IInfo, IInventorySummary, IQueues, IQueueResource } from '../api';
import { migProfileOf } from '../format';

function Bar(props: { value: number; total: number; kind: 'free' | 'used' }): JSX.Element {
  const pct = props.total > 0 ? Math.max(0, Math.min(100, (100 * props.value) / props.total)) : 0;
  return (
    <div className={`jp-gpuqueue-bar jp-gpuqueue-bar-${props.kind}`} aria-hidden="true">
      <div className="jp-gpuqueue-bar-fill" style={{ width: `${pct}%` }} />
    </div>
  );
}

export function Availability(props: { summary: IInventorySummary[] | null }): JSX.Element {
  const summary = props.summary;
  if (!summary) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }
  if (summary.length === 0) {
    return <div className="jp-gpuqueue-muted">No GPUs in the inventory.</div>;
  }
  const rows = [...summary].sort(
    (a, b) => a.flavor.localeCompare(b.flavor) || a.resource.localeCompare(b.resource)
  );
  return (
    <div className="jp-gpuqueue-avail">
      {rows.map(r => {
        const mig = migProfileOf(r.resource);
        return (
          <div
            className="jp-gpuqueue-avail-row"
            key={`${r.flavor}|${r.resource}`}
            data-flavor={r.flavor}
            data-resource={r.resource}
          >
            <div className="jp-gpuqueue-avail-label">
              <span className="jp-gpuqueue-avail-name">
                {r.flavor}
                {mig && <span className="jp-gpuqueue-mig"> · MIG {mig}</span>}
              </span>
              <span className="jp-gpuqueue-avail-count">
                <b>{r.free}</b> / {r.total} free
              </span>
            </div>
            <Bar value={r.free} total={r.total} kind="free" />
          </div>
        );
      })}
    </div>
  );
}

function quantity(q: string | null | undefined): number {
  if (q == null || q === '') {
    return 0;
  }
  const m = /^(\d+(?:\.\d+)?)(m)?$/.exec(q.trim());
  if (!m) {
    return Number(q) || 0;
  }
  return m[2] ? parseFloat(m[1]) / 1000 : parseFloat(m[1]);
}

function QuotaRow(props: { r: IQueueResource; cohort: boolean }): JSX.Element {
  const { r } = props;
  const mayBorrow = props.cohort && quantity(r.borrowingLimit ?? '1') > 0;
  const used = quantity(r.usage);
  const nominal = quantity(r.nominalQuota);
  const borrowed = quantity(r.borrowed);
  const mig = migProfileOf(r.resource);
  const limits =
    `nominalQuota ${r.nominalQuota}` +
    (r.borrowingLimit != null ? `, borrowingLimit ${r.borrowingLimit}` : '') +
    (r.lendingLimit != null ? `, lendingLimit ${r.lendingLimit}` : '');
  return (
    <div className="jp-gpuqueue-avail-row" title={limits}>
      <div className="jp-gpuqueue-avail-label">
        <span className="jp-gpuqueue-avail-name">
          {r.flavor}
          {mig && <span className="jp-gpuqueue-mig"> · MIG {mig}</span>}
        </span>
        <span className="jp-gpuqueue-avail-count">
          {nominal === 0 && used === 0 ? (
            <span className="jp-gpuqueue-muted">
              no nominal quota{mayBorrow ? ' · may borrow' : ''}
            </span>
          ) : (
            <>
              <b>{r.usage}</b> / {r.nominalQuota} used
            </>
          )}
          {borrowed > 0 && (
            <span className="jp-gpuqueue-borrowed"> · {r.borrowed} borrowed</span>
          )}
        </span>
      </div>
      <Bar value={used} total={Math.max(nominal, used)} kind="used" />
    </div>
  );
}

function ClusterQueueView(props: { cq: IClusterQueue; user: string }): JSX.Element {
  const { cq } = props;
  // The panel is about GPUs: cpu / memory quotas stay in `jupyter gpuqueue` and the API.
  const gpuResources = cq.resources.filter(r => r.resource.startsWith('nvidia.com/'));
  const pending = [...cq.pending].sort(
    (a, b) => a.positionInClusterQueue - b.positionInClusterQueue
  );
  return (
    <div className="jp-gpuqueue-cq" data-cluster-queue={cq.name}>
      <div className="jp-gpuqueue-cq-head">
        <span className="jp-gpuqueue-cq-name">{cq.name}</span>
        <span className="jp-gpuqueue-muted">
          {[cq.cohort ? `cohort ${cq.cohort}` : null, cq.queueingStrategy]
            .filter(Boolean)
            .join(' · ')}
        </span>
      </div>
      <div className="jp-gpuqueue-muted">
        {cq.admittedWorkloads} admitted · {cq.pendingWorkloads} pending
      </div>
      {pending.length > 0 && (
        <ol className="jp-gpuqueue-pending">
          {pending.map((p, i) => (
            <li
              key={p.name === null ? `${p.namespace}#${i}` : `${p.namespace}/${p.name}`}
              className={p.owner !== null && p.owner === props.user ? 'jp-mod-mine' : ''}
              data-gpuqueue-pending={p.name === null ? undefined : `${p.namespace}/${p.name}`}
              title={p.name === null ? `a workload of ${p.namespace} (another team's: its name is not shown)` : p.message ?? ''}
            >
              <span className="jp-gpuqueue-pos">{p.positionInClusterQueue + 1}</span>
              <span className="jp-gpuqueue-pending-name">
                {p.name === null ? `${p.namespace} · another team's` : `${p.namespace}/${p.name}`}
              </span>
              <span className="jp-gpuqueue-muted">
                {p.owner ?? ''}
                {p.reason ? `${p.owner ? ' · ' : ''}${p.reason}` : ''}
              </span>
            </li>
          ))}
        </ol>
      )}
      {gpuResources.length > 0 && (
        <div className="jp-gpuqueue-avail jp-gpuqueue-quota">
          <div className="jp-gpuqueue-subhead">GPU quota</div>
          {gpuResources.map(r => (
            <QuotaRow key={`${r.flavor}|${r.resource}`} r={r} cohort={!!cq.cohort} />
          ))}
        </div>
      )}
    </div>
  );
}

export function TeamQueue(props: { queues: IQueues | null; info: IInfo | null }): JSX.Element {
  const { queues, info } = props;
  if (!queues || !info) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }
  const mine = new Set(info.localQueues.map(q => q.clusterQueue));
  const cqs = queues.clusterQueues.filter(cq => mine.size === 0 || mine.has(cq.name));
  if (cqs.length === 0) {
    return <div className="jp-gpuqueue-muted">No ClusterQueue for your LocalQueues.</div>;
  }
  return (
    <div className="jp-gpuqueue-team">
      {cqs.map(cq => (
        <ClusterQueueView key={cq.name} cq={cq} user={info.user} />
      ))}
    </div>
  );
}
