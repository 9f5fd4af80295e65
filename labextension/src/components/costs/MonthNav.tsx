/**
 * The month navigation of a report view (Costs, Admin → Usage): previous / next month (no month
 * after the current one) and the CSV downloads of that month's reports.
 */
import * as React from 'react';

import { GpuQueueClient } from '../../api';
import { ReportKind, reportCsvUrl, shiftMonth } from './costsApi';

export function MonthNav(props: {
  client: GpuQueueClient;
  month: string;
  live: boolean;
  setMonth: (month: string) => void;
  /** the reports offered as CSV, in order */
  csv: ReportKind[];
}): JSX.Element {
  const { client, month, live, setMonth, csv } = props;
  return (
    <div className="jp-gpuqueue-costs-nav">
      <button type="button" className="jp-gpuqueue-icon-button" title="Previous month" aria-label="Previous month"
        onClick={() => setMonth(shiftMonth(month, -1))}>‹</button>
      <span className="jp-gpuqueue-costs-month">{month}{live ? ' (to date)' : ''}</span>
      <button type="button" className="jp-gpuqueue-icon-button" title="Next month" aria-label="Next month"
        disabled={live} onClick={() => setMonth(shiftMonth(month, 1))}>›</button>
      <span className="jp-gpuqueue-costs-csv">
        CSV:{' '}
        {csv.map((kind, i) => (
          <React.Fragment key={kind}>
            {i > 0 && ' · '}
            <a href={reportCsvUrl(client, kind, month)} download>{kind}</a>
          </React.Fragment>
        ))}
      </span>
    </div>
  );
}
