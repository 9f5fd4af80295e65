/**
 * The admin view (shown only when `/info` says `permissions.admin`): ClusterQueue quotas and
 * cohorts and each team's maximum run time, usage per user with each team's waits and preemption
 * losses, every team's jobs (cancel any), priority classes, prices, idle notebook reclaim per team,
 * Kueue YAML import/export, and the audit log. Every change
 * goes through the admin API, which validates it as Kueue does and applies it live; its errors are
 * shown next to the field they name.
 */
import * as React from 'react';

import { ApiError, IAdminConfig, IAuditEntry } from '../../api';
import { formatDateTime } from '../../format';
import { QueueModel } from '../../model';
import { AdminJobs } from './AdminJobs';
import { AuditLog } from './AuditLog';
import { IdlePolicyEditor } from './IdlePolicy';
import { PricesEditor, PriorityEditor } from './PriorityAndPrices';
import { CapacityWarnings, ClusterQueueEditor } from './QuotaEditor';
import { RuntimeCapsEditor } from './RuntimeCaps';
import { UsageView } from './UsageView';
import { YamlPanel } from './YamlPanel';

type Tab = 'quotas' | 'usage' | 'jobs' | 'priorities' | 'prices' | 'idle' | 'yaml' | 'audit';
const TABS: Array<[Tab, string]> = [
  ['quotas', 'Quotas'],
  ['usage', 'Usage'],
  ['jobs', 'Jobs'],
  ['priorities', 'Priorities'],
  ['prices', 'Prices'],
  ['idle', 'Idle'],
  ['yaml', 'YAML'],
  ['audit', 'Audit']
];

export function AdminView(props: { model: QueueModel }): JSX.Element {
  const { model } = props;
  const [config, setConfig] = React.useState<IAdminConfig | null>(null);
  const [audit, setAudit] = React.useState<IAuditEntry[]>([]);
  const [auditTotal, setAuditTotal] = React.useState(0);
  const [tab, setTab] = React.useState<Tab>('quotas');
  const [error, setError] = React.useState<string | null>(null);
  const [notice, setNotice] = React.useState<string | null>(null);

  const reload = React.useCallback(async () => {
    try {
      const [c, a] = await Promise.all([model.client.adminConfig(), model.client.audit(50)]);
      setConfig(c);
      setAudit(a.items);
      setAuditTotal(a.total);
      setError(null);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    }
  }, [model]);

  React.useEffect(() => {
    void reload();
  }, [reload]);

  /** After a change: the admin view, and the panel's queues and info, show the new state. */
  const applied = async (what: string, message?: string) => {
    setNotice(message ?? `${what}: applied; the next scheduling cycle uses it`);
    await reload();
    void model.refresh();
  };

  if (error && !config) {
    return <div className="jp-gpuqueue-form-error">{error}</div>;
  }
  if (!config) {
    return <div className="jp-gpuqueue-muted">Loading…</div>;
  }
  return (
    <div className="jp-gpuqueue-admin">
      <div className="jp-gpuqueue-segmented jp-gpuqueue-admin-tabs" role="tablist">
        {TABS.map(([id, label]) => (
          <button
            key={id}
            type="button"
            role="tab"
            aria-selected={tab === id}
            data-admin-tab={id}
            className={tab === id ? 'jp-mod-active' : ''}
            onClick={() => {
              setTab(id);
              setNotice(null);
            }}
          >
            {label}
            {id === 'audit' && auditTotal > 0 ? ` (${auditTotal})` : ''}
          </button>
        ))}
      </div>
      {notice && (
        <div className="jp-gpuqueue-submitted jp-gpuqueue-admin-notice" role="status">
          {notice}
        </div>
      )}
      {config.stored && (
        <div className="jp-gpuqueue-muted jp-gpuqueue-admin-stored">
          Configuration set by {config.stored.updatedBy},{' '}
          {formatDateTime(config.stored.updatedAt)} (stored; used at restart)
        </div>
      )}
      {tab === 'quotas' && (
        <CapacityWarnings warnings={(config as IAdminConfig & { warnings?: string[] }).warnings ?? []} />
      )}
      {tab === 'quotas' &&
        config.clusterQueues.map(cq => (
          <ClusterQueueEditor
            key={cq.name}
            model={model}
            cq={cq}
            cohorts={config.cohorts}
            onApplied={applied}
          />
        ))}
      {tab === 'quotas' && <RuntimeCapsEditor model={model} onApplied={applied} />}
      {tab === 'usage' && <UsageView model={model} />}
      {tab === 'jobs' && <AdminJobs model={model} onApplied={applied} />}
      {tab === 'priorities' && (
        <PriorityEditor model={model} classes={config.priorityClasses} onApplied={applied} />
      )}
      {tab === 'prices' && (
        <PricesEditor model={model} prices={config.prices} onApplied={applied} />
      )}
      {tab === 'idle' && <IdlePolicyEditor model={model} onApplied={applied} />}
      {tab === 'yaml' && <YamlPanel model={model} onApplied={applied} />}
      {tab === 'audit' && <AuditLog entries={audit} total={auditTotal} />}
    </div>
  );
}
