"""Kubernetes / Kueue manifests → the engine's model, validated as Kueue and Kubernetes would.

The caller reads files; this module gets text (:func:`load_text`) or already-parsed documents
(:func:`load_documents`, :func:`parse_workload_document`). It does no I/O and reads no clock.

Accepted kinds
--------------
====================================  ===========================================================
``v1`` Namespace                      ``ClusterConfig.namespaces`` (its labels feed namespaceSelector)
``v1`` List                           each of ``items`` (error paths start ``items[i].``)
``scheduling.k8s.io/v1`` PriorityClass ``ClusterConfig.priority_classes``
``kueue.x-k8s.io/v1beta1|v1beta2``    ResourceFlavor, ClusterQueue, Cohort (also ``v1alpha1``),
                                      LocalQueue, WorkloadPriorityClass → ``ClusterConfig``;
                                      Workload → ``Manifests.workloads`` (``status.admission``
                                      becomes ``Workload.admission``: it starts admitted)
``config.kueue.x-k8s.io/v1beta1|2``   Configuration: ``fairSharing`` and ``resources.transformations`` are read
``batch/v1`` Job                      a Workload with one PodSet ``main``
``batch.volcano.sh/v1alpha1`` Job     a Workload with one PodSet per task
``kubeflow.org/v1`` PyTorchJob, TFJob a Workload with one PodSet per replica type (lower-cased)
====================================  ===========================================================

A job (batch/v1, Volcano, Kubeflow) without the ``kueue.x-k8s.io/queue-name`` label (or the
deprecated annotation of that name) is not managed by Kueue (its default
``manageJobsWithoutQueueName: false``) and is listed in ``Manifests.ignored``, as is every other
kind (``v1/ResourceQuota ml-team/gpu-quota``, ``v1/LimitRange ...``, Kueue's AdmissionCheck ...).

Workloads made from jobs are named after the job (Kueue itself would name a Job's Workload
``job-<name>-<hash>``); their ``creation_time`` is ``metadata.creationTimestamp`` (RFC 3339, as
seconds since the epoch) when present, else the document index, so that documents keep their
order in FIFO queues.

Validation
----------
The rules are Kueue's CRD schemas (kubebuilder markers and CEL ``XValidation`` rules in
``apis/kueue/v1beta1/*_types.go``), Kueue's admission webhooks (``pkg/webhooks/*.go``,
``pkg/controller/jobframework/validation.go``, ``pkg/config/validation.go``) and the Kubernetes
API server's own (``k8s.io/apimachinery/pkg/util/validation``, ``pkg/apis/core/validation``,
``pkg/apis/batch/validation``, ``pkg/apis/scheduling/validation``), with their messages. Fields
unknown to the schema are rejected as ``kubectl``'s strict field validation does, for Kueue kinds,
object metadata, a Job's ``spec`` and a container's ``resources``; a key repeated in a YAML
mapping is rejected too. The whole input is rejected on the first error: :class:`ManifestError`
carries the source, the 0-based document index (documents that are empty, e.g. a comment block
before the first ``---``, are skipped and not counted), the kind and name, the field path and the
reason.

Cross-references Kueue accepts and only marks inactive (a LocalQueue naming a missing
ClusterQueue, a ClusterQueue naming a missing ResourceFlavor or Cohort) are kept as they are.
A cohort named only by ``ClusterQueue.spec.cohort`` gets no ``Cohort`` entry (it is implicit).
Priority classes may come after the jobs that use them: they are resolved once every document is
read. Fields Kueue has and the engine does not model (admission checks, topology, LocalQueue
stopPolicy ...) are accepted, validated where cheap, and reported in ``Manifests.warnings``.

Modules, by object family
-------------------------
``kueue_objects`` (Kueue's objects → ``ClusterConfig``), ``workloads`` (Workload objects),
``jobs`` (batch/v1, Volcano and Kubeflow jobs → Workloads), ``pods`` (pod templates: Pod rules
for jobs, Kueue's rules for Workloads), ``selectors`` (label selectors, taints, tolerations,
node affinity), ``fields`` (field-path errors, typed readers, names, quantities, durations),
``builder`` (the state of one load) and ``loader`` (YAML, dispatch, the entry points below).
"""

from .builder import Manifests
from .fields import (
    DEFAULT_NAMESPACE,
    JOB_MIN_PARALLELISM_ANNOTATION,
    MAX_EXEC_TIME_LABEL,
    MAX_POD_SETS,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    dns1123_label_errors,
    parse_duration,
)
from .loader import load_documents, load_text, load_texts, parse_workload_document, parse_yaml_documents

__all__ = [
    "Manifests",
    "load_text",
    "load_documents",
    "load_texts",
    "parse_workload_document",
    "parse_yaml_documents",
    "parse_duration",
    "dns1123_label_errors",
    "QUEUE_NAME_LABEL",
    "PRIORITY_CLASS_LABEL",
    "MAX_EXEC_TIME_LABEL",
    "JOB_MIN_PARALLELISM_ANNOTATION",
    "DEFAULT_NAMESPACE",
    "MAX_POD_SETS",
]
