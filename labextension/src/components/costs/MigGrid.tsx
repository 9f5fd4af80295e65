/**
 * The availability grid: every node's GPUs, one row each, drawn over the GPU's seven compute
 * slices. A whole GPU is one cell; a GPU in MIG mode shows each MIG device (1g, 2g, 3g, …) as wide
 * as its slices. Free cells are green, used ones show who holds them (the workload), slices not
 * partitioned into a device are hatched.
 */
import * as React from 'react';

import { IInventory } from '../../api';

interface IMigView {
  uuid: string;
  profile: string;
  slices: number;
  assignedTo: string | null;
}

interface IGpuView {
  index: number;
  uuid: string;
  product: string;
  memoryMiB: number;
  assignedTo: string | null;
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

function GpuRow(props: { gpu: IGpuView }): JSX.Element {
  const g = props.gpu;
  const cells: JSX.Element[] = [];
  if (g.mig === null) {
    cells.push(
      <div key="whole" className={`jp-gpuqueue-slot ${g.assignedTo ? 'jp-mod-used' : 'jp-mod-free'}`}
        style={{ gridColumn: `span ${SLICES}` }}
        title={g.assignedTo ? `GPU ${g.index}: used by ${g.assignedTo}` : `GPU ${g.index}: free`}>
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
          title={`MIG ${d.profile} (${d.uuid}): ${d.assignedTo ? `used by ${d.assignedTo}` : 'free'}`}>
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
              <GpuRow key={g.index} gpu={g} />
            ))}
          </div>
        );
      })}
    </div>
  );
}
