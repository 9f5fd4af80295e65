"""The job kinds Kueue manages → Workloads: batch/v1 Job (one PodSet ``main``), Volcano Job (one
PodSet per task) and Kubeflow PyTorchJob / TFJob (one PodSet per replica type), as Kueue's
integrations (``pkg/controller/jobs/...``, ``pkg/controller/jobframework``) build them. Their pod
templates are validated as Pods (``pods``)."""

from __future__ import annotations

import re
from typing import Optional

from .. import model
from .builder import Builder, _PriorityRef, _ignored_entry
from .fields import (
    INT32_MAX,
    JOB_MIN_PARALLELISM_ANNOTATION,
    MAX_EXEC_TIME_LABEL,
    MAX_POD_SETS,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    _check,
    _child,
    _dns1123_subdomain_errors,
    _dns_subdomain,
    _duplicate,
    _index,
    _integer,
    _invalid,
    _key,
    _known_fields,
    _mapping,
    _required,
    _sequence,
    _string,
    _too_many,
    _unsupported,
    dns1123_label_errors,
)
from .pods import _pod_template


_JOB_SPEC_FIELDS = (
    "parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "successPolicy",
    "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "selector", "manualSelector",
    "template", "ttlSecondsAfterFinished", "completionMode", "suspend", "podReplacementPolicy",
    "managedBy",
)

# Kueue's PodSet order for Kubeflow jobs (pkg/controller/jobs/kubeflow/...: OrderedReplicaTypes).
_KUBEFLOW = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker"), "pytorch"),
    "TFJob": ("tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator"), "tensorflow"),
}


class JobKinds:
    """Reads the job kinds Kueue manages into Workloads: batch/v1 Job, Volcano Job, Kubeflow PyTorchJob / TFJob."""

    def __init__(self, builder: Builder):
        self.b = builder

    def _job_queue(self, labels: dict, annotations: dict) -> str:
        """queue-name label, else the deprecated annotation; validated as a CRD name
        (jobframework ValidateQueueName)."""
        if labels.get(QUEUE_NAME_LABEL):
            path, queue = _key("metadata.labels", QUEUE_NAME_LABEL), labels[QUEUE_NAME_LABEL]
        elif annotations.get(QUEUE_NAME_LABEL):
            path, queue = _key("metadata.annotations", QUEUE_NAME_LABEL), annotations[QUEUE_NAME_LABEL]
        else:
            return ""
        _check(_dns1123_subdomain_errors(queue), path, queue)
        return queue

    def _job_max_exec(self, labels: dict) -> Optional[int]:
        """jobframework validateCreateForMaxExecTime."""
        if MAX_EXEC_TIME_LABEL not in labels:
            return None
        path = _key("metadata.labels", MAX_EXEC_TIME_LABEL)
        text = labels[MAX_EXEC_TIME_LABEL]
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _invalid(path, text, f'strconv.Atoi: parsing "{text}": invalid syntax')
        value = int(text)
        if value <= 0:
            raise _invalid(path, value, "should be greater than 0")
        if value > INT32_MAX:
            raise _invalid(path, value, f"must be less than or equal to {INT32_MAX}")
        return value

    def _job_common(self, doc, kind) -> Optional[tuple[str, str, str, dict, dict, dict]]:
        """(name, namespace, queue, labels, annotations, metadata), or None when not managed."""
        name, namespace, labels, annotations = self.b._namespaced_meta(doc)
        queue = self._job_queue(labels, annotations)
        if not queue:
            self.b.ignored.append(_ignored_entry(doc["apiVersion"], kind, namespace, name))
            return None
        return name, namespace, queue, labels, annotations, doc["metadata"]

    def batch_job(self, doc, group, version, kind, name):
        """batch/v1 Job → one PodSet "main" (Kueue pkg/controller/jobs/job: PodSets, podsCount)."""
        _known_fields(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        spec = _mapping(doc.get("spec"), "spec", required=True)
        _known_fields(spec, _JOB_SPEC_FIELDS, "spec")
        parallelism = _integer(spec.get("parallelism"), "spec.parallelism", default=1, minimum=0)
        completions = _integer(spec.get("completions"), "spec.completions", minimum=0)
        count = parallelism if completions is None else min(parallelism, completions)
        info = _pod_template(spec.get("template"), "spec.template", job_restart_policy=True)
        min_count = None
        if JOB_MIN_PARALLELISM_ANNOTATION in annotations:
            apath = _key("metadata.annotations", JOB_MIN_PARALLELISM_ANNOTATION)
            text = annotations[JOB_MIN_PARALLELISM_ANNOTATION]
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                raise _invalid(apath, text, f'strconv.Atoi: parsing "{text}": invalid syntax')
            min_count = int(text)
            if not 0 < min_count < count:
                raise _invalid(apath, min_count, f"should be between 0 and {count - 1}")
        pod_set = model.PodSet(name="main", count=count, requests=info.requests, min_count=min_count,
                               node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""), pod_class=info.priority_class_name,
                           pod_class_path="spec.template.spec.priorityClassName")
        return self.b._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=[pod_set],
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))

    def volcano_job(self, doc, group, version, kind, name):
        """batch.volcano.sh/v1alpha1 Job → one PodSet per task (Volcano's admission webhook:
        tasks required, unique DNS-1123 task names, replicas ≥ 0, 0 ≤ minAvailable ≤ Σ replicas).
        ``minAvailable`` is a gang: Kueue admits every PodSet whole, all or nothing; with a single
        task and ``minAvailable`` < replicas it becomes that PodSet's ``min_count``."""
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        spec = _mapping(doc.get("spec"), "spec", required=True)
        tpath = "spec.tasks"
        tasks = _sequence(spec.get("tasks"), tpath)
        if not tasks:
            raise _required(tpath, "No task specified in job spec")
        if len(tasks) > MAX_POD_SETS:
            raise _too_many(tpath, len(tasks), MAX_POD_SETS)
        pod_sets: list[model.PodSet] = []
        first_pc = ""
        total = 0
        for i, task in enumerate(tasks):
            ipath = _index(tpath, i)
            task = _mapping(task, ipath, required=True)
            tname = _string(task.get("name"), _child(ipath, "name")) or f"default{i}"
            _check(dns1123_label_errors(tname), _child(ipath, "name"), tname)
            if any(ps.name == tname for ps in pod_sets):
                raise _duplicate(_child(ipath, "name"), tname, f"duplicated task name {tname}")
            # TaskSpec.replicas has no default in Volcano: absent is 0 pods.
            replicas = _integer(task.get("replicas"), _child(ipath, "replicas"), default=0, minimum=0)
            task_min = _integer(task.get("minAvailable"), _child(ipath, "minAvailable"), minimum=0)
            if task_min is not None and task_min > replicas:
                raise _invalid(_child(ipath, "minAvailable"), task_min, "'minAvailable' is greater than 'replicas'")
            info = _pod_template(task.get("template"), _child(ipath, "template"))
            if i == 0:
                first_pc = info.priority_class_name
            total += replicas
            pod_sets.append(model.PodSet(name=tname, count=replicas, requests=info.requests,
                                         node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity))
        min_available = _integer(spec.get("minAvailable"), "spec.minAvailable", minimum=0)
        if min_available is not None and min_available > total:
            raise _invalid("spec.minAvailable", min_available,
                           "job 'minAvailable' should not be greater than total replicas in tasks")
        if min_available is not None and len(pod_sets) == 1 and 0 < min_available < pod_sets[0].count:
            pod_sets[0].min_count = min_available
        pc = _dns_subdomain(spec.get("priorityClassName"), "spec.priorityClassName", required=False)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""),
                           pod_class=pc or first_pc,
                           pod_class_path="spec.priorityClassName" if pc else "spec.tasks[0].template.spec.priorityClassName")
        return self.b._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))

    def kubeflow_job(self, doc, group, version, kind, name):
        """kubeflow.org/v1 PyTorchJob / TFJob → one PodSet per replica type, named in lower case,
        in Kueue's order (Master, Worker; Chief, Master, PS, Worker, Evaluator). The training
        operator requires the ``pytorch`` / ``tensorflow`` container and at most one
        Master / Chief / Evaluator."""
        common = self._job_common(doc, kind)
        if common is None:
            return None
        name, namespace, queue, labels, annotations, meta = common
        specs_key, order, container = _KUBEFLOW[kind]
        spec = _mapping(doc.get("spec"), "spec", required=True)
        rpath = f"spec.{specs_key}"
        replica_specs = _mapping(spec.get(specs_key), rpath, required=True)
        if not replica_specs:
            raise _required(rpath, "at least one replica spec is needed")
        for rtype in replica_specs:
            if rtype not in order:
                raise _unsupported(rpath, rtype, order)
        pod_sets: list[model.PodSet] = []
        first_pc, first_path = "", ""
        for rtype in order:
            if rtype not in replica_specs:
                continue
            ipath = _key(rpath, rtype)
            rs = _mapping(replica_specs[rtype], ipath, required=True)
            replicas = _integer(rs.get("replicas"), _child(ipath, "replicas"), default=1, minimum=0)
            if rtype in ("Master", "Chief", "Evaluator") and replicas > 1:
                raise _invalid(_child(ipath, "replicas"), replicas, f"there must be only 1 {rtype} replica")
            tpl_path = _child(ipath, "template")
            info = _pod_template(rs.get("template"), tpl_path)
            containers = _mapping(rs.get("template"), tpl_path)["spec"].get("containers") or []
            if not any(isinstance(c, dict) and c.get("name") == container for c in containers):
                raise _invalid(_child(tpl_path, "spec.containers"), [c.get("name") for c in containers if isinstance(c, dict)],
                               f"there is no container named {container} in {kind} {rtype} replica")
            if not pod_sets:
                first_pc, first_path = info.priority_class_name, _child(tpl_path, "spec.priorityClassName")
            pod_sets.append(model.PodSet(name=rtype.lower(), count=replicas, requests=info.requests,
                                         node_selector=info.node_selector, tolerations=info.tolerations,
                               required_affinity=info.required_affinity))
        sched_path = "spec.runPolicy.schedulingPolicy"
        run_policy = _mapping(spec.get("runPolicy"), "spec.runPolicy")
        sched = _mapping(run_policy.get("schedulingPolicy"), sched_path)
        pc = _dns_subdomain(sched.get("priorityClass"), _child(sched_path, "priorityClass"), required=False)
        ref = _PriorityRef(label=labels.get(PRIORITY_CLASS_LABEL, ""), pod_class=pc or first_pc,
                           pod_class_path=_child(sched_path, "priorityClass") if pc else first_path)
        return self.b._new_workload(kind=kind, name=name, namespace=namespace, queue=queue, pod_sets=pod_sets,
                                  meta=meta, labels=labels, annotations=annotations, priority=ref,
                                  max_exec=self._job_max_exec(labels))
