--
-- PostgreSQL database dump
--

\restrict vHZd6wTQLICdxJ04tyddDo9GBdWksviqNSF4LQc6No2SSga2hFMQv3BY6uaKX2V

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: alembic_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.alembic_version (
    version_num character varying(32) NOT NULL
);


--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    id integer NOT NULL,
    at double precision NOT NULL,
    actor character varying(256) NOT NULL,
    operation character varying(64) NOT NULL,
    target character varying(512) NOT NULL,
    before json,
    after json
);


--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_log_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_log_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;


--
-- Name: budgets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budgets (
    namespace character varying(253) NOT NULL,
    monthly_usd double precision NOT NULL,
    warn_at double precision NOT NULL,
    hard boolean NOT NULL,
    updated_at double precision NOT NULL,
    updated_by character varying(256) NOT NULL
);


--
-- Name: config_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.config_versions (
    id integer NOT NULL,
    created_at double precision NOT NULL,
    actor character varying(256) NOT NULL,
    kueue_yaml text NOT NULL,
    prices json NOT NULL
);


--
-- Name: config_versions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.config_versions_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: config_versions_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.config_versions_id_seq OWNED BY public.config_versions.id;


--
-- Name: gpu_utilization_samples; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.gpu_utilization_samples (
    id integer NOT NULL,
    workload_uid character varying(64) NOT NULL,
    device character varying(128) NOT NULL,
    at double precision NOT NULL,
    percent double precision NOT NULL
);


--
-- Name: gpu_utilization_samples_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.gpu_utilization_samples_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: gpu_utilization_samples_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.gpu_utilization_samples_id_seq OWNED BY public.gpu_utilization_samples.id;


--
-- Name: settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.settings (
    key character varying(128) NOT NULL,
    value json,
    updated_at double precision NOT NULL
);


--
-- Name: usage_intervals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_intervals (
    id integer NOT NULL,
    workload_uid character varying(64) NOT NULL,
    flavor character varying(253) NOT NULL,
    resource character varying(253) NOT NULL,
    quantity integer NOT NULL,
    gpu_equivalent double precision NOT NULL,
    usd_per_hour double precision NOT NULL,
    start double precision NOT NULL,
    "end" double precision
);


--
-- Name: usage_intervals_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.usage_intervals_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: usage_intervals_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.usage_intervals_id_seq OWNED BY public.usage_intervals.id;


--
-- Name: workloads; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.workloads (
    uid character varying(64) NOT NULL,
    namespace character varying(253) NOT NULL,
    name character varying(253) NOT NULL,
    owner character varying(256) NOT NULL,
    local_queue character varying(253) NOT NULL,
    cluster_queue character varying(253),
    priority_class character varying(253),
    priority integer NOT NULL,
    state character varying(16) NOT NULL,
    reason character varying(64),
    message text,
    spec json NOT NULL,
    admission json,
    run json,
    created_at double precision NOT NULL,
    admitted_at double precision,
    started_at double precision,
    finished_at double precision,
    exit_code integer,
    evictions integer NOT NULL
);


--
-- Name: audit_log id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log ALTER COLUMN id SET DEFAULT nextval('public.audit_log_id_seq'::regclass);


--
-- Name: config_versions id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.config_versions ALTER COLUMN id SET DEFAULT nextval('public.config_versions_id_seq'::regclass);


--
-- Name: gpu_utilization_samples id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.gpu_utilization_samples ALTER COLUMN id SET DEFAULT nextval('public.gpu_utilization_samples_id_seq'::regclass);


--
-- Name: usage_intervals id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_intervals ALTER COLUMN id SET DEFAULT nextval('public.usage_intervals_id_seq'::regclass);


--
-- Data for Name: alembic_version; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.alembic_version VALUES ('0002');


--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.audit_log VALUES (1, 1795638199.509423, 'admin', 'set-budget', 'budget/one', NULL, '{"monthlyUSD": 500.0, "warnAt": 0.8, "hard": false}');
INSERT INTO public.audit_log VALUES (2, 1795638199.5300043, 'admin', 'patch-cluster-queue', 'cq-one', '{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}}', '{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq-one"}, "spec": {"cohort": "lab", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]}, {"name": "gpu-b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}, "warnings": ["Cohort lab has 3 nvidia.com/gpu of flavor gpu-a in nominal quota, but the inventory has 2: workloads within quota may wait for devices (PlacementFailed) or preempt lower-priority workloads on the nodes"]}');


--
-- Data for Name: budgets; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.budgets VALUES ('one', 500, 0.8, false, 1795638199.509423, 'admin');


--
-- Data for Name: config_versions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.config_versions VALUES (1, 1795638199.5300043, 'admin', 'apiVersion: kueue.x-k8s.io/v1beta1
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
', '{"currency": "USD", "flavors": {"gpu-a": 2.21, "gpu-b": 0.81}, "default": 2.0, "migSlicesPerGpu": 7}');


--
-- Data for Name: gpu_utilization_samples; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.gpu_utilization_samples VALUES (1, '1b924682-e2ee-4d74-8569-f350298d1394', 'GPU-00000000-0000-0000-0000-000000000010', 1795638198.5397658, 40);
INSERT INTO public.gpu_utilization_samples VALUES (2, '1b924682-e2ee-4d74-8569-f350298d1394', 'GPU-00000000-0000-0000-0000-000000000011', 1795638199.5397658, 60);


--
-- Data for Name: settings; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.settings VALUES ('inventory.firstKnownAt', '1795638199.378179', 1795638199.378179);


--
-- Data for Name: usage_intervals; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.usage_intervals VALUES (1, '10aa41ac-9ca7-4ea4-89d8-2c8725502848', 'gpu-a', 'nvidia.com/gpu', 1, 1, 2, 1795638199.378179, 1795638199.4276538);
INSERT INTO public.usage_intervals VALUES (2, '50bbb35c-d784-4633-a5d8-c75362431d46', 'gpu-a', 'nvidia.com/gpu', 1, 1, 2, 1795638199.378179, 1795638199.4159381);
INSERT INTO public.usage_intervals VALUES (3, '1b924682-e2ee-4d74-8569-f350298d1394', 'gpu-b', 'nvidia.com/gpu', 2, 2, 4, 1795638199.4657662, NULL);
INSERT INTO public.usage_intervals VALUES (4, 'ff824cfb-8109-4c70-9c1d-f29ae0cba3bf', 'gpu-a', 'nvidia.com/gpu', 1, 1, 2, 1795638199.4935498, NULL);


--
-- Data for Name: workloads; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.workloads VALUES ('10aa41ac-9ca7-4ea4-89d8-2c8725502848', 'one', 'broken', 'alice', 'q', 'cq-one', 'low', 10, 'Failed', NULL, 'exited with code 1', '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["false"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}', '{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}', '{"pid": 17584, "pgid": 17584, "startTicks": 2091202, "logPath": "/tmp/tmps3jh5qb5/data/logs/one/broken-10aa41ac.log", "exitPath": "/tmp/tmps3jh5qb5/data/logs/one/broken-10aa41ac.log.exit", "startedAt": 1795638199.3886666}', 1795638199.3756542, 1795638199.378179, 1795638199.3886666, 1795638199.4276538, 1, 0);
INSERT INTO public.workloads VALUES ('50bbb35c-d784-4633-a5d8-c75362431d46', 'one', 'done', 'alice', 'q', 'cq-one', NULL, 0, 'Succeeded', NULL, 'exited with code 0', '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}', '{"clusterQueue": "cq-one", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["1"], "resource": "nvidia.com/gpu"}]}', '{"pid": 17585, "pgid": 17585, "startTicks": 2091202, "logPath": "/tmp/tmps3jh5qb5/data/logs/one/done-50bbb35c.log", "exitPath": "/tmp/tmps3jh5qb5/data/logs/one/done-50bbb35c.log.exit", "startedAt": 1795638199.3930776}', 1795638199.3626528, 1795638199.378179, 1795638199.3930776, 1795638199.4159381, 0, 0);
INSERT INTO public.workloads VALUES ('1b924682-e2ee-4d74-8569-f350298d1394', 'two', 'runner', 'bob', 'q', 'cq-two', NULL, 0, 'Running', NULL, NULL, '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 2}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}', '{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-b"}, "resourceUsage": {"nvidia.com/gpu": 2}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-b", "devices": ["0", "1"], "resource": "nvidia.com/gpu"}]}', '{"pid": 17588, "pgid": 17588, "startTicks": 2091210, "logPath": "/tmp/tmps3jh5qb5/data/logs/two/runner-1b924682.log", "exitPath": "/tmp/tmps3jh5qb5/data/logs/two/runner-1b924682.log.exit", "startedAt": 1795638199.4721699}', 1795638199.4614654, 1795638199.4657662, 1795638199.4721699, NULL, NULL, 0);
INSERT INTO public.workloads VALUES ('1f3a37d1-be13-4d65-9c59-3c45058c7719', 'one', 'dropped', 'alice', 'q', 'cq-one', NULL, 0, 'Cancelled', 'Cancelled', 'cancelled by alice', '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}', NULL, NULL, 1795638199.4791563, NULL, NULL, 1795638199.4892776, NULL, 0);
INSERT INTO public.workloads VALUES ('078d40a7-028d-44a8-9afa-4d6f18200f5c', 'one', 'waiter', 'alice', 'q', 'cq-one', NULL, 0, 'Pending', 'NoFit', 'couldn''t assign flavors to pod set main: flavor gpu-a doesn''t match node affinity, insufficient unused quota for nvidia.com/gpu in flavor gpu-b, 1 more needed', '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "b"}, "tolerations": []}], "command": ["true"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-b", "source": "form"}', NULL, NULL, 1795638199.4767106, NULL, NULL, NULL, NULL, 0);
INSERT INTO public.workloads VALUES ('ff824cfb-8109-4c70-9c1d-f29ae0cba3bf', 'two', 'starter', 'bob', 'q', 'cq-two', NULL, 0, 'Admitted', NULL, NULL, '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}, "nodeSelector": {"model": "a"}, "tolerations": []}], "command": ["sleep", "600"], "workingDir": "/tmp/tmps3jh5qb5/root", "env": {}, "maxRuntimeSeconds": 3600, "flavor": "gpu-a", "source": "form"}', '{"clusterQueue": "cq-two", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu-a"}, "resourceUsage": {"nvidia.com/gpu": 1}, "count": 1}], "placements": [{"podSet": "main", "podIndex": 0, "node": "box-a", "devices": ["0"], "resource": "nvidia.com/gpu"}]}', NULL, 1795638199.4905512, 1795638199.4935498, NULL, NULL, NULL, 0);


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.audit_log_id_seq', 2, true);


--
-- Name: config_versions_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.config_versions_id_seq', 1, true);


--
-- Name: gpu_utilization_samples_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.gpu_utilization_samples_id_seq', 2, true);


--
-- Name: usage_intervals_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.usage_intervals_id_seq', 4, true);


--
-- Name: alembic_version alembic_version_pkc; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);


--
-- Name: budgets budgets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budgets
    ADD CONSTRAINT budgets_pkey PRIMARY KEY (namespace);


--
-- Name: config_versions config_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.config_versions
    ADD CONSTRAINT config_versions_pkey PRIMARY KEY (id);


--
-- Name: gpu_utilization_samples gpu_utilization_samples_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.gpu_utilization_samples
    ADD CONSTRAINT gpu_utilization_samples_pkey PRIMARY KEY (id);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (key);


--
-- Name: workloads uq_workloads_namespace_name; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workloads
    ADD CONSTRAINT uq_workloads_namespace_name UNIQUE (namespace, name);


--
-- Name: usage_intervals usage_intervals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_intervals
    ADD CONSTRAINT usage_intervals_pkey PRIMARY KEY (id);


--
-- Name: workloads workloads_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workloads
    ADD CONSTRAINT workloads_pkey PRIMARY KEY (uid);


--
-- Name: ix_audit_log_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_log_at ON public.audit_log USING btree (at);


--
-- Name: ix_gpu_utilization_samples_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_gpu_utilization_samples_at ON public.gpu_utilization_samples USING btree (at);


--
-- Name: ix_gpu_utilization_samples_workload_uid; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_gpu_utilization_samples_workload_uid ON public.gpu_utilization_samples USING btree (workload_uid);


--
-- Name: ix_usage_intervals_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_usage_intervals_open ON public.usage_intervals USING btree (workload_uid, "end");


--
-- Name: ix_usage_intervals_workload_uid; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_usage_intervals_workload_uid ON public.usage_intervals USING btree (workload_uid);


--
-- Name: ix_workloads_state; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_workloads_state ON public.workloads USING btree (state);


--
-- Name: gpu_utilization_samples gpu_utilization_samples_workload_uid_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.gpu_utilization_samples
    ADD CONSTRAINT gpu_utilization_samples_workload_uid_fkey FOREIGN KEY (workload_uid) REFERENCES public.workloads(uid) ON DELETE CASCADE;


--
-- Name: usage_intervals usage_intervals_workload_uid_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_intervals
    ADD CONSTRAINT usage_intervals_workload_uid_fkey FOREIGN KEY (workload_uid) REFERENCES public.workloads(uid) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict vHZd6wTQLICdxJ04tyddDo9GBdWksviqNSF4LQc6No2SSga2hFMQv3BY6uaKX2V

