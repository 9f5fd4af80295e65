/**
 * Kueue's pending reasons in plain words: a sentence that leads the raw reason and message (which
 * are kept and shown after it). The same mapping as `plain_reason` in jupyter_gpuqueue/widget.py
 * (tests/test_widget_reasons.py runs both on the same cases). No imports: plain functions.
 */

const INSUFFICIENT =
  /insufficient unused quota for (\S+) in flavor ([^\s,;]+), (\d+) more needed/g;
const NO_NODE = /quota fits, but no node(?: of flavor ([^\s,;]+))? has (.+?) free/;
const PREEMPTED_FOR = /Preempted to accommodate (\S+?)(?: \(|$|\s)/;

/** `nvidia.com/gpu` → `GPU`/`GPUs`; `nvidia.com/mig-1g.10gb` → `MIG 1g.10gb slice(s)`. */
export function resourceWords(resource: string, count: number): string {
  const plural = count !== 1;
  if (resource === 'nvidia.com/gpu' || resource === 'gpu') {
    return plural ? 'GPUs' : 'GPU';
  }
  if (resource.startsWith('nvidia.com/mig-')) {
    return `MIG ${resource.slice('nvidia.com/mig-'.length)} slice${plural ? 's' : ''}`;
  }
  return resource;
}

/**
 * A plain sentence for a pending workload's `reason` / `message`, e.g. "Waiting for 2 more GPUs
 * of nvidia-a100 (the quota is in use)"; null when there is nothing to add.
 */
export function plainReason(
  reason: string | null | undefined,
  message: string | null | undefined
): string | null {
  const r = reason ?? '';
  const m = message ?? '';
  if (r === 'BudgetExceeded') {
    return "Held: the team's budget for this period is spent (a hub admin can raise it or lift the hold)";
  }
  if (r === 'Preempted' || m.startsWith('Preempted to accommodate')) {
    const p = PREEMPTED_FOR.exec(m);
    return `Preempted to make room${p ? ` for ${p[1]}` : ''}; waiting in the queue again`;
  }
  const wants = Array.from(m.matchAll(INSUFFICIENT));
  if (wants.length) {
    const parts = wants.map(
      ([, res, flavor, n]) => `${n} more ${resourceWords(res, Number(n))} of ${flavor}`
    );
    return `Waiting for ${parts.join(' or ')} (the quota is in use)`;
  }
  const node = NO_NODE.exec(m);
  if (node || r === 'PlacementFailed') {
    const where = node && node[1] ? ` of ${node[1]}` : '';
    const what = node ? ` has ${node[2]} free` : ' has the devices free';
    if (m.includes('kept for higher-priority work')) {
      // devices the panel shows free are kept for a preemptor or the job it evicted (issue 34 item 8)
      return `Free ${node && node[1] ? node[1] : 'GPU'} devices are held for higher-priority work`;
    }
    return `Waiting for devices: the quota allows it, but no single node${where}${what} yet`;
  }
  if (
    r === 'ExceedsMaxQuota' ||
    m.includes('request > maximum capacity') ||
    m.includes('exceeds max quota')
  ) {
    return 'It asks for more than the queue can ever give: it cannot start as it is (ask for fewer GPUs or another flavor)';
  }
  if (r === 'Inactive' || m.includes(' is inactive')) {
    return "The team's queue is stopped or misconfigured: ask a hub admin";
  }
  if (
    r === 'Misconfigured' ||
    m.includes("doesn't exist") ||
    m.includes("doesn't match ClusterQueue selector")
  ) {
    return "The team's queue is misconfigured: ask a hub admin";
  }
  if (m.includes("doesn't match node affinity") || m.includes('untolerated taint')) {
    return 'No flavor of the queue matches what it asks for (its node selection or tolerations)';
  }
  if (r === 'PreemptionLivelock') {
    return 'Waiting: preempting others for it would only go round in circles';
  }
  return null;
}
