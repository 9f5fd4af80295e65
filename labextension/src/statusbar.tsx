/**
 * The GPU queue's status-bar item: "GPU · #3 · 2 running · $4.20".
 *
 * - `#3`: the 1-based position (in its ClusterQueue) of the user's next pending job; "held" when
 *   the only pending jobs wait for a budget; left out when nothing is pending;
 * - `2 running`: the user's running jobs;
 * - `$4.20`: the month-to-date spend of the user's team (default LocalQueue's namespace),
 *   ticking between updates at the team's burn rate; styled as a warning once the team's soft
 *   budget share is reached, and as exceeded beyond the budget.
 *
 * The tooltip names the user's next pending job (the earliest estimated start), its position,
 * its estimated start with the range, and what it waits for.
 *
 * Jobs come from the panel's QueueModel, kept current by the event stream; the team's spend is
 * refetched (`gpuqueue/api/budgets`) when a workload or budgets event arrives, and every minute.
 * Clicking the item opens the GPU Queue panel.
 */
import * as React from 'react';
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ReactWidget } from '@jupyterlab/ui-components';

import { budgets, IBudgets, IBudgetStatus, spentNow, usd } from './components/costs/costsApi';
import { workloadKey } from './api';
import { clockTime, nextPending, startSummary, waitingForText } from './estimate';
import { QueueModel } from './model';

export const STATUS_ITEM_ID = 'jupyter-gpuqueue:status';

export interface IStatusSummary {
  position: number | null;
  held: number;
  running: number;
}

/** Position (1-based) of the user's next pending job, held and running counts. */
export function summarize(model: QueueModel): IStatusSummary {
  let position: number | null = null;
  let held = 0;
  let running = 0;
  for (const { workload: w } of model.workloads) {
    if (w.state === 'Running') {
      running++;
    } else if (w.state === 'Pending') {
      if (w.reason === 'BudgetExceeded') {
        held++;
      } else if (typeof w.positionInClusterQueue === 'number') {
        const p = w.positionInClusterQueue + 1;
        position = position === null ? p : Math.min(position, p);
      }
    }
  }
  return { position, held, running };
}

/**
 * The tooltip's first line: the user's next pending job (earliest estimated start, else best
 * position), its position and its estimated start, and what it waits for.
 */
export function nextJobLine(model: QueueModel, nowMs: number): string {
  const next = nextPending(
    model.workloads
      .map(e => e.workload)
      .filter(w => w.reason !== 'BudgetExceeded' || w.estimatedStartAt != null)
  );
  if (!next) {
    return 'No job of yours is waiting in a queue';
  }
  const position =
    typeof next.positionInClusterQueue === 'number'
      ? `, #${next.positionInClusterQueue + 1} in ${next.clusterQueue}`
      : '';
  const lines = [
    `Your next pending job: ${workloadKey(next)}${position}`,
    `  ${startSummary(next, nowMs)}` +
      (next.estimatedStartAt != null && next.estimatedStartAt * 1000 > nowMs
        ? `, at ~${clockTime(next.estimatedStartAt, nowMs)}`
        : '')
  ];
  const wf = next.waitingFor?.[0];
  if (wf && next.estimatedStartAt != null) {
    lines.push(`  waiting for ${waitingForText(wf, model.info?.user ?? null, nowMs)}`);
  }
  return lines.join('\n');
}

function StatusView(props: { model: QueueModel; onClick: () => void }): JSX.Element {
  const { model } = props;
  const [, setVersion] = React.useState(0);
  const [view, setView] = React.useState<IBudgets | null>(null);
  const [offsetMs, setOffsetMs] = React.useState(0);

  React.useEffect(() => {
    let disposed = false;
    let timer = 0;
    const fetchBudgets = () => {
      budgets(model.client)
        .then(v => {
          if (!disposed) {
            setOffsetMs(Date.now() - v.at * 1000);
            setView(v);
          }
        })
        .catch(() => undefined); // the panel shows connection problems
    };
    const later = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(fetchBudgets, 300); // coalesce a burst of events
    };
    const onChange = () => setVersion(v => v + 1);
    model.changed.connect(onChange);
    model.workloadChanged.connect(later);
    model.budgetsChanged.connect(later);
    fetchBudgets();
    const poll = window.setInterval(fetchBudgets, 60000);
    const tick = window.setInterval(onChange, 1000); // the spend ticks with running work
    return () => {
      disposed = true;
      model.changed.disconnect(onChange);
      model.workloadChanged.disconnect(later);
      model.budgetsChanged.disconnect(later);
      window.clearTimeout(timer);
      window.clearInterval(poll);
      window.clearInterval(tick);
    };
  }, [model]);

  const s = summarize(model);
  const team = view?.defaultTeam ?? view?.myTeams[0] ?? null;
  const status: IBudgetStatus | undefined = view?.teams.find(t => t.namespace === team);
  const spent = status ? spentNow(status, offsetMs) : null;
  const parts = ['GPU'];
  if (s.position !== null) {
    parts.push(`#${s.position}`);
  } else if (s.held > 0) {
    parts.push('held');
  }
  parts.push(`${s.running} running`);
  if (spent !== null) {
    parts.push(usd(spent));
  }
  const state = status?.state ?? 'none';
  const budget = status?.budget;
  const title = [
    nextJobLine(model, Date.now()),
    s.held > 0 ? `${s.held} held: the team's hard budget is spent (BudgetExceeded)` : '',
    `${s.running} running`,
    status
      ? `${status.namespace} has spent ${usd(spent)} in ${status.month}` +
        (budget
          ? ` of its ${usd(budget.monthlyUSD)} budget (${Math.round(((spent ?? 0) / budget.monthlyUSD) * 100)}%` +
            `${state === 'warning' ? `, warning at ${Math.round(budget.warnAt * 100)}%` : ''}` +
            `${state === 'exceeded' ? ', exceeded' : ''})`
          : ' (no budget)')
      : ''
  ]
    .filter(Boolean)
    .join('\n');
  return (
    <div
      className={`jp-gpuqueue-status jp-gpuqueue-status-${state}`}
      title={title}
      data-state={state}
      onClick={props.onClick}
    >
      {parts.join(' · ')}
    </div>
  );
}

class StatusItem extends ReactWidget {
  constructor(
    private readonly _model: QueueModel,
    private readonly _open: () => void
  ) {
    super();
    this.id = 'jp-gpuqueue-statusbar';
    this.addClass('jp-gpuqueue-statusbar');
  }

  render(): JSX.Element {
    return <StatusView model={this._model} onClick={this._open} />;
  }
}

/**
 * Add the item to JupyterLab's status bar (when the application has one) and start the model's
 * event stream, which the item needs even while the panel stays closed.
 */
export function addStatusBarItem(app: JupyterFrontEnd, model: QueueModel, panelId: string): void {
  void app
    .resolveOptionalService(IStatusBar)
    .then(statusBar => {
      if (!statusBar) {
        return;
      }
      const item = new StatusItem(model, () => app.shell.activateById(panelId));
      statusBar.registerStatusItem(STATUS_ITEM_ID, {
        item,
        align: 'left',
        rank: 50,
        isActive: () => true
      });
      model.start();
    })
    .catch(reason => console.warn('jupyter-gpuqueue: no status bar', reason));
}
