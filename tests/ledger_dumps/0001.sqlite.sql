BEGIN TRANSACTION;
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
INSERT INTO "audit_log" VALUES(1,1.79561983559073662757e+09,'admin','set-budget','budget/one',NULL,'{"monthlyUSD": 500.0, "warnAt": 0.8, "hard": false}');
INSERT INTO "audit_log" VALUES(2,1.79561983562765359878e+09,'admin','patch-cluster-queue','cq-one','{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}}','{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}}');
CREATE TABLE budgets (
	namespace VARCHAR(253) NOT NULL, 
	monthly_usd FLOAT NOT NULL, 
	warn_at FLOAT NOT NULL, 
	hard BOOLEAN NOT NULL, 
	updated_at FLOAT NOT NULL, 
	updated_by VARCHAR(256) NOT NULL, 
	PRIMARY KEY (namespace)
);
INSERT INTO "budgets" VALUES('one',500.0,0.8,0,1.79561983559073662757e+09,'admin');
CREATE TABLE config_versions (
	id INTEGER NOT NULL, 
	created_at FLOAT NOT NULL, 
	actor VARCHAR(256) NOT NULL, 
	kueue_yaml TEXT NOT NULL, 
	prices JSON NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "config_versions" VALUES(1,1.79561983562765359878e+09,'admin','apiVersion: kueue.x-k8s.io/v1beta1
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
INSERT INTO "gpu_utilization_samples" VALUES(1,'93311324-3097-404d-81fc-4dd4ca2c351e','GPU-00000000-0000-0000-0000-000000000010',1.79561983464394736296e+09,40.0);
INSERT INTO "gpu_utilization_samples" VALUES(2,'93311324-3097-404d-81fc-4dd4ca2c351e','GPU-00000000-0000-0000-0000-000000000011',1.79561983564394736286e+09,60.0);
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
INSERT INTO "usage_intervals" VALUES(1,'100f6b46-d28d-4e08-8777-7021d7c60926','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79561983538055586814e+09,1.79561983541569352143e+09);
INSERT INTO "usage_intervals" VALUES(2,'6a6be65c-631c-4454-b54e-ff4f0b66bb3d','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79561983538055586814e+09,1.79561983544039416313e+09);
INSERT INTO "usage_intervals" VALUES(3,'93311324-3097-404d-81fc-4dd4ca2c351e','gpu-b','nvidia.com/gpu',2,2.0,4.0,1.79561983549066114425e+09,NULL);
INSERT INTO "usage_intervals" VALUES(4,'87a70c05-641b-4878-9447-6e8567e4b9e1','gpu-a','nvidia.com/gpu',1,1.0,2.0,1.79561983556609058377e+09,NULL);
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
INSERT INTO "workloads" VALUES('6a6be65c-631c-4454-b54e-ff4f0b66bb3d','one','done','alice','q','cq-one',NULL,0,'Succeeded',NULL,'exited with code 0','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["1"], "resource": "nvidia.com/gpu"}]}','{"pid": 4615, "pgid": 4615, "startTicks": 254803, "logPath": "/tmp/tmparl8jjs4/data/logs/one/done-6a6be65c.log", "exitPath": "/tmp/tmparl8jjs4/data/logs/one/done-6a6be65c.log.exit", "startedAt": 1795619835.3972654}',1.79561983535861325266e+09,1.79561983538055586814e+09,1.79561983539726543425e+09,1.79561983544039416313e+09,0,0);
INSERT INTO "workloads" VALUES('100f6b46-d28d-4e08-8777-7021d7c60926','one','broken','alice','q','cq-one','low',10,'Failed',NULL,'exited with code 1','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["false"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}','{"pid": 4614, "pgid": 4614, "startTicks": 254802, "logPath": "/tmp/tmparl8jjs4/data/logs/one/broken-100f6b46.log", "exitPath": "/tmp/tmparl8jjs4/data/logs/one/broken-100f6b46.log.exit", "startedAt": 1795619835.3903637}',1.79561983537738203997e+09,1.79561983538055586814e+09,1.79561983539036369326e+09,1.79561983541569352143e+09,1,0);
INSERT INTO "workloads" VALUES('93311324-3097-404d-81fc-4dd4ca2c351e','two','runner','bob','q','cq-two',NULL,0,'Running',NULL,NULL,'{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 2}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}','{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-b"}, "resourceUsage": {"nvidia.com/gpu": 2}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-b", "devices": ["0", "1"], "resource": "nvidia.com/gpu"}]}','{"pid": 4618, "pgid": 4618, "startTicks": 254813, "logPath": "/tmp/tmparl8jjs4/data/logs/two/runner-93311324.log", "exitPath": "/tmp/tmparl8jjs4/data/logs/two/runner-93311324.log.exit", "startedAt": 1795619835.4962342}',1.79561983548125076292e+09,1.79561983549066114425e+09,1.79561983549623417847e+09,NULL,NULL,0);
INSERT INTO "workloads" VALUES('478f0873-d09f-458c-ad59-5ad8d5b418ad','one','waiter','alice','q','cq-one',NULL,0,'Pending','NoFit','couldn''t assign flavors to pod set main: flavor gpu-a doesn''t match node affinity, insufficient unused quota for nvidia.com/gpu in flavor gpu-b, 1 more needed','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}',NULL,NULL,1.79561983551414585118e+09,NULL,NULL,NULL,NULL,0);
INSERT INTO "workloads" VALUES('b2f14371-ee74-4a4e-b7fa-7d2c968dbd2b','one','dropped','alice','q','cq-one',NULL,0,'Cancelled','Cancelled','cancelled by alice','{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}',NULL,NULL,1.7956198355211589337e+09,NULL,NULL,1.79561983555266833304e+09,NULL,0);
INSERT INTO "workloads" VALUES('87a70c05-641b-4878-9447-6e8567e4b9e1','two','starter','bob','q','cq-two',NULL,0,'Admitted',NULL,NULL,'{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmparl8jjs4/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}','{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}',NULL,1.79561983556388711927e+09,1.79561983556609058377e+09,NULL,NULL,NULL,0);
CREATE INDEX ix_workloads_state ON workloads (state);
CREATE INDEX ix_audit_log_at ON audit_log (at);
CREATE INDEX ix_usage_intervals_workload_uid ON usage_intervals (workload_uid);
CREATE INDEX ix_usage_intervals_open ON usage_intervals (workload_uid, "end");
CREATE INDEX ix_gpu_utilization_samples_workload_uid ON gpu_utilization_samples (workload_uid);
CREATE INDEX ix_gpu_utilization_samples_at ON gpu_utilization_samples (at);
COMMIT;
