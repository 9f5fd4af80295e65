BEGIN TRANSACTION;
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO "alembic_version" VALUES('0002');
CREATE TABLE audit_log (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	actor VARCHAR(256) NOT NULL, 
	operation VARCHAR(64) NOT NULL, 
	target VARCHAR(512) NOT NULL, 
	"before" JSON, 
	"after" JSON, 
	PRIMARY KEY (id)
);
INSERT INTO "audit_log" VALUES(1,1.79563819682654595378e+09,'admin','set-budget','budget/one',NULL,'{"monthlyUSD": 500.0, "warnAt": 0.8, "hard": false}');
INSERT INTO "audit_log" VALUES(2,1.79563819685924673085e+09,'admin','patch-cluster-queue','cq-one','{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}}','{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}, "warnings": ["Cohort lab has 3 nvidia.com/gpu of flavor gpu-a in nominal quota, but the inventory has 2: workloads within quota may wait for devices (PlacementFailed) or preempt lower-priority workloads on the nodes"]}');
CREATE TABLE budgets (
	namespace VARCHAR(253) NOT NULL, 
	monthly_usd FLOAT NOT NULL, 
	warn_at FLOAT NOT NULL, 
	hard BOOLEAN NOT NULL, 
	updated_at FLOAT NOT NULL, 
	updated_by VARCHAR(256) NOT NULL, 
	PRIMARY KEY (namespace)
);
INSERT INTO "budgets" VALUES('one',500.0,0.8,0,1.79563819682654595378e+09,'admin');
CREATE TABLE config_versions (
	id INTEGER NOT NULL, 
	created_at FLOAT NOT NULL, 
	actor VARCHAR(256) NOT NULL, 
	kueue_yaml TEXT NOT NULL, 
	prices JSON NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "config_versions" VALUES(1,1.79563819685924673085e+09,'admin','apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: gpu-a
spec:
  nodeLabels:
    model: a
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: gpu-b
spec:
  nodeLabels:
    model: b
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq-one
spec:
  cohort: lab
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption:
    reclaimWithinCohort: Never
    withinClusterQueue: Never
  resourceGroups:
  - coveredResources:
    - nvidia.com/gpu
    flavors:
    - name: gpu-a
      resources:
      - name: nvidia.com/gpu
        nominalQuota: ''2''
    - name: gpu-b
      resources:
      - name: nvidia.com/gpu
        nominalQuota: ''0''
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq-two
spec:
  cohort: lab
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption:
    reclaimWithinCohort: Never
    withinClusterQueue: Never
  resourceGroups:
  - coveredResources:
    - nvidia.com/gpu
    flavors:
    - name: gpu-a
      resources:
      - name: nvidia.com/gpu
        nominalQuota: ''1''
    - name: gpu-b
      resources:
      - name: nvidia.com/gpu
        nominalQuota: ''2''
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  name: q
  namespace: one
spec:
  clusterQueue: cq-one
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  name: q
  namespace: two
spec:
  clusterQueue: cq-two
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low
value: 10
','{"currency": "USD", "flavors": {"gpu-a": 2.21, "gpu-b": 0.81}, "default": 2.0, "migSlicesPerGpu": 7}');
CREATE TABLE gpu_utilization_samples (
	id INTEGER NOT NULL, 
	workload_uid VARCHAR(64) NOT NULL, 
	device VARCHAR(128) NOT NULL, 
	at FLOAT NOT NULL, 
	percent FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(workload_uid) REFERENCES workloads (uid) ON DELETE CASCADE
);
INSERT INTO "gpu_utilization_samples" VALUES(1,'93e11cf8-a1ff-4a40-98ea-e4edb9f5b426','GPU-00000000-0000-0000-0000-000000000010',1.79563819588635587695e+09,40.0);
INSERT INTO "gpu_utilization_samples" VALUES(2,'93e11cf8-a1ff-4a40-98ea-e4edb9f5b426','GPU-00000000-0000-0000-0000-000000000011',1.79563819688635587694e+09,60.0);
CREATE TABLE settings (
	"key" VARCHAR(128) NOT NULL, 
	value JSON, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "settings" VALUES('inventory.firstKnownAt',1.79563819653539466858e+09,1.79563819653539466858e+09);
CREATE TABLE usage_intervals (
	id INTEGER NOT NULL, 
	workload_uid VARCHAR(64) NOT NULL, 
	flavor VARCHAR(253) NOT NULL, 
	resource VARCHAR(253) NOT NULL, 
	quantity INTEGER NOT NULL, 
	gpu_equivalent FLOAT NOT NULL, 
	usd_per_hour FLOAT NOT NULL, 
	start FLOAT NOT NULL, 
	"end" FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(workload_uid) REFERENCES workloads (uid) ON DELETE CASCADE
);
INSERT INTO "usage_intervals" VALUES(1,'91f8cdd0-7bd9-41c1-8550-2d4a705be104','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79563819653539466858e+09,1.7956381966236093044e+09);
INSERT INTO "usage_intervals" VALUES(2,'ddc83848-7e27-49a2-88c4-884921d9f54a','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79563819653539466858e+09,1.79563819662874436374e+09);
INSERT INTO "usage_intervals" VALUES(3,'93e11cf8-a1ff-4a40-98ea-e4edb9f5b426','gpu-b','nvidia.com/gpu',2,2.0,4.0,1.79563819671791696547e+09,NULL);
INSERT INTO "usage_intervals" VALUES(4,'47103e35-a58e-4d4f-a62f-945e002a1628','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79563819677998208999e+09,NULL);
CREATE TABLE workloads (
	uid VARCHAR(64) NOT NULL, 
	namespace VARCHAR(253) NOT NULL, 
	name VARCHAR(253) NOT NULL, 
	owner VARCHAR(256) NOT NULL, 
	local_queue VARCHAR(253) NOT NULL, 
	cluster_queue VARCHAR(253), 
	priority_class VARCHAR(253), 
	priority INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	reason VARCHAR(64), 
	message TEXT, 
	spec JSON NOT NULL, 
	admission JSON, 
	run JSON, 
	created_at FLOAT NOT NULL, 
	admitted_at FLOAT, 
	started_at FLOAT, 
	finished_at FLOAT, 
	exit_code INTEGER, 
	evictions INTEGER NOT NULL, 
	PRIMARY KEY (uid), 
	CONSTRAINT uq_workloads_namespace_name UNIQUE (namespace, name)
);
INSERT INTO "workloads" VALUES('ddc83848-7e27-49a2-88c4-884921d9f54a','one','done','alice','q','cq-one',NULL,0,'Succeeded',NULL,'exited with code 0','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["1"], "resource": "nvidia.com/gpu"}]}','{"pid": 17515, "pgid": 17515, "startTicks": 2090919, "logPath": "/tmp/tmp2w9cco8m/data/logs/one/done-ddc83848.log", "exitPath": "/tmp/tmp2w9cco8m/data/logs/one/done-ddc83848.log.exit", "startedAt": 1795638196.5609033}',1.79563819650435018545e+09,1.79563819653539466858e+09,1.79563819656090331079e+09,1.79563819662874436374e+09,0,0);
INSERT INTO "workloads" VALUES('91f8cdd0-7bd9-41c1-8550-2d4a705be104','one','broken','alice','q','cq-one','low',10,'Failed',NULL,'exited with code 1','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["false"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}','{"pid": 17514, "pgid": 17514, "startTicks": 2090919, "logPath": "/tmp/tmp2w9cco8m/data/logs/one/broken-91f8cdd0.log", "exitPath": "/tmp/tmp2w9cco8m/data/logs/one/broken-91f8cdd0.log.exit", "startedAt": 1795638196.556162}',1.7956381965286312103e+09,1.79563819653539466858e+09,1.79563819655616211884e+09,1.7956381966236093044e+09,1,0);
INSERT INTO "workloads" VALUES('93e11cf8-a1ff-4a40-98ea-e4edb9f5b426','two','runner','bob','q','cq-two',NULL,0,'Running',NULL,NULL,'{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 2}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}','{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-b"}, "resourceUsage": {"nvidia.com/gpu": 2}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-b", "devices": ["0", "1"], "resource": "nvidia.com/gpu"}]}','{"pid": 17518, "pgid": 17518, "startTicks": 2090936, "logPath": "/tmp/tmp2w9cco8m/data/logs/two/runner-93e11cf8.log", "exitPath": "/tmp/tmp2w9cco8m/data/logs/two/runner-93e11cf8.log.exit", "startedAt": 1795638196.7314785}',1.79563819670436382292e+09,1.79563819671791696547e+09,1.79563819673147845269e+09,NULL,NULL,0);
INSERT INTO "workloads" VALUES('5feea3a4-b666-4497-823f-8eaecd82445d','one','waiter','alice','q','cq-one',NULL,0,'Pending','NoFit','couldn''t assign flavors to pod set main: flavor gpu-a doesn''t match node affinity, insufficient unused quota for nvidia.com/gpu in flavor gpu-b, 1 more needed','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}',NULL,NULL,1.79563819673895525928e+09,NULL,NULL,NULL,NULL,0);
INSERT INTO "workloads" VALUES('d071ae99-b6bc-4c8f-a049-8b9176f35900','one','dropped','alice','q','cq-one',NULL,0,'Cancelled','Cancelled','cancelled by alice','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}',NULL,NULL,1.79563819674784541126e+09,NULL,NULL,1.79563819675488543512e+09,NULL,0);
INSERT INTO "workloads" VALUES('47103e35-a58e-4d4f-a62f-945e002a1628','two','starter','bob','q','cq-two',NULL,0,'Admitted',NULL,NULL,'{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmp2w9cco8m/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}',NULL,1.79563819676046800615e+09,1.79563819677998208999e+09,NULL,NULL,NULL,0);
CREATE INDEX ix_workloads_state ON workloads (state);
CREATE INDEX ix_audit_log_at ON audit_log (at);
CREATE INDEX ix_usage_intervals_workload_uid ON usage_intervals (workload_uid);
CREATE INDEX ix_usage_intervals_open ON usage_intervals (workload_uid, "end");
CREATE INDEX ix_gpu_utilization_samples_workload_uid ON gpu_utilization_samples (workload_uid);
CREATE INDEX ix_gpu_utilization_samples_at ON gpu_utilization_samples (at);
COMMIT;
