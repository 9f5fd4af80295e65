/**
 * The parts of the REST API the job page, the notifications and the job history read that
 * api.ts does not type (yet): a workload's `preemptions`, its timeline; and small fetch helpers
 * for them, built on the panel's client (ServerConnection.makeRequest, token and XSRF handled).
 */
import { GpuQueueClient, ILogChunk, ISubmitRequest, IWorkload } from '../api';

/** One preemption of a workload (`preemptions.last`, `preemptions.history[]`). */
export interface IPreemption {
  at: number;
  /** "team-a/high-wait", or null where the preemptor is another team's and the user no admin. */
  by: string | null;
  byNamespace: string | null;
  reason: string | null;
  /** "priority", "reclaim", … */
  words: string | null;
  byWords?: string | null;
  lostCostUsd: number;
}

export interface IPreemptions {
  count: number;
  lostCostUsd: number;
  last: IPreemption;
  /** "preempted 1× by team-a/high-wait (priority) · $0.32 of runs lost" */
  summary: string;
  history?: IPreemption[];
}

/** A workload view as the server answers it, with the fields api.ts does not name. */
export type IWorkloadView = IWorkload & {
  preemptions?: IPreemptions | null;
  budgetWarning?: string | null;
};

export function preemptionsOf(w: IWorkload): IPreemptions | null {
  const p = (w as IWorkloadView).preemptions;
  return p && p.count > 0 ? p : null;
}

export interface ITimelineEvent {
  at: number;
  /** Submitted, Moved, Admitted, Started, Preempted, BudgetHoldLifted, Succeeded, Failed, Cancelled */
  type: string;
  text: string;
}

export interface IRun {
  start: number;
  end: number | null;
  flavors: string[];
  costUsd: number;
  outcome: string | null;
}

export interface IUtilizationSample {
  device: string;
  at: number;
  percent: number;
}

/** An NVML memory sample of one device (GPU or MIG UUID): MiB in use and in all. */
export interface IMemorySample {
  device: string;
  /** seconds since the epoch */
  at: number;
  /** `nvmlDeviceGetMemoryInfo().used` / 2^20 */
  memoryUsedMiB: number;
  /** `.total` / 2^20; null where unknown */
  memoryTotalMiB: number | null;
}

export interface ITimeline {
  workload: IWorkloadView;
  events: ITimelineEvent[];
  runs: IRun[];
  utilization: IUtilizationSample[];
  /** absent from servers before revision 0003 of the ledger */
  memory?: IMemorySample[];
}

function path(namespace: string, name: string): string {
  return `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
}

export function fetchTimeline(
  client: GpuQueueClient,
  namespace: string,
  name: string
): Promise<ITimeline> {
  return client.request<ITimeline>(`${path(namespace, name)}/timeline`);
}

export function fetchWorkload(
  client: GpuQueueClient,
  namespace: string,
  name: string
): Promise<IWorkloadView> {
  return client.request<IWorkloadView>(path(namespace, name));
}

export function fetchLog(
  client: GpuQueueClient,
  namespace: string,
  name: string,
  offset: number
): Promise<ILogChunk> {
  return client.logs(namespace, name, offset);
}

const GPU_RESOURCE = 'nvidia.com/gpu';
const MIG_PREFIX = 'nvidia.com/mig-';

/**
 * The SubmitRequest that made `w`, read back from its view: command, working dir, GPUs or MIG
 * profile, flavor, queue, priority class, max run time. The name is left out (a new one is made).
 */
export function requestOf(w: IWorkload, runs: IRun[] = []): ISubmitRequest {
  const body: ISubmitRequest = {
    localQueue: `${w.namespace}/${w.localQueue}`
  };
  const nb = (w as any).notebook;
  if (nb && typeof nb.input === 'string') {
    // A notebook job (notebookJob.ts): its notebook and parameters, not papermill's argv.
    body.notebook = nb.input;
    body.parameters = { ...(nb.parameters ?? {}) };
    if (nb.outputDir) {
      body.outputDir = nb.outputDir;
    }
  } else {
    if (w.command && w.command.length) {
      body.command = [...w.command];
    }
    if (w.workingDir) {
      body.workingDir = w.workingDir;
    }
  }
  const requests = w.podSets?.[0]?.requests ?? {};
  for (const [resource, quantity] of Object.entries(requests)) {
    if (resource === GPU_RESOURCE) {
      body.gpus = Number(quantity) * (w.podSets[0].count || 1);
    } else if (resource.startsWith(MIG_PREFIX)) {
      body.migProfile = resource.slice(MIG_PREFIX.length);
    }
  }
  // The flavor asked for is the one it ran on (a job names one flavor, or "any" when none).
  const flavors = new Set<string>();
  for (const a of w.admission?.podSetAssignments ?? []) {
    for (const f of Object.values(a.flavors)) {
      flavors.add(f);
    }
  }
  if (flavors.size === 0) {
    // Pending again (after a preemption): the flavor of its last run ("2 × nvidia-a100").
    for (const f of runs.length ? runs[runs.length - 1].flavors : []) {
      flavors.add(f.replace(/^\d+\s*×\s*/, ''));
    }
  }
  const asked = (w as any).flavor ?? (w as any).requestedFlavor;
  if (typeof asked === 'string' && asked) {
    body.flavor = asked;
  } else if (flavors.size === 1 && !body.migProfile) {
    body.flavor = [...flavors][0];
  }
  if (w.priorityClass) {
    body.priorityClass = w.priorityClass;
  }
  if ((w as any).acceptSpot) {
    (body as any).acceptSpot = true;
  }
  if (w.maxRuntimeSeconds) {
    body.maxRuntimeSeconds = w.maxRuntimeSeconds;
  }
  return body;
}
