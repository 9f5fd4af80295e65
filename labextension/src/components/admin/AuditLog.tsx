/**
 * The audit log: who changed what, when, before → after (only the values that differ), and the
 * warnings a change was applied with (quota above the hardware).
 */
import * as React from 'react';

import { IAuditEntry } from '../../api';
import { formatDateTime } from '../../format';
import { WARNING_STYLE } from './QuotaEditor';

/** Leaves of a JSON value as path → text; list items with a `name` are keyed by it. */
function flatten(value: any, path: string, out: Map<string, string>): void {
  if (Array.isArray(value)) {
    value.forEach((item, i) => {
      const key = item && typeof item === 'object' && 'name' in item ? String(item.name) : String(i);
      flatten(item, path ? `${path}/${key}` : key, out);
    });
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === 'name' && path) {
        continue;
      }
      flatten(v, path ? `${path}.${k}` : k, out);
    }
  } else if (value !== undefined) {
    out.set(path, value === null ? 'null' : String(value));
  }
}

/** "path: before → after" for every value that changed (YAML texts are summarised). */
export function auditChanges(before: any, after: any): string[] {
  const strip = (v: any) => (v && typeof v === 'object' && 'kueueYaml' in v ? v.summary : v);
  const b = new Map<string, string>();
  const a = new Map<string, string>();
  flatten(strip(before), '', b);
  flatten(strip(after), '', a);
  const lines: string[] = [];
  for (const key of new Set([...b.keys(), ...a.keys()])) {
    if (b.get(key) !== a.get(key)) {
      const label = key.replace(/^spec\.resourceGroups\/\d+\.flavors\//, '').replace(/\.resources\//, ' ');
      lines.push(`${label}: ${b.get(key) ?? '—'} → ${a.get(key) ?? '—'}`);
    }
  }
  return lines;
}

export function AuditLog(props: { entries: IAuditEntry[]; total: number }): JSX.Element {
  if (!props.entries.length) {
    return <div className="jp-gpuqueue-muted jp-gpuqueue-empty">No change yet.</div>;
  }
  return (
    <ul className="jp-gpuqueue-admin-audit">
      {props.entries.map(e => {
        const changes = auditChanges(e.before, e.after);
        const warnings: string[] = (e as IAuditEntry & { warnings?: string[] }).warnings ?? [];
        return (
          <li key={e.id} data-audit-id={e.id}>
            <div className="jp-gpuqueue-admin-audit-head">
              <span className="jp-gpuqueue-cq-name">{e.operation}</span>
              <span>{e.target}</span>
            </div>
            <div className="jp-gpuqueue-muted">
              {e.actor} · {formatDateTime(e.at)}
            </div>
            {changes.length > 0 && (
              <ul className="jp-gpuqueue-admin-changes">
                {changes.slice(0, 8).map(c => (
                  <li key={c}>
                    <code>{c}</code>
                  </li>
                ))}
                {changes.length > 8 && <li className="jp-gpuqueue-muted">… {changes.length - 8} more</li>}
              </ul>
            )}
            {warnings.map(w => (
              <div key={w} style={WARNING_STYLE} data-audit-warning="">
                {w}
              </div>
            ))}
          </li>
        );
      })}
      {props.total > props.entries.length && (
        <li className="jp-gpuqueue-muted">… {props.total - props.entries.length} older entries</li>
      )}
    </ul>
  );
}
