/**
 * The availability grid: every node's GPUs, one row each, drawn over the GPU's seven compute
 * slices. A whole GPU is one cell; a GPU in MIG mode shows each MIG device (1g, 2g, 3g, …) as wide
 * as its slices. Free cells are green, used ones show who holds them (the workload), slices not
 * partitioned into a device are hatched. Under each node, every held device is listed with its
 * holder: the user, the team, the workload and how long it has run (issue 34 item 11; another
 * team's workload by its team alone, as the API shows it).
 */
import * as React from 'react';

import { IDeviceHolder, IInventory } from '../../api';
import { formatClock } from '../../format';

interface IMigView {
  uuid: string;
  profile: string;
  slices: number;
  assignedTo: string | null;
  holder?: IDeviceHolder | null;
}

interface IGpuView {
  index: number;
  uuid: string;
  product: string;
  memoryMiB: number;
  assignedTo: string | null;
  holder?: IDeviceHolder | null;
  mig: IMigView[] | null;
}

interface INodeView {
  name: string;
  gpus: IGpuView[];
}

const SLICES = 7;

function holder(key: string | null): string {
  return key ? key.split('/').pop() ?? key : '';
}

/** "alice · team-a/train · 12:04", or "team-b (another team's) · 3:10". */
function holderText(h: IDeviceHolder | null | undefined, key: string | null, nowMs: number): string {
  if (!h) {
    return key ?? '';
  }
  const who = h.name === null ? `${h.namespace} (another team's)` : `${h.owner} · ${h.namespace}/${h.name}`;
  return h.since ? `${who} · ${formatClock(nowMs / 1000 - h.since)}` : who;
}

/** One held device in the list under its node: which device, who holds it, for how long. */
function HolderLine(props: { device: string; holder: IDeviceHolder | null | undefined; assignedTo: string; nowMs: number }): JSX.Element {
  const h = props.holder;
  const running = h?.since ? formatClock(props.nowMs / 1000 - h.since) : null;
  return (
    <li className="jp-gpuqueue-holder" data-holder={props.assignedTo}>
      <span className="jp-gpuqueue-holder-device">{props.device}</span>{' '}
      {h && h.name !== null ? (
        <>
          <b className="jp-gpuqueue-holder-owner">{h.owner}</b>
          <span className="jp-gpuqueue-muted"> · </span>
          <span className="jp-gpuqueue-holder-name">
            <span className="jp-gpuqueue-muted">{h.namespace}/</span>
            {h.name}
          </span>
        </>
      ) : (
        <span className="jp-gpuqueue-muted">{h ? `${h.namespace} (another team's)` : props.assignedTo}</span>
      )}
      {running && (
        <span className="jp-gpuqueue-holder-time" title={h?.kind === 'NotebookLease' ? 'notebook server running for' : 'running for'}>
          {' '}· {running}
        </span>
      )}
    </li>
  );
}

function GpuRow(props: { gpu: IGpuView; nowMs: number }): JSX.Element {
  const g = props.gpu;
  const cells: JSX.Element[] = [];
  if (g.mig === null) {
    cells.push(
      <div key="whole" className={`jp-gpuqueue-slot ${g.assignedTo ? 'jp-mod-used' : 'jp-mod-free'}`}
        style={{ gridColumn: `span ${SLICES}` }}
        title={g.assignedTo ? `GPU ${g.index}: ${holderText(g.holder, g.assignedTo, props.nowMs)}` : `GPU ${g.index}: free`}>
        {g.assignedTo ? holder(g.assignedTo) : 'free'}
      </div>
    );
  } else {
    let used = 0;
    for (const d of g.mig) {
      used += d.slices;
      cells.push(
        <div key={d.uuid} className={`jp-gpuqueue-slot ${d.assignedTo ? 'jp-mod-used' : 'jp-mod-free'}`}
          style={{ gridColumn: `span ${Math.max(1, d.slices)}` }}
          data-profile={d.profile}
          title={`MIG ${d.profile} (${d.uuid}): ${d.assignedTo ? holderText(d.holder, d.assignedTo, props.nowMs) : 'free'}`}>
          {d.assignedTo ? holder(d.assignedTo) : d.profile.split('.')[0]}
        </div>
      );
    }
    if (used < SLICES) {
      cells.push(
        <div key="rest" className="jp-gpuqueue-slot jp-mod-unpartitioned" style={{ gridColumn: `span ${SLICES - used}` }}
          title={`${SLICES - used} compute slices not partitioned into MIG devices`} />
      );
    }
  }
  const product = g.product.replace(/^NVIDIA\s+/, '').split(/[\s-]/)[0];
  return (
    <div className="jp-gpuqueue-gpu-row" data-gpu={g.index}>
      <div className="jp-gpuqueue-gpu-label" title={`${g.product} · ${g.uuid}`}>
        {g.index} <span className="jp-gpuqueue-muted">{product}{g.mig ? ' MIG' : ''}</span>
      </div>
      <div className="jp-gpuqueue-slots">{cells}</div>
    </div>
  );
}

export function MigGrid(props: { inventory: IInventory | null }): JSX.Element | null {
  const nodes = (props.inventory?.nodes ?? []) as INodeView[];
  const held = nodes.some(n => n.gpus.some(g => g.assignedTo || (g.mig ?? []).some(d => d.assignedTo)));
  const [nowMs, setNow] = React.useState(Date.now());
  React.useEffect(() => {
    if (!held) {
      return;
    }
    const timer = window.setInterval(() => setNow(Date.now()), 1000); // the running times tick
    return () => window.clearInterval(timer);
  }, [held]);
  if (nodes.length === 0) {
    return null;
  }
  return (
    <div className="jp-gpuqueue-grid" aria-label="GPUs and MIG slices per node">
      {nodes.map(n => {
        // Whole GPUs and MIG slices are counted apart: 7 free 1g slices are not 7 free GPUs.
        const freeGpus = n.gpus.filter(g => g.mig === null && !g.assignedTo).length;
        const freeSlices = n.gpus.reduce((s, g) => s + (g.mig === null ? 0 : g.mig.filter(d => !d.assignedTo).length), 0);
        const hasMig = n.gpus.some(g => g.mig !== null);
        const parts = [`${freeGpus} free GPU${freeGpus === 1 ? '' : 's'}`];
        if (hasMig) {
          parts.push(`${freeSlices} free MIG slice${freeSlices === 1 ? '' : 's'}`);
        }
        return (
          <div key={n.name} className="jp-gpuqueue-grid-node" data-node={n.name}>
            <div className="jp-gpuqueue-grid-node-name">
              {n.name} <span className="jp-gpuqueue-muted">· {parts.join(' · ')}</span>
            </div>
            {n.gpus.map(g => (
              <GpuRow key={g.index} gpu={g} nowMs={nowMs} />
            ))}
            <HolderList node={n} nowMs={nowMs} />
          </div>
        );
      })}
    </div>
  );
}

/** Every held device of a node, one line each (none: nothing shown). */
function HolderList(props: { node: INodeView; nowMs: number }): JSX.Element | null {
  const lines: JSX.Element[] = [];
  for (const g of props.node.gpus) {
    if (g.mig === null && g.assignedTo) {
      lines.push(<HolderLine key={g.uuid} device={`GPU ${g.index}`} holder={g.holder} assignedTo={g.assignedTo} nowMs={props.nowMs} />);
    }
    for (const d of g.mig ?? []) {
      if (d.assignedTo) {
        lines.push(
          <HolderLine key={d.uuid} device={`GPU ${g.index} · ${d.profile}`} holder={d.holder} assignedTo={d.assignedTo} nowMs={props.nowMs} />
        );
      }
    }
  }
  if (lines.length === 0) {
    return null;
  }
  return (
    <ul className="jp-gpuqueue-holders" aria-label={`Who holds the devices of ${props.node.name}`}>
      {lines}
    </ul>
  );
}
