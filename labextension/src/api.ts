/**
 * Typed client for the jupyter_gpuqueue REST API (docs/rest-api.md).
 *
 * Every request goes through `ServerConnection.makeRequest`, which adds the token header or the
 * XSRF header of the browser session. Never use a bare `fetch` here.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The URL namespace of the server extension, below the server's base URL. */
export const API_NAMESPACE = 'gpuqueue/api';

export type WorkloadState =
  | 'Pending'
  | 'Admitted'
  | 'Running'
  | 'Succeeded'
  | 'Failed'
  | 'Cancelled';

export const FINISHED_STATES: ReadonlyArray<WorkloadState> = [
  'Succeeded',
  'Failed',
  'Cancelled'
];

export interface IPodSet {
  name: string;
  count: number;
  requests: Record<string, string>;
}

export interface IPodSetAssignment {
  name: string;
  count: number;
  flavors: Record<string, string>;
  resourceUsage: Record<string, string>;
}

export interface IPlacement {
  podSet: string;
  podIndex: number;
  node: string;
  devices: string[];
  resource: string;
}

export interface IWorkload {
  uid: string;
  name: string;
  namespace: string;
  localQueue: string;
  clusterQueue: string;
  owner: string;
  state: WorkloadState;
  reason?: string | null;
  message?: string | null;
  priorityClass?: string | null;
  priority?: number | null;
  positionInClusterQueue?: number | null;
  positionInLocalQueue?: number | null;
  podSets: IPodSet[];
  admission?: {
    clusterQueue: string;
    podSetAssignments: IPodSetAssignment[];
  } | null;
  placement?: IPlacement[] | null;
  visibleDevices?: string | null;
  command?: string[];
  workingDir?: string;
  maxRuntimeSeconds?: number;
  createdAt: number;
  admittedAt?: number | null;
  startedAt?: number | null;
  finishedAt?: number | null;
  exitCode?: number | null;
  evictions?: number;
  costUsd?: number;
  estimatedCostUsd?: number;
  pricePerHourUsd?: number;
  /** Pending only: the estimated start (seconds since the epoch), or null (`estimateReason` says why). */
  estimatedStartAt?: number | null;
  /** Pending only: the range of the estimate (early and late bounds, seconds since the epoch). */
  estimatedStartRange?: { early: number; late: number | null } | null;
  /** Pending only: the (at most three) workloads whose end or admission it waits for. */
  waitingFor?: IWaitingFor[];
  /** Pending without an estimate: why ("NotYetEstimated", "BudgetExceeded", "ExceedsMaxQuota", …). */
  estimateReason?: string | null;
  /** A human sentence for `estimateReason`. */
  estimateMessage?: string | null;
  /** When the estimate was computed (seconds since the epoch). */
  estimateComputedAt?: number | null;
  /** True where the estimate comes from a mirrored queue (the Kueue-delegated mode). */
  estimateApproximate?: boolean;
  /** Another flavor, MIG profile or fewer GPUs that would start sooner. */
  fasterOptions?: IFasterOption[];
  /** Its moves to another flavor / size while it was pending, oldest first. */
  moves?: IMove[];
  /** "Job" (default) or "NotebookLease": GPUs held by a notebook server, no process or log. */
  kind?: string;
  /** A preempted lease: when its GPUs are taken back (seconds since the epoch). */
  evictionDeadline?: number | null;
  /** A Running NotebookLease idle for its team's timeout: released then unless kept (idle reclaim). */
  idleDeadline?: number | null;
  /** A Running NotebookLease of a team whose idle policy is on: "Keep my GPU" left. */
  idleKeepsLeft?: number | null;
}

/** A workload that a pending one waits for (the name is null for another team's workload). */
export interface IWaitingFor {
  namespace: string;
  name: string | null;
  owner: string | null;
  kind: 'running' | 'pending';
  expectedEndAt: number;
  /** What it holds: "2 × nvidia-a100". */
  summary: string;
}

/** A request that would start sooner than the submitted one. */
export interface IFasterOption {
  flavor: string | null;
  migProfile: string | null;
  gpus: number;
  estimatedStartAt: number;
  startsNow: boolean;
  pricePerHourUsd: number;
  /** Fewer GPUs or another MIG profile: the summary says so ("runs on 2 GPUs instead of 4"). */
  changesSize?: boolean;
  /** The body of `POST workloads/{namespace}/{name}/move` that takes this option. */
  move?: IMoveRequest;
  /** "4 × nvidia-l4 is free now: start at once, $3.24/h". */
  summary: string;
}

/** What a move changes (`POST workloads/{namespace}/{name}/move`); the rest is kept. */
export interface IMoveRequest {
  flavor?: string;
  gpus?: number;
  migProfile?: string;
}

/** One move of a workload (`moves`): "4 × nvidia-a100" to "4 × nvidia-l4". */
export interface IMove {
  at: number;
  by: string;
  from: string;
  to: string;
}

export interface ISubmitRequest {
  name?: string;
  localQueue?: string;
  command?: string[];
  script?: string;
  args?: string[];
  workingDir?: string;
  gpus?: number;
  migProfile?: string | null;
  flavor?: string;
  priorityClass?: string;
  maxRuntimeSeconds?: number;
  maxRuntime?: string;
  env?: Record<string, string>;
  /** A notebook job (notebookJob.ts): the .ipynb, papermill parameters, kernel, output folder. */
  notebook?: string;
  parameters?: Record<string, unknown>;
  kernel?: string;
  outputDir?: string;
}

export interface IEstimate {
  gpuHours: number;
  costUsd: number;
  pricePerHourUsd: number;
  flavor: string;
  resource: string;
  quantity: number;
  maxRuntimeSeconds: number;
  /** Every flavor it could land on (flavor "any"), and the range of their costs (USD). */
  eligibleFlavors?: string[];
  costRangeUsd?: [number, number] | null;
}

export interface ILocalQueueRef {
  namespace: string;
  name: string;
  clusterQueue: string;
  /** The team's cap on a submission's maximum run time (seconds; null: none). */
  maxRuntimeSeconds?: number | null;
}

/** Who holds a device (GET inventory); another team's without its name and owner. */
export interface IDeviceHolder {
  namespace: string;
  name: string | null;
  owner: string | null;
  kind: string;
  /** Its start (else its admission), seconds since the epoch. */
  since: number | null;
}

/** Every team's cap on maxRuntimeSeconds (GET admin/runtime-caps). */
export interface IRuntimeCaps {
  teams: Array<{
    namespace: string;
    maxRuntimeSeconds: number | null;
    configuredSeconds?: number | null;
    stored: boolean;
    updatedAt?: number | null;
    updatedBy?: string | null;
  }>;
}

export interface IPriorityClass {
  name: string;
  value: number;
  kind?: string;
  description?: string;
}

export interface IInfo {
  user: string;
  mode: string;
  version: string;
  localQueues: ILocalQueueRef[];
  defaultLocalQueue: string | null;
  flavors: string[];
  migProfiles: string[];
  priorityClasses: IPriorityClass[];
  defaultPriorityClass: string | null;
  pythonExecutable?: string;
  /** The JupyterHub scopes the user holds (custom:gpuqueue:submit / custom:gpuqueue:admin). */
  permissions?: { submit: boolean; admin: boolean };
}

export interface IQueueResource {
  flavor: string;
  resource: string;
  nominalQuota: string;
  borrowingLimit?: string | null;
  lendingLimit?: string | null;
  usage: string;
  borrowed: string;
}

export interface IPendingEntry {
  namespace: string;
  /** Null (with `owner` and `message`) for another team's workload, unless you are a queue admin. */
  name: string | null;
  localQueue: string;
  owner: string | null;
  priority: number;
  positionInClusterQueue: number;
  positionInLocalQueue: number;
  reason?: string | null;
  message?: string | null;
  createdAt: number;
}

export interface IClusterQueue {
  name: string;
  cohort?: string | null;
  queueingStrategy?: string;
  resources: IQueueResource[];
  pendingWorkloads: number;
  admittedWorkloads: number;
  pending: IPendingEntry[];
}

export interface IQueues {
  clusterQueues: IClusterQueue[];
  localQueues: Array<
    ILocalQueueRef & { pendingWorkloads: number; admittedWorkloads: number }
  >;
}

export interface IInventorySummary {
  flavor: string;
  resource: string;
  free: number;
  total: number;
}

export interface IInventory {
  source: string;
  summary: IInventorySummary[];
  nodes: unknown[];
}

export interface IPrices {
  currency: string;
  flavors: Record<string, number>;
  default: number;
  migSlicesPerGpu: number;
}

export interface ILogChunk {
  text: string;
  offset: number;
  nextOffset: number;
  eof: boolean;
  size: number;
}

/** One quota of a ClusterQueue in the admin view (quantities as strings). */
export interface IAdminQuota {
  flavor: string;
  resource: string;
  nominalQuota: string;
  borrowingLimit: string | null;
  lendingLimit: string | null;
  /** Kueue field path, e.g. `spec.resourceGroups[0].flavors[1].resources[2]`. */
  path: string;
}

export interface IAdminClusterQueue {
  name: string;
  cohort: string | null;
  queueingStrategy: string;
  resources: IAdminQuota[];
  localQueues: string[];
}

export interface IAdminPriorityClass {
  name: string;
  kind: 'PriorityClass' | 'WorkloadPriorityClass';
  value: number;
  description: string;
  globalDefault: boolean;
}

export interface IAdminPrices extends IPrices {
  effective: Array<{ flavor: string; usdPerGpuHour: number; source: string; model?: string }>;
}

export interface IAdminConfig {
  clusterQueues: IAdminClusterQueue[];
  cohorts: string[];
  resourceFlavors: string[];
  priorityClasses: IAdminPriorityClass[];
  prices: IAdminPrices;
  stored: { updatedAt: number; updatedBy: string } | null;
}

export interface IQuotaPatch {
  flavor: string;
  resource: string;
  nominalQuota?: string;
  borrowingLimit?: string | null;
  lendingLimit?: string | null;
}

export interface IImportResult {
  dryRun: boolean;
  summary: Record<string, number>;
  ignored: string[];
  warnings: string[];
  auditId?: number;
}

export interface IAuditEntry {
  id: number;
  at: number;
  actor: string;
  operation: string;
  target: string;
  before: any;
  after: any;
}

/**
 * An event of the websocket `gpuqueue/api/events`; `batch` (several events in order) only
 * reaches clients that connect with `?batch=1`.
 */
export type QueueEvent =
  | { type: 'hello'; user: string }
  | { type: 'workload'; workload: IWorkload }
  | { type: 'queues' }
  | { type: 'inventory' }
  | { type: 'budgets' }
  | { type: 'ping' }
  | { type: 'batch'; events: QueueEvent[] };

/** An error answered by the API: `{"message", "reason", "field"}`. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly reason?: string,
    readonly field?: string
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** What the panel says when the server no longer answers as the GPU queue. */
export const SERVER_GONE_MESSAGE =
  'The server is gone: it was stopped (a notebook server stops when its GPU lease ends) or ' +
  'your login expired. Start it again from the hub, then reload this page.';

/**
 * The server did not answer as the GPU queue: a redirect to a login page, an HTML page (under
 * JupyterHub: its login form, its "server not running" page), any other body that is not JSON,
 * or JupyterHub's 424 for a stopped server. The body is never shown: such a page may hold an
 * `_xsrf` token and is no message for a person.
 */
export class ServerGoneError extends ApiError {
  constructor(status: number) {
    super(SERVER_GONE_MESSAGE, status, 'ServerGone');
    this.name = 'ServerGoneError';
  }
}

/**
 * Whether a response comes from something other than the GPU queue's API at `url`: redirected
 * elsewhere (a login page), JupyterHub's 424 "server no longer running", or a body that is not
 * JSON (`text` given; empty bodies are fine).
 */
function isServerGone(response: Response, url: string, text?: string): boolean {
  if (response.status === 424) {
    return true;
  }
  if (response.redirected && response.url) {
    const wanted = new URL(url, window.location.href).pathname;
    if (new URL(response.url, window.location.href).pathname !== wanted) {
      return true;
    }
  }
  if (text === undefined || text.length === 0) {
    return false;
  }
  const type = response.headers.get('Content-Type') ?? '';
  if (/text\/html|application\/xhtml/i.test(type) || /^\s*<(!doctype|html|head|body)\b/i.test(text)) {
    return true;
  }
  try {
    const body = JSON.parse(text);
    // JupyterHub's JSON answer for a stopped server (a 424, or 503 in its legacy mode)
    return !!body && typeof body.message === 'string' && /^JupyterHub server no longer running/.test(body.message);
  } catch {
    return true;
  }
}

/** `namespace/name`, the key of a workload everywhere in the panel. */
export function workloadKey(w: { namespace: string; name: string }): string {
  return `${w.namespace}/${w.name}`;
}

/**
 * The REST client. One instance per panel; `serverSettings` come from the application's
 * ServiceManager so that base URL, token and XSRF cookie are right in JupyterLab and JupyterHub.
 */
export class GpuQueueClient {
  constructor(
    readonly serverSettings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /**
   * Call `gpuqueue/api/<endPoint>` and parse the JSON answer; throw ApiError on a 4xx/5xx, and
   * ServerGoneError (with a plain message, never the body) when the answer is not the API's.
   */
  async request<T>(
    endPoint: string,
    init: RequestInit = {},
    query?: Record<string, string | number | boolean | undefined>
  ): Promise<T> {
    let url = URLExt.join(this.serverSettings.baseUrl, API_NAMESPACE, endPoint);
    if (query) {
      const params = Object.entries(query)
        .filter(([, v]) => v !== undefined)
        .map(
          ([k, v]) =>
            `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`
        )
        .join('&');
      if (params) {
        url += `?${params}`;
      }
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        url,
        init,
        this.serverSettings
      );
    } catch (error) {
      throw new ServerConnection.NetworkError(error as TypeError);
    }
    const text = await response.text();
    if (isServerGone(response, url, text)) {
      throw new ServerGoneError(response.status);
    }
    const data: any = text.length > 0 ? JSON.parse(text) : null;
    if (!response.ok) {
      const body = data && typeof data === 'object' ? data : {};
      const message =
        (typeof body.message === 'string' && body.message) ||
        response.statusText ||
        `HTTP ${response.status}`;
      throw new ApiError(message, response.status, body.reason, body.field);
    }
    return data as T;
  }

  info(): Promise<IInfo> {
    return this.request<IInfo>('info');
  }

  prices(): Promise<IPrices> {
    return this.request<IPrices>('prices');
  }

  async workloads(): Promise<IWorkload[]> {
    const answer = await this.request<{ items: IWorkload[] }>(
      'workloads',
      {},
      { mine: true }
    );
    return answer.items;
  }

  submit(body: ISubmitRequest): Promise<IWorkload> {
    return this.request<IWorkload>('workloads', {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  estimate(body: ISubmitRequest, signal?: AbortSignal): Promise<IEstimate> {
    return this.request<IEstimate>('estimate', {
      method: 'POST',
      body: JSON.stringify(body),
      signal
    });
  }

  /** Every workload the caller sees in `states` (a queue admin: every team's), newest first. */
  async workloadsIn(states: WorkloadState[]): Promise<IWorkload[]> {
    const answer = await this.request<{ items: IWorkload[] }>('workloads', {}, { state: states.join(',') });
    return answer.items;
  }

  cancel(namespace: string, name: string): Promise<IWorkload> {
    return this.request<IWorkload>(
      `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`,
      { method: 'DELETE' }
    );
  }

  /**
   * Move a pending workload (owner only) to another flavor, MIG profile or number of GPUs, in
   * place: it keeps its name, place in the queue and history (a faster option taken in one click).
   */
  move(namespace: string, name: string, body: IMoveRequest): Promise<IWorkload> {
    return this.request<IWorkload>(
      `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/move`,
      { method: 'POST', body: JSON.stringify(body) }
    );
  }

  /** Extend a running notebook lease's maximum time (where a hub admin allows it: `leaseExtensionSeconds`). */
  extendLease(namespace: string, name: string): Promise<IWorkload> {
    return this.request<IWorkload>(
      `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/extend`,
      { method: 'POST' }
    );
  }

  /** Keep an idle-warned notebook lease's GPU (owner only): its idle clock restarts. */
  keepGpu(namespace: string, name: string): Promise<IWorkload> {
    return this.request<IWorkload>(
      `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/keep-gpu`,
      { method: 'POST' }
    );
  }

  logs(
    namespace: string,
    name: string,
    offset: number,
    limit = 262144
  ): Promise<ILogChunk> {
    return this.request<ILogChunk>(
      `workloads/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/logs`,
      {},
      { offset, limit }
    );
  }

  queues(): Promise<IQueues> {
    return this.request<IQueues>('queues');
  }

  inventory(): Promise<IInventory> {
    return this.request<IInventory>('inventory');
  }

  // -- admin (scope custom:gpuqueue:admin) ---------------------------------------------------

  adminConfig(): Promise<IAdminConfig> {
    return this.request<IAdminConfig>('admin/config');
  }

  /** The whole configuration as Kueue YAML (the export). */
  async exportKueue(): Promise<string> {
    const url = URLExt.join(this.serverSettings.baseUrl, API_NAMESPACE, 'admin/config') + '?format=yaml';
    const response = await ServerConnection.makeRequest(
      url,
      { headers: { Accept: 'application/yaml' } },
      this.serverSettings
    );
    const text = await response.text();
    const type = response.headers.get('Content-Type') ?? '';
    if (isServerGone(response, url) || /text\/html/i.test(type) || /^\s*</.test(text)) {
      throw new ServerGoneError(response.status);
    }
    if (!response.ok) {
      let body: any = {};
      try {
        body = JSON.parse(text);
      } catch {
        body = {};
      }
      throw new ApiError(body.message || `HTTP ${response.status}`, response.status, body.reason, body.field);
    }
    return text;
  }

  importKueue(yaml: string, dryRun = false): Promise<IImportResult> {
    return this.request<IImportResult>(
      'admin/import',
      { method: 'POST', body: JSON.stringify({ yaml }) },
      dryRun ? { dryRun: true } : undefined
    );
  }

  patchClusterQueue(
    name: string,
    patch: { cohort?: string | null; resources?: IQuotaPatch[] }
  ): Promise<IAdminConfig> {
    return this.request<IAdminConfig>(`admin/cluster-queues/${encodeURIComponent(name)}`, {
      method: 'PATCH',
      body: JSON.stringify(patch)
    });
  }

  patchPriorityClass(
    name: string,
    patch: { value?: number; description?: string; kind?: string }
  ): Promise<IAdminConfig> {
    return this.request<IAdminConfig>(`admin/priority-classes/${encodeURIComponent(name)}`, {
      method: 'PATCH',
      body: JSON.stringify(patch)
    });
  }

  setPrices(prices: { flavors: Record<string, number>; default: number }): Promise<IAdminPrices> {
    return this.request<IAdminPrices>('admin/prices', {
      method: 'PUT',
      body: JSON.stringify(prices)
    });
  }

  audit(limit = 50): Promise<{ items: IAuditEntry[]; total: number }> {
    return this.request<{ items: IAuditEntry[]; total: number }>('admin/audit', {}, { limit });
  }

  /** The websocket URL of the event stream, with `?token=` when the settings ask for it. */
  eventsUrl(): string {
    const settings = this.serverSettings;
    let url = URLExt.join(settings.wsUrl, API_NAMESPACE, 'events');
    if (settings.appendToken && settings.token) {
      url += `?token=${encodeURIComponent(settings.token)}`;
    }
    return url;
  }

  // -- idle notebook GPU reclaim (admin) -------------------------------------------------------

  /** Every team's idle policy, the default and the smallest timeout. */
  runtimeCaps(): Promise<IRuntimeCaps> {
    return this.request<IRuntimeCaps>('admin/runtime-caps');
  }

  /** Set a team's cap (seconds; null: no cap); answers every team's. */
  setRuntimeCap(namespace: string, seconds: number | null): Promise<IRuntimeCaps> {
    return this.request<IRuntimeCaps>(`admin/runtime-caps/${encodeURIComponent(namespace)}`, {
      method: 'PUT',
      body: JSON.stringify({ maxRuntimeSeconds: seconds })
    });
  }

  /** Forget a team's stored cap (the configured one applies again). */
  deleteRuntimeCap(namespace: string): Promise<IRuntimeCaps> {
    return this.request<IRuntimeCaps>(`admin/runtime-caps/${encodeURIComponent(namespace)}`, {
      method: 'DELETE'
    });
  }

  idlePolicies(): Promise<IIdlePolicies> {
    return this.request<IIdlePolicies>('admin/idle-policy');
  }

  /** Set a team's idle policy (fields left out: the default's); answers every policy. */
  setIdlePolicy(namespace: string, policy: Partial<IIdlePolicy>): Promise<IIdlePolicies> {
    return this.request<IIdlePolicies>(`admin/idle-policy/${encodeURIComponent(namespace)}`, {
      method: 'PUT',
      body: JSON.stringify(policy)
    });
  }

  /** Forget a team's stored idle policy (the default applies again). */
  deleteIdlePolicy(namespace: string): Promise<IIdlePolicies> {
    return this.request<IIdlePolicies>(`admin/idle-policy/${encodeURIComponent(namespace)}`, {
      method: 'DELETE'
    });
  }
}

/** A team's idle notebook reclaim policy (`idleTimeoutSeconds: null`: off). */
export interface IIdlePolicy {
  idleTimeoutSeconds: number | null;
  warnSeconds: number;
  maxKeeps: number;
  utilizationBelowPercent: number | null;
  /** What an idle release does to the notebook server (default "stop"). */
  onIdle?: 'stop' | 'release';
}

/** `GET admin/idle-policy`. */
export interface IIdlePolicies {
  default: IIdlePolicy;
  minimumTimeoutSeconds: number;
  teams: Array<{
    namespace: string;
    policy: IIdlePolicy;
    stored: boolean;
    updatedAt: number | null;
    updatedBy: string | null;
  }>;
}
